// Package replicabus carries messages between the replicas of a gateway that share their
// state on one Redis, over pub/sub: to one replica, to all, and to whichever replica follows
// a session (holds one of its streams). It also keeps the replicas' leases, so that the
// survivors learn when one stopped, and what each owns for the others to take over. The
// messages are session.BusMessage values.
//
//	b := replicabus.NewBus(replicabus.Shared{Client: client, KeyPrefix: "manifold", IDOf: store.IDOf},
//		&replicabus.BusOptions{Replica: name, Receive: receive, Gone: gone})
//	go b.Run(ctx)
//	ok, err := b.Send(ctx, other, &session.BusMessage{Kind: "hello"})
package replicabus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/session"
)

// BusOptions configure a RedisBus.
type BusOptions struct {
	// Replica names this process among those that share the store; unique.
	Replica string
	// Lease is how long this replica's lease lives without renewal; it is renewed three
	// times per lease. If zero, 10 seconds.
	Lease time.Duration
	// Receive is called, one message at a time, on the bus's goroutine, for each message
	// sent to this replica, broadcast, or published on a session channel it follows. It
	// must not block.
	Receive func(*session.BusMessage)
	// Gone is called once per replica whose lease ran out, on every replica (claimed true
	// on the one that took its leftovers over: see ClaimOwned). It may block for a while:
	// messages wait meanwhile.
	Gone func(replica string, claimed bool)
	// Sealer seals every message published and opens every message received, bound to its
	// channel; a message that does not open is dropped. Every replica, and the event log
	// (EventLogOptions.Sealer), needs one of the same keys. Nil sends and reads messages in
	// the clear, which whoever reads Redis sees (a client's token on its way to the replica
	// that uses it): for tests only.
	Sealer session.Sealer
}

// RedisBus carries messages between the replicas sharing a RedisStore over Redis pub/sub: to
// one replica, to all, and to whichever replica follows a session (holds its stream). It also
// keeps the replicas' leases (a sorted set of replica → expiry, in Redis time), so that the
// survivors learn when one stopped, and the sets of what each replica owns. Publishing is one
// round trip; nothing polls but the lease renewal.
type RedisBus struct {
	store *conn
	opts  BusOptions
	// ps is the one subscription connection, made by NewBus (it connects on first use) and
	// closed when Run returns.
	ps *redis.PubSub

	// subMu makes the followed table and the subscription agree: a Follow and an Unfollow of
	// one session never cross.
	subMu sync.Mutex

	mu sync.Mutex
	// followed maps the digests of the sessions whose channel is followed to their ids, with
	// a count of followers. Guarded by mu.
	followed map[string]*follower
	// confirmed holds waiters for a channel's subscription confirmation. Guarded by mu.
	confirmed map[string][]chan struct{}
	// gone remembers the replicas known to have stopped. Guarded by mu.
	gone map[string]bool
	// leased is set once the lease was first taken; heldSince is when this replica last
	// began to hold it without a break (a failed renewal, or a lease lost to another, is a
	// break). Only keepLease uses them.
	leased    bool
	heldSince time.Time
	// unopened counts the messages dropped because they did not open since the last warning,
	// at warnedUnopened (zero: none yet). Only receive uses them.
	unopened       int
	warnedUnopened time.Time
}

// unopenedWarnEvery is how often at most the bus warns of messages it dropped because they
// did not open: a replica with other keys, or a forger, could send many.
const unopenedWarnEvery = time.Minute

type follower struct {
	id    string
	count int
}

// Shared is what a bus shares with the session store on the same Redis.
type Shared struct {
	// Client is the Redis client; the bus does not close it.
	Client redis.UniversalClient
	// KeyPrefix begins the bus's channels and keys, as the session store's keys.
	KeyPrefix string
	// OpTimeout bounds each operation. If zero, 4 seconds, the store's default.
	OpTimeout time.Duration
	// Logger receives the bus's warnings. If nil, nothing is logged.
	Logger *slog.Logger
	// IDOf returns the id of the session of a digest when this replica knows it, else "":
	// it fills in BusMessage.SessionID. Required.
	IDOf func(digest string) string
}

// conn is the Shared Redis of a bus.
type conn struct {
	client    redis.UniversalClient
	prefix    string
	opTimeout time.Duration
	logger    *slog.Logger
	idOf      func(digest string) string
}

// bound derives the context of one operation: ctx, ending at the latest after OpTimeout.
func (c *conn) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opTimeout)
}

func (c *conn) sessionChannel(digest string) string { return session.SessionChannel(c.prefix, digest) }

// defaultOpTimeout is Shared.OpTimeout given none.
const defaultOpTimeout = 4 * time.Second

// NewBus returns the bus of this replica on shared; Run serves it.
func NewBus(shared Shared, opts *BusOptions) *RedisBus {
	if shared.Client == nil || shared.IDOf == nil {
		panic("replicabus: NewBus without a Client or IDOf")
	}
	s := &conn{client: shared.Client, prefix: shared.KeyPrefix, opTimeout: shared.OpTimeout, logger: shared.Logger, idOf: shared.IDOf}
	if s.opTimeout <= 0 {
		s.opTimeout = defaultOpTimeout
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	b := &RedisBus{store: s, followed: map[string]*follower{}, confirmed: map[string][]chan struct{}{}, gone: map[string]bool{}}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Lease <= 0 {
		b.opts.Lease = 10 * time.Second
	}
	if b.opts.Receive == nil {
		b.opts.Receive = func(*session.BusMessage) {}
	}
	if b.opts.Gone == nil {
		b.opts.Gone = func(string, bool) {}
	}
	b.ps = s.client.Subscribe(context.Background())
	return b
}

// Replica is this replica's name.
func (b *RedisBus) Replica() string { return b.opts.Replica }

func (b *RedisBus) replicaChannel(replica string) string {
	return b.store.prefix + ":replica:" + replica
}
func (b *RedisBus) broadcastChannel() string { return b.store.prefix + ":bus" }
func (b *RedisBus) leasesKey() string        { return b.store.prefix + ":replicas" }
func (b *RedisBus) ownedKey(replica string) string {
	return b.store.prefix + ":owned:" + replica
}

// Run takes this replica's lease, receives messages and renews the lease until ctx ends;
// then it gives the lease up at once (the others take over without waiting for it to run
// out).
func (b *RedisBus) Run(ctx context.Context) {
	if err := b.ps.Subscribe(ctx, b.replicaChannel(b.opts.Replica), b.broadcastChannel()); err != nil {
		// go-redis subscribes again when it reconnects: receive goes on.
		b.store.logger.Warn("bus: subscribing failed; trying again", "error", err.Error())
	}
	var wg sync.WaitGroup
	wg.Go(func() { b.receive(ctx) })
	wg.Go(func() { b.keepLease(ctx) })
	<-ctx.Done()
	_ = b.ps.Close()
	wg.Wait()
	// Given up, not deleted: its expiry in the past lets the next survivor that renews its
	// own claim what this replica owned.
	bg, cancel := b.store.bound(context.Background())
	defer cancel()
	_ = b.store.client.ZAdd(bg, b.leasesKey(), redis.Z{Score: 0, Member: b.opts.Replica}).Err()
}

// receive reads the subscription until ctx ends; go-redis reconnects and subscribes again
// after a broken connection.
func (b *RedisBus) receive(ctx context.Context) {
	for ctx.Err() == nil {
		msg, err := b.ps.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
				return
			}
			b.store.logger.Debug("bus: receiving failed; trying again", "error", err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				b.mu.Lock()
				for _, ch := range b.confirmed[m.Channel] {
					close(ch)
				}
				delete(b.confirmed, m.Channel)
				b.mu.Unlock()
			}
		case *redis.Message:
			payload := []byte(m.Payload)
			if b.opts.Sealer != nil {
				var err error
				if payload, err = b.opts.Sealer.Open(payload, []byte(m.Channel)); err != nil {
					b.dropUnopened(err)
					continue
				}
			}
			var bm session.BusMessage
			if err := json.Unmarshal(payload, &bm); err != nil {
				b.store.logger.Warn("bus: a message could not be read: dropped", "channel_kind", "bus", "error", err.Error())
				continue
			}
			if bm.Kind == session.BusReplicaGone {
				b.noteGone(bm.Replica, false)
				continue
			}
			if bm.Session != "" {
				b.mu.Lock()
				if f := b.followed[bm.Session]; f != nil {
					bm.SessionID = f.id
				}
				b.mu.Unlock()
				if bm.SessionID == "" {
					bm.SessionID = b.store.idOf(bm.Session)
				}
			}
			b.opts.Receive(&bm)
		}
	}
}

// dropUnopened warns that a message was dropped because it did not open (err): at most once
// per unopenedWarnEvery, with the count of those dropped since the last warning.
func (b *RedisBus) dropUnopened(err error) {
	b.unopened++
	now := time.Now()
	if !b.warnedUnopened.IsZero() && now.Sub(b.warnedUnopened) < unopenedWarnEvery {
		return
	}
	b.store.logger.Warn("bus: messages that do not open with this replica's keys were dropped: give every replica the same keys (the new key first on all of them, the old one kept after it)",
		"dropped", b.unopened, "error", err.Error())
	b.unopened, b.warnedUnopened = 0, now
}

// noteGone records that replica stopped and tells Gone, once.
func (b *RedisBus) noteGone(replica string, claimed bool) {
	b.mu.Lock()
	seen := b.gone[replica]
	b.gone[replica] = true
	b.mu.Unlock()
	if !seen {
		b.opts.Gone(replica, claimed)
	}
}

// scriptLease renews this replica's lease (ARGV[1] its name, ARGV[2] the lease in ms) and
// returns the replicas whose lease ran out, by Redis's clock, so that replicas' clocks need
// not agree.
var scriptLease = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local added = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local res = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
table.insert(res, 1, tostring(added))
return res
`)

// scriptAlive answers whether replica ARGV[1]'s lease still runs.
var scriptAlive = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > now then return 1 end
return 0
`)

// keepLease renews the lease three times per lease and claims the replicas whose lease ran
// out: the one whose ZREM removes a replica takes its leftovers over (Gone with claimed) and
// tells the others.
func (b *RedisBus) keepLease(ctx context.Context) {
	t := time.NewTicker(b.opts.Lease / 3)
	defer t.Stop()
	for {
		b.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (b *RedisBus) renew(ctx context.Context) {
	rctx, cancel := b.store.bound(ctx)
	defer cancel()
	res, err := scriptLease.Run(rctx, b.store.client, []string{b.leasesKey()}, b.opts.Replica, b.opts.Lease.Milliseconds()).StringSlice()
	if err != nil || len(res) == 0 {
		b.heldSince = time.Time{}
		if ctx.Err() == nil {
			b.store.logger.Warn("bus: renewing this replica's lease failed; the others take over what it owns if this lasts", "error", fmt.Sprint(err))
		}
		return
	}
	if res[0] == "1" && b.leased {
		// Claimed by another while it could not renew: what it owned moved, and the streams
		// it produces end with errors where clients resumed them.
		b.store.logger.Error("bus: this replica's lease ran out before it renewed it (a stall, or Redis out of reach for a lease): the other replicas took over what it owned; set a longer replica_lease if this recurs")
	}
	if res[0] == "1" || b.heldSince.IsZero() {
		b.heldSince = time.Now()
	}
	b.leased = true
	if time.Since(b.heldSince) < b.opts.Lease {
		// Back from a break (Redis out of reach, a stall): the others' leases may have run
		// out for the same reason. They get a whole lease to renew before anyone is taken
		// for dead.
		return
	}
	expired := res[1:]
	for _, r := range expired {
		if r == b.opts.Replica {
			continue
		}
		n, err := b.store.client.ZRem(rctx, b.leasesKey(), r).Result()
		if err != nil || n != 1 {
			continue // another replica claimed it
		}
		b.store.logger.Info("bus: a replica's lease ran out: taking over what it owned", "replica", r)
		// Noted first: this replica's own broadcast, when it comes back, is then no news.
		b.noteGone(r, true)
		_ = b.Broadcast(rctx, &session.BusMessage{Kind: session.BusReplicaGone, Replica: r})
	}
}

// Alive reports whether replica's lease still runs.
func (b *RedisBus) Alive(ctx context.Context, replica string) (bool, error) {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	n, err := scriptAlive.Run(ctx, b.store.client, []string{b.leasesKey()}, replica).Int()
	if err != nil {
		return false, fmt.Errorf("bus: is replica %s alive: %w", replica, err)
	}
	return n == 1, nil
}

func (b *RedisBus) publish(ctx context.Context, channel string, m *session.BusMessage) (int64, error) {
	m.From = b.opts.Replica
	data, err := json.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("bus: encode %s: %w", m.Kind, err)
	}
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	n, err := b.store.client.Publish(ctx, channel, session.SealFor(b.opts.Sealer, channel, data)).Result()
	if err != nil {
		return 0, fmt.Errorf("bus: publish %s: %w", m.Kind, err)
	}
	return n, nil
}

// PublishAll sends messages in order, in one round trip.
func (b *RedisBus) PublishAll(ctx context.Context, posts []session.Post) error {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	pipe := b.store.client.Pipeline()
	for _, p := range posts {
		p.Msg.From = b.opts.Replica
		channel := b.broadcastChannel()
		switch {
		case p.Replica != "":
			channel = b.replicaChannel(p.Replica)
		case p.Digest != "":
			p.Msg.Session = p.Digest
			channel = b.store.sessionChannel(p.Digest)
		}
		data, err := json.Marshal(p.Msg)
		if err != nil {
			return fmt.Errorf("bus: encode %s: %w", p.Msg.Kind, err)
		}
		pipe.Publish(ctx, channel, session.SealFor(b.opts.Sealer, channel, data))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("bus: publish %d messages: %w", len(posts), err)
	}
	return nil
}

// Send sends m to replica; it reports whether that replica listens.
func (b *RedisBus) Send(ctx context.Context, replica string, m *session.BusMessage) (bool, error) {
	n, err := b.publish(ctx, b.replicaChannel(replica), m)
	return n > 0, err
}

// Broadcast sends m to every replica, this one included.
func (b *RedisBus) Broadcast(ctx context.Context, m *session.BusMessage) error {
	_, err := b.publish(ctx, b.broadcastChannel(), m)
	return err
}

// Publish sends m to the replicas following session digest; it reports whether one does.
func (b *RedisBus) Publish(ctx context.Context, digest string, m *session.BusMessage) (bool, error) {
	m.Session = digest
	n, err := b.publish(ctx, b.store.sessionChannel(digest), m)
	return n > 0, err
}

// Follow makes the messages published for session id reach this replica, and returns once
// Redis has confirmed it, so that nothing published after Follow returns is missed. Each
// Follow that succeeds is matched by an Unfollow.
func (b *RedisBus) Follow(ctx context.Context, id string) error {
	digest := session.Digest(id)
	channel := b.store.sessionChannel(digest)
	b.subMu.Lock()
	b.mu.Lock()
	if f := b.followed[digest]; f != nil {
		f.count++
		b.mu.Unlock()
		b.subMu.Unlock()
		return nil
	}
	b.followed[digest] = &follower{id: id, count: 1}
	done := make(chan struct{})
	b.confirmed[channel] = append(b.confirmed[channel], done)
	b.mu.Unlock()
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	err := b.ps.Subscribe(ctx, channel)
	b.subMu.Unlock()
	if err == nil {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	b.Unfollow(id)
	return fmt.Errorf("bus: follow a session: %w", err)
}

// Unfollow ends one Follow of session id.
func (b *RedisBus) Unfollow(id string) {
	digest := session.Digest(id)
	channel := b.store.sessionChannel(digest)
	b.subMu.Lock()
	defer b.subMu.Unlock()
	b.mu.Lock()
	f := b.followed[digest]
	if f == nil {
		b.mu.Unlock()
		return
	}
	if f.count--; f.count > 0 {
		b.mu.Unlock()
		return
	}
	delete(b.followed, digest)
	delete(b.confirmed, channel)
	b.mu.Unlock()
	ctx, cancel := b.store.bound(context.Background())
	defer cancel()
	_ = b.ps.Unsubscribe(ctx, channel)
}

// Own records that this replica holds something for session digest that another must take
// over if this one stops (its upstream subscriptions).
func (b *RedisBus) Own(ctx context.Context, digest string) error {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	if err := b.store.client.SAdd(ctx, b.ownedKey(b.opts.Replica), digest).Err(); err != nil {
		return fmt.Errorf("bus: record ownership: %w", err)
	}
	return nil
}

// Disown drops what Own recorded.
func (b *RedisBus) Disown(ctx context.Context, digest string) error {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	if err := b.store.client.SRem(ctx, b.ownedKey(b.opts.Replica), digest).Err(); err != nil {
		return fmt.Errorf("bus: drop ownership: %w", err)
	}
	return nil
}

// scriptClaim takes a set whole: its members, and the set is gone, so that one claimer only
// gets them.
var scriptClaim = redis.NewScript(`
local m = redis.call('SMEMBERS', KEYS[1])
redis.call('DEL', KEYS[1])
return m
`)

// ClaimOwned takes what a stopped replica owned: the digests of its sessions (Own).
func (b *RedisBus) ClaimOwned(ctx context.Context, replica string) ([]string, error) {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	digests, err := scriptClaim.Run(ctx, b.store.client, []string{b.ownedKey(replica)}).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("bus: claim what replica %s owned: %w", replica, err)
	}
	return digests, nil
}

// Sequence returns the next number of a sequence all replicas share (one INCR), which orders
// what they do apart.
func (b *RedisBus) Sequence(ctx context.Context) (uint64, error) {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	n, err := b.store.client.Incr(ctx, b.store.prefix+":seq").Uint64()
	if err != nil {
		return 0, fmt.Errorf("bus: sequence: %w", err)
	}
	return n, nil
}

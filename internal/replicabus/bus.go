package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Digest is how the shared store names a session: its keys, the channels of the bus and the
// messages on it carry the digest, never the id itself, so that reading Redis is not enough
// to take a session over.
func Digest(id string) string { return sessionHash(id) }

// Kinds of bus messages the store itself writes.
const (
	// BusEvents carries events a stream's producer appended to its event log, published on
	// the stream's session channel in the same round trip (RedisEventLog), for a replica
	// where the stream's client resumed it.
	BusEvents = "events"
	// BusReplicaGone is broadcast by the replica that found another's lease run out.
	BusReplicaGone = "gone"
	// BusStreamTaken tells the replicas following a session that replica Replica took its
	// stream Stream over from the one that stopped producing it (RedisEventLog.Claim).
	BusStreamTaken = "taken"
)

// BusMessage is one message between replicas. Kinds other than those above are the
// gateway's; the bus carries them as they are.
type BusMessage struct {
	Kind string `json:"k"`
	// From is the sending replica.
	From string `json:"f,omitempty"`
	// Session is the digest of the session the message is about, if any.
	Session string `json:"s,omitempty"`
	// SessionID is the session's id when this replica knows it (it followed the session's
	// channel, or has read its record); filled in on receipt, never sent.
	SessionID string `json:"-"`
	// Stream and Events, Complete: a stream's events (BusEvents), or the stream a message is
	// for.
	Stream   string          `json:"st,omitempty"`
	Events   []LoggedEvent   `json:"e,omitempty"`
	Complete bool            `json:"c,omitempty"`
	Requests json.RawMessage `json:"rq,omitempty"`
	// Replica names a replica the message is about (BusReplicaGone).
	Replica string `json:"r,omitempty"`
	// Data is the message's payload: a JSON-RPC message, an id.
	Data json.RawMessage `json:"d,omitempty"`
	// Text is a short string argument (a URI, an upstream's name).
	Text string `json:"t,omitempty"`
}

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
	Receive func(*BusMessage)
	// Gone is called once per replica whose lease ran out, on every replica (claimed true
	// on the one that took its leftovers over: see ClaimOwned). It may block for a while:
	// messages wait meanwhile.
	Gone func(replica string, claimed bool)
}

// RedisBus carries messages between the replicas sharing a RedisStore over Redis pub/sub: to
// one replica, to all, and to whichever replica follows a session (holds its stream). It also
// keeps the replicas' leases (a sorted set of replica → expiry, in Redis time), so that the
// survivors learn when one stopped, and the sets of what each replica owns. Publishing is one
// round trip; nothing polls but the lease renewal.
type RedisBus struct {
	store *RedisStore
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
}

type follower struct {
	id    string
	count int
}

// NewBus returns the bus of this replica; Run serves it.
func (s *RedisStore) NewBus(opts *BusOptions) *RedisBus {
	b := &RedisBus{store: s, followed: map[string]*follower{}, confirmed: map[string][]chan struct{}{}, gone: map[string]bool{}}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Lease <= 0 {
		b.opts.Lease = 10 * time.Second
	}
	if b.opts.Receive == nil {
		b.opts.Receive = func(*BusMessage) {}
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
	return b.store.opts.KeyPrefix + ":replica:" + replica
}
func (b *RedisBus) broadcastChannel() string { return b.store.opts.KeyPrefix + ":bus" }
func (s *redisConn) sessionChannel(digest string) string {
	return s.opts.KeyPrefix + ":{" + digest + "}:live"
}
func (b *RedisBus) leasesKey() string { return b.store.opts.KeyPrefix + ":replicas" }
func (b *RedisBus) ownedKey(replica string) string {
	return b.store.opts.KeyPrefix + ":owned:" + replica
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
			var bm BusMessage
			if err := json.Unmarshal([]byte(m.Payload), &bm); err != nil {
				b.store.logger.Warn("bus: a message could not be read: dropped", "channel_kind", "bus", "error", err.Error())
				continue
			}
			if bm.Kind == BusReplicaGone {
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
		_ = b.Broadcast(rctx, &BusMessage{Kind: BusReplicaGone, Replica: r})
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

func (b *RedisBus) publish(ctx context.Context, channel string, m *BusMessage) (int64, error) {
	m.From = b.opts.Replica
	data, err := json.Marshal(m)
	if err != nil {
		return 0, fmt.Errorf("bus: encode %s: %w", m.Kind, err)
	}
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	n, err := b.store.client.Publish(ctx, channel, data).Result()
	if err != nil {
		return 0, fmt.Errorf("bus: publish %s: %w", m.Kind, err)
	}
	return n, nil
}

// Post is a message for PublishAll: to Replica, or to the followers of session Digest, or,
// when both are empty, to every replica.
type Post struct {
	Replica string
	Digest  string
	Msg     *BusMessage
}

// PublishAll sends messages in order, in one round trip.
func (b *RedisBus) PublishAll(ctx context.Context, posts []Post) error {
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
		pipe.Publish(ctx, channel, data)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("bus: publish %d messages: %w", len(posts), err)
	}
	return nil
}

// Send sends m to replica; it reports whether that replica listens.
func (b *RedisBus) Send(ctx context.Context, replica string, m *BusMessage) (bool, error) {
	n, err := b.publish(ctx, b.replicaChannel(replica), m)
	return n > 0, err
}

// Broadcast sends m to every replica, this one included.
func (b *RedisBus) Broadcast(ctx context.Context, m *BusMessage) error {
	_, err := b.publish(ctx, b.broadcastChannel(), m)
	return err
}

// Publish sends m to the replicas following session digest; it reports whether one does.
func (b *RedisBus) Publish(ctx context.Context, digest string, m *BusMessage) (bool, error) {
	m.Session = digest
	n, err := b.publish(ctx, b.store.sessionChannel(digest), m)
	return n > 0, err
}

// Follow makes the messages published for session id reach this replica, and returns once
// Redis has confirmed it, so that nothing published after Follow returns is missed. Each
// Follow that succeeds is matched by an Unfollow.
func (b *RedisBus) Follow(ctx context.Context, id string) error {
	digest := sessionHash(id)
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
	digest := sessionHash(id)
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

// GetByDigest reads the record of session digest, for a replica that takes over what
// another owned and may never have seen the session's id: its ID is empty.
func (s *RedisStore) GetByDigest(ctx context.Context, digest string) (*Record, error) {
	rec, _, _, err := s.read(ctx, digest, "")
	return rec, err
}

// eventsMessage is what the event log publishes with an append.
func eventsMessage(digest, stream string, events []LoggedEvent, complete bool, requests json.RawMessage) ([]byte, error) {
	return json.Marshal(&BusMessage{Kind: BusEvents, Session: digest, Stream: stream, Events: events, Complete: complete, Requests: requests})
}

// Sequence returns the next number of a sequence all replicas share (one INCR), which orders
// what they do apart.
func (b *RedisBus) Sequence(ctx context.Context) (uint64, error) {
	ctx, cancel := b.store.bound(ctx)
	defer cancel()
	n, err := b.store.client.Incr(ctx, b.store.opts.KeyPrefix+":seq").Uint64()
	if err != nil {
		return 0, fmt.Errorf("bus: sequence: %w", err)
	}
	return n, nil
}

// Existing reports, for each digest, whether its session still exists: one round trip.
func (s *RedisStore) Existing(ctx context.Context, digests []string) ([]bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(digests))
	for i, d := range digests {
		cmds[i] = pipe.Exists(ctx, s.keysOf(d).rec)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, opError(ctx, "exists", err)
	}
	out := make([]bool, len(digests))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// Package replica carries what is live of sessions between the gateway replicas that share a
// Redis store (design decision 6): a message for a stream another replica holds, a client's
// answer to a request another replica sent, a cancel of a request another replica serves, a
// call run on the replica holding a session's own upstream connection, list changes, who holds
// a session's subscriptions, and what a replica whose lease ran out leaves behind.
//
// The gateway builds one Replicas per process when its sessions are shared, and gives it what
// it needs of the gateway as a Host; a single gateway has none.
//
//	r := replica.New(host, &replica.Options{Digests: set.Digests, Connections: set.Connections, Lease: lease, Context: ctx, Go: goWorker},
//		func(receive, gone) replica.Bus { return set.Bus(&replicabus.BusOptions{Replica: name, Receive: receive, Gone: gone}) })
//	go r.Run(ctx)                      // serves the bus and sends the outbox until ctx ends
//	r.DeliverElsewhere(digest, "", data) // a message for a stream held elsewhere
package replica

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Kinds of the gateway's messages between replicas (session.BusMessage.Kind).
const (
	// busDeliver: put Data on the session's standalone stream, on the replica that holds it.
	busDeliver = "deliver"
	// busAnswer: a client's answer (Data) to a request sent to it by the receiving replica.
	busAnswer = "answer"
	// busCancel: the client cancelled its request Data; the replica serving it stops it.
	busCancel = "cancel"
	// busRefresh: upstream Text announced a list change: refetch its lists.
	busRefresh = "refresh"
	// busSubscribed: the sending replica holds the session's subscription to URI Text of
	// upstream Stream now (or dropped it): the others drop theirs.
	busSubscribed = "subscribed"
	// busStandalone: the sending replica opened (or took over) the session's standalone
	// stream, Stream: the others drop any other, which nobody will read again.
	busStandalone = "standalone"
	// busPins: an operator decided on a pinned tool's change: read the pins anew.
	busPins = "pins"
	// busDecided: an operator decided the held call Text, which the receiving replica holds.
	busDecided = "decided"
	// busLogLevel: the session set its log level to Text on the sending replica.
	busLogLevel = "loglevel"
)

// Bus is what the layer needs of the bus between the replicas sharing a Redis store
// (replicabus.RedisBus).
type Bus interface {
	Replica() string
	Run(ctx context.Context)
	Send(ctx context.Context, replica string, m *session.BusMessage) (bool, error)
	Broadcast(ctx context.Context, m *session.BusMessage) error
	Publish(ctx context.Context, digest string, m *session.BusMessage) (bool, error)
	PublishAll(ctx context.Context, posts []session.Post) error
	Follow(ctx context.Context, sessionID string) error
	Unfollow(sessionID string)
	Alive(ctx context.Context, replica string) (bool, error)
	Own(ctx context.Context, digest string) error
	Disown(ctx context.Context, digest string) error
	ClaimOwned(ctx context.Context, replica string) ([]string, error)
	Sequence(ctx context.Context) (uint64, error)
}

// DigestReader reads a session's record by its digest, for a replica taking over what another
// owned, and tells which of such sessions still exist.
type DigestReader interface {
	GetByDigest(ctx context.Context, digest string) (*session.Record, error)
	Existing(ctx context.Context, digests []string) ([]bool, error)
}

// Hub is what the layer needs of the live side of this process's sessions (hub.Local): the
// streams other replicas produce, and the sessions live here.
type Hub interface {
	Lookup(sessionID string) *hub.Session
	Extend(sessionID, streamID string, events []hub.Event, complete bool) bool
	Keep(sessionID string, data []byte) bool
	Produced(sessionID, streamID, producer string)
	TakeOver(ctx context.Context, producer string, each time.Duration) []string
}

// Host is what the layer needs of the gateway it carries messages for. Its methods are called
// on the bus's goroutine unless said otherwise, and must not block there.
type Host interface {
	Hub
	// Deliver puts data on a stream of a session held here (its standalone stream when
	// streamID is ""): hub.ErrNoStream when it is not.
	Deliver(sessionID, streamID string, data []byte) error
	// Answer takes a client's answer to a request this replica sent it.
	Answer(sessionID string, resp *protocol.Response)
	// Serve runs a call another replica forwarded, on the session's own connection here, and
	// returns how it ended. It runs on a goroutine of its own (Options.Go), with ctx ended
	// when the sender cancels the call or stops.
	Serve(ctx context.Context, sessionID, streamID, name string, c Call) Result
	// ServeResume serves a 2026-07-28 client's retry of a call waiting here for input, which
	// another replica took (ForwardResume), and returns what the call came to. It runs on a
	// goroutine of its own, with ctx ended when the sender gives up.
	// emit passes a message about the call (progress, a log message) to the retry's client.
	ServeResume(ctx context.Context, retry json.RawMessage, emit func([]byte)) Result
	// Refresh refetches the lists of the named upstream, which announced a change.
	Refresh(upstream string)
	// ReloadPins reads the pins anew after an operator's decision on another replica.
	ReloadPins()
	// Decided wakes the held call id, which an operator decided on another replica.
	Decided(id string)
	// ReloadConfig reads this replica's configuration files again and applies them, as
	// another replica asked, then announces what it runs (AnnounceConfig). It runs on a
	// goroutine of its own.
	ReloadConfig()
	// RunningConfig is what this replica runs, for another that asks.
	RunningConfig() Config
	// LevelSetElsewhere notes that the session set its log level on another replica, for
	// the sessions this one serves.
	LevelSetElsewhere(digest, sessionID, level string)
	// DropSubscription drops session's subscription to uri of upstream held here, unless its
	// stamp is later than seq: another replica holds it now.
	DropSubscription(digest, sessionID, upstream, uri string, seq uint64)
	// TakeOverSubscription subscribes here, for the session of digest (by its profile), to
	// an exposed uri a stopped replica subscribed to; it reports whether it did. It may
	// block (its own goroutine).
	TakeOverSubscription(ctx context.Context, digest, profile, uri string) bool
	// SubscriptionsTakenOver lists the digests of the sessions whose subscriptions were
	// taken over here; DropTakenOver drops those of one that ended.
	SubscriptionsTakenOver() []string
	DropTakenOver(digest string)
	// Orphan ends what the stopped replica produced that clients read here, but what the
	// calls it held need (claimed: this replica takes them over). It may block.
	Orphan(replica string, claimed bool)
	// KeepsOpen reports whether stream streamID of sessionID, produced by the stopped
	// replica producer, stays open for a held call that a replica takes over.
	KeepsOpen(ctx context.Context, sessionID, streamID, producer string) bool
}

// Options configure Replicas.
type Options struct {
	// Digests reads the sessions the replicas share by their digest. Required.
	Digests DigestReader
	// Connections records which replica holds a session's own upstream connection. Required.
	Connections ConnectionRecorder
	// Lease is the replica lease: a replica found stopped counts as such for a lease.
	Lease time.Duration
	// Logger receives the layer's logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Context is the gateway's lifetime: it ends at Close.
	Context context.Context
	// Go runs a function on a goroutine the gateway owns and waits for at Close; false when
	// it is closing and did not.
	Go func(func()) bool
}

// Replicas carries what is live of sessions between the replicas that share a Redis store. Each
// message is one Redis round trip; those raised on an upstream's read loop are queued and sent
// by a goroutine of their own, so that the read loop never waits for Redis. It is safe for
// concurrent use once attached to its bus.
type Replicas struct {
	host   Host
	opts   Options
	bus    Bus
	logger *slog.Logger

	// outbox holds the messages sent off the read loops, in order.
	outbox chan outgoing

	mu sync.Mutex
	// followed holds the sessions whose messages this replica receives (it holds a stream
	// of theirs), with when it began. Guarded by mu.
	followed map[string]time.Time

	// gone are the replicas found stopped.
	gone goneReplicas

	// forwarding holds the calls run on the replica holding a session's own connection.
	forwarding forwarding
	// configs holds what the other replicas run (config.go).
	configs configs
}

// outgoing is a queued message: to a replica, to a session's followers (digest), or to every
// replica. Queued messages leave in order, so that one sent to a replica after messages for
// a stream it holds arrives after them.
type outgoing struct {
	replica string
	digest  string
	msg     *session.BusMessage
}

// outboxSize bounds the queued messages; past it they are dropped, and logged.
const outboxSize = 16384

// callTimeout bounds a step of a takeover and the bookkeeping of a session that ended.
const callTimeout = 10 * time.Second

// New returns the layer for host, on the bus openBus makes with the layer's receive and gone
// callbacks (which it calls once, before New returns: the layer never runs without its bus).
func New(host Host, opts *Options, openBus func(receive func(*session.BusMessage), gone func(replica string, claimed bool)) Bus) *Replicas {
	r := &Replicas{host: host, opts: *opts, outbox: make(chan outgoing, outboxSize), followed: map[string]time.Time{},
		forwarding: forwarding{waiting: map[string]waitingCall{}, running: map[string]runningCall{}}}
	r.gone.lease = r.opts.Lease
	r.logger = r.opts.Logger
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	r.bus = openBus(r.Receive, r.Gone)
	return r
}

// NewName names this process among the replicas: random, so that a restarted replica is a new
// one (what the old one owned is taken over, not resumed).
func NewName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Replica is this replica's name.
func (r *Replicas) Replica() string { return r.bus.Replica() }

// Run serves the bus and sends the outbox until ctx ends.
func (r *Replicas) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.bus.Run(ctx) })
	wg.Go(func() { r.send(ctx) })
	wg.Wait()
}

// send sends the outbox: what has queued meanwhile goes in one round trip, so that a burst
// (a resource update fanned out to many sessions) costs few.
func (r *Replicas) send(ctx context.Context) {
	const batch = 256
	posts := make([]session.Post, 0, batch)
	for {
		posts = posts[:0]
		select {
		case <-ctx.Done():
			return
		case o := <-r.outbox:
			posts = append(posts, session.Post{Replica: o.replica, Digest: o.digest, Msg: o.msg})
		}
	more:
		for len(posts) < batch {
			select {
			case o := <-r.outbox:
				posts = append(posts, session.Post{Replica: o.replica, Digest: o.digest, Msg: o.msg})
			default:
				break more
			}
		}
		if err := r.bus.PublishAll(ctx, posts); err != nil && ctx.Err() == nil {
			r.logger.Warn("messages to the other replicas were lost: Redis did not take them", "messages", len(posts), "error", err.Error())
		}
	}
}

// post queues a message; it never blocks.
func (r *Replicas) post(o outgoing) {
	select {
	case r.outbox <- o:
	default:
		r.logger.Warn("a message to the other replicas was dropped: too many wait to be sent", "kind", o.msg.Kind)
	}
}

// DeliverElsewhere sends a message for a session's stream (its standalone stream when
// streamID is "") to the replica that holds it, if one does. It never blocks.
func (r *Replicas) DeliverElsewhere(digest, streamID string, data []byte) {
	r.post(outgoing{digest: digest, msg: &session.BusMessage{Kind: busDeliver, Stream: streamID, Data: data}})
}

// PinsDecided tells the other replicas that an operator decided on a pinned tool's change.
func (r *Replicas) PinsDecided() {
	r.post(outgoing{msg: &session.BusMessage{Kind: busPins}})
}

// Decided wakes replica, which holds the call id an operator decided here; it reports whether
// that replica listens.
func (r *Replicas) Decided(ctx context.Context, replica, id string) (bool, error) {
	return r.bus.Send(ctx, replica, &session.BusMessage{Kind: busDecided, Text: id})
}

// Follow makes the messages for session id reach this replica, which holds (or is about to
// resume) a stream of it. Until the session ends here.
func (r *Replicas) Follow(ctx context.Context, id string) error {
	r.mu.Lock()
	if _, ok := r.followed[id]; ok {
		r.followed[id] = time.Now()
		r.mu.Unlock()
		return nil
	}
	r.followed[id] = time.Now()
	r.mu.Unlock()
	if err := r.bus.Follow(ctx, id); err != nil {
		r.mu.Lock()
		delete(r.followed, id)
		r.mu.Unlock()
		return err
	}
	return nil
}

// Ended forgets session id here.
func (r *Replicas) Ended(id string) {
	r.unfollow(id)
	// What it owned for the session (subscriptions) is no one's to take over any more.
	digest := session.Digest(id)
	r.opts.Go(func() {
		ctx, cancel := context.WithTimeout(r.opts.Context, callTimeout)
		defer cancel()
		_ = r.bus.Disown(ctx, digest)
	})
}

// Producing reports whether the replica producing stream streamID of session sessionID, p,
// still runs, or whether the replica taking over a call it held finishes the stream (a
// stream read back from the event log stays open for its further events if so). It is the
// hub's Producing option.
func (r *Replicas) Producing(ctx context.Context, sessionID, p, streamID string) bool {
	if p == "" || p == r.bus.Replica() {
		return false // this process's streams are held here: one not held is not produced
	}
	alive, err := r.bus.Alive(ctx, p)
	if err != nil {
		// Not known to have stopped: followed, and ended with errors when it is.
		r.logger.Warn("could not learn whether a replica still runs", "replica", p, "error", err.Error())
		return true
	}
	if alive {
		return true
	}
	return r.host.KeepsOpen(ctx, sessionID, streamID, p)
}

// AnswerElsewhere sends a client's answer to a request that another replica sent it (its id
// names that replica); it reports whether that replica listens.
func (r *Replicas) AnswerElsewhere(ctx context.Context, sessionID string, resp *protocol.Response) bool {
	s, ok := resp.ID.Raw(), true
	var id string
	if ok = json.Unmarshal(s, &id) == nil; !ok {
		return false
	}
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return false
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 64); err != nil {
		return false
	}
	replica := id[:i]
	if replica == r.bus.Replica() {
		return false
	}
	data, err := protocol.Encode(resp)
	if err != nil {
		return false
	}
	sent, err := r.bus.Send(ctx, replica, &session.BusMessage{Kind: busAnswer, Session: session.Digest(sessionID), Data: data})
	if err != nil {
		r.logger.Warn("a client's answer for another replica was lost", "session", fingerprint(sessionID), "error", err.Error())
	}
	return sent
}

// CancelElsewhere tells every replica that the client cancelled its request id: the one
// serving it stops it.
func (r *Replicas) CancelElsewhere(ctx context.Context, sessionID string, id protocol.ID) {
	if err := r.bus.Broadcast(ctx, &session.BusMessage{Kind: busCancel, Session: session.Digest(sessionID), Data: id.Raw()}); err != nil {
		r.logger.Warn("a client's cancel could not reach the other replicas", "session", fingerprint(sessionID), "error", err.Error())
	}
}

// LevelSet tells the other replicas that a session set its log level here, for the index of
// the sessions each serves (its stream may be held there).
func (r *Replicas) LevelSet(ctx context.Context, sessionID, level string) {
	if err := r.bus.Broadcast(ctx, &session.BusMessage{Kind: busLogLevel, Session: session.Digest(sessionID), Text: level}); err != nil {
		r.logger.Warn("a session's log level could not reach the other replicas: they apply it at its next request there", "session", fingerprint(sessionID), "error", err.Error())
	}
}

// ListChanged tells the other replicas that an upstream announced a list change.
func (r *Replicas) ListChanged(upstreamName string) {
	r.post(outgoing{msg: &session.BusMessage{Kind: busRefresh, Text: upstreamName}})
}

// Subscribed tells the other replicas that this one now holds (or dropped) session id's
// subscription to an upstream's uri, so that they drop any they hold: one upstream
// subscription per session and URI, whichever replica it was made on. What this replica
// holds is recorded with it, for a survivor to take over if it stops.
func (r *Replicas) Subscribed(ctx context.Context, digest, upstreamName, uri string, on bool, seq uint64) {
	stamp, _ := json.Marshal(seq)
	r.post(outgoing{msg: &session.BusMessage{Kind: busSubscribed, Session: digest, Stream: upstreamName, Text: uri, Data: stamp}})
	if on {
		if err := r.bus.Own(ctx, digest); err != nil {
			r.logger.Warn("recording a subscription this replica holds failed: it is not taken over if this replica stops", "error", err.Error())
		}
	}
}

// Sequence returns the next stamp of the subscribes and unsubscribes of all replicas; 0 when
// Redis cannot give one (the subscription then yields to any other).
func (r *Replicas) Sequence(ctx context.Context) uint64 {
	seq, err := r.bus.Sequence(ctx)
	if err != nil {
		r.logger.Warn("stamping a subscription failed: another replica's may replace it", "error", err.Error())
	}
	return seq
}

// Receive handles a message from another replica (or a broadcast of this one). It runs on the
// bus's goroutine and never blocks: what calls an upstream runs on a worker.
func (r *Replicas) Receive(m *session.BusMessage) {
	h := r.host
	switch m.Kind {
	case session.BusEvents:
		if m.SessionID == "" {
			return
		}
		events := make([]hub.Event, len(m.Events))
		for i, e := range m.Events {
			events[i] = hub.Event{Seq: e.Seq, Data: e.Data}
		}
		h.Extend(m.SessionID, m.Stream, events, m.Complete)
	case session.BusStreamTaken:
		if m.SessionID != "" {
			h.Produced(m.SessionID, m.Stream, m.Replica)
		}
	case busDeliver:
		if m.SessionID == "" {
			return
		}
		err := h.Deliver(m.SessionID, m.Stream, m.Data)
		if errors.Is(err, hub.ErrNoStream) && m.Stream == "" {
			// For the standalone stream another replica produces and a client reads here: it
			// goes on it here should that replica have stopped before it could.
			h.Keep(m.SessionID, m.Data)
		}
	case busCall:
		r.opts.Go(func() { r.runForwarded(m) })
	case busResume:
		r.opts.Go(func() { r.runResume(m) })
	case busCallResult:
		r.forwarding.callResult(m)
	case busResumeEvent:
		r.forwarding.callEvent(m)
	case busCallCancel:
		r.forwarding.cancel(m.Text)
	case busAnswer:
		msg, err := protocol.Decode(m.Data)
		if resp, ok := msg.(*protocol.Response); err == nil && ok {
			h.Answer(m.SessionID, resp)
		}
	case busCancel:
		if ls := h.Lookup(m.SessionID); ls != nil {
			if id, err := protocol.ParseID(m.Data); err == nil {
				ls.CancelRequest(id)
			}
		}
	case busStandalone:
		if m.From == r.bus.Replica() {
			return
		}
		if ls := h.Lookup(m.SessionID); ls != nil {
			ls.DropStandalone(m.Stream)
		}
	case busRefresh:
		if m.From == r.bus.Replica() {
			return
		}
		h.Refresh(m.Text)
	case busPins:
		if m.From == r.bus.Replica() {
			return
		}
		h.ReloadPins()
	case busDecided:
		h.Decided(m.Text)
	case busReload, busConfig:
		r.receiveConfig(m)
	case busLogLevel:
		if m.From != r.bus.Replica() {
			h.LevelSetElsewhere(m.Session, m.SessionID, m.Text)
		}
	case busSubscribed:
		if m.From == r.bus.Replica() {
			return
		}
		var seq uint64
		_ = json.Unmarshal(m.Data, &seq)
		h.DropSubscription(m.Session, m.SessionID, m.Stream, m.Text, seq)
	}
}

// Gone handles a replica whose lease ran out: the streams it produced that clients resumed
// here end, with an error for each request it did not answer, but for sessions' standalone
// streams, which this replica takes over, and the streams of the calls it held; the replica
// that claimed it (claimed) takes its subscriptions and held calls over.
func (r *Replicas) Gone(replica string, claimed bool) {
	r.logger.Info("a replica's lease ended (it stopped, or lost Redis for a lease): what it produced ends here, what it owned moves", "replica", replica, "taking_over", claimed)
	r.gone.mark(replica)
	r.configs.drop(replica)
	r.host.Orphan(replica, claimed)
	r.opts.Go(func() { r.TakeOverStandalone(replica) })
	r.forwarding.fail(replica)
	if claimed {
		r.opts.Go(func() { r.takeOver(replica) })
	}
}

// TakeOverStandalone takes over the standalone streams of a stopped replica that clients
// read here: their messages go on them from this replica from now on. Each within its own
// time: many sessions, or a slow store, do not make the later ones run out of it.
func (r *Replicas) TakeOverStandalone(replica string) {
	for _, id := range r.host.TakeOver(r.opts.Context, replica, callTimeout) {
		if ls := r.host.Lookup(id); ls != nil {
			if st := ls.Standalone(); st != nil {
				r.logger.Info("took over a session's standalone stream from a stopped replica", "replica", replica, "session", fingerprint(id))
				r.OpenedStandalone(id, st.ID())
			}
		}
	}
}

// takeOver subscribes upstream, on this replica, for the sessions whose subscriptions a
// stopped replica held. Their updates reach them wherever their stream is. Subscriptions on a
// session's own upstream connection (isolation) are not taken over: that connection went with
// the replica.
func (r *Replicas) takeOver(replica string) {
	reader := r.opts.Digests
	if reader == nil {
		return // nothing could be taken over: leave what it owned to a replica that can
	}
	claimCtx, cancel := context.WithTimeout(r.opts.Context, callTimeout)
	defer cancel()
	digests, err := r.bus.ClaimOwned(claimCtx, replica)
	if err != nil {
		r.logger.Warn("taking over the subscriptions of a stopped replica failed", "replica", replica, "error", err.Error())
		return
	}
	taken := 0
	for _, digest := range digests {
		// Each session within its own time: a slow one does not cost the others theirs.
		ctx, cancel := context.WithTimeout(r.opts.Context, callTimeout)
		taken += r.takeOverSession(ctx, reader, replica, digest)
		cancel()
	}
	r.logger.Info("took over the subscriptions of a stopped replica", "replica", replica, "sessions", len(digests), "subscriptions", taken)
}

// takeOverSession subscribes here for one session of a stopped replica; it returns how many
// subscriptions it took.
func (r *Replicas) takeOverSession(ctx context.Context, reader DigestReader, replica, digest string) int {
	taken := 0
	rec, err := reader.GetByDigest(ctx, digest)
	if errors.Is(err, session.ErrNotFound) {
		return 0 // ended meanwhile
	}
	if err != nil {
		r.logger.Warn("taking over a session's subscriptions failed", "replica", replica, "error", err.Error())
		return 0
	}
	for _, uri := range rec.Subscriptions {
		if r.host.TakeOverSubscription(ctx, digest, rec.Profile, uri) {
			taken++
		}
	}
	return taken
}

// SweepTakenOver drops the subscriptions taken over for sessions that ended since: known here
// by their digest only, their end (by expiry) is not reported here otherwise. One round trip
// for all of them, on each expiry pass.
func (r *Replicas) SweepTakenOver(ctx context.Context) {
	digests := r.host.SubscriptionsTakenOver()
	reader := r.opts.Digests
	if len(digests) == 0 || reader == nil {
		return
	}
	exists, err := reader.Existing(ctx, digests)
	if err != nil {
		r.logger.Warn("checking the sessions of taken-over subscriptions failed; trying again on the next pass", "error", err.Error())
		return
	}
	for i, digest := range digests {
		if !exists[i] {
			r.host.DropTakenOver(digest)
		}
	}
}

// OpenedStandalone tells the replicas following session id that its standalone stream,
// streamID, is here now.
func (r *Replicas) OpenedStandalone(id, streamID string) {
	r.post(outgoing{digest: session.Digest(id), msg: &session.BusMessage{Kind: busStandalone, Stream: streamID}})
}

// unfollow stops receiving session id's messages here.
func (r *Replicas) unfollow(id string) {
	r.mu.Lock()
	_, followed := r.followed[id]
	delete(r.followed, id)
	r.mu.Unlock()
	if followed {
		r.bus.Unfollow(id)
	}
}

// FollowGrace is how long a session is followed at least, so that a stream about to be
// opened after a follow is not left without its messages.
const FollowGrace = 10 * time.Second

// SweepFollowed stops following the sessions that hold no stream here any more and have no
// request in flight here: their messages go to the replicas that do.
func (r *Replicas) SweepFollowed() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.followed))
	for id, since := range r.followed {
		if time.Since(since) > FollowGrace {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		if ls := r.host.Lookup(id); ls == nil || !ls.HoldsStreams() && !ls.Busy() {
			r.unfollow(id)
		}
	}
}

// fingerprint names a session in logs without its id, which is a credential (as the gateway
// does).
func fingerprint(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:6])
}

package gateway

import (
	"context"
	"crypto/rand"
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
)

// bus is what the gateway needs of the bus between the replicas sharing a Redis store
// (replicabus.RedisBus).
type bus interface {
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

// digestReader reads a session's record by its digest, for a replica taking over what another
// owned (Options.Backends' Digests), and tells which of such sessions still exist.
type digestReader interface {
	GetByDigest(ctx context.Context, digest string) (*session.Record, error)
	Existing(ctx context.Context, digests []string) ([]bool, error)
}

// replicas carries what is live of sessions between the replicas that share a Redis store
// (design decision 6): a message for a stream another replica holds, a client's answer to a
// request another replica sent, a cancel of a request another replica serves, list changes,
// and who holds a session's subscriptions. Each message is one Redis round trip; those raised
// on an upstream's read loop are queued and sent by a goroutine of their own, so that the
// read loop never waits for Redis. Nil when sessions live in this process's memory.
type replicas struct {
	g      *Gateway
	bus    bus
	logger *slog.Logger

	// outbox holds the messages sent off the read loops, in order.
	outbox chan outgoing

	mu sync.Mutex
	// followed holds the sessions whose messages this replica receives (it holds a stream
	// of theirs), with when it began. Guarded by mu.
	followed map[string]time.Time
	// goneReplicas holds when replicas were found stopped; an entry counts for a lease (a
	// replica taken for dead after an outage may renew again). Guarded by mu.
	goneReplicas map[string]time.Time
	// lease is the replica lease.
	lease time.Duration

	// forwarding holds the calls run on the replica holding a session's own connection.
	forwarding forwarding
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

func newReplicas(g *Gateway, b bus) *replicas {
	return &replicas{g: g, bus: b, logger: g.logger, outbox: make(chan outgoing, outboxSize), followed: map[string]time.Time{}, goneReplicas: map[string]time.Time{},
		forwarding: forwarding{waiting: map[string]waitingCall{}, running: map[string]runningCall{}}}
}

// run serves the bus and sends the outbox until the gateway closes.
func (r *replicas) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.bus.Run(ctx) })
	wg.Go(func() { r.send(ctx) })
	wg.Wait()
}

// send sends the outbox: what has queued meanwhile goes in one round trip, so that a burst
// (a resource update fanned out to many sessions) costs few.
func (r *replicas) send(ctx context.Context) {
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
func (r *replicas) post(o outgoing) {
	select {
	case r.outbox <- o:
	default:
		r.logger.Warn("a message to the other replicas was dropped: too many wait to be sent", "kind", o.msg.Kind)
	}
}

// deliverElsewhere sends a message for a session's stream (its standalone stream when
// streamID is "") to the replica that holds it, if one does.
func (r *replicas) deliverElsewhere(digest, streamID string, data []byte) {
	r.post(outgoing{digest: digest, msg: &session.BusMessage{Kind: busDeliver, Stream: streamID, Data: data}})
}

// follow makes the messages for session id reach this replica, which holds (or is about to
// resume) a stream of it. Until the session ends here.
func (r *replicas) follow(ctx context.Context, id string) error {
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

// ended forgets session id here.
func (r *replicas) ended(id string) {
	r.unfollow(id)
	// What it owned for the session (subscriptions) is no one's to take over any more.
	digest := session.Digest(id)
	r.g.goWorker(func() {
		ctx, cancel := context.WithTimeout(r.g.ctx, subscriptionCallTimeout)
		defer cancel()
		_ = r.bus.Disown(ctx, digest)
	})
}

// producing reports whether the replica producing stream streamID of session sessionID, p,
// still runs, or whether the replica taking over a call it held finishes the stream (a
// stream read back from the event log stays open for its further events if so).
func (r *replicas) producing(ctx context.Context, sessionID, p, streamID string) bool {
	if p == "" || p == r.bus.Replica() {
		return false // this process's streams are held here: one not held is not produced
	}
	alive, err := r.bus.Alive(ctx, p)
	if err != nil {
		// Not known to have stopped: followed, and ended with errors when it is.
		r.logger.Warn("could not learn whether a replica still runs", "replica", p, "error", err.Error())
		return true
	}
	if alive || r.g.held == nil {
		return alive
	}
	// A stream of a held call is finished by the replica that took the call over; one not
	// known to be a held call's (the store is out of reach) is kept open as if it were, until
	// that can be known. Either is answered here once the call's time is past with no answer.
	c, held, err := r.g.held.heldFor(ctx, streamID)
	if err != nil {
		r.logger.Warn("could not learn whether a stopped replica's stream is a held call's: it stays open until that can be known", "replica", p, "error", err.Error())
	}
	if held || err != nil {
		r.g.held.keepOpen(sessionID, streamID, p, c)
	}
	return held || err != nil
}

// answerElsewhere sends a client's answer to a request that another replica sent it (its id
// names that replica); it reports whether that replica listens.
func (r *replicas) answerElsewhere(ctx context.Context, sessionID string, resp *protocol.Response) bool {
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

// cancelElsewhere tells every replica that the client cancelled its request id: the one
// serving it stops it.
func (r *replicas) cancelElsewhere(ctx context.Context, sessionID string, id protocol.ID) {
	if err := r.bus.Broadcast(ctx, &session.BusMessage{Kind: busCancel, Session: session.Digest(sessionID), Data: id.Raw()}); err != nil {
		r.logger.Warn("a client's cancel could not reach the other replicas", "session", fingerprint(sessionID), "error", err.Error())
	}
}

// listChanged tells the other replicas that an upstream announced a list change.
func (r *replicas) listChanged(upstreamName string) {
	r.post(outgoing{msg: &session.BusMessage{Kind: busRefresh, Text: upstreamName}})
}

// subscribed tells the other replicas that this one now holds (or dropped) session id's
// subscription to an upstream's uri, so that they drop any they hold: one upstream
// subscription per session and URI, whichever replica it was made on. What this replica
// holds is recorded with it, for a survivor to take over if it stops.
func (r *replicas) subscribed(ctx context.Context, digest, upstreamName, uri string, on bool, seq uint64) {
	stamp, _ := json.Marshal(seq)
	r.post(outgoing{msg: &session.BusMessage{Kind: busSubscribed, Session: digest, Stream: upstreamName, Text: uri, Data: stamp}})
	if on {
		if err := r.bus.Own(ctx, digest); err != nil {
			r.logger.Warn("recording a subscription this replica holds failed: it is not taken over if this replica stops", "error", err.Error())
		}
	}
}

// sequence returns the next stamp of the subscribes and unsubscribes of all replicas; 0 when
// Redis cannot give one (the subscription then yields to any other).
func (r *replicas) sequence(ctx context.Context) uint64 {
	seq, err := r.bus.Sequence(ctx)
	if err != nil {
		r.logger.Warn("stamping a subscription failed: another replica's may replace it", "error", err.Error())
	}
	return seq
}

// receive handles a message from another replica (or a broadcast of this one). It runs on the
// bus's goroutine and never blocks: what calls an upstream runs on a worker.
func (r *replicas) receive(m *session.BusMessage) {
	g := r.g
	switch m.Kind {
	case session.BusEvents:
		if m.SessionID == "" {
			return
		}
		events := make([]hub.Event, len(m.Events))
		for i, e := range m.Events {
			events[i] = hub.Event{Seq: e.Seq, Data: e.Data}
		}
		g.hub.Extend(m.SessionID, m.Stream, events, m.Complete)
	case session.BusStreamTaken:
		if m.SessionID != "" {
			g.hub.Produced(m.SessionID, m.Stream, m.Replica)
		}
	case busDeliver:
		if m.SessionID == "" {
			return
		}
		err := g.router.deliverHere(m.SessionID, m.Stream, m.Data)
		if errors.Is(err, hub.ErrNoStream) && m.Stream == "" {
			// For the standalone stream another replica produces and a client reads here: it
			// goes on it here should that replica have stopped before it could.
			g.hub.Keep(m.SessionID, m.Data)
		}
	case busCall:
		g.goWorker(func() { r.runForwarded(m) })
	case busCallResult:
		r.callResult(m)
	case busCallCancel:
		r.cancelForwarded(m.Text)
	case busAnswer:
		if ls := g.hub.Lookup(m.SessionID); ls != nil {
			msg, err := protocol.Decode(m.Data)
			if resp, ok := msg.(*protocol.Response); err == nil && ok {
				g.takeAnswer(g.ctx, ls, resp)
			}
		}
	case busCancel:
		if ls := g.hub.Lookup(m.SessionID); ls != nil {
			if id, err := protocol.ParseID(m.Data); err == nil {
				ls.CancelRequest(id)
			}
		}
	case busStandalone:
		if m.From == r.bus.Replica() {
			return
		}
		if ls := g.hub.Lookup(m.SessionID); ls != nil {
			ls.DropStandalone(m.Stream)
		}
	case busRefresh:
		if m.From == r.bus.Replica() {
			return
		}
		for _, u := range g.upstreams {
			if u.ns.Name == m.Text {
				u.shared.client.Refresh()
			}
		}
	case busPins:
		if m.From == r.bus.Replica() || g.pinning == nil {
			return
		}
		g.goWorker(func() {
			if err := g.pinning.reload(g.ctx); err != nil {
				r.logger.Warn("reading the pins after another replica's decision failed", "error", err.Error())
			}
			g.rebuild()
		})
	case busDecided:
		if g.held != nil {
			g.held.wake(m.Text)
		}
	case busSubscribed:
		if m.From == r.bus.Replica() {
			return
		}
		var seq uint64
		_ = json.Unmarshal(m.Data, &seq)
		g.subs.dropElsewhere(m.Session, m.SessionID, m.Stream, m.Text, seq)
	}
}

// gone handles a replica whose lease ran out: the streams it produced that clients resumed
// here end, with an error for each request it did not answer, but for sessions' standalone
// streams, which this replica takes over; the replica that claimed it (claimed) takes its
// subscriptions over.
func (r *replicas) gone(replica string, claimed bool) {
	r.logger.Info("a replica's lease ended (it stopped, or lost Redis for a lease): what it produced ends here, what it owned moves", "replica", replica, "taking_over", claimed)
	r.mu.Lock()
	r.goneReplicas[replica] = time.Now()
	r.mu.Unlock()
	if r.g.held == nil {
		r.g.hub.Orphaned(replica, nil)
	} else {
		r.g.goWorker(func() { r.orphanHeld(replica, claimed) })
	}
	r.g.goWorker(func() { r.takeOverStandalone(replica) })
	r.failForwarded(replica)
	if claimed {
		r.g.goWorker(func() { r.takeOver(replica) })
	}
}

// orphanHeld ends the streams a stopped replica produced that clients resumed here, but those
// of the calls it held: they never ran, and their streams stay open, for the replica that
// claimed it (claimed: this one) to run them once decided and answer there. When the held
// calls cannot be read, all its streams stay open until they can (heldCalls.sweepFollowed):
// a held call's stream must not be told that its call may have run in part.
func (r *replicas) orphanHeld(replica string, claimed bool) {
	h := r.g.held
	if adopted, err := h.streamsHeldBy(r.g.ctx, replica); err != nil {
		r.logger.Warn("reading the calls a stopped replica held failed: its streams read here stay open until they can be read", "replica", replica, "error", err.Error())
		h.orphanLater(replica)
	} else {
		h.orphanFollowed(replica, adopted)
	}
	if claimed {
		h.takeOverFrom(replica)
	}
}

// takeOverStandalone takes over the standalone streams of a stopped replica that clients
// read here: their messages go on them from this replica from now on. Each within its own
// time: many sessions, or a slow store, do not make the later ones run out of it.
func (r *replicas) takeOverStandalone(replica string) {
	for _, id := range r.g.hub.TakeOver(r.g.ctx, replica, subscriptionCallTimeout) {
		if ls := r.g.hub.Lookup(id); ls != nil {
			if st := ls.Standalone(); st != nil {
				r.logger.Info("took over a session's standalone stream from a stopped replica", "replica", replica, "session", fingerprint(id))
				r.openedStandalone(id, st.ID())
			}
		}
	}
}

// takeOver subscribes upstream, on this replica, for the sessions whose subscriptions a
// stopped replica held. Their updates reach them wherever their stream is. Subscriptions on a
// session's own upstream connection (isolation) are not taken over: that connection went with
// the replica.
func (r *replicas) takeOver(replica string) {
	claimCtx, cancel := context.WithTimeout(r.g.ctx, subscriptionCallTimeout)
	defer cancel()
	digests, err := r.bus.ClaimOwned(claimCtx, replica)
	if err != nil {
		r.logger.Warn("taking over the subscriptions of a stopped replica failed", "replica", replica, "error", err.Error())
		return
	}
	reader := r.g.backends.Digests
	if reader == nil {
		return
	}
	taken := 0
	for _, digest := range digests {
		// Each session within its own time: a slow one does not cost the others theirs.
		ctx, cancel := context.WithTimeout(r.g.ctx, subscriptionCallTimeout)
		taken += r.takeOverSession(ctx, reader, replica, digest)
		cancel()
	}
	r.logger.Info("took over the subscriptions of a stopped replica", "replica", replica, "sessions", len(digests), "subscriptions", taken)
}

// takeOverSession subscribes here for one session of a stopped replica; it returns how many
// subscriptions it took.
func (r *replicas) takeOverSession(ctx context.Context, reader digestReader, replica, digest string) int {
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
		if r.g.subs.takeOver(ctx, digest, rec.Profile, uri) {
			taken++
		}
	}
	return taken
}

// newReplicaName names this process among the replicas: random, so that a restarted replica
// is a new one (what the old one owned is taken over, not resumed).
func newReplicaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sweepTakenOver drops the subscriptions taken over for sessions that ended since: known here
// by their digest only, their end (by expiry) is not reported here otherwise. One round trip
// for all of them, on each expiry pass.
func (r *replicas) sweepTakenOver(ctx context.Context) {
	digests := r.g.subs.takenOver()
	reader := r.g.backends.Digests
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
			r.g.subs.dropDigest(digest)
		}
	}
}

// openedStandalone tells the replicas following session id that its standalone stream,
// streamID, is here now.
func (r *replicas) openedStandalone(id, streamID string) {
	r.post(outgoing{digest: session.Digest(id), msg: &session.BusMessage{Kind: busStandalone, Stream: streamID}})
}

// unfollow stops receiving session id's messages here.
func (r *replicas) unfollow(id string) {
	r.mu.Lock()
	_, followed := r.followed[id]
	delete(r.followed, id)
	r.mu.Unlock()
	if followed {
		r.bus.Unfollow(id)
	}
}

// followGrace is how long a session is followed at least, so that a stream about to be
// opened after a follow is not left without its messages.
const followGrace = 10 * time.Second

// sweepFollowed stops following the sessions that hold no stream here any more and have no
// request in flight here: their messages go to the replicas that do.
func (r *replicas) sweepFollowed() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.followed))
	for id, since := range r.followed {
		if time.Since(since) > followGrace {
			ids = append(ids, id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		if ls := r.g.hub.Lookup(id); ls == nil || !ls.HoldsStreams() && !ls.Busy() {
			r.unfollow(id)
		}
	}
}

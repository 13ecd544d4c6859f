package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
)

// crossReplica is what the gateway asks of the layer between replicas that share a Redis
// store (internal/replica): nil when the sessions live in this process only, so that a single
// gateway carries nothing between replicas.
type crossReplica interface {
	replicaMessages
	replicaCalls
	// Run serves the bus until ctx ends; the expiry pass sweeps what the layer keeps, and a
	// session's end here is told to it.
	Run(ctx context.Context)
	SweepTakenOver(ctx context.Context)
	SweepFollowed()
	Ended(sessionID string)
	// TakeOverStandalone takes over a stopped replica's standalone streams read here.
	TakeOverStandalone(replica string)
	// ReloadAll, AnnounceConfig and Configs carry reloads and what each replica runs
	// (reload.go).
	ReloadAll()
	AnnounceConfig(cfg replica.Config, ask bool)
	Configs() []replica.Config
}

// replicaMessages carries what is live of a session to the replicas where it is needed: the
// router's messages for streams held elsewhere, clients' answers and cancels, subscriptions,
// list changes and operators' decisions.
type replicaMessages interface {
	Replica() string
	DeliverElsewhere(digest, streamID string, data []byte)
	AnswerElsewhere(ctx context.Context, sessionID string, resp *protocol.Response) bool
	CancelElsewhere(ctx context.Context, sessionID string, id protocol.ID)
	LevelSet(ctx context.Context, sessionID, level string)
	Follow(ctx context.Context, sessionID string) error
	OpenedStandalone(sessionID, streamID string)
	ListChanged(upstream string)
	Subscribed(ctx context.Context, digest, upstream, uri string, on bool, seq uint64)
	Sequence(ctx context.Context) uint64
	PinsDecided()
	Decided(ctx context.Context, replica, id string) (bool, error)
}

// replicaCalls runs calls on the replica that holds a session's own upstream connection.
type replicaCalls interface {
	HolderOf(connections map[string]string, upstream string) string
	Forward(ctx context.Context, holder, sessionID, streamID string, c replica.Call, timeout time.Duration) (replica.Result, bool, error)
	NotifyHolder(ctx context.Context, holder, sessionID string, c replica.Call)
	ForwardResume(ctx context.Context, holder string, retry json.RawMessage, timeout time.Duration, emit func([]byte)) (replica.Result, bool, error)
	RecordConnection(ctx context.Context, sessionID, upstream string, open bool)
}

var _ crossReplica = (*replica.Replicas)(nil)

// replicaHost is what the layer between replicas gets of the gateway: the live side of its
// sessions, and the few things it does for messages from other replicas.
type replicaHost struct{ g *Gateway }

var _ replica.Host = replicaHost{}

func (h replicaHost) Lookup(id string) *hub.Session { return h.g.hub.Lookup(id) }

func (h replicaHost) Extend(id, streamID string, events []hub.Event, complete bool) bool {
	return h.g.hub.Extend(id, streamID, events, complete)
}

func (h replicaHost) Keep(id string, data []byte) bool { return h.g.hub.Keep(id, data) }

func (h replicaHost) Produced(id, streamID, producer string) {
	h.g.hub.Produced(id, streamID, producer)
}

func (h replicaHost) TakeOver(ctx context.Context, producer string, each time.Duration) []string {
	return h.g.hub.TakeOver(ctx, producer, each)
}

func (h replicaHost) Deliver(id, streamID string, data []byte) error {
	return h.g.router.deliverHere(id, streamID, data)
}

func (h replicaHost) Answer(id string, resp *protocol.Response) {
	if ls := h.g.hub.Lookup(id); ls != nil {
		h.g.streamable.takeAnswer(h.g.ctx, ls, resp)
	}
}

func (h replicaHost) Refresh(upstreamName string) {
	if u := h.g.upstreamNamed(upstreamName); u != nil {
		u.shared.client.Refresh()
	}
}

func (h replicaHost) ReloadPins() {
	g := h.g
	if g.pinning == nil {
		return
	}
	g.goWorker(func() {
		if err := g.pinning.reload(g.ctx); err != nil {
			g.logger.Warn("reading the pins after another replica's decision failed", "error", err.Error())
		}
		g.rebuild()
	})
}

func (h replicaHost) Decided(id string) {
	if h.g.held != nil {
		h.g.held.Wake(id)
	}
}

func (h replicaHost) LevelSetElsewhere(digest, sessionID, level string) {
	l := &h.g.logs.listeners
	if sessionID == "" {
		sessionID = l.byDigest(digest)
	}
	if sessionID != "" && l.setLevel(sessionID, level) {
		h.g.resyncLogLevels()
	}
}

func (h replicaHost) DropSubscription(digest, id, upstreamName, uri string, seq uint64) {
	h.g.subs.dropElsewhere(digest, id, upstreamName, uri, seq)
}

func (h replicaHost) TakeOverSubscription(ctx context.Context, digest, profile, uri string) bool {
	ns, original, ok := h.g.catalogOf(profile).ResolveURI(uri)
	if !ok {
		return false
	}
	return h.g.subs.takeOver(ctx, digest, h.g.upstreamOf(ns), original)
}

func (h replicaHost) SubscriptionsTakenOver() []string { return h.g.subs.takenOver() }

func (h replicaHost) DropTakenOver(digest string) { h.g.subs.dropDigest(digest) }

func (h replicaHost) Orphan(replica string, claimed bool) {
	g := h.g
	if g.held == nil {
		// On a worker: the log is read for each stream (Receive must not block).
		g.goWorker(func() { g.hub.Orphaned(g.ctx, replica, nil) })
		return
	}
	g.goWorker(func() { g.held.orphan(replica, claimed) })
}

// KeepsOpen: a stream of a held call is finished by the replica that took the call over; one
// not known to be a held call's (the store is out of reach) is kept open as if it were, until
// that can be known. Either is answered here once the call's time is past with no answer.
func (h replicaHost) KeepsOpen(ctx context.Context, id, streamID, producer string) bool {
	held := h.g.held
	if held == nil {
		return false
	}
	c, ok, err := held.heldFor(ctx, streamID)
	if err != nil {
		h.g.logger.Warn("could not learn whether a stopped replica's stream is a held call's: it stays open until that can be known", "replica", producer, "error", err.Error())
	}
	if ok || err != nil {
		held.keepOpen(id, streamID, producer, c)
	}
	return ok || err != nil
}

// holderOf returns the replica that holds the session's own connection to u, when it is
// another replica not known to have stopped: the call goes there.
func holderOf(r replicaCalls, rq *request, u *upstreamEntry) string {
	return r.HolderOf(rq.connections, u.ns.Name)
}

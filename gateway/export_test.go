package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// ServeValue serves a request value through the pipeline as a face without sessions or
// streams would (the 2026-07-28 stateless one will): for tests.
func (g *Gateway) ServeValue(ctx context.Context, req *pipeline.Request) (json.RawMessage, *protocol.Error) {
	return g.requests.serve(ctx, &request{Request: req})
}

// SetTestHooks sets what runs as a catalog rebuild begins and as a call begins to wait for
// its upstream's catalog to be merged. Call it before Start.
func (g *Gateway) SetTestHooks(beforeRebuild, beforeMergeWait func()) {
	g.beforeRebuild, g.beforeMergeWait = beforeRebuild, beforeMergeWait
}

// SetFirstListHook sets what runs as a list request begins to wait for the upstreams' first
// attempts to start. Call it before Start.
func (g *Gateway) SetFirstListHook(beforeFirstListWait func()) {
	g.beforeFirstListWait = beforeFirstListWait
}

// UpstreamStatus is the named upstream's own status, which the catalog's statuses follow
// once rebuilt.
func (g *Gateway) UpstreamStatus(name string) upstream.Status {
	for _, u := range g.upstreamList() {
		if u.ns.Name == name {
			return u.Status()
		}
	}
	return upstream.Status{}
}

// WrapPinStore replaces the gateway's pin store with what wrap makes of it, for tests that
// watch its use. Call it before Start; it does nothing when no upstream is pinned.
func (g *Gateway) WrapPinStore(wrap func(pin.Store) pin.Store) {
	if g.pinning != nil {
		g.pinning.store = wrap(g.pinning.store)
	}
}

// SetListenKeepAlive sets how often an idle subscriptions/listen stream gets a keep-alive
// comment. Call it before Start.
func (g *Gateway) SetListenKeepAlive(d time.Duration) { g.streamable.stateless.listens.keepAlive = d }

// ListenStreams is how many subscriptions/listen streams are open here.
func (g *Gateway) ListenStreams() int { return g.streamable.stateless.listens.count() }

// SetParkTimer replaces how parked calls time their expiry (time.AfterFunc). Call it before
// any call parks.
func (g *Gateway) SetParkTimer(start func(d time.Duration, expire func()) interface{ Stop() bool }) {
	g.streamable.stateless.parked.startTimer = func(d time.Duration, f func()) expiryTimer { return start(d, f) }
}

// ParkedCalls is how many 2026-07-28 calls wait for their clients' input here.
func (g *Gateway) ParkedCalls() int { return g.streamable.stateless.parked.count() }

// SetApprovalKeepAlive sets how often a 2026-07-28 request waiting for an operator's decision
// gets a keep-alive. Call it before any call waits.
func (g *Gateway) SetApprovalKeepAlive(d time.Duration) {
	if g.gate != nil {
		g.gate.approvals.keepAlive = d
	}
}

// ListeningSessions counts the sessions here whose client listens on their standalone
// stream, so that a test can know a notification will reach it.
func (g *Gateway) ListeningSessions() int {
	n := 0
	for _, s := range g.hub.Sessions() {
		if s.Listening() {
			n++
		}
	}
	return n
}

// GrantWaiters reports how many retries wait here for a user's grant to land.
func (g *Gateway) GrantWaiters() int {
	if g.userAuth == nil {
		return 0
	}
	g.userAuth.mu.Lock()
	defer g.userAuth.mu.Unlock()
	n := 0
	for _, w := range g.userAuth.landed {
		n += w.n
	}
	return n
}

// BorrowedCatalogOwner names whose connection lends upstream name its listing: the
// principal's key, "" when nobody's (or the upstream borrows none).
func (g *Gateway) BorrowedCatalogOwner(name string) string {
	u := g.upstreamNamed(name)
	if u == nil || u.pool == nil || u.pool.borrowed == nil {
		return ""
	}
	u.pool.borrowed.mu.Lock()
	defer u.pool.borrowed.mu.Unlock()
	return u.pool.borrowed.owner
}

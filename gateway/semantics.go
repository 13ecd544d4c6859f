package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// What the protocol scopes to a session stays scoped to it when sessions share an upstream
// connection (design decision 5): log levels and log messages here, resource subscriptions in
// subscriptions.go.

// levelRank orders the RFC 5424 levels, debug lowest; -1 for an unknown level.
func levelRank(level string) int { return slices.Index(protocol.LogLevels, level) }

// levelAllows reports whether a message at level reaches a session that asked for min; a
// session that set no level gets everything (the server may choose, mcp-notes §6.5).
func levelAllows(min, level string) bool {
	return min == "" || levelRank(level) >= levelRank(min)
}

// syncLogLevels sets each shared upstream that logs to the most verbose level any live
// session asked for, when that changed.
func (g *Gateway) syncLogLevels(ctx context.Context) {
	want := ""
	for _, ls := range g.liveSessions() {
		rec, err := g.store.Get(ctx, ls.id)
		if err != nil || rec.LogLevel == "" {
			continue
		}
		if want == "" || levelRank(rec.LogLevel) < levelRank(want) {
			want = rec.LogLevel
		}
	}
	if want == "" {
		return
	}
	// All upstreams at once: a slow one delays this sync by its own time only, not by the sum.
	var wg sync.WaitGroup
	for _, r := range g.routes {
		wg.Go(func() { g.setUpstreamLevel(ctx, r, want) })
	}
	wg.Wait()
}

// syncSessionLogLevel sets a session's own upstream connections (isolation session) to the
// session's level.
func (g *Gateway) syncSessionLogLevel(ctx context.Context, ls *liveSession, level string) {
	for _, r := range g.routes {
		if r.pool == nil {
			continue
		}
		if pc := r.pool.existing(ls.id); pc != nil {
			g.setUpstreamLevel(ctx, pc.route, level)
		}
	}
}

// setUpstreamLevel sends logging/setLevel to one upstream when its level differs.
func (g *Gateway) setUpstreamLevel(ctx context.Context, r *route, level string) {
	info := r.client.Server()
	if info == nil || info.Capabilities.Logging == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.sentLevel == level && r.sentTo == info {
		return
	}
	params, _ := json.Marshal(map[string]string{"level": level})
	if _, err := r.client.Call(ctx, protocol.MethodSetLogLevel, params); err != nil {
		g.logger.Warn("setting an upstream's log level failed", "upstream", r.ns.Name, "level", level, "error", err.Error())
		return
	}
	r.sentLevel, r.sentTo = level, info
}

// deliverLog sends an upstream's log message to the session it belongs to, if its level
// admits it; a message that cannot be attributed reaches no one unless the upstream is
// configured to broadcast its logs.
func (g *Gateway) deliverLog(r *route, n *protocol.Notification, origin upstream.Origin) {
	level, _, _ := protocol.StringMember(n.Params, "level")
	if owner, _ := g.ownerOf(r, origin); owner != nil {
		if levelAllows(owner.logLevel, level) {
			if err := owner.out.send(n); err != nil {
				_ = standaloneSink{owner.session, g}.send(n)
			}
		}
		return
	}
	if !r.broadcastLogs {
		return
	}
	data, err := protocol.Encode(n)
	if err != nil {
		return
	}
	for _, ls := range g.liveSessions() {
		rec, err := g.store.Get(g.ctx, ls.id)
		if err == nil && levelAllows(rec.LogLevel, level) {
			ls.notify(data, g.logger)
		}
	}
}

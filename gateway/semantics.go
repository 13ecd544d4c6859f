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
	for _, s := range g.hub.Sessions() {
		rec, err := g.store.Get(ctx, s.ID())
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
	for _, u := range g.upstreams {
		wg.Go(func() { g.setUpstreamLevel(ctx, u.shared, want) })
	}
	wg.Wait()
}

// syncSessionLogLevel sets a session's own upstream connections (isolation session) to the
// session's level.
func (g *Gateway) syncSessionLogLevel(ctx context.Context, sessionID string, level string) {
	for _, u := range g.upstreams {
		if u.pool == nil {
			continue
		}
		if pc := u.pool.existing(sessionID); pc != nil {
			g.setUpstreamLevel(ctx, pc.conn, level)
		}
	}
}

// setUpstreamLevel sends logging/setLevel on one upstream connection when its level differs.
func (g *Gateway) setUpstreamLevel(ctx context.Context, c *conn, level string) {
	info := c.client.Server()
	if info == nil || info.Capabilities.Logging == nil {
		return
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.sentLevel == level && c.sentTo == info {
		return
	}
	params, _ := json.Marshal(map[string]string{"level": level})
	if _, err := c.client.Call(ctx, protocol.MethodSetLogLevel, params); err != nil {
		g.logger.Warn("setting an upstream's log level failed", "upstream", c.upstream.ns.Name, "level", level, "error", err.Error())
		return
	}
	c.sentLevel, c.sentTo = level, info
}

// deliverLog sends an upstream's log message to the session it belongs to, if its level
// admits it; a message that cannot be attributed reaches no one unless it came on the shared
// connection of an upstream configured to broadcast its logs (a session's own connection
// never broadcasts: its messages are that session's).
func (g *Gateway) deliverLog(c *conn, n *protocol.Notification, origin upstream.Origin) {
	level, _, _ := protocol.StringMember(n.Params, "level")
	if owner, _ := g.ownerOf(c, origin); owner != nil {
		if levelAllows(owner.logLevel, level) {
			_ = g.send(owner.forSession(g), n)
		}
		return
	}
	if !c.upstream.broadcastLogs || c.session != "" {
		return
	}
	data, err := protocol.Encode(n)
	if err != nil {
		return
	}
	for _, s := range g.hub.Sessions() {
		rec, err := g.store.Get(g.ctx, s.ID())
		if err == nil && levelAllows(rec.LogLevel, level) {
			_ = g.deliver(s.ID(), "", data)
		}
	}
}

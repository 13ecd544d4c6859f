package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// What the protocol scopes to a session stays scoped to it when sessions share an upstream
// connection (design decision 5): log levels and log messages here, resource subscriptions in
// subscriptions.go, tasks in tasks.go.

// sessionLogs keeps each session's log level over shared upstream connections: an upstream
// logs at the most verbose level any session asked for, and each session receives only the
// messages its own level admits, of its own calls.
type sessionLogs struct {
	router    *messageRouter
	upstreams []*upstreamEntry
	// serves reports whether the endpoint of a session's group (a profile, "" for /mcp)
	// shows anything of an upstream, whose broadcast logs then reach its sessions.
	serves func(group string, ns *catalog.Namespace) bool
}

// levelRank orders the RFC 5424 levels, debug lowest; -1 for an unknown level.
func levelRank(level string) int { return slices.Index(protocol.LogLevels, level) }

// levelAllows reports whether a message at level reaches a session that asked for min; a
// session that set no level gets everything (the server may choose, mcp-notes §6.5).
func levelAllows(min, level string) bool {
	return min == "" || levelRank(level) >= levelRank(min)
}

// syncLogLevels sets each shared upstream that logs to the most verbose level any live
// session asked for, when that changed.
func (l *sessionLogs) syncLevels(ctx context.Context) {
	want := ""
	for _, s := range l.router.hub.Sessions() {
		rec, err := l.router.store.Get(ctx, s.ID())
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
	for _, u := range l.upstreams {
		wg.Go(func() { l.setUpstreamLevel(ctx, u.shared, want) })
	}
	wg.Wait()
}

// syncSessionLogLevel sets a session's own upstream connections (isolation session) to the
// session's level.
func (l *sessionLogs) syncSession(ctx context.Context, sessionID string, level string) {
	for _, u := range l.upstreams {
		if u.pool == nil {
			continue
		}
		if pc := u.pool.existing(sessionID); pc != nil {
			l.setUpstreamLevel(ctx, pc.conn, level)
		}
	}
}

// setUpstreamLevel sends logging/setLevel on one upstream connection when its level differs.
func (l *sessionLogs) setUpstreamLevel(ctx context.Context, c *conn, level string) {
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
		l.router.logger.Warn("setting an upstream's log level failed", "upstream", c.upstream.ns.Name, "level", level, "error", err.Error())
		return
	}
	c.sentLevel, c.sentTo = level, info
}

// deliverLog sends an upstream's log message to the session it belongs to, if its level
// admits it; a message that cannot be attributed reaches no one unless it came on the shared
// connection of an upstream configured to broadcast its logs (a session's own connection
// never broadcasts: its messages are that session's).
func (l *sessionLogs) deliver(c *conn, n *protocol.Notification, origin upstream.Origin) {
	level, _, _ := protocol.StringMember(n.Params, "level")
	if owner, _ := l.router.ownerOf(c, origin); owner != nil {
		if levelAllows(owner.logLevel, level) {
			_ = l.router.send(owner.forSession(l.router.hub), n)
		}
		return
	}
	if !c.upstream.broadcastLogs || c.pooled != "" {
		return
	}
	data, err := protocol.Encode(n)
	if err != nil {
		return
	}
	for _, s := range l.router.hub.Sessions() {
		if !l.serves(s.Group(), c.upstream.ns) {
			continue // a profile that shows nothing of this upstream
		}
		rec, err := l.router.store.Get(l.router.ctx, s.ID())
		if err == nil && levelAllows(rec.LogLevel, level) {
			_ = l.router.deliver(s.ID(), "", data)
		}
	}
}

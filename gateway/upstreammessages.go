package gateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// upstreamMessages hands what the upstreams send to what it concerns: the router, which routes
// it to the session it belongs to, and what the protocol scopes to a session over shared
// connections (design decision 5): log levels, subscriptions, tasks.
type upstreamMessages struct {
	// conns finds the connection of an upstream client, shared or a session's own.
	conns sync.Map // upstreamClient → *conn

	// router routes what upstreams send to the sessions it belongs to; logs, subs and tasks
	// keep what the protocol scopes to a session over shared connections.
	router *messageRouter
	logs   *sessionLogs
	subs   *subscriptions
	tasks  *taskTable
}

// connOf finds the connection of an upstream client, shared or a session's own.
func (g *upstreamMessages) connOf(c *upstream.Client) *conn {
	if v, ok := g.conns.Load(upstreamClient(c)); ok {
		return v.(*conn)
	}
	return nil
}

// onUpstreamRequest hands a request from an upstream to the router.
func (g *upstreamMessages) onUpstreamRequest(ctx context.Context, client *upstream.Client, req *protocol.Request, origin upstream.Origin) (json.RawMessage, error) {
	c := g.connOf(client)
	if c == nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "unknown upstream")
	}
	return g.router.onRequest(ctx, c, req, origin)
}

// onUpstreamNotification hands a notification from an upstream to what it concerns: a call's
// progress, a cancel or an elicitation's completion to the router, a log message, a task's
// status and a resource update to their per-session semantics.
func (g *upstreamMessages) onUpstreamNotification(client *upstream.Client, n *protocol.Notification, origin upstream.Origin) {
	c := g.connOf(client)
	if c == nil {
		return
	}
	switch n.Method {
	case protocol.NotificationProgress:
		g.router.onProgress(c, n)
	case protocol.NotificationCancelled:
		g.router.onCancelled(c, n)
	case protocol.NotificationElicitationComplete:
		g.router.onElicitationComplete(c, n, origin)
	case protocol.NotificationMessage:
		g.logs.deliver(c, n, origin)
	case notificationStatus:
		g.tasks.deliverStatus(c, n)
	case protocol.NotificationResourceUpdated:
		g.subs.deliverUpdated(c, n)
	}
}

// workerGroup runs the goroutines a gateway owns, which Close waits for.
type workerGroup struct {
	mu sync.Mutex
	// closing is set by Close: no worker starts any more. Guarded by mu.
	closing bool
	workers sync.WaitGroup
}

// goWorker runs f on a goroutine the gateway owns: Close waits for it. Once Close has begun it
// refuses (false), so that no goroutine joins the group while Close waits for it.
func (g *workerGroup) goWorker(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.workers.Add(1)
	go func() {
		defer g.workers.Done()
		f()
	}()
	return true
}

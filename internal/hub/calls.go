package hub

import (
	"context"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// calls are the client requests a session has in flight here: each with its own context,
// which ends with the request, its cancel, or the session.
type calls struct {
	// ctx is the session's; hub counts the requests of all sessions. Set before use.
	ctx context.Context
	hub *Local

	// mu is taken after the session's mu, never before: the session's end cancels ctx under
	// it, so that no request begins once ctx has ended.
	mu sync.Mutex
	// inflight holds a cancel func per client request id being served. Guarded by mu.
	inflight map[protocol.ID]context.CancelCauseFunc
	// early holds the ids of cancels that came before their request (oldest first, at most
	// maxEarlyCancels): behind a balancer without affinity, a client's cancel may reach a
	// replica, or this one, before the request it cancels has begun. A request that begins
	// with its id here begins cancelled. An id is never reused within a session (mcp-notes
	// §1), so a late cancel kept here matches nothing. Guarded by mu.
	early []protocol.ID
}

// maxEarlyCancels bounds the cancels a session keeps for requests not begun yet.
const maxEarlyCancels = 32

// Begin registers a client request in flight and returns its context, the func that cancels
// that context alone (with a cause), and the func that ends the request. It refuses an id
// already in flight, a request past limit requests of this session, and any request once the
// session has ended. A request it admits is counted among the hub's requests until the one
// serving it calls RequestDone.
//
// The cancel func is the request's own: it never reaches a later request that reuses the id,
// as CancelRequest, which goes by id, would.
func (c *calls) Begin(id protocol.ID, limit int) (context.Context, context.CancelCauseFunc, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch _, dup := c.inflight[id]; {
	case c.ctx.Err() != nil:
		return nil, nil, nil, ErrSessionEnded
	case c.hub.draining.Load():
		return nil, nil, nil, ErrClosing
	case dup:
		return nil, nil, nil, ErrDuplicateID
	case limit > 0 && len(c.inflight) >= limit:
		return nil, nil, nil, ErrTooManyCalls
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	c.inflight[id] = cancel
	c.hub.requests.Add(1)
	if i := slices.Index(c.early, id); i >= 0 {
		c.early = slices.Delete(c.early, i, i+1)
		cancel(ErrClientCancelled)
	}
	return ctx, cancel, func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
		cancel(nil)
	}, nil
}

// RequestDone is called once by the goroutine that served a request Begin admitted.
func (c *calls) RequestDone() { c.hub.requests.Done() }

// CancelRequest cancels the client's request id (notifications/cancelled) and reports
// whether it was in flight. One that was not is kept, so that the request begins cancelled
// should it come later.
func (c *calls) CancelRequest(id protocol.ID) bool {
	c.mu.Lock()
	cancel, ok := c.inflight[id]
	if !ok && !slices.Contains(c.early, id) {
		if len(c.early) == maxEarlyCancels {
			c.early = slices.Delete(c.early, 0, 1)
		}
		c.early = append(c.early, id)
	}
	c.mu.Unlock()
	if ok {
		cancel(ErrClientCancelled)
	}
	return ok
}

// cancelAll cancels every request in flight with cause.
func (c *calls) cancelAll(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.inflight {
		cancel(cause)
	}
}

// count is the number of requests in flight.
func (c *calls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight)
}

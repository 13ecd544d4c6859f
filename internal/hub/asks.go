package hub

import (
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// asks are the requests sent to a session's client that wait for its answer.
type asks struct {
	// tag is the hub's, which the ids carry. Set before use.
	tag string

	mu sync.Mutex
	// pending holds the requests that wait, by id; seq numbers them. Guarded by mu.
	pending map[protocol.ID]pendingAsk
	seq     uint64
}

// pendingAsk is a request sent to the client: where its answer goes, and how to give up.
type pendingAsk struct {
	answer chan *protocol.Response
	cancel func()
}

// Ask registers a request to the client under a new id, which carries the hub's tag so that
// the answer finds its way without a lookup; cancel is how CancelAsk gives up on it. It
// returns the id, the channel its answer comes on, and the func that forgets it.
func (a *asks) Ask(cancel func()) (protocol.ID, <-chan *protocol.Response, func()) {
	ch := make(chan *protocol.Response, 1)
	a.mu.Lock()
	a.seq++
	id := protocol.StringID(a.tag + "-" + strconv.FormatUint(a.seq, 10))
	a.pending[id] = pendingAsk{answer: ch, cancel: cancel}
	a.mu.Unlock()
	return id, ch, func() {
		a.mu.Lock()
		delete(a.pending, id)
		a.mu.Unlock()
	}
}

// Answer delivers a client's answer to a request sent to it; it reports whether one was
// waiting.
func (a *asks) Answer(resp *protocol.Response) bool {
	a.mu.Lock()
	p, ok := a.pending[resp.ID]
	delete(a.pending, resp.ID)
	a.mu.Unlock()
	if ok {
		p.answer <- resp
	}
	return ok
}

// CancelAsk gives up on a request sent to the client (its upstream cancelled it).
func (a *asks) CancelAsk(id protocol.ID) {
	a.mu.Lock()
	p, ok := a.pending[id]
	a.mu.Unlock()
	if ok {
		p.cancel()
	}
}

// count is the number of requests that wait for an answer.
func (a *asks) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

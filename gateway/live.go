package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
)

// streamBuffer is how many messages may wait for a slow standalone stream before newer ones
// are dropped.
const streamBuffer = 64

// liveSession is this process's part of one client session: what cannot live in the store.
type liveSession struct {
	id string
	// ctx ends when the session ends (DELETE, expiry, shutdown); the session's upstream calls
	// run under it, not under one HTTP connection (design decision 10).
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// stream is the outbox of the open standalone GET stream, nil when none. Guarded by mu.
	stream chan []byte
	// inflight holds a cancel func per client request id being served. Guarded by mu.
	inflight map[protocol.ID]context.CancelCauseFunc
	// pending holds the requests sent to the client on an upstream's behalf, waiting for its
	// answer, by the gateway's id. Guarded by mu.
	pending map[protocol.ID]pendingReverse
	// calls holds the owners of the client requests being served, by client id. Guarded by mu.
	calls map[protocol.ID]*callOwner
	// reverseSeq numbers the requests sent to the client over the session's whole life.
	reverseSeq atomic.Uint64
	// caps are the capabilities the client declared at initialize; set once by capsFor.
	caps     clientCaps
	capsOnce sync.Once
}

func newLiveSession(parent context.Context, id string) *liveSession {
	ls := &liveSession{id: id, inflight: map[protocol.ID]context.CancelCauseFunc{}, pending: map[protocol.ID]pendingReverse{}, calls: map[protocol.ID]*callOwner{}}
	ls.ctx, ls.cancel = context.WithCancel(parent)
	return ls
}

// end cancels the session's calls and closes its stream.
func (ls *liveSession) end() { ls.cancel() }

// openStream registers a standalone stream; it fails when one is open already.
func (ls *liveSession) openStream() (chan []byte, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stream != nil {
		return nil, false
	}
	ls.stream = make(chan []byte, streamBuffer)
	return ls.stream, true
}

func (ls *liveSession) closeStream(ch chan []byte) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stream == ch {
		ls.stream = nil
	}
}

func (ls *liveSession) hasStream() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.stream != nil
}

// notify queues a message for the standalone stream; without one, or when it is full, the
// message is dropped (list_changed needs no redelivery: the next list shows the change).
func (ls *liveSession) notify(data []byte, logger *slog.Logger) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stream == nil {
		return false
	}
	select {
	case ls.stream <- data:
		return true
	default:
		logger.Warn("a session's stream is not reading; a notification was dropped", "session_id", ls.id)
		return false
	}
}

// begin registers a client request in flight and returns its context, or ok=false when the
// client already has a request with that id in flight.
func (ls *liveSession) begin(id protocol.ID) (context.Context, func(), bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if _, dup := ls.inflight[id]; dup {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancelCause(ls.ctx)
	ls.inflight[id] = cancel
	return ctx, func() {
		ls.mu.Lock()
		delete(ls.inflight, id)
		ls.mu.Unlock()
		cancel(nil)
	}, true
}

// cancelRequest cancels the client's request id, if in flight (notifications/cancelled).
func (ls *liveSession) cancelRequest(id protocol.ID) bool {
	ls.mu.Lock()
	cancel, ok := ls.inflight[id]
	ls.mu.Unlock()
	if ok {
		cancel(errClientCancelled)
	}
	return ok
}

// errClientCancelled is the cause of a request context the client cancelled.
var errClientCancelled = errors.New("cancelled by the client")

// capsFor returns the client capabilities the session declared, read once.
func (ls *liveSession) capsFor(rec *session.Record) clientCaps {
	ls.capsOnce.Do(func() { ls.caps = parseClientCaps(rec.ClientCapabilities, rec.ProtocolVersion) })
	return ls.caps
}

package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
)

// liveSession is this process's part of one client session: what cannot live in the store.
type liveSession struct {
	id string
	// ctx ends when the session ends (DELETE, expiry, shutdown); the session's upstream calls
	// run under it, not under one HTTP connection (design decision 10).
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// stream is the outbox of the open standalone GET stream, nil when none. Guarded by mu.
	stream *outbox
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
	// requests counts the client requests being served, which may outlive the HTTP request
	// that brought them (design decision 10); it is the gateway's, which waits for them when it
	// closes. Add happens in begin, under mu, only while the session lives; end cancels under
	// mu, so no Add follows it.
	requests *sync.WaitGroup
}

func newLiveSession(parent context.Context, id string, requests *sync.WaitGroup) *liveSession {
	ls := &liveSession{id: id, requests: requests, inflight: map[protocol.ID]context.CancelCauseFunc{}, pending: map[protocol.ID]pendingReverse{}, calls: map[protocol.ID]*callOwner{}}
	ls.ctx, ls.cancel = context.WithCancel(parent)
	return ls
}

// end cancels the session's calls and closes its stream. No request begins after it.
func (ls *liveSession) end() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.cancel()
}

// openStream registers a standalone stream; it fails when one is open already.
func (ls *liveSession) openStream() (*outbox, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stream != nil {
		return nil, false
	}
	ls.stream = newOutbox(-1)
	return ls.stream, true
}

func (ls *liveSession) closeStream(b *outbox) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stream == b {
		ls.stream = nil
	}
}

func (ls *liveSession) hasStream() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.stream != nil
}

// notify queues a message for the standalone stream. Without one the message is dropped
// (list_changed needs no redelivery: the next list shows the change); a stream whose client
// does not keep up is closed.
func (ls *liveSession) notify(data []byte, logger *slog.Logger) bool {
	ls.mu.Lock()
	stream := ls.stream
	ls.mu.Unlock()
	if stream == nil {
		return false
	}
	if err := stream.put(data, false); err != nil {
		if errors.Is(err, errStreamOverflow) {
			logger.Warn("a session's stream was closed: its client is not reading it", "session", fingerprint(ls.id))
		}
		return false
	}
	return true
}

// Reasons begin refuses a request.
var (
	errDuplicateID  = errors.New("request id already in flight")
	errTooManyCalls = errors.New("too many requests in flight")
)

// begin registers a client request in flight and returns its context and the func that ends
// it. It refuses an id already in flight, a request past limit requests of this session, and
// any request once the session has ended. A request it admits is counted in ls.requests too;
// the goroutine that serves it calls ls.requests.Done when it is finished.
func (ls *liveSession) begin(id protocol.ID, limit int) (context.Context, func(), error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch _, dup := ls.inflight[id]; {
	case ls.ctx.Err() != nil:
		return nil, nil, errSessionEnded
	case dup:
		return nil, nil, errDuplicateID
	case limit > 0 && len(ls.inflight) >= limit:
		return nil, nil, errTooManyCalls
	}
	ctx, cancel := context.WithCancelCause(ls.ctx)
	ls.inflight[id] = cancel
	ls.requests.Add(1)
	return ctx, func() {
		ls.mu.Lock()
		delete(ls.inflight, id)
		ls.mu.Unlock()
		cancel(nil)
	}, nil
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

// fingerprint names a session in logs. A session id is a bearer secret: whoever holds it can
// act in the session, so logs carry a short hash of it instead.
func fingerprint(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:6])
}

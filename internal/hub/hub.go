// Package hub keeps what is live of client sessions on this process. Local holds the
// sessions live here. Each Session holds its SSE streams, the client requests being served
// (calls) and the requests sent to its client that wait for an answer (asks). A Stream holds
// the bounded log of events that makes it resumable and, for a session's standalone stream
// another replica produces, the messages kept in case that one stops (keptMessages); a byte
// budget bounds what all the streams hold together (Options.Budget). Records of what a
// session is live in the session store; the hub holds what cannot be written down. An
// EventLog keeps streams beyond this process, so that a client resumes a stream on another
// replica, which follows it (Extend) and takes it over when its producer stops (TakeOver).
// Everything below the gateway's server face addresses a session and a stream by id, never by
// pointer.
package hub

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosing is returned by Open once Close has begun, and by Session.Begin once Drain has.
var ErrClosing = errors.New("the gateway is shutting down")

// ErrShuttingDown is the cause of the requests EndRequests ends: the gateway stopped before they
// finished.
var ErrShuttingDown = errors.New("the gateway shut down before the request finished")

// Options are a hub's settings; zero values take the defaults.
type Options struct {
	// Tag names this process in the ids it makes (streams, requests to clients), so that they
	// are unique across replicas. If empty, random.
	Tag string
	// Now returns the current time. If nil, time.Now.
	Now func() time.Time
	// Limits bound each stream's log. If zero, 256 messages and 8 MiB.
	Limits Limits
	// Retention is how long a complete stream whose connection broke before its end is kept
	// for its client to resume. If zero, a minute.
	Retention time.Duration
	// FinishedRetention is how long a stream written to its end is kept, for a connection
	// that broke just after the last flush. If zero, 10 seconds (at most Retention).
	FinishedRetention time.Duration
	// MaxStreams bounds the streams a session keeps; complete ones go first. If zero, 64.
	MaxStreams int
	// Log keeps what clients can resume beyond this process; nil keeps it here only.
	Log EventLog
	// Producing reports whether the replica producing stream streamID of session sessionID,
	// the hub tagged producer (the one the stream's id names, or the one that took the stream
	// over), still runs, or whether another will go on with the stream, and makes that
	// stream's further events reach this hub (Extend) if so. A stream read back from the log
	// whose producer stopped ends with an error answer for each request it did not answer; the
	// session's standalone stream is taken over instead. Nil: no producer but this hub runs.
	Producing func(ctx context.Context, sessionID, producer, streamID string) bool
	// Budget bounds the bytes of events the hub's streams hold together; past it, the
	// streams kept for resumption only are evicted, the one whose retention ends first
	// first (see budget). If zero, none.
	Budget int64
	// Hold is how long a message for a session's standalone stream that another hub produces
	// is kept on the copy of it this hub follows (Keep), in case that hub stopped before it
	// logged it. If zero, Retention.
	Hold time.Duration
}

// Local is the in-process hub.
type Local struct {
	opts Options
	ctx  context.Context
	stop context.CancelFunc
	// seed hashes the messages of followed streams (digest).
	seed maphash.Seed
	// budget counts the bytes the streams hold against Options.Budget.
	budget budget

	mu sync.Mutex
	// sessions holds the live sessions by id. Guarded by mu.
	sessions map[string]*Session
	// ended remembers recently ended sessions, so that a request that raced their end does not
	// bring them back to life. Pruned by Sweep. Guarded by mu.
	ended map[string]time.Time
	// closing is set by Close. Guarded by mu.
	closing bool

	// draining is set by Drain: no request begins any more. Atomic: Begin reads it under the
	// lock of its session's calls, which is taken after mu, never before.
	draining atomic.Bool

	// requests counts the client requests being served (Session.Begin), which may outlive
	// the HTTP requests that brought them.
	requests sync.WaitGroup
}

// New returns an empty hub; sessions' contexts derive from parent.
func New(parent context.Context, opts *Options) *Local {
	h := &Local{sessions: map[string]*Session{}, ended: map[string]time.Time{}, seed: maphash.MakeSeed()}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.Tag == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		h.opts.Tag = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if h.opts.Now == nil {
		h.opts.Now = time.Now
	}
	if h.opts.Limits.Messages <= 0 {
		h.opts.Limits.Messages = 256
	}
	if h.opts.Limits.Bytes <= 0 {
		h.opts.Limits.Bytes = 8 << 20
	}
	if h.opts.Retention <= 0 {
		h.opts.Retention = time.Minute
	}
	if h.opts.FinishedRetention <= 0 {
		h.opts.FinishedRetention = min(10*time.Second, h.opts.Retention)
	}
	if h.opts.Hold <= 0 {
		h.opts.Hold = h.opts.Retention
	}
	if h.opts.MaxStreams <= 0 {
		h.opts.MaxStreams = 64
	}
	h.budget.limit = h.opts.Budget
	h.ctx, h.stop = context.WithCancel(parent)
	return h
}

// Tag is the hub's tag.
func (h *Local) Tag() string { return h.opts.Tag }

// Open returns the live part of session id, creating it on first use in group (sessions of
// one group get the same broadcasts; a session's group never changes, so later calls' group is
// ignored). It fails for a session that ended meanwhile, and once Close has begun.
func (h *Local) Open(id, group string) (*Session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, ErrClosing
	}
	s, ok := h.sessions[id]
	if !ok {
		if _, ended := h.ended[id]; ended {
			return nil, ErrSessionEnded
		}
		s = newSession(h, id, group)
		h.sessions[id] = s
	}
	return s, nil
}

// Lookup returns the live part of session id, nil when it has none here.
func (h *Local) Lookup(id string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

// End ends session id here: its calls are cancelled and its streams dropped. It reports
// whether the session was live here.
func (h *Local) End(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[id]
	delete(h.sessions, id)
	h.ended[id] = h.opts.Now()
	if s != nil {
		// Under h.mu, so that a Close that no longer finds the session knows it has ended and
		// no request of it begins.
		s.end(false)
	}
	return s != nil
}

// Close ends every session and refuses new ones. It does not wait for their requests: see
// RequestsDone.
func (h *Local) Close() {
	h.mu.Lock()
	h.closing = true
	sessions := h.sessions
	h.sessions = map[string]*Session{}
	h.mu.Unlock()
	for _, s := range sessions {
		s.end(true)
	}
}

// Drain refuses new requests (Session.Begin fails with ErrClosing) while those in flight go on:
// RequestsDone tells when they have all ended.
func (h *Local) Drain() { h.draining.Store(true) }

// EndRequests cancels every request in flight with cause (ErrShuttingDown at the end of a
// drain), so that each is answered now rather than cut off.
func (h *Local) EndRequests(cause error) {
	for _, s := range h.Sessions() {
		s.calls.cancelAll(cause)
	}
}

// RequestsDone is closed once no request admitted by Begin is being served. Call it after
// Drain or Close, when no request begins any more.
func (h *Local) RequestsDone() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		h.requests.Wait()
		close(done)
	}()
	return done
}

// Sessions returns the live sessions at this moment.
func (h *Local) Sessions() []*Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

// digest hashes a message, to recognise it again.
func (h *Local) digest(data []byte) uint64 { return maphash.Bytes(h.seed, data) }

// Sweep forgets sessions that ended before cutoff (no request that started before they ended
// can still be on its way), complete streams kept past the retention period, and messages
// kept for followed standalone streams past Options.Hold.
func (h *Local) Sweep(cutoff time.Time) {
	h.mu.Lock()
	for id, at := range h.ended {
		if at.Before(cutoff) {
			delete(h.ended, id)
		}
	}
	sessions := make([]*Session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	now := h.opts.Now()
	for _, s := range sessions {
		s.mu.Lock()
		s.pruneLocked()
		s.mu.Unlock()
		for _, st := range s.followedStandalone() {
			st.mu.Lock()
			st.kept.prune(now, h.opts.Hold)
			st.mu.Unlock()
		}
	}
	h.enforceBudget()
}

// ErrNoStream is returned by Deliver when the session or the stream is not live here.
var ErrNoStream = errors.New("no such stream here")

// Deliver puts a message on a session's stream: streamID's, or the standalone stream when
// streamID is empty. It never blocks.
func (h *Local) Deliver(sessionID, streamID string, data []byte) error {
	s := h.Lookup(sessionID)
	if s == nil {
		return ErrNoStream
	}
	var st *Stream
	if streamID == "" {
		st = s.Standalone()
	} else {
		st = s.Stream(streamID)
	}
	if st == nil || st.readBack() {
		// A stream read back from the log is another replica's: it takes its messages.
		return ErrNoStream
	}
	return st.Put(data, false)
}

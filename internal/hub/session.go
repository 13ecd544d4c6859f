package hub

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Reasons Begin and OpenStandalone refuse.
var (
	ErrSessionEnded = errors.New("session ended")
	ErrDuplicateID  = errors.New("request id already in flight")
	ErrTooManyCalls = errors.New("too many requests in flight")
	// ErrStreamOpen is returned by OpenStandalone while a connection writes the session's
	// standalone stream.
	ErrStreamOpen = errors.New("the session's standalone stream is open")
)

// Causes of a request context that ended before its answer, besides its session's end.
var (
	// ErrClientCancelled: the client cancelled the request (notifications/cancelled).
	ErrClientCancelled = errors.New("cancelled by the client")
	// ErrAnswerUndeliverable: the stream that would carry the answer was dropped (its client
	// left without a way to resume it, or did not keep up): nobody can receive the answer.
	ErrAnswerUndeliverable = errors.New("the stream of its answer was dropped")
)

// Session is this process's live part of one client session: its streams and their logs, the
// client requests being served, and the requests sent to its client that wait for an answer.
// What a session is (its record) lives in the session store.
type Session struct {
	id  string
	hub *Local
	// group is what the session was opened in (hub.Open); it never changes.
	group string
	// ctx ends when the session ends (DELETE, expiry, shutdown); the session's upstream calls
	// run under it, not under one HTTP connection (design decision 10).
	ctx    context.Context
	cancel context.CancelFunc

	// calls are the client requests being served (Begin), asks the requests sent to the
	// client that wait for its answer (Ask): each with its own lock, taken after mu.
	calls
	asks

	mu sync.Mutex
	// streams holds the session's streams that are open or kept for resumption, by id.
	// Guarded by mu.
	streams map[string]*Stream
	// standalone is the stream of GET requests, nil when none. Guarded by mu.
	standalone *Stream
	// streamSeq numbers the session's streams. Guarded by mu.
	streamSeq uint64
}

func newSession(h *Local, id, group string) *Session {
	s := &Session{id: id, hub: h, group: group, streams: map[string]*Stream{}}
	s.ctx, s.cancel = context.WithCancel(h.ctx)
	s.calls = calls{ctx: s.ctx, hub: h, inflight: map[protocol.ID]context.CancelCauseFunc{}}
	s.asks = asks{tag: h.opts.Tag, pending: map[protocol.ID]pendingAsk{}}
	return s
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Group is the group the session was opened in.
func (s *Session) Group() string { return s.group }

// Context ends when the session does.
func (s *Session) Context() context.Context { return s.ctx }

// end cancels the session's calls and drops its streams. No request begins after it. When
// the hub closes (closing), the session goes on elsewhere: its standalone stream's end is not
// logged, so that the hub where its client resumes it takes it over.
func (s *Session) end(closing bool) {
	s.mu.Lock()
	s.calls.mu.Lock() // so that no request begins once the session's context is cancelled
	s.cancel()
	s.calls.mu.Unlock()
	streams := s.streams
	s.streams, s.standalone = map[string]*Stream{}, nil
	s.mu.Unlock()
	for _, st := range streams {
		st.mu.Lock()
		if closing && st.standalone {
			st.loggedEnd = true
		}
		st.dropLocked()
		st.mu.Unlock()
	}
}

// NewStream starts the stream of a POST that expects responses responses. At the session's
// number of kept streams, those kept past their time, then the oldest complete ones, are
// forgotten first (Sweep forgets the former otherwise).
func (s *Session) NewStream(responses int) *Stream {
	st := &Stream{session: s, limits: s.hub.opts.Limits, responses: responses, first: 1, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.id = s.nextStreamIDLocked()
	if s.ctx.Err() != nil {
		st.dropLocked()
		return st
	}
	if len(s.streams) >= s.hub.opts.MaxStreams {
		// Only at the cap: a request does not pay for a walk over the kept streams.
		s.pruneLocked()
	}
	s.streams[st.id] = st
	st.mu.Lock()
	st.session.hub.budget.enter(st)
	st.mu.Unlock()
	return st
}

func (s *Session) nextStreamIDLocked() string {
	s.streamSeq++
	return s.hub.opts.Tag + "_" + strconv.FormatUint(s.streamSeq, 36)
}

// pruneLocked forgets complete streams kept too long, and the oldest ones past the session's
// number of kept streams.
func (s *Session) pruneLocked() {
	now := s.hub.opts.Now()
	for id, st := range s.streams {
		if st.expired(now) {
			delete(s.streams, id)
			st.mu.Lock()
			st.session.hub.budget.release(st)
			st.mu.Unlock()
		}
	}
	for len(s.streams) >= s.hub.opts.MaxStreams {
		var oldest *Stream
		for _, st := range s.streams {
			st.mu.Lock()
			kept := st.writer == nil && (st.complete || st.dropped)
			st.mu.Unlock()
			if kept && (oldest == nil || streamBefore(st, oldest)) {
				oldest = st
			}
		}
		if oldest == nil {
			return // all in use: the new one is still admitted
		}
		delete(s.streams, oldest.id)
		oldest.mu.Lock()
		oldest.session.hub.budget.release(oldest)
		oldest.mu.Unlock()
	}
}

// streamBefore orders streams by age, through the number in their id.
func streamBefore(a, b *Stream) bool {
	return len(a.id) < len(b.id) || len(a.id) == len(b.id) && a.id < b.id
}

// OpenStandalone opens the session's standalone stream (GET without Last-Event-ID) and
// attaches the caller to it. One connection at a time: while one writes it, ErrStreamOpen. A
// standalone stream whose connection dropped is replaced: a client that opens a new one does
// not want the old one's events.
func (s *Session) OpenStandalone() (*Stream, *Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return nil, nil, ErrSessionEnded
	}
	if old := s.standalone; old != nil {
		if old.attached() {
			return nil, nil, ErrStreamOpen
		}
		delete(s.streams, old.id)
		old.mu.Lock()
		old.dropLocked()
		old.mu.Unlock()
	}
	st := &Stream{session: s, limits: s.hub.opts.Limits, responses: -1, first: 1, done: make(chan struct{}), standalone: true}
	st.id = s.nextStreamIDLocked()
	s.standalone = st
	s.streams[st.id] = st
	st.mu.Lock()
	st.session.hub.budget.enter(st)
	st.mu.Unlock()
	// Attached under the session's lock (session, then stream: the lock order), so that a
	// second GET finds it taken.
	c, err := st.Attach(0)
	return st, c, err
}

// Resume attaches the caller to the stream that lastEventID came from, after that event: a
// stream of this session only (mcp-notes §4.5). It fails with ErrUnknownStream for an id of
// no stream of the session, ErrEventsLost when what came after it is no longer held.
func (s *Session) Resume(ctx context.Context, lastEventID string) (*Stream, *Cursor, error) {
	streamID, seq, ok := splitEventID(lastEventID)
	if !ok {
		return nil, nil, ErrUnknownStream
	}
	s.mu.Lock()
	st := s.streams[streamID]
	s.mu.Unlock()
	if st == nil || st.readBack() {
		// Not produced here: the event log may hold it (a restart, another replica), and
		// more of it each time.
		replayed, err := s.replay(ctx, streamID, seq)
		if err != nil {
			return nil, nil, fmt.Errorf("resume from the event log: %w", err)
		}
		if replayed == nil && st == nil {
			return nil, nil, ErrUnknownStream
		}
		if replayed != nil {
			s.mu.Lock()
			if s.ctx.Err() != nil {
				s.mu.Unlock()
				return nil, nil, ErrSessionEnded
			}
			var old, copied *Stream
			if held := s.streams[streamID]; held == nil || held.readBack() {
				if held != nil {
					// The copy read before is replaced: what was kept on it goes on the new
					// one, and its connection, if any, ends.
					replayed.replaceCopyLocked(held)
					copied = held
				}
				s.streams[streamID] = replayed
				replayed.mu.Lock()
				replayed.session.hub.budget.enter(replayed)
				replayed.mu.Unlock()
				st = replayed
				if !replayed.readBack() {
					// Taken over here: the session's standalone stream from now on.
					old = s.installStandaloneLocked(replayed)
				}
			} else {
				st = held // produced here meanwhile: not expected, but the live one wins
			}
			s.mu.Unlock()
			dropReplaced(old)
			dropReplaced(copied)
			if st == replayed {
				s.catchUp(ctx, replayed)
			}
		}
	}
	c, err := st.Attach(seq)
	if errors.Is(err, ErrStreamDone) {
		return nil, nil, ErrUnknownStream
	}
	return st, c, err
}

// Stream returns the session's stream id, nil when it is not held.
func (s *Session) Stream(id string) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// Standalone returns the session's standalone stream, nil when none.
func (s *Session) Standalone() *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.standalone
}

// Listening reports whether a connection writes the session's standalone stream, or a
// stream read back from the log (a standalone stream resumed here from another replica): a
// client that listens is using its session.
func (s *Session) Listening() bool {
	s.mu.Lock()
	streams := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		if st == s.standalone || st.readBack() {
			streams = append(streams, st)
		}
	}
	s.mu.Unlock()
	for _, st := range streams {
		if st.attached() {
			return true
		}
	}
	return false
}

// StreamsOpen returns how many of the session's streams here a connection writes now.
func (s *Session) StreamsOpen() int {
	s.mu.Lock()
	streams := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	n := 0
	for _, st := range streams {
		if st.attached() {
			n++
		}
	}
	return n
}

// HoldsStreams reports whether the session has streams here, open or kept for resumption.
func (s *Session) HoldsStreams() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams) > 0
}

// DropStandalone drops the session's standalone stream here, and the copies followed here of
// another hub's but stream keep: another hub produces the session's standalone stream, keep,
// from now on (its client opened it there, or resumed it there and that hub took it over).
// When the one produced here is keep itself (this hub was taken for stopped), its end is not
// logged: it goes on there.
func (s *Session) DropStandalone(keep string) {
	s.mu.Lock()
	var drop []*Stream
	for id, st := range s.streams {
		if st.standalone && (st == s.standalone || id != keep && st.readBack()) {
			drop = append(drop, st)
			delete(s.streams, id)
		}
	}
	s.standalone = nil
	s.mu.Unlock()
	for _, st := range drop {
		st.mu.Lock()
		if st.id == keep {
			st.loggedEnd = true
		}
		st.dropLocked()
		st.mu.Unlock()
	}
}

// installStandaloneLocked makes st, taken over here, the session's standalone stream, and
// returns the one it replaces, if any. s.mu must be held.
func (s *Session) installStandaloneLocked(st *Stream) *Stream {
	old := s.standalone
	s.standalone = st
	s.streams[st.id] = st
	st.mu.Lock()
	st.session.hub.budget.enter(st)
	st.mu.Unlock()
	if old == st {
		return nil
	}
	if old != nil {
		delete(s.streams, old.id)
	}
	return old
}

// replaceCopyLocked takes over, on a stream read anew from the log, the messages kept on the
// copy of it that it replaces (held: read back before). s.mu of the session must be held;
// the streams' own are taken one after the other.
func (st *Stream) replaceCopyLocked(held *Stream) {
	if !st.standalone {
		return
	}
	held.mu.Lock()
	kept, logged := held.kept.msgs, held.kept.loggedFirst
	held.kept = keptMessages{}
	// A message Keep is about to keep on it goes on st instead.
	held.replaced = true
	held.mu.Unlock()
	if len(kept) == 0 && len(logged) == 0 {
		return
	}
	st.mu.Lock()
	st.takeKeptLocked(kept, logged)
	st.mu.Unlock()
}

// dropReplaced drops a standalone stream that another replaced (nil: none).
func dropReplaced(old *Stream) {
	if old == nil {
		return
	}
	old.mu.Lock()
	old.dropLocked()
	old.mu.Unlock()
}

// Busy reports whether the session has client requests in flight or requests waiting for its
// client's answer: it is in use, whatever its last request's time.
func (s *Session) Busy() bool {
	return s.calls.count() > 0 || s.asks.count() > 0
}

// forget removes a dropped stream.
func (s *Session) forget(st *Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
	}
	if s.standalone == st {
		s.standalone = nil
	}
}

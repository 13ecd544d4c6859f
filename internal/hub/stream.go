package hub

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Errors of a stream's writers and of those who put messages on it.
var (
	// ErrStreamDone is returned by a put after the stream's last response, or after it was
	// dropped.
	ErrStreamDone = errors.New("the stream has ended")
	// ErrStreamOverflow is returned by the put that found more unwritten messages than the
	// stream holds; the stream is dropped, so that a client that does not read costs only
	// itself.
	ErrStreamOverflow = fmt.Errorf("%w: its client did not keep up", ErrStreamDone)
	// ErrUnknownStream is returned by Resume for an event id that names no stream of the
	// session: another session's, one long finished, or none at all.
	ErrUnknownStream = errors.New("the event id names no stream of this session")
	// ErrEventsLost is returned by Resume when events after the given id are no longer held.
	ErrEventsLost = errors.New("events after this id are no longer held")
)

// Stream is one SSE stream of a session: a POST's answer or the standalone GET stream. Every
// message put on it becomes an event with an id and stays in the stream's bounded log, so that
// a client whose connection dropped can resume it with Last-Event-ID on a new connection and
// get what it missed, in order (mcp-notes §4.5). Any goroutine may put (an upstream's read
// loop among them: a put never blocks); the connection currently attached writes.
type Stream struct {
	id      string
	session *Session
	limits  Limits

	mu sync.Mutex
	// events are the messages held, in order; events[i] has sequence number first+i. Events
	// already written to a connection are dropped first when the log is full. Guarded by mu.
	events [][]byte
	first  uint64
	size   int
	// written is the highest sequence number a connection wrote out (Cursor.Wrote): only
	// events up to it may make room for new ones. Guarded by mu.
	written uint64
	// responses counts the responses still expected: the stream is complete after the last.
	// A standalone stream expects none (negative). Guarded by mu.
	responses int
	complete  bool
	// dropped is set when the stream can take no more: overflow, its session ended, or its
	// client left before it could resume. Guarded by mu.
	dropped bool
	// streamed is set once a message other than a response was put: the answer must be an SSE
	// stream, not JSON. Guarded by mu.
	streamed bool
	// resumable is set once the client has an event id of this stream. Guarded by mu.
	resumable bool
	// logged is the highest sequence number appended to the hub's event log, loggedEnd
	// whether its end was; fromLog marks a stream read back from that log, which is not
	// written again. Guarded by mu.
	logged      uint64
	loggedStart bool
	loggedEnd   bool
	fromLog     bool
	// requests are the ids of the requests the stream answers (Expect), logged with its
	// start; answered holds those whose answer a stream read back from the log carries, and
	// following marks such a stream whose producer, another replica, still runs: its events
	// come by Extend. Guarded by mu.
	requests  []protocol.ID
	answered  map[protocol.ID]bool
	following bool
	// standalone marks the session's standalone stream, here or read back from the log; it
	// lives as long as its session, so a hub takes it over when its producer stops. Set
	// before the stream is shared.
	standalone bool
	// owner is the hub producing a stream read back from the log: the one its id names, or
	// the one that took it over (Produced). Guarded by mu.
	owner string
	// kept holds messages for the session's standalone stream that reached this hub while
	// it follows the stream from another (Keep). Guarded by mu.
	kept keptMessages
	// replaced marks a copy that a resume replaced with a new one (which took what was kept
	// on it): what comes for it goes on that one. Guarded by mu.
	replaced bool
	// writer is the attached connection, nil when none. Guarded by mu.
	writer *Cursor
	// keepUntil is when a complete stream without a connection is forgotten; zero while it
	// is not both. Set by keepUntilLocked. Guarded by mu.
	keepUntil time.Time
	// share is what the hub's budget counts of the stream. Guarded by mu.
	share share
	// done is closed when the stream is dropped: requests put on it wait for an answer no
	// more.
	done chan struct{}
}

// Limits bound one stream's log.
type Limits struct {
	// Messages and Bytes bound the events held. Past either, events already written are
	// dropped first; when the unwritten ones alone are over, the stream is dropped. A single
	// message larger than Bytes still goes when it is the only one unwritten; responses always
	// go.
	Messages, Bytes int
}

// ID names the stream within its session.
func (s *Stream) ID() string { return s.id }

// EventID is the id of the stream's event seq: the stream's id and the sequence number, so
// that an id names its stream (mcp-notes §4.5). Sequence 0 is the priming event.
func (s *Stream) EventID(seq uint64) string {
	return s.id + "." + strconv.FormatUint(seq, 10)
}

// splitEventID is EventID reversed.
func splitEventID(id string) (stream string, seq uint64, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], seq, true
}

// Put queues a message, or a response when response is set. It fails when the stream has
// ended; a log whose unwritten events are over the limits drops the stream and fails.
func (s *Stream) Put(data []byte, response bool) error {
	s.mu.Lock()
	if s.dropped || s.complete {
		s.mu.Unlock()
		return ErrStreamDone
	}
	if !response && !s.roomLocked(len(data)) {
		s.dropLocked()
		unread := s.writer == nil
		s.mu.Unlock()
		if unread {
			// Nobody reads it to notice: it goes now, not when its session does.
			s.session.forget(s)
		}
		return ErrStreamOverflow
	}
	s.appendLocked(data, response)
	s.logLocked()
	s.wakeLocked()
	s.mu.Unlock()
	s.session.hub.enforceBudget()
	return nil
}

// appendLocked adds a message to the events held, with room made for it.
func (s *Stream) appendLocked(data []byte, response bool) {
	s.events = append(s.events, data)
	s.size += len(data)
	s.session.hub.budget.account(s)
	if response {
		s.answeredLocked()
	} else {
		s.streamed = true
	}
}

// roomLocked makes room for a message of n bytes by dropping events already written; it
// reports whether there is room.
func (s *Stream) roomLocked(n int) bool {
	over := func() bool {
		return len(s.events) > 0 && (len(s.events) >= s.limits.Messages || s.size+n > s.limits.Bytes)
	}
	for over() && s.first <= s.written && len(s.events) > 0 {
		s.size -= len(s.events[0])
		s.events[0] = nil
		s.events = s.events[1:]
		s.first++
	}
	s.session.hub.budget.account(s)
	return !over()
}

// Unanswered notes that one expected response will not come (the client cancelled its
// request, or its session ended): the stream may complete without it.
func (s *Stream) Unanswered() {
	s.mu.Lock()
	if !s.dropped && !s.complete {
		s.answeredLocked()
		s.logLocked()
		s.wakeLocked()
	}
	s.mu.Unlock()
	s.session.hub.enforceBudget()
}

func (s *Stream) answeredLocked() {
	if s.responses--; s.responses == 0 {
		s.complete = true
		if s.writer == nil {
			// Its client left before the end: the retention period begins now.
			s.keepUntilLocked(s.session.hub.opts.Now().Add(s.session.hub.opts.Retention))
		}
	}
}

// StartStreaming makes the answer an SSE stream even before a message is put (a batch).
func (s *Stream) StartStreaming() {
	s.mu.Lock()
	s.streamed = true
	s.mu.Unlock()
}

func (s *Stream) dropLocked() {
	if !s.dropped {
		close(s.done)
		if log := s.session.hub.opts.Log; log != nil && s.loggedStart && !s.loggedEnd && !s.fromLog {
			// A replica following it learns that it ends here, rather than wait for more.
			s.loggedEnd = true
			log.Append(s.session.id, s.id, nil, true)
		}
	}
	s.dropped = true
	s.events, s.size = nil, 0
	s.session.hub.budget.release(s)
	s.wakeLocked()
}

// Dropped is closed when the stream is dropped (overflow, its session's end, a client that
// left and cannot come back): what waits for its client's answer can give up.
func (s *Stream) Dropped() <-chan struct{} { return s.done }

func (s *Stream) wakeLocked() {
	if s.writer != nil {
		select {
		case s.writer.wake <- struct{}{}:
		default:
		}
		if s.writer.onWake != nil {
			s.writer.onWake()
		}
	}
}

// Attach makes a new connection the stream's writer, from after sequence number after (0:
// from the start). A writer attached before is detached: its Next reports Detached. It fails
// with ErrEventsLost when events after after are no longer held.
func (s *Stream) Attach(after uint64) (*Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after+1 < s.first || after+1 > s.first+uint64(len(s.events)) {
		return nil, ErrEventsLost
	}
	if s.dropped {
		return nil, ErrStreamDone
	}
	// The client has what it confirms, no more: events after it must stay until written.
	s.written = after
	s.keepUntilLocked(time.Time{})
	if s.writer != nil {
		s.writer.detached = true
		s.wakeLocked()
	}
	c := &Cursor{stream: s, after: after, wake: make(chan struct{}, 1)}
	s.writer = c
	c.wake <- struct{}{}
	return c, nil
}

// Cursor is one connection's place in a stream: what it has written. Only the connection's
// own goroutine uses it.
type Cursor struct {
	stream *Stream
	after  uint64
	wake   chan struct{}
	// onWake, when set, is called (under the stream's mu) on every wake after the first.
	onWake func()
	// detached is set, under the stream's mu, when another connection took the stream over.
	detached bool
}

// State is what a writer learns from Next besides the events.
type State int

const (
	// Live: more may come; wait on Wake.
	Live State = iota
	// Complete: the events returned are the stream's last.
	Complete
	// Dropped: the stream ended without completing (overflow, session end).
	Dropped
	// Detached: another connection took the stream over.
	Detached
)

// Event is one message of a stream with its sequence number.
type Event struct {
	Seq  uint64
	Data []byte
}

// Wake receives when there may be something new for Next.
func (c *Cursor) Wake() <-chan struct{} { return c.wake }

// OnWake has f called whenever the stream has something new for the cursor, beside the
// signal on Wake: a connection that is busy elsewhere (serving the request whose answer the
// stream carries) learns that it must start writing. f runs with the stream locked: it must
// not block, nor call into the stream.
func (c *Cursor) OnWake(f func()) {
	c.stream.mu.Lock()
	c.onWake = f
	c.stream.mu.Unlock()
}

// Next returns the events after the cursor and the stream's state, and whether it must be
// SSE (a message other than a response was put). They count as written only once the caller
// says so (Wrote).
func (c *Cursor) Next() (events []Event, state State, streamed bool) {
	s := c.stream
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case c.detached:
		return nil, Detached, s.streamed
	case s.dropped:
		return nil, Dropped, s.streamed
	}
	last := s.first + uint64(len(s.events)) - 1 // first-1 when the log is empty
	for seq := max(c.after+1, s.first); seq <= last; seq++ {
		events = append(events, Event{Seq: seq, Data: s.events[seq-s.first]})
	}
	c.after = max(c.after, last)
	if s.complete {
		return events, Complete, s.streamed
	}
	return events, Live, s.streamed
}

// Wrote notes that the connection wrote the stream out up to event seq: those events may
// make room for new ones, and go at once from a stream its client cannot resume (it holds no
// event id to ask for them again). Events handed out by Next but not written stay until
// resumed.
func (c *Cursor) Wrote(seq uint64) {
	s := c.stream
	s.mu.Lock()
	if s.writer == c {
		s.written = max(s.written, seq)
		if !s.resumable {
			for s.first <= s.written && len(s.events) > 0 {
				s.size -= len(s.events[0])
				s.events[0] = nil
				s.events = s.events[1:]
				s.first++
			}
			s.session.hub.budget.account(s)
		}
	}
	s.mu.Unlock()
}

// MarkResumable notes that the client holds an event id of the stream (a priming event or an
// event was written): from now on a dropped connection leaves the stream to be resumed.
func (c *Cursor) MarkResumable() {
	s := c.stream
	s.mu.Lock()
	s.resumable = true
	s.logLocked()
	s.mu.Unlock()
}

// Detach ends the connection's part. A stream the client can resume stays, and keeps its
// messages for a new connection; one it cannot (answered as JSON, or dropped before an id was
// written) is dropped, so that requests put on it fail at once instead of waiting for a client
// that cannot come back. A complete stream is forgotten after the retention period.
func (c *Cursor) Detach() {
	s := c.stream
	s.mu.Lock()
	if s.writer != c {
		s.mu.Unlock()
		return
	}
	s.writer = nil
	if !s.resumable {
		s.dropLocked()
	} else if s.complete {
		s.keepUntilLocked(s.session.hub.opts.Now().Add(s.session.hub.opts.Retention))
	}
	dropped := s.dropped
	s.mu.Unlock()
	if dropped {
		s.session.forget(s)
	}
	s.session.hub.enforceBudget()
}

// Finish ends the connection's part after it wrote the whole of a complete stream. A flush
// only says that the bytes left for the client, not that they came: a stream its client can
// resume is kept for the short FinishedRetention, in case the connection broke right after,
// instead of the whole retention period. On a stream not complete, or one its client cannot
// resume (which goes at once, with its events), it is Detach.
func (c *Cursor) Finish() {
	s := c.stream
	s.mu.Lock()
	finished := s.writer == c && s.complete && s.resumable
	if finished {
		s.writer = nil
		s.keepUntilLocked(s.session.hub.opts.Now().Add(s.session.hub.opts.FinishedRetention))
	}
	s.mu.Unlock()
	if !finished {
		c.Detach()
		return
	}
	s.session.hub.enforceBudget()
}

// attached reports whether a connection writes the stream.
func (s *Stream) attached() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writer != nil
}

// expired reports whether a complete stream without a connection has been kept long enough.
func (s *Stream) expired(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writer == nil && !s.keepUntil.IsZero() && now.After(s.keepUntil)
}

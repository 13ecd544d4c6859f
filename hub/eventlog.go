package hub

import (
	"context"
	"errors"
	"math"
)

// EventLog keeps streams' events beyond this process (in Redis, a Stream per stream), so that
// a client can resume a stream this process does not hold: after a restart of the process or,
// with replicas, on another one. The hub writes what a client can resume — that the stream
// exists, from the moment the client holds an event id of it (its priming event), then its
// events and its end — and reads the log when Resume finds no such stream here.
type EventLog interface {
	// Append records a stream's events, in order; complete marks the stream's end. A first
	// Append with no events and complete false records that the stream exists. It must not
	// block: an implementation queues and writes in the background, and may drop what it
	// cannot queue (a resume then finds a gap and says so).
	Append(sessionID, streamID string, events []Event, complete bool)
	// Replay returns what the log holds of a stream after sequence number after: nil when it
	// holds nothing of that stream (never logged, another session's, expired). The events
	// returned follow after without a gap; ErrEventsLost when some that followed it are no
	// longer held. It may return fewer events than it holds (a page); Complete is then false.
	Replay(ctx context.Context, sessionID, streamID string, after uint64) (*Replayed, error)
}

// Replayed is what an event log holds of a stream after an event.
type Replayed struct {
	// Events follow the event asked about, in order, without a gap.
	Events []Event
	// Complete says that the stream's end was logged and follows Events.
	Complete bool
}

// ErrLogUnavailable wraps the error of an event log that could not be read (its store is
// unreachable): the client may retry.
var ErrLogUnavailable = errors.New("the event log could not be read")

// logLocked appends to the log what it lacks of the stream: that it exists, the events held
// after the last logged, and its end once complete. s.mu must be held.
func (s *Stream) logLocked() {
	log := s.session.hub.opts.Log
	if log == nil || !s.resumable || s.dropped || s.fromLog {
		return
	}
	last := s.first + uint64(len(s.events)) - 1 // first-1 when the log is empty
	var events []Event
	for seq := max(s.logged+1, s.first); seq <= last; seq++ {
		events = append(events, Event{Seq: seq, Data: s.events[seq-s.first]})
	}
	if len(events) == 0 && s.loggedStart && (!s.complete || s.loggedEnd) {
		return
	}
	s.loggedStart = true
	s.logged = max(s.logged, last)
	s.loggedEnd = s.complete
	log.Append(s.session.id, s.id, events, s.complete)
}

// readBack reports whether the stream was read back from the event log.
func (s *Stream) readBack() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fromLog
}

// replay makes a stream of what the event log holds of streamID after seq: it ends after
// what was logged, since nothing here produces more of it (a client that resumes again
// later gets what was logged meanwhile). nil when the log holds nothing of it.
func (s *Session) replay(ctx context.Context, streamID string, after uint64) (*Stream, error) {
	log := s.hub.opts.Log
	if log == nil || after >= math.MaxUint64-1 {
		return nil, nil
	}
	r, err := log.Replay(ctx, s.id, streamID, after)
	switch {
	case errors.Is(err, ErrEventsLost):
		return nil, err
	case err != nil:
		return nil, errors.Join(ErrLogUnavailable, err)
	case r == nil:
		return nil, nil
	}
	st := &Stream{id: streamID, session: s, limits: s.hub.opts.Limits, first: after + 1, complete: true,
		resumable: true, fromLog: true, done: make(chan struct{})}
	for i, e := range r.Events {
		if e.Seq != after+1+uint64(i) {
			return nil, ErrEventsLost // the log broke its promise: say so rather than skip
		}
		st.events = append(st.events, e.Data)
		st.size += len(e.Data)
	}
	return st, nil
}

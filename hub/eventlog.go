package hub

import (
	"context"
	"errors"
	"math"

	"github.com/manifold-mcp/manifold/protocol"
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
	// More says that the log holds more events after these (Events is a page): the client
	// resumes again for them.
	More bool
	// Requests are the ids of the requests the stream answers, as its producer logged them
	// (RequestLog); nil when it logged none.
	Requests []protocol.ID
}

// RequestLog is an EventLog that records, when a stream starts, the ids of the requests it
// answers, so that a replica resuming it after its producer stopped can answer those that
// never were with an error instead of silence.
type RequestLog interface {
	EventLog
	// Start records that a stream exists, and the requests it answers; it takes the place of
	// the first Append with no events.
	Start(sessionID, streamID string, requests []protocol.ID)
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
	if !s.loggedStart {
		if rl, ok := log.(RequestLog); ok {
			rl.Start(s.session.id, s.id, s.requests)
			if len(events) == 0 && !s.complete {
				s.loggedStart = true
				return
			}
		}
	}
	s.loggedStart = true
	s.logged = max(s.logged, last)
	s.loggedEnd = s.complete
	log.Append(s.session.id, s.id, events, s.complete)
}

// FromLog reports whether the stream was read back from the event log: another replica
// produced it.
func (s *Stream) FromLog() bool { return s.readBack() }

// readBack reports whether the stream was read back from the event log.
func (s *Stream) readBack() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fromLog
}

// replay makes a stream of what the event log holds of streamID after seq. When its producer
// still runs (Options.Producing), the stream stays open for the events it goes on producing
// (Extend); otherwise it ends after what was logged, with an error answer for each request
// the producer never answered. nil when the log holds nothing of it.
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
	st := &Stream{id: streamID, session: s, limits: s.hub.opts.Limits, first: after + 1, complete: r.Complete,
		resumable: true, fromLog: true, requests: r.Requests, responses: -1, done: make(chan struct{})}
	for i, e := range r.Events {
		if e.Seq != after+1+uint64(i) {
			return nil, ErrEventsLost // the log broke its promise: say so rather than skip
		}
		st.events = append(st.events, e.Data)
		st.size += len(e.Data)
		st.noteAnswer(e.Data)
	}
	if len(st.requests) > 0 && after > 0 && !st.complete {
		// Answers the client had before the resume point count too: a request answered
		// there must not get an error answer if the producer stops.
		s.answersBefore(ctx, st, after)
	}
	switch {
	case r.More:
		// A page: it ends here, and the client resumes again for the next one.
		st.complete = true
	case !st.complete:
		// A stream still being produced, or one whose producer stopped.
		producing := s.hub.opts.Producing
		if producing == nil || !producing(ctx, streamID) {
			st.orphanLocked()
		} else {
			st.following = true
		}
	}
	return st, nil
}

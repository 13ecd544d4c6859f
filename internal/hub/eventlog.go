package hub

import (
	"context"
	"errors"
	"math"

	"github.com/manifold-mcp/manifold/internal/protocol"
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
	// Standalone says that the stream is its session's standalone stream (RequestLog), which
	// lives as long as the session: a replica takes it over when its producer stops.
	Standalone bool
	// Producer is the hub (its tag) that took the stream over from the one that began it
	// (TakeoverLog); empty when none did: the producer is the one its id names.
	Producer string
}

// RequestLog is an EventLog that records, when a stream starts, the ids of the requests it
// answers, so that a replica resuming it after its producer stopped can answer those that
// never were with an error instead of silence.
type RequestLog interface {
	EventLog
	// Start records that a stream exists, and the requests it answers, or that it is its
	// session's standalone stream; it takes the place of the first Append with no events.
	Start(sessionID, streamID string, requests []protocol.ID, standalone bool)
}

// TakeoverLog is an EventLog that lets a stream outlive its producer: the session's
// standalone stream, or the stream of a call another replica finishes, goes on from another
// hub, which writes its further events to the log under the same id, after the last.
type TakeoverLog interface {
	EventLog
	// Claim makes hub to the producer of a stream whose producer, hub from, stopped, unless
	// another hub claimed it first; it returns the stream's producer after the claim. A
	// successful claim is announced to the hubs following the stream (Local.Produced). It
	// fails with ErrStreamDone for a session's standalone stream that another replaced (its
	// client opened a new one): nobody takes it over.
	Claim(ctx context.Context, sessionID, streamID, from, to string) (string, error)
	// Touch keeps what the log holds of a stream for the log's retention from now: a stream
	// that goes on while nothing happens on it. It must not block.
	Touch(sessionID, streamID string)
}

// DurableLog is an EventLog that can wait until an append is written: a stream another hub
// follows that this one ends (Session.Abandon) must be ended in the log before what else says
// so (a held call's record) goes, for a hub that then reads the log finds the end there.
type DurableLog interface {
	EventLog
	// AppendWait is Append, but it waits until the events are written, or ctx ends, and
	// reports whether they were. An event refused because the log holds its sequence number
	// already (another hub wrote it first) counts as written.
	AppendWait(ctx context.Context, sessionID, streamID string, events []Event, complete bool) error
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
			rl.Start(s.session.id, s.id, s.requests, s.standalone)
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
	case r.Standalone && r.Complete && len(r.Events) == 0:
		// The session's standalone stream outlives its producer: it ends only when dropped
		// (its client opened another, or did not keep up), and a resume of it after its
		// end would end at once, again and again.
		return nil, ErrUnknownStream
	}
	st := &Stream{id: streamID, session: s, limits: s.hub.opts.Limits, first: after + 1, complete: r.Complete,
		resumable: true, fromLog: true, requests: r.Requests, responses: -1, done: make(chan struct{}),
		standalone: r.Standalone, owner: r.Producer}
	if st.owner == "" {
		st.owner = Producer(streamID)
	}
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
		if err := s.followOrTakeOver(ctx, st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// followOrTakeOver decides what becomes of a stream read back from the log that has not
// ended: it is followed while its producer runs. When its producer stopped, the session's
// standalone stream, which lives as long as the session, is taken over here (or followed
// from the hub that took it over first); any other ends, with an error answer for each
// request its producer did not answer.
func (s *Session) followOrTakeOver(ctx context.Context, st *Stream) error {
	producing := s.hub.opts.Producing
	// A claim may name a hub that stopped too: it is claimed from that one in turn, a few
	// times at most; after that the stream is followed, and taken over here when that hub's
	// end is known (TakeOver).
	for range 3 {
		if producing != nil && producing(ctx, s.id, st.owner, st.id) {
			st.following = true
			return nil
		}
		if !st.standalone {
			st.orphanLocked()
			return nil
		}
		owner, err := s.claim(ctx, st.id, st.owner)
		if errors.Is(err, ErrStreamDone) {
			// Its client opened another standalone stream meanwhile: this one goes no
			// further than its producer logged (it is unknown when nothing is left of it).
			if len(st.events) == 0 {
				return ErrUnknownStream
			}
			st.complete = true
			return nil
		}
		if err != nil {
			return err
		}
		if owner == s.hub.opts.Tag {
			st.adoptLocked(-1)
			return nil
		}
		st.owner = owner
	}
	st.following = true
	return nil
}

// claim makes this hub the producer of stream streamID, whose producer, hub from, stopped,
// unless another hub did first: it returns the stream's producer after the claim. With a log
// that records no producers, this hub is the only one that reads it back.
func (s *Session) claim(ctx context.Context, streamID, from string) (string, error) {
	tl, ok := s.hub.opts.Log.(TakeoverLog)
	if !ok {
		return s.hub.opts.Tag, nil
	}
	owner, err := tl.Claim(ctx, s.id, streamID, from, s.hub.opts.Tag)
	if errors.Is(err, ErrStreamDone) {
		return "", err
	}
	if err != nil {
		return "", errors.Join(ErrLogUnavailable, err)
	}
	return owner, nil
}

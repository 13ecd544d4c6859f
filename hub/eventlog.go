package hub

import "context"

// EventLog keeps streams' events beyond this process (in Redis, a Stream per stream), so that
// a client can resume a stream this process does not hold: after a restart of the process or,
// with replicas, on another one. The hub writes what a client can resume — a stream's events
// from the moment the client holds an event id of it — and reads the log when Resume finds no
// such stream here.
type EventLog interface {
	// Append records a stream's events, in order; complete marks the stream's end (events
	// may be empty then). It must not block: an implementation queues and writes in the
	// background, and may drop what it cannot queue (the stream then resumes here only).
	Append(sessionID, streamID string, events []Event, complete bool)
	// Replay returns the stream's events after sequence number after, and whether the stream
	// is complete. An unknown stream is no events and no error.
	Replay(ctx context.Context, sessionID, streamID string, after uint64) (events []Event, complete bool, err error)
}

// logLocked appends the stream's events not yet in the log, up to the last held, and its end
// once complete. s.mu must be held.
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
	if len(events) == 0 && (!s.complete || s.loggedEnd) {
		return
	}
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

// replay makes a stream of what the event log holds of streamID after seq: complete, since
// nothing here produces more of it (a client that resumes again later gets what was logged
// meanwhile). nil when the log holds nothing of it.
func (s *Session) replay(ctx context.Context, streamID string, after uint64) (*Stream, error) {
	log := s.hub.opts.Log
	if log == nil {
		return nil, nil
	}
	events, complete, err := log.Replay(ctx, s.id, streamID, after)
	if err != nil || len(events) == 0 && !complete {
		return nil, err
	}
	st := &Stream{id: streamID, session: s, limits: s.hub.opts.Limits, first: after + 1, complete: true,
		resumable: true, fromLog: true, done: make(chan struct{})}
	for i, e := range events {
		if e.Seq != after+1+uint64(i) {
			break // a gap: what follows it cannot be told in order
		}
		st.events = append(st.events, e.Data)
		st.size += len(e.Data)
	}
	return st, nil
}

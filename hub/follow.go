package hub

import (
	"context"
	"strings"

	"github.com/manifold-mcp/manifold/protocol"
)

// Expect records the ids of the requests the stream answers, before its first event: they are
// logged with its start, so that a replica resuming the stream after this one stopped can
// answer those never answered with an error (see Orphaned).
func (s *Stream) Expect(ids ...protocol.ID) {
	s.mu.Lock()
	s.requests = append(s.requests, ids...)
	s.mu.Unlock()
}

// Producer names the hub (its Tag) that produced a stream, from the stream's id.
func Producer(streamID string) string {
	i := strings.LastIndexByte(streamID, '_')
	if i <= 0 {
		return ""
	}
	return streamID[:i]
}

// noteAnswer notes the id of a response among a stream's events read back from the log.
func (s *Stream) noteAnswer(data []byte) {
	msg, err := protocol.Decode(data)
	if err != nil {
		return
	}
	if resp, ok := msg.(*protocol.Response); ok {
		if s.answered == nil {
			s.answered = map[protocol.ID]bool{}
		}
		s.answered[resp.ID] = true
	}
}

// ErrProducerStopped is the error answer of a request whose stream's producer, another
// replica, stopped before answering it.
var ErrProducerStopped = protocol.Errorf(protocol.CodeShuttingDown,
	"the gateway replica running this request stopped before it finished; it may have run in part upstream: check before sending it again")

// orphanLocked ends a stream read back from the log whose producer stopped: each request it
// never answered gets an error answer, and the stream completes. The answers are logged, so
// that every replica resuming the stream later reads the same.
func (s *Stream) orphanLocked() {
	for _, id := range s.requests {
		if s.answered[id] {
			continue
		}
		data, err := protocol.Encode(&protocol.Response{ID: id, Error: ErrProducerStopped})
		if err != nil {
			continue
		}
		s.events = append(s.events, data)
		s.size += len(data)
		s.noteAnswer(data)
	}
	s.completeFollowedLocked()
	if s.fromLog && s.session.hub.opts.Log != nil {
		// Logged as if produced here: seq numbers follow the log's, so that a second
		// replica doing the same adds nothing (the log refuses an id it holds).
		last := s.first + uint64(len(s.events)) - 1
		var events []Event
		for seq := s.first; seq <= last; seq++ {
			events = append(events, Event{Seq: seq, Data: s.events[seq-s.first]})
		}
		s.session.hub.opts.Log.Append(s.session.id, s.id, events, true)
	}
	s.wakeLocked()
}

// Extend adds to a stream read back from the log the events its producer, another replica,
// published since: those after the last held, in order. An event already held is skipped; a
// gap (events published while this replica did not follow) drops the stream, so that its
// client resumes again and reads them from the log. It reports whether the stream was
// followed here.
func (h *Local) Extend(sessionID, streamID string, events []Event, complete bool) bool {
	ls := h.Lookup(sessionID)
	if ls == nil {
		return false
	}
	st := ls.Stream(streamID)
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.following || st.dropped {
		return false
	}
	if !st.extendLocked(events) {
		return true
	}
	if complete {
		st.completeFollowedLocked()
	}
	st.wakeLocked()
	return true
}

// extendLocked adds events its producer logged or published to a followed stream: those
// after the last held, in order; it reports false when a gap (or a client that does not keep
// up) dropped the stream.
func (st *Stream) extendLocked(events []Event) bool {
	next := st.first + uint64(len(st.events))
	for _, e := range events {
		switch {
		case e.Seq < next:
			continue
		case e.Seq > next || !st.roomLocked(len(e.Data)):
			st.dropLocked()
			return false
		}
		st.events = append(st.events, e.Data)
		st.size += len(e.Data)
		st.noteAnswer(e.Data)
		next++
	}
	return true
}

// completeFollowedLocked ends a followed stream: kept for its client for the retention
// period if none is attached.
func (st *Stream) completeFollowedLocked() {
	st.following = false
	st.complete = true
	if st.writer == nil {
		st.keepUntil = st.session.hub.opts.Now().Add(st.session.hub.opts.Retention)
	}
}

// answersBefore notes the answers the log holds up to event seq after, read from its start in
// pages: those the client had before it resumed.
func (s *Session) answersBefore(ctx context.Context, st *Stream, after uint64) {
	log := s.hub.opts.Log
	for from := uint64(0); from < after; {
		r, err := log.Replay(ctx, s.id, st.id, from)
		if err != nil || r == nil || len(r.Events) == 0 {
			return // best effort: what cannot be read is not known to be answered
		}
		for _, e := range r.Events {
			if e.Seq > after {
				return
			}
			st.noteAnswer(e.Data)
			from = e.Seq
		}
		if !r.More {
			return
		}
	}
}

// catchUp reads again, once a followed stream is where Extend finds it, what its producer
// logged while it was being read back: nothing published meanwhile is lost.
func (s *Session) catchUp(ctx context.Context, st *Stream) {
	st.mu.Lock()
	following, last := st.following, st.first+uint64(len(st.events))-1
	st.mu.Unlock()
	if !following {
		return
	}
	r, err := s.hub.opts.Log.Replay(ctx, s.id, st.id, last)
	if err != nil || r == nil {
		return // what was published after the registration comes by Extend
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.following || st.dropped || !st.extendLocked(r.Events) {
		return
	}
	if r.Complete {
		st.completeFollowedLocked()
	}
	st.wakeLocked()
}

// Orphaned ends the streams followed here whose producer, the hub tagged producer, stopped:
// each request they did not answer gets an error answer (ErrProducerStopped). A stream
// adopted reports (another replica finishes what it answers) stays open for its events.
func (h *Local) Orphaned(producer string, adopted func(streamID string) bool) {
	for _, ls := range h.Sessions() {
		ls.mu.Lock()
		var streams []*Stream
		for _, st := range ls.streams {
			if Producer(st.id) == producer && (adopted == nil || !adopted(st.id)) {
				streams = append(streams, st)
			}
		}
		ls.mu.Unlock()
		for _, st := range streams {
			st.mu.Lock()
			if st.following && !st.dropped {
				st.orphanLocked()
			}
			st.mu.Unlock()
		}
	}
}

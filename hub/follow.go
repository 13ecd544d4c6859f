package hub

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

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
		st.forgetKeptLocked(e.Data)
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
// adopted reports (another replica finishes what it answers) stays open for its events, and
// so does the session's standalone stream, which TakeOver takes over.
func (h *Local) Orphaned(producer string, adopted func(streamID string) bool) {
	for _, ls := range h.Sessions() {
		ls.mu.Lock()
		var streams []*Stream
		for _, st := range ls.streams {
			if !st.standalone && (adopted == nil || !adopted(st.id)) {
				streams = append(streams, st)
			}
		}
		ls.mu.Unlock()
		for _, st := range streams {
			st.mu.Lock()
			if st.following && !st.dropped && st.owner == producer {
				st.orphanLocked()
			}
			st.mu.Unlock()
		}
	}
}

// keptMessage is a message kept for a followed standalone stream (Keep).
type keptMessage struct {
	data []byte
	at   time.Time
}

// Keep keeps a message for session sessionID's standalone stream, which another hub
// produces, on the copies of it followed here: if that hub stopped before it logged the
// message, the message goes on the stream when this hub takes it over (TakeOver, Resume). A
// message its producer logs meanwhile is forgotten here as its event comes (Extend); one is
// kept for Options.Hold at most, and as many as a stream holds. It reports whether a copy
// keeps it.
func (h *Local) Keep(sessionID string, data []byte) bool {
	ls := h.Lookup(sessionID)
	if ls == nil {
		return false
	}
	kept := false
	for _, st := range ls.followedStandalone() {
		st.mu.Lock()
		if st.following && !st.dropped {
			st.keepLocked(data)
			kept = true
		}
		st.mu.Unlock()
	}
	return kept
}

// followedStandalone returns the copies of the session's standalone stream that this hub
// reads back from the log.
func (s *Session) followedStandalone() []*Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Stream
	for _, st := range s.streams {
		if st.standalone && st != s.standalone {
			out = append(out, st)
		}
	}
	return out
}

func (s *Stream) keepLocked(data []byte) {
	now := s.session.hub.opts.Now()
	cutoff := now.Add(-s.session.hub.opts.Hold)
	i := 0
	for i < len(s.kept) && (s.kept[i].at.Before(cutoff) || len(s.kept)-i >= s.limits.Messages) {
		i++
	}
	s.kept = append(s.kept[i:], keptMessage{data: data, at: now})
}

// forgetKeptLocked forgets one kept message equal to an event its producer logged.
func (s *Stream) forgetKeptLocked(data []byte) {
	for i, k := range s.kept {
		if bytes.Equal(k.data, data) {
			s.kept = slices.Delete(s.kept, i, i+1)
			return
		}
	}
}

// Produced notes that the hub tagged producer took stream streamID of session sessionID
// over (TakeoverLog.Claim): a copy of it followed here follows that hub from now on.
func (h *Local) Produced(sessionID, streamID, producer string) {
	ls := h.Lookup(sessionID)
	if ls == nil || producer == h.opts.Tag {
		return
	}
	if st := ls.Stream(streamID); st != nil {
		st.mu.Lock()
		if st.following {
			st.owner = producer
		}
		st.mu.Unlock()
	}
}

// adoptLocked makes a stream read back from the log this hub's own: its producer stopped, and
// it goes on here after the last event the log holds, written to the log from this hub. It
// expects responses responses (-1: the standalone stream, which expects none); the messages
// kept for it meanwhile (Keep) follow. s.mu must be held.
func (s *Stream) adoptLocked(responses int) {
	s.fromLog, s.following = false, false
	s.resumable, s.loggedStart = true, true
	s.owner = ""
	s.responses = responses
	s.logged = s.first + uint64(len(s.events)) - 1
	cutoff := s.session.hub.opts.Now().Add(-s.session.hub.opts.Hold)
	for _, k := range s.kept {
		if !k.at.Before(cutoff) && s.roomLocked(len(k.data)) {
			s.appendLocked(k.data, false)
		}
	}
	s.kept = nil
	s.logLocked()
	s.wakeLocked()
}

// TakeOver takes over the standalone streams followed here (a client resumed them here)
// whose producer, the hub tagged producer, stopped: this hub goes on producing each, from
// the last event the log holds, with the messages kept for it (unless another hub claimed
// one first: it is then followed from that one). A copy whose client is away between two
// connections is taken over too: its client may resume it here, or where it is followed from
// here. It returns the ids of the sessions whose standalone stream is produced here now.
func (h *Local) TakeOver(ctx context.Context, producer string) []string {
	var ids []string
	for _, ls := range h.Sessions() {
		for _, st := range ls.followedStandalone() {
			st.mu.Lock()
			theirs := st.fromLog && st.following && !st.dropped && st.owner == producer
			st.mu.Unlock()
			if theirs && ls.takeOverFollowed(ctx, st, producer) {
				ids = append(ids, ls.id)
			}
		}
	}
	return ids
}

// takeOverFollowed takes over a standalone stream followed here whose producer stopped; it
// reports whether it is produced here now. One that cannot be claimed (the log is out of
// reach) is dropped: its client resumes it again.
func (s *Session) takeOverFollowed(ctx context.Context, st *Stream, producer string) bool {
	// What the producer logged and this copy missed comes first.
	s.catchUp(ctx, st)
	owner, err := s.claim(ctx, st.id, producer)
	st.mu.Lock()
	switch {
	case err != nil:
		st.dropLocked()
		st.mu.Unlock()
		s.forget(st)
		return false
	case owner != s.hub.opts.Tag:
		if st.following {
			st.owner = owner
		}
		st.mu.Unlock()
		return false
	}
	st.mu.Unlock()
	s.mu.Lock()
	st.mu.Lock()
	if s.ctx.Err() != nil || !st.following || st.dropped {
		st.mu.Unlock()
		s.mu.Unlock()
		return false
	}
	st.adoptLocked(-1)
	st.mu.Unlock()
	old := s.installStandaloneLocked(st)
	s.mu.Unlock()
	s.dropReplaced(old)
	return true
}

// ErrStreamTaken is returned by Adopt when another hub took the stream over first.
var ErrStreamTaken = errors.New("another replica took the stream over")

// Adopt takes over stream streamID of the session, which another hub began and stopped
// producing (a call of it that this hub finishes): this hub goes on producing it after the
// events the log holds, with no connection until its client resumes it (here, or on a hub
// that follows it). The stream awaits an answer for each request the log recorded that none
// of its events answers (Awaiting). It fails with ErrUnknownStream when the log holds nothing
// of the stream, ErrStreamDone when the stream ended, ErrStreamTaken when another hub took
// it over first.
func (s *Session) Adopt(ctx context.Context, streamID string) (*Stream, error) {
	log := s.hub.opts.Log
	if log == nil {
		return nil, ErrUnknownStream
	}
	if cp := s.Stream(streamID); cp != nil && cp.readBack() {
		// Its client resumed it here: the copy it reads goes on from here, once it holds
		// what the log does.
		s.catchUp(ctx, cp)
	}
	held := &Stream{session: s, limits: s.hub.opts.Limits, first: 1, done: make(chan struct{})}
	var first *Replayed
	for {
		r, err := log.Replay(ctx, s.id, streamID, held.first+uint64(len(held.events))-1)
		switch {
		case errors.Is(err, ErrEventsLost):
			return nil, err
		case err != nil:
			return nil, errors.Join(ErrLogUnavailable, err)
		case r == nil:
			return nil, ErrUnknownStream
		case r.Complete:
			return nil, ErrStreamDone
		}
		if first == nil {
			first = r
			if len(r.Events) > 0 {
				held.first = r.Events[0].Seq
			}
		}
		for _, e := range r.Events {
			held.noteAnswer(e.Data)
			held.events = append(held.events, e.Data)
			held.size += len(e.Data)
		}
		if !r.More {
			break
		}
	}
	last := held.first + uint64(len(held.events)) - 1
	from := first.Producer
	if from == "" {
		from = Producer(streamID)
	}
	owner, err := s.claim(ctx, streamID, from)
	if err != nil {
		return nil, err
	}
	if owner != s.hub.opts.Tag {
		return nil, ErrStreamTaken
	}
	var awaiting []protocol.ID
	for _, id := range first.Requests {
		if !held.answered[id] {
			awaiting = append(awaiting, id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return nil, ErrSessionEnded
	}
	if cp := s.streams[streamID]; cp != nil {
		cp.mu.Lock()
		adopted := cp.fromLog && cp.following && !cp.dropped && cp.first+uint64(len(cp.events))-1 == last
		if adopted {
			cp.requests = awaiting
			cp.adoptLocked(len(awaiting))
		}
		cp.mu.Unlock()
		if adopted {
			return cp, nil
		}
	}
	// The events the log holds stay here too, for a client that resumes from any of them;
	// they may make room for new ones.
	st := held
	st.id, st.requests, st.responses = streamID, awaiting, len(awaiting)
	st.resumable, st.loggedStart, st.logged, st.written = true, true, last, last
	st.answered = nil
	for len(st.events) > st.limits.Messages {
		st.size -= len(st.events[0])
		st.events = st.events[1:]
		st.first++
	}
	if st.responses == 0 {
		st.complete = true
		st.keepUntil = s.hub.opts.Now().Add(s.hub.opts.Retention)
	}
	s.streams[streamID] = st
	return st, nil
}

// Awaiting returns the requests a stream taken over (Adopt) awaits answers for, as it was
// taken over.
func (s *Stream) Awaiting() []protocol.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// KeepLogged keeps what the event log holds of a stream produced here for the log's retention
// from now (TakeoverLog.Touch): the session's standalone stream goes on while nothing
// happens on it, and must stay resumable on another hub if this one stops.
func (s *Stream) KeepLogged() {
	tl, ok := s.session.hub.opts.Log.(TakeoverLog)
	if !ok {
		return
	}
	s.mu.Lock()
	live := s.loggedStart && !s.loggedEnd && !s.fromLog && !s.dropped
	s.mu.Unlock()
	if live {
		tl.Touch(s.session.id, s.id)
	}
}

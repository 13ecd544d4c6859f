package hub

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
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
var ErrProducerStopped = protocol.Errorf(protocol.CodeInterrupted,
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
	s.session.hub.budget.account(s)
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
	defer h.enforceBudget() // after the unlock: a stream it completes may be kept now
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
		if st.standalone {
			st.kept.forget(e.Data, st.session.hub, st.limits.Messages)
		}
		next++
	}
	st.session.hub.budget.account(st)
	return true
}

// completeFollowedLocked ends a followed stream: kept for its client for the retention
// period if none is attached.
func (st *Stream) completeFollowedLocked() {
	st.following = false
	st.complete = true
	if st.writer == nil {
		st.keepUntilLocked(st.session.hub.opts.Now().Add(st.session.hub.opts.Retention))
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
// each request they did not answer gets an error answer (ErrProducerStopped). What the log
// holds of each that its copy here lacks comes first (orphanCaughtUp). A stream adopted
// reports (another replica finishes what it answers) stays open for its events, and so does
// the session's standalone stream, which TakeOver takes over. ctx bounds the log's reads.
func (h *Local) Orphaned(ctx context.Context, producer string, adopted func(streamID string) bool) {
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
			ls.orphanCaughtUp(ctx, st, producer)
		}
	}
}

// orphanCaughtUp ends a copy followed here from producer, which stopped, as Orphaned does,
// once it holds what the log does: another hub may have ended the stream there, with the
// answers it gave (a held call it took over and could not run, Abandon), and let go of what
// told that the stream was to go on (the call's record) before their live copy came here.
// Those answers, not ErrProducerStopped, are the stream's; so are events its producer logged
// that did not come here live. A copy followed from another hub, or no longer followed, is
// left alone.
func (s *Session) orphanCaughtUp(ctx context.Context, st *Stream, producer string) {
	st.mu.Lock()
	theirs := st.following && !st.dropped && st.owner == producer
	st.mu.Unlock()
	if !theirs {
		return
	}
	if s.hub.opts.Log != nil {
		s.catchUp(ctx, st)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.following && !st.dropped && st.owner == producer {
		st.orphanLocked()
	}
}

// Keep keeps a message for session sessionID's standalone stream, which another hub
// produces, on the copies of it followed here: if that hub stopped before it logged the
// message, the message goes on the stream when this hub takes it over (TakeOver, Resume). A
// message its producer logs meanwhile is forgotten here as its event comes (Extend), or not
// kept when its event came first, shortly before (loggedFirstWindow); one is kept for
// Options.Hold at most (Sweep forgets it),
// and no more than a stream holds, in messages and in bytes (Limits): the oldest go first.
// It reports whether a copy keeps it.
func (h *Local) Keep(sessionID string, data []byte) bool {
	ls := h.Lookup(sessionID)
	if ls == nil {
		return false
	}
	kept := false
	copies := ls.followedStandalone()
	if keepPicked != nil {
		keepPicked()
	}
	for _, st := range copies {
		for st != nil {
			st.mu.Lock()
			if st.replaced {
				// A resume replaced the copy, and took what was kept on it: the message
				// goes on the copy that replaced it.
				st.mu.Unlock()
				st = ls.Stream(st.id)
				continue
			}
			switch {
			case st.following && !st.dropped:
				st.kept.keep(data, st.session.hub, st.limits)
				kept = true
			case !st.fromLog && st.standalone && !st.dropped && !st.complete && st.roomLocked(len(data)):
				// The copy that replaced it took the stream over: the message goes on it,
				// as the messages kept meanwhile did.
				st.appendLocked(data, false)
				st.logLocked()
				st.wakeLocked()
				kept = true
			}
			st.mu.Unlock()
			break
		}
	}
	return kept
}

// keepPicked, when set (by tests only), runs in Keep once it picked the copies to keep the
// message on, before it keeps it on them: a resume that replaces one of them can come then.
var keepPicked func()

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

// takeKeptLocked takes over the messages kept (and the events noted as logged first, logged)
// on the copy of the stream that s replaces (a resume read it anew): they go on s as they
// would have gone on that copy, kept while s is followed, put on it when s is produced here.
func (s *Stream) takeKeptLocked(kept []keptMessage, logged []loggedFirst) {
	if s.fromLog {
		s.kept.prepend(kept, logged)
		return
	}
	s.kept.msgs = kept
	s.putKeptLocked()
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
	s.putKeptLocked()
}

// putKeptLocked puts the messages kept for a stream taken over here on it, and logs them.
func (s *Stream) putKeptLocked() {
	cutoff := s.session.hub.opts.Now().Add(-s.session.hub.opts.Hold)
	for _, k := range s.kept.msgs {
		if !k.at.Before(cutoff) && s.roomLocked(len(k.data)) {
			s.appendLocked(k.data, false)
		}
	}
	s.kept = keptMessages{}
	s.logLocked()
	s.wakeLocked()
}

// TakeOver takes over the standalone streams followed here (a client resumed them here)
// whose producer, the hub tagged producer, stopped: this hub goes on producing each, from
// the last event the log holds, with the messages kept for it (unless another hub claimed
// one first: it is then followed from that one). A copy whose client is away between two
// connections is taken over too: its client may resume it here, or where it is followed from
// here. Each stream is taken over within its own time, each, from ctx (0: ctx alone), one
// after another. It returns the ids of the sessions whose standalone stream is produced here
// now.
func (h *Local) TakeOver(ctx context.Context, producer string, each time.Duration) []string {
	var ids []string
	for _, ls := range h.Sessions() {
		for _, st := range ls.followedStandalone() {
			st.mu.Lock()
			theirs := st.fromLog && st.following && !st.dropped && st.owner == producer
			st.mu.Unlock()
			if !theirs {
				continue
			}
			sctx, cancel := ctx, context.CancelFunc(func() {})
			if each > 0 {
				sctx, cancel = context.WithTimeout(ctx, each)
			}
			if ls.takeOverFollowed(sctx, st, producer) {
				ids = append(ids, ls.id)
			}
			cancel()
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
	// A resume meanwhile may have read the stream anew, with its own copy, which replaced
	// this one (and dropped it): that one is taken over here if it follows (the claim is
	// this hub's: nobody else produces the stream), once it holds what the log does; one
	// that took the stream over itself stays as it is.
	caught := st
	for {
		s.mu.Lock()
		cur := s.streams[st.id]
		if s.ctx.Err() != nil || cur == nil {
			s.mu.Unlock()
			return false
		}
		cur.mu.Lock()
		if !cur.fromLog || !cur.following || cur.dropped {
			cur.mu.Unlock()
			s.mu.Unlock()
			return false
		}
		if cur != caught {
			cur.mu.Unlock()
			s.mu.Unlock()
			s.catchUp(ctx, cur)
			caught = cur
			continue
		}
		cur.adoptLocked(-1)
		cur.mu.Unlock()
		old := s.installStandaloneLocked(cur)
		s.mu.Unlock()
		dropReplaced(old)
		return true
	}
}

// ErrStreamTaken is returned by Adopt when another hub took the stream over first.
var ErrStreamTaken = errors.New("another replica took the stream over")

// Adopt takes over stream streamID of the session, which the hub tagged from stopped
// producing (a call of it that this hub finishes, or answers): this hub goes on producing it
// after the events the log holds, with no connection until its client resumes it (here, or
// on a hub that follows it). The stream awaits an answer for each request the log recorded
// that none of its events answers (Awaiting). It fails with ErrUnknownStream when the log
// holds nothing of the stream, ErrStreamDone when the stream ended, ErrStreamTaken when a
// hub other than from took it over: that one produces it, and may run.
func (s *Session) Adopt(ctx context.Context, streamID, from string) (*Stream, error) {
	log := s.hub.opts.Log
	if log == nil {
		return nil, ErrUnknownStream
	}
	if cp := s.Stream(streamID); cp != nil && cp.readBack() {
		// Its client resumed it here: the copy it reads goes on from here, once it holds
		// what the log does.
		s.catchUp(ctx, cp)
	}
	held, first, err := s.readLogged(ctx, streamID)
	if err != nil {
		return nil, err
	}
	last := held.first + uint64(len(held.events)) - 1
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
	st.mu.Lock()
	st.session.hub.budget.enter(st)
	st.mu.Unlock()
	return st, nil
}

// readLogged reads whole what the log holds of a stream that has not ended, page after page:
// a stream of its events (not the session's), and the first page (the requests the stream
// answers, its producer). It fails with ErrUnknownStream when the log holds nothing of it,
// ErrStreamDone when it ended, ErrEventsLost when its first events are no longer held.
func (s *Session) readLogged(ctx context.Context, streamID string) (*Stream, *Replayed, error) {
	held := &Stream{session: s, limits: s.hub.opts.Limits, first: 1, done: make(chan struct{})}
	var first *Replayed
	for {
		r, err := s.hub.opts.Log.Replay(ctx, s.id, streamID, held.first+uint64(len(held.events))-1)
		switch {
		case errors.Is(err, ErrEventsLost):
			return nil, nil, err
		case err != nil:
			return nil, nil, errors.Join(ErrLogUnavailable, err)
		case r == nil:
			return nil, nil, ErrUnknownStream
		case r.Complete:
			return nil, nil, ErrStreamDone
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
			return held, first, nil
		}
	}
}

// Abandon ends stream streamID of the session, which another hub began and stopped producing,
// when this hub does not go on with it (Adopt failed, or what it was to run cannot run): an
// answer for each request the log recorded that none of its events answers — held, for the
// request this hub was to run (held.ID; nil for none), ErrProducerStopped for every other —
// and the stream's end are written to the log after its last event, so that every hub
// following the stream, and every later resume of it, ends it with them (the log refuses what
// another hub wrote there first); a copy followed here ends at once, once the log holds them
// when it can say so (DurableLog). A log that holds nothing
// of the stream any more (it expired) gets them as its first events, held's included: the
// stream of a call that never ran carries nothing before its answer. A log that lost the
// stream's first events gets its end alone: what follows them is not known here. A stream
// that ended is left as it is. Abandon fails when the log cannot be read, or what it writes
// there could not be written (ErrLogUnavailable).
func (s *Session) Abandon(ctx context.Context, streamID string, held *protocol.Response) error {
	log := s.hub.opts.Log
	if log == nil {
		return ErrUnknownStream
	}
	st, first, err := s.readLogged(ctx, streamID)
	var requests []protocol.ID
	switch {
	case errors.Is(err, ErrStreamDone):
		return nil
	case errors.Is(err, ErrEventsLost):
		if err := s.appendEnd(ctx, streamID, nil); err != nil {
			return err
		}
		s.endCopy(streamID, nil)
		return nil
	case errors.Is(err, ErrUnknownStream):
		st = &Stream{session: s, limits: s.hub.opts.Limits, first: 1}
	case err != nil:
		return err
	default:
		requests = first.Requests
	}
	if held != nil && !slices.Contains(requests, held.ID) {
		requests = append(slices.Clip(requests), held.ID)
	}
	next := st.first + uint64(len(st.events))
	var events []Event
	for _, id := range requests {
		if st.answered[id] {
			continue
		}
		resp := &protocol.Response{ID: id, Error: ErrProducerStopped}
		if held != nil && id == held.ID {
			resp = held
		}
		data, err := protocol.Encode(resp)
		if err != nil {
			continue
		}
		events = append(events, Event{Seq: next, Data: data})
		next++
	}
	if err := s.appendEnd(ctx, streamID, events); err != nil {
		return err
	}
	s.endCopy(streamID, events)
	return nil
}

// appendEnd writes events and the end of stream streamID to the log, and waits until they are
// written when the log can (DurableLog): Abandon's caller may then let go of what else tells
// that the stream goes on (a held call's record), and a hub that reads the log after that
// finds the end there. It fails with ErrLogUnavailable when they could not be written.
func (s *Session) appendEnd(ctx context.Context, streamID string, events []Event) error {
	dl, ok := s.hub.opts.Log.(DurableLog)
	if !ok {
		s.hub.opts.Log.Append(s.id, streamID, events, true)
		return nil
	}
	if err := dl.AppendWait(ctx, s.id, streamID, events, true); err != nil {
		return errors.Join(ErrLogUnavailable, err)
	}
	return nil
}

// Abandon is Session.Abandon for session sessionID, whether or not it is live here (a hub
// that could not read the session's record does not open it: its group is not known).
func (h *Local) Abandon(ctx context.Context, sessionID, streamID string, held *protocol.Response) error {
	s := h.Lookup(sessionID)
	if s == nil {
		// Nothing of it is followed here: only the log is written.
		s = &Session{id: sessionID, hub: h, streams: map[string]*Stream{}}
	}
	return s.Abandon(ctx, streamID, held)
}

// Follows reports whether this hub follows stream streamID of the session (its copy read
// back from the log waits for more events), and from which hub.
func (s *Session) Follows(streamID string) (producer string, ok bool) {
	st := s.Stream(streamID)
	if st == nil {
		return "", false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.fromLog || !st.following || st.dropped {
		return "", false
	}
	return st.owner, true
}

// Orphan ends the copy of stream streamID followed here from producer, which stopped, as
// Orphaned does: what the log holds that it lacks, then an error answer for each request it
// did not answer (ErrProducerStopped). A copy followed from another hub, or no longer
// followed, is left alone; so is a copy of the session's standalone stream, which TakeOver
// takes over: Orphan reports false for it. ctx bounds the log's reads.
func (s *Session) Orphan(ctx context.Context, streamID, producer string) bool {
	st := s.Stream(streamID)
	if st == nil {
		return true
	}
	st.mu.Lock()
	standalone, theirs := st.standalone, st.following && !st.dropped && st.owner == producer
	st.mu.Unlock()
	if standalone {
		return !theirs
	}
	s.orphanCaughtUp(ctx, st, producer)
	return true
}

// endCopy ends a copy of stream streamID followed here with the events its end brings.
func (s *Session) endCopy(streamID string, events []Event) {
	cp := s.Stream(streamID)
	if cp == nil {
		return
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if !cp.following || cp.dropped || !cp.extendLocked(events) {
		return
	}
	cp.completeFollowedLocked()
	cp.wakeLocked()
}

// Awaiting returns the requests a stream taken over (Adopt) awaits answers for, as it was
// taken over.
func (s *Stream) Awaiting() []protocol.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// KeepLogged keeps what the event log holds of a stream for the log's retention from now
// (TakeoverLog.Touch), while a client reads it: the session's standalone stream goes on while
// nothing happens on it, and must stay resumable, and be taken over, if its producer stops.
// A stream produced here is kept once its client holds an event id of it, one followed here
// from another hub while it is followed: its producer has no client reading it to keep it.
func (s *Stream) KeepLogged() {
	tl, ok := s.session.hub.opts.Log.(TakeoverLog)
	if !ok {
		return
	}
	s.mu.Lock()
	live := !s.dropped && (s.fromLog && s.following || !s.fromLog && s.loggedStart && !s.loggedEnd)
	s.mu.Unlock()
	if live {
		tl.Touch(s.session.id, s.id)
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
	"github.com/manifold-mcp/manifold/internal/session"
)

// takenOverKey carries, to the approval check, the held call a replica took over from one
// that stopped: the check waits for its decision instead of holding the call anew.
type takenOverKey struct{}

// orphan ends the streams a stopped replica produced that clients resumed here, but those of
// the calls it held: they never ran, and their streams stay open, for the replica that
// claimed it (claimed: this one) to run them once decided and answer there. When the held
// calls cannot be read, all its streams stay open until they can (sweepFollowed): a held
// call's stream must not be told that its call may have run in part.
func (h *heldCalls) orphan(replica string, claimed bool) {
	if adopted, err := h.streamsHeldBy(h.g.ctx, replica); err != nil {
		h.g.logger.Warn("reading the calls a stopped replica held failed: its streams read here stay open until they can be read", "replica", replica, "error", err.Error())
		h.orphanLater(replica)
	} else {
		h.orphanFollowed(replica, adopted)
	}
	if claimed {
		h.takeOverFrom(replica)
	}
}

// streamsHeldBy returns the calls a stopped replica held, by their stream: their streams
// stay open for the replica taking the calls over. The calls are found by their stream's
// producer as well as by their holder, which the replica taking them over may have changed
// already (and which may be the one that stopped, having taken them over itself).
func (h *heldCalls) streamsHeldBy(ctx context.Context, replica string) (map[string]approval.HeldCall, error) {
	ctx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
	defer cancel()
	calls, err := h.Store.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the held calls: %w", err)
	}
	streams := map[string]approval.HeldCall{}
	for _, c := range calls {
		if c.StreamID != "" && (hub.Producer(c.StreamID) == replica || c.Replica == replica) {
			streams[c.StreamID] = c
		}
	}
	return streams, nil
}

// heldFor returns the held call whose stream is streamID, if one is held: that stream of a
// stopped replica is finished by the replica taking the call over.
func (h *heldCalls) heldFor(ctx context.Context, streamID string) (approval.HeldCall, bool, error) {
	calls, err := h.Store.All(ctx)
	if err != nil {
		return approval.HeldCall{}, false, fmt.Errorf("reading the held calls: %w", err)
	}
	for _, c := range calls {
		if c.StreamID == streamID {
			return c, true, nil
		}
	}
	return approval.HeldCall{}, false, nil
}

// takeOverFrom takes over the calls a stopped replica held: they never ran, so this replica
// waits for their decision and runs them, answering on the stream their client resumes.
// A call whose client has no resumable stream is dropped: its client saw its request fail
// and may send it again. While the store is out of reach, reading them is tried again until
// the time of the last that may still be held is past.
func (h *heldCalls) takeOverFrom(replica string) {
	var calls []approval.HeldCall
	until := h.g.opts.Now().Add(h.g.reloads.running.Load().Policy.Approval.Timeout + approval.Grace)
	err := h.retry(h.g.ctx, until, func() error {
		ctx, cancel := context.WithTimeout(h.g.ctx, pinStoreTimeout)
		defer cancel()
		var err error
		if calls, err = h.Store.HeldBy(ctx, replica); err != nil {
			return retryable{err}
		}
		return nil
	})
	if err != nil {
		h.g.logger.Warn("taking over the calls a stopped replica held failed: the replicas where their clients read their streams answer them once their time is past", "replica", replica, "error", err.Error())
		return
	}
	for _, c := range calls {
		h.g.goWorker(func() { h.takeOver(c) })
	}
}

// takeOver finishes one held call of a stopped replica here. The call's stream, which its
// client resumes here or on a replica that follows it, is produced here from now on: what
// the upstream asks the client mid-call, and the answer, go on it. Once the call is moved
// here, its client gets an answer whatever fails: the call did not run (notRun), written to
// its stream's log. While the store is out of reach, each step is tried again, until the
// call's time to be decided is past (by approval.Grace); a replica where its client reads the
// stream answers it after that if nothing did (sweepFollowed). A call whose stream another
// replica took over is left to that one. When this replica shuts down first, the call stays
// recorded as held here, for the replica that takes over from this one.
func (h *heldCalls) takeOver(c approval.HeldCall) {
	g := h.g
	ctx := g.ctx
	until := c.Deadline.Add(approval.Grace)
	var moved approval.HeldCall
	err := h.retry(ctx, until, func() error {
		var err error
		if moved, err = h.Store.Move(ctx, c.ID, h.Replica); err != nil && !errors.Is(err, approval.ErrNotFound) {
			return retryable{err}
		}
		return err
	})
	if err != nil {
		g.logger.Warn("a held call of a stopped replica could not be taken over: the replicas where its client reads its stream answer it once its time is past", "approval", c.ID, "error", err.Error())
		return
	}
	// However the call ends here (run, refused by a policy that changed, failed), its record
	// goes: nobody may decide it any more. It stays when this replica shuts down before it
	// could go on (the next takes it over), or when its client could not be told.
	keep := false
	defer func() {
		if !keep {
			_ = h.Store.Release(context.WithoutCancel(ctx), c.ID)
		}
	}()
	release := func(why string) {
		g.logger.Info("a held call of a stopped replica is dropped: it never ran", "approval", c.ID, "why", why)
	}
	if c.StreamID == "" || g.events == nil {
		release("its client has no stream to resume")
		return
	}
	clientID, err := protocol.ParseID(c.ClientID)
	if err != nil {
		// Its answer cannot be addressed: the requests its stream's log names get one.
		release("its request id is unreadable")
		keep = !h.abandon(ctx, until, c, nil)
		return
	}
	var rec *session.Record
	var ls *hub.Session
	var st *hub.Stream
	err = h.retry(ctx, until, func() error {
		var err error
		if rec == nil {
			if rec, err = g.store.Get(ctx, c.SessionID); err != nil {
				rec = nil
				if errors.Is(err, session.ErrNotFound) {
					return err
				}
				return retryable{err}
			}
		}
		if ls, err = g.openLive(rec); err != nil {
			return err
		}
		// Claimed from the replica that held the call: a claim another replica made
		// meanwhile is that one's.
		if st, err = ls.Adopt(ctx, c.StreamID, c.Replica); errors.Is(err, hub.ErrLogUnavailable) {
			return retryable{err}
		}
		return err
	})
	switch {
	case err != nil && (errors.Is(err, hub.ErrClosing) || ctx.Err() != nil):
		keep = true
		g.logger.Info("a held call taken over is left for the replica that takes over from this one: this one is shutting down", "approval", c.ID)
		return
	case errors.Is(err, session.ErrNotFound), errors.Is(err, hub.ErrSessionEnded):
		release("its session ended")
		return
	case errors.Is(err, hub.ErrStreamTaken):
		// Another replica goes on with its stream (one where its client reads it answered
		// it): it is that one's to answer.
		g.logger.Info("a held call of a stopped replica is left to the replica that took its stream over", "approval", c.ID)
		return
	case errors.Is(err, hub.ErrStreamDone):
		release("its stream ended")
		return
	case err != nil:
		// Its stream cannot go on here (it expired while the call was held, the log is out
		// of reach, the session could not be read): it ends with the call's answer, that it
		// did not run, for its client, which may wait on the stream resumed elsewhere.
		g.logger.Warn("a held call of a stopped replica is dropped: its stream could not be taken over; its client is told that it did not run", "approval", c.ID, "error", err.Error())
		keep = !h.abandon(ctx, until, c, h.notRun(ctx, recordOr(rec, c), c, clientID))
		return
	}
	reqCtx, _, end, err := ls.Begin(clientID, 0)
	if err != nil {
		release("its request could not begin here: " + err.Error())
		answerRest(st, protocol.ID{}, h.notRun(ctx, rec, c, clientID))
		return
	}
	defer ls.RequestDone()
	g.logger.Info("took over a held call of a stopped replica", "approval", c.ID, "from", c.Replica, "upstream", c.Upstream, "tool", c.Original, "session", c.Session)
	req := g.streamable.requestValue(rec, &protocol.Request{ID: clientID, Method: c.Method, Params: c.Params}, g.streamable.nextRequestID())
	var caller session.Principal
	if json.Unmarshal(c.Caller, &caller) == nil && caller.Same(rec.Principal) {
		req.Client.Principal = caller
	}
	owner := &callOwner{sessionID: rec.ID, streamID: st.ID(), caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: reqCtx, clientID: clientID, logLevel: rec.LogLevel}
	result, wireErr := g.requests.serve(context.WithValue(reqCtx, takenOverKey{}, moved), &request{Request: req, owner: owner})
	cancelled := errors.Is(context.Cause(reqCtx), hub.ErrClientCancelled)
	end()
	if cancelled {
		// The receiver of a cancel does not answer (2025-11-25 cancellation).
		st.Unanswered()
	} else if err := respond(st, &protocol.Response{ID: clientID, Result: result, Error: wireErr}); err != nil {
		g.logger.Warn("the answer of a taken-over call could not go on its stream", "approval", c.ID, "error", err.Error())
	}
	answerRest(st, clientID, nil)
}

// abandon ends a held call's stream in the log with held, the call's answer (nil: the
// requests the log names get ErrProducerStopped), tried again while the log is out of reach,
// until until. It reports whether it did; when it did not, the replicas where the call's
// client reads its stream answer it once its time is past.
func (h *heldCalls) abandon(ctx context.Context, until time.Time, c approval.HeldCall, held *protocol.Response) bool {
	err := h.retry(ctx, until, func() error {
		actx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
		defer cancel()
		if err := h.g.hub.Abandon(actx, c.SessionID, c.StreamID, held); errors.Is(err, hub.ErrLogUnavailable) {
			return retryable{err}
		} else {
			return err
		}
	})
	if err != nil {
		h.g.logger.Warn("the client of a held call that was dropped could not be told now: the replicas where it reads the call's stream tell it once the call's time is past", "approval", c.ID, "error", err.Error())
		return false
	}
	return true
}

// recordOr is rec, or when the session's record could not be read, what the held call
// records of it: enough to answer and audit the call.
func recordOr(rec *session.Record, c approval.HeldCall) *session.Record {
	if rec != nil {
		return rec
	}
	r := &session.Record{ID: c.SessionID}
	_ = json.Unmarshal(c.Caller, &r.Principal)
	return r
}

// followedHeld keeps, on a replica where their clients read them, the streams of calls held
// on replicas that stopped: each stays open for the replica taking its call over, which
// answers on it, and is answered here, that its call did not run, once the call's time is
// past (approval.Grace after its deadline: the taker has given up by then) with no answer, so
// that no client waits on one with no bound (heldCalls.sweepFollowed).
type followedHeld struct {
	mu sync.Mutex
	// streams are the streams kept open, by session and stream. Guarded by mu.
	streams map[[2]string]heldStream
	// replicas are the stopped replicas whose streams read here all stay open until the held
	// calls can be read. Guarded by mu.
	replicas map[string]bool
}

// heldStream is a stream kept open here for a held call of a stopped replica.
type heldStream struct {
	sessionID, streamID string
	// producer is the stopped replica the copy here follows.
	producer string
	// call is the held call; "" ID while not known (the held calls could not be read).
	call approval.HeldCall
	// since is when the stream was kept open (the gateway's clock).
	since time.Time
}

// keepOpen notes that stream streamID of session sessionID, which the stopped replica
// producer produced, stays open here for held call c (zero while the held calls cannot be
// read).
func (h *heldCalls) keepOpen(sessionID, streamID, producer string, c approval.HeldCall) {
	f := &h.followed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams == nil {
		f.streams = map[[2]string]heldStream{}
	}
	f.streams[[2]string{sessionID, streamID}] = heldStream{sessionID: sessionID, streamID: streamID, producer: producer, call: c, since: h.g.opts.Now()}
}

// orphanLater notes a stopped replica whose held calls could not be read: its streams read
// here are ended, but those of its held calls, once they can be (sweepFollowed).
func (h *heldCalls) orphanLater(replica string) {
	f := &h.followed
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.replicas == nil {
		f.replicas = map[string]bool{}
	}
	f.replicas[replica] = true
}

// orphanFollowed ends the streams the stopped replica produced that clients read here, but
// those of the calls it held (held, by stream), which stay open.
func (h *heldCalls) orphanFollowed(replica string, held map[string]approval.HeldCall) {
	h.g.hub.Orphaned(h.g.ctx, replica, func(streamID string) bool {
		_, ok := held[streamID]
		return ok
	})
	for _, c := range held {
		if ls := h.g.hub.Lookup(c.SessionID); ls != nil {
			if producer, ok := ls.Follows(c.StreamID); ok {
				h.keepOpen(c.SessionID, c.StreamID, producer, c)
			}
		}
	}
}

// sweepFollowed settles, on each expiry pass, the streams kept open here for held calls of
// stopped replicas: those of a replica whose held calls could not be read are ended, but the
// held calls', once they can be; a stream kept open without knowing its call's is ended when
// no call is held for it; one whose call's time is past with no answer gets the answer, that
// the call did not run, here (settle). A stream ended meanwhile, or followed from a replica
// that took it over (which answers it, or whose end ends it), is forgotten.
func (h *heldCalls) sweepFollowed(ctx context.Context) {
	f := &h.followed
	f.mu.Lock()
	replicas := make([]string, 0, len(f.replicas))
	for replica := range f.replicas {
		replicas = append(replicas, replica)
	}
	f.mu.Unlock()
	for _, replica := range replicas {
		held, err := h.streamsHeldBy(ctx, replica)
		if err != nil {
			continue // on the next pass
		}
		f.mu.Lock()
		delete(f.replicas, replica)
		f.mu.Unlock()
		h.orphanFollowed(replica, held)
	}
	f.mu.Lock()
	streams := make([]heldStream, 0, len(f.streams))
	for _, e := range f.streams {
		streams = append(streams, e)
	}
	f.mu.Unlock()
	// What changes of a stream is written back unless it was noted anew meanwhile.
	update := func(e heldStream, forget bool) {
		key := [2]string{e.sessionID, e.streamID}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case !f.streams[key].since.Equal(e.since):
		case forget:
			delete(f.streams, key)
		default:
			f.streams[key] = e
		}
	}
	var calls []approval.HeldCall
	read := 0 // 1: calls read, -1: could not be
	takeOver := map[string]bool{}
	now := h.g.opts.Now()
	for _, e := range streams {
		ls := h.g.hub.Lookup(e.sessionID)
		producer, following := "", false
		if ls != nil {
			producer, following = ls.Follows(e.streamID)
		}
		if !following || producer != e.producer {
			// Ended, or followed from the replica that took it over; or not yet where it is
			// looked for (a resume notes it before it holds it): forgotten after a while.
			if now.Sub(e.since) >= replica.FollowGrace {
				update(e, true)
			}
			continue
		}
		if e.call.ID == "" {
			if read == 0 {
				read = -1
				if all, err := h.Store.All(ctx); err == nil {
					calls, read = all, 1
				}
			}
			if read < 0 {
				continue
			}
			i := slices.IndexFunc(calls, func(c approval.HeldCall) bool { return c.StreamID == e.streamID })
			if i < 0 {
				// No call is held for it: its producer's end ends it, as any other; the
				// session's standalone stream is taken over here.
				if !ls.Orphan(ctx, e.streamID, e.producer) {
					takeOver[e.producer] = true
				}
				update(e, true)
				continue
			}
			e.call = calls[i]
			update(e, false)
		}
		if now.Before(e.call.Deadline.Add(approval.Grace)) {
			continue
		}
		if h.settle(ctx, ls, e) {
			update(e, true)
		}
	}
	for producer := range takeOver {
		h.g.replicas.TakeOverStandalone(producer)
	}
}

// settle answers, here, the stream of a held call whose time is past with no answer on it:
// no replica took it over, or none could go on with it. The stream is claimed from the
// stopped replica the copy here follows, so that a replica that did take it over (and may
// run the call) keeps it; claimed, it gets the call's answer, that it did not run, and an
// error for any other request it awaits. A stream whose log is gone gets them as its first
// events. It reports whether the stream is settled (false: the log is out of reach, tried
// again on the next pass).
func (h *heldCalls) settle(ctx context.Context, ls *hub.Session, e heldStream) bool {
	ctx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
	defer cancel()
	st, err := ls.Adopt(ctx, e.streamID, e.producer)
	switch {
	case err == nil:
		h.g.logger.Warn("a held call of a stopped replica got no answer in its time: its client is told that it did not run", "approval", e.call.ID)
		answerRest(st, protocol.ID{}, h.answerOf(ctx, e.call))
		return true
	case errors.Is(err, hub.ErrUnknownStream), errors.Is(err, hub.ErrEventsLost):
		h.g.logger.Warn("a held call of a stopped replica got no answer in its time: its client is told that it did not run", "approval", e.call.ID)
		return ls.Abandon(ctx, e.streamID, h.answerOf(ctx, e.call)) == nil
	case errors.Is(err, hub.ErrLogUnavailable):
		return false
	}
	return true // another replica goes on with it, it ended, or its session did
}

// answerOf is the answer of held call c that did not run (nil when its request id cannot be
// read), with its session's record as the store has it, or as the call records it.
func (h *heldCalls) answerOf(ctx context.Context, c approval.HeldCall) *protocol.Response {
	id, err := protocol.ParseID(c.ClientID)
	if err != nil {
		return nil
	}
	rec, err := h.g.store.Get(ctx, c.SessionID)
	if err != nil {
		rec = nil
	}
	return h.notRun(ctx, recordOr(rec, c), c, id)
}

// notRun is the answer of a held call taken over that could not run here: it did not run,
// and may be sent again; the refusal is audited as the call's end.
func (h *heldCalls) notRun(ctx context.Context, rec *session.Record, c approval.HeldCall, id protocol.ID) *protocol.Response {
	refusal := &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: c.Upstream,
		Message: fmt.Sprintf("%s was held for an operator's approval on a gateway replica that stopped, and no replica could go on with it: it did not run; call it again", c.Tool)}
	req := h.g.streamable.requestValue(rec, &protocol.Request{ID: id, Method: c.Method, Params: c.Params}, h.g.streamable.nextRequestID())
	t := &pipeline.Target{Kind: pipeline.Tool, Upstream: c.Upstream, Exposed: c.Tool, Original: c.Original}
	result, wireErr := h.g.requests.finish(ctx, req, t, nil, refusal)
	return &protocol.Response{ID: id, Result: result, Error: wireErr}
}

// retryable marks an error of a store out of reach: the step is tried again.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// takeOverBackoff bounds the wait between two tries of a step of a takeover.
const takeOverBackoff = 15 * time.Second

// retry runs step until it succeeds or fails for good, trying again after a growing wait
// while it fails retryable, until until (on the gateway's clock) or ctx's end. It returns
// the last error, unwrapped.
func (h *heldCalls) retry(ctx context.Context, until time.Time, step func() error) error {
	wait := time.Second
	for {
		err := step()
		var r retryable
		if !errors.As(err, &r) {
			return err
		}
		if !h.g.opts.Now().Before(until) {
			return r.error
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return r.error
		}
		wait = min(2*wait, takeOverBackoff)
	}
}

// answerRest answers the requests a taken-over stream awaits but the one answered: held's
// with held (the held call's answer, when it did not run here; nil when it was answered),
// every other with an error, for the replica that ran them stopped before it answered them.
func answerRest(st *hub.Stream, answered protocol.ID, held *protocol.Response) {
	for _, id := range st.Awaiting() {
		switch {
		case held != nil && id == held.ID:
			_ = respond(st, held)
		case id != answered:
			_ = respond(st, &protocol.Response{ID: id, Error: hub.ErrProducerStopped})
		}
	}
}

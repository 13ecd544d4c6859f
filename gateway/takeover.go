package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/hold"
	"github.com/manifold-mcp/manifold/hub"
	"github.com/manifold-mcp/manifold/pipeline"
	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
)

// takenOverKey carries, to the approval check, the held call a replica took over from one
// that stopped: the check waits for its decision instead of holding the call anew.
type takenOverKey struct{}

// streamsHeldBy returns the streams of the calls a stopped replica held: they stay open for
// the replica taking the calls over. The calls are found by their stream's producer, not by
// their holder, which the replica taking them over may have changed already. On an error,
// none (their streams end with an error).
func (h *heldCalls) streamsHeldBy(replica string) map[string]bool {
	ctx, cancel := context.WithTimeout(h.g.ctx, pinStoreTimeout)
	defer cancel()
	calls, err := h.store.All(ctx)
	if err != nil {
		h.g.logger.Warn("reading the calls a stopped replica held failed: their clients get an error", "replica", replica, "error", err.Error())
		return nil
	}
	streams := map[string]bool{}
	for _, c := range calls {
		if c.StreamID != "" && hub.Producer(c.StreamID) == replica {
			streams[c.StreamID] = true
		}
	}
	return streams
}

// adopts reports whether a stream of a stopped replica answers a held call that another
// replica finishes.
func (h *heldCalls) adopts(ctx context.Context, streamID string) bool {
	calls, err := h.store.All(ctx)
	if err != nil {
		return false
	}
	for _, c := range calls {
		if c.StreamID == streamID {
			return true
		}
	}
	return false
}

// takeOverFrom takes over the calls a stopped replica held: they never ran, so this replica
// waits for their decision and runs them, answering on the stream their client resumes.
// A call whose client has no resumable stream is dropped: its client saw its request fail
// and may send it again.
func (h *heldCalls) takeOverFrom(replica string) {
	ctx, cancel := context.WithTimeout(h.g.ctx, pinStoreTimeout)
	calls, err := h.store.HeldBy(ctx, replica)
	cancel()
	if err != nil {
		h.g.logger.Warn("taking over the calls a stopped replica held failed", "replica", replica, "error", err.Error())
		return
	}
	for _, c := range calls {
		h.g.goWorker(func() { h.takeOver(c) })
	}
}

// takeOver finishes one held call of a stopped replica here. The call's stream, which its
// client resumes here or on a replica that follows it, is produced here from now on: what
// the upstream asks the client mid-call, and the answer, go on it. Once the call is moved
// here, its client gets an answer whatever fails: the call did not run (notRun). While the
// store is out of reach, each step is tried again, until the call's time to be decided is
// past.
func (h *heldCalls) takeOver(c hold.Call) {
	g := h.g
	ctx := g.ctx
	until := c.Deadline.Add(hold.Grace)
	var moved hold.Call
	err := h.retry(ctx, until, func() error {
		var err error
		if moved, err = h.store.Move(ctx, c.ID, h.replica); err != nil && !errors.Is(err, hold.ErrNotFound) {
			return retryable{err}
		}
		return err
	})
	if err != nil {
		g.logger.Warn("a held call of a stopped replica could not be taken over", "approval", c.ID, "error", err.Error())
		return
	}
	release := func(why string) {
		g.logger.Info("a held call of a stopped replica is dropped: it never ran", "approval", c.ID, "why", why)
		_ = h.store.Release(context.WithoutCancel(ctx), c.ID)
	}
	// However the call ends here (run, refused by a policy that changed, failed), its record
	// goes: nobody may decide it any more.
	defer func() { _ = h.store.Release(context.WithoutCancel(ctx), c.ID) }()
	if c.StreamID == "" || g.events == nil {
		release("its client has no stream to resume")
		return
	}
	clientID, err := protocol.ParseID(c.ClientID)
	if err != nil {
		release("its request id is unreadable")
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
		if ls, err = g.hub.Open(rec.ID, rec.Profile); err != nil {
			return err
		}
		if st, err = ls.Adopt(ctx, c.StreamID); errors.Is(err, hub.ErrLogUnavailable) {
			return retryable{err}
		}
		return err
	})
	switch {
	case errors.Is(err, session.ErrNotFound), errors.Is(err, hub.ErrSessionEnded):
		release("its session ended")
		return
	case err != nil && ls == nil:
		g.logger.Warn("a held call of a stopped replica is dropped: its session could not be read", "approval", c.ID, "error", err.Error())
		return
	case err != nil:
		// Its stream cannot go on here (it expired while the call was held, another replica
		// took it, the log is out of reach): it ends with the call's answer, that it did
		// not run, for its client, which may wait on the stream resumed elsewhere.
		g.logger.Warn("a held call of a stopped replica is dropped, its client told that it did not run: its stream could not be taken over", "approval", c.ID, "error", err.Error())
		actx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
		defer cancel()
		if err := ls.Abandon(actx, c.StreamID, h.notRun(ctx, rec, c, clientID)); err != nil {
			g.logger.Warn("the client of a held call that was dropped could not be told: it may wait until it gives up", "approval", c.ID, "error", err.Error())
		}
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
	req := g.requestValue(rec, &protocol.Request{ID: clientID, Method: c.Method, Params: c.Params}, g.nextRequestID())
	var caller session.Principal
	if json.Unmarshal(c.Caller, &caller) == nil && caller.Same(rec.Principal) {
		req.Client.Principal = caller
	}
	owner := &callOwner{sessionID: rec.ID, streamID: st.ID(), caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: reqCtx, clientID: clientID, logLevel: rec.LogLevel}
	result, wireErr := g.serve(context.WithValue(reqCtx, takenOverKey{}, moved), &request{Request: req, owner: owner})
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

// notRun is the answer of a held call taken over that could not run here: it did not run,
// and may be sent again; the refusal is audited as the call's end.
func (h *heldCalls) notRun(ctx context.Context, rec *session.Record, c hold.Call, id protocol.ID) *protocol.Response {
	refusal := &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: c.Upstream,
		Message: fmt.Sprintf("%s was held for an operator's approval on a gateway replica that stopped, and the replica taking it over could not go on with it: it did not run; call it again", c.Tool)}
	req := h.g.requestValue(rec, &protocol.Request{ID: id, Method: c.Method, Params: c.Params}, h.g.nextRequestID())
	t := &pipeline.Target{Kind: pipeline.Tool, Upstream: c.Upstream, Exposed: c.Tool, Original: c.Original}
	result, wireErr := h.g.finish(ctx, req, t, nil, refusal)
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

package gateway

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/hold"
	"github.com/manifold-mcp/manifold/hub"
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
// the upstream asks the client mid-call, and the answer, go on it.
func (h *heldCalls) takeOver(c hold.Call) {
	g := h.g
	ctx := g.ctx
	moved, err := h.store.Move(ctx, c.ID, h.replica)
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
	rec, err := g.store.Get(ctx, c.SessionID)
	if err != nil {
		release("its session ended")
		return
	}
	clientID, err := protocol.ParseID(c.ClientID)
	if err != nil {
		release("its request id is unreadable")
		return
	}
	ls, err := g.hub.Open(rec.ID, rec.Profile)
	if err != nil {
		release("its session ended")
		return
	}
	st, err := ls.Adopt(ctx, c.StreamID)
	if err != nil {
		g.logger.Warn("a held call of a stopped replica is dropped: its stream could not be taken over", "approval", c.ID, "error", err.Error())
		return
	}
	reqCtx, _, end, err := ls.Begin(clientID, 0)
	if err != nil {
		release("its request id is in flight again")
		answerRest(st, protocol.ID{})
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
	answerRest(st, clientID)
}

// answerRest answers with an error the requests a taken-over stream awaits but the one
// answered (answered): the replica that ran them stopped before it answered them.
func answerRest(st *hub.Stream, answered protocol.ID) {
	for _, id := range st.Awaiting() {
		if id != answered {
			_ = respond(st, &protocol.Response{ID: id, Error: hub.ErrProducerStopped})
		}
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/tracing"
	"github.com/manifold-mcp/manifold/upstream"
)

// Reasons a forwarded call failed, and the errors they stand for.
var forwardReasons = []struct {
	name string
	err  error
}{
	{replica.ReasonTimeout, upstream.ErrTimeout},
	{replica.ReasonInterrupted, upstream.ErrInterrupted},
	{"limit", errConnectionLimit},
	{"ended", hub.ErrSessionEnded},
}

// failedResult is how a call that failed on this replica travels back.
func failedResult(err error) replica.Result {
	res := replica.Result{Unavailable: err.Error()}
	for _, r := range forwardReasons {
		if errors.Is(err, r.err) {
			res.Reason = r.name
		}
	}
	return res
}

// forwardFailure is the error of a forwarded call that failed there, with its reason.
func forwardFailure(res replica.Result) error {
	for _, r := range forwardReasons {
		if res.Reason == r.name {
			return fmt.Errorf("%s: %w", res.Unavailable, r.err)
		}
	}
	return fmt.Errorf("%s: %w", res.Unavailable, upstream.ErrUnavailable)
}

// forwardCall runs a call on replica holder, which holds the session's own connection to u,
// and returns how it ended there. Messages about the call come back to its stream here.
func forwardCall(ctx context.Context, r replicaCalls, rq *request, u *upstreamEntry, holder, method string, params json.RawMessage) (json.RawMessage, error, bool) {
	return forward(ctx, r, rq, u, holder, replica.Call{Method: method, Params: params})
}

// forward sends fc, for upstream u, to replica holder and waits for how it ended there;
// forwarded is false when it was not run there (the caller runs it here).
func forward(ctx context.Context, r replicaCalls, rq *request, u *upstreamEntry, holder string, fc replica.Call) (result json.RawMessage, err error, forwarded bool) {
	streamID := ""
	if rq.owner != nil {
		streamID, fc.ClientID = rq.owner.streamID, rq.owner.clientID.Raw()
	}
	fc.Upstream, fc.Trace = u.ns.Name, tracing.Carry(ctx)
	if ex := u.pool.credentials.exchanger; ex != nil {
		fc.Subject, fc.SubjectExpiry, _ = ex.Subject(rq.Client.Principal)
	}
	res, forwarded, err := r.Forward(ctx, holder, rq.Client.SessionID, streamID, fc, u.pool.spec.RequestTimeout)
	switch {
	case !forwarded:
		return nil, nil, false
	case err != nil:
		return nil, err, true
	case res.RPCError != nil:
		return nil, &upstreamRPCError{Err: res.RPCError}, true
	case res.Unavailable != "":
		return nil, forwardFailure(res), true
	}
	return res.Result, nil, true
}

// Serve runs a call another replica forwarded, on the session's own connection here, and
// returns how it ended, for the replica waiting for it.
func (h replicaHost) Serve(ctx context.Context, sessionID, streamID, name string, fc replica.Call) replica.Result {
	g := h.g
	u := g.upstreamNamed(fc.Upstream)
	rec, err := g.store.Get(ctx, sessionID)
	if u == nil || u.pool == nil || err != nil {
		return replica.Result{Unavailable: "the session or its upstream is gone on the replica holding its connection"}
	}
	ls, err := g.openLive(rec)
	if err != nil {
		return replica.Result{Draining: true}
	}
	// Counted among the session's requests, so that a drain waits for it (and refuses it
	// once begun: the sender then runs it itself).
	callCtx, _, done, err := ls.Begin(protocol.StringID(name), 0)
	if err != nil {
		return replica.Result{Draining: true}
	}
	defer ls.RequestDone()
	defer done()
	// The upstream call's span continues the sender's trace.
	ctx, stop := context.WithCancel(tracing.Carried(ctx, fc.Trace))
	defer stop()
	stopWith := context.AfterFunc(callCtx, stop)
	defer stopWith()
	clientID, _ := protocol.ParseID(fc.ClientID)
	rq := &request{Request: &pipeline.Request{Method: fc.Method, Params: fc.Params, Client: pipeline.ClientContext{
		SessionID: rec.ID, ProtocolVersion: rec.ProtocolVersion, Capabilities: rec.ClientCapabilities, LogLevel: rec.LogLevel, Profile: rec.Profile,
		Principal: rec.Principal,
	}}}
	if ex := u.pool.credentials.exchanger; ex != nil && fc.Subject != "" {
		ex.Remember(rec.Principal, fc.Subject, fc.SubjectExpiry)
	}
	rq.owner = &callOwner{sessionID: rec.ID, streamID: streamID, caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: ctx, clientID: clientID, logLevel: rec.LogLevel}
	var result json.RawMessage
	switch {
	case fc.Notify:
		g.notifyOwnConnections(ctx, rec.ID, &protocol.Notification{Method: fc.Method, Params: fc.Params})
	case fc.Method == protocol.MethodSubscribe || fc.Method == protocol.MethodUnsubscribe:
		res := &resolved{upstream: u, params: fc.Params, target: pipeline.Target{Kind: pipeline.Resource, Upstream: u.ns.Name, Exposed: fc.Exposed, Original: fc.Original}}
		result, err = g.subs.subscribeHere(ctx, rq, res, fc.Method == protocol.MethodSubscribe)
	default:
		result, err = g.requests.callHere(ctx, rq, u, fc.Method, fc.Params)
	}
	var rpcErr *upstreamRPCError
	var protoErr *protocol.Error
	switch {
	case errors.As(err, &rpcErr):
		return replica.Result{RPCError: rpcErr.Err}
	case errors.As(err, &protoErr):
		return replica.Result{RPCError: protoErr}
	case err != nil:
		return failedResult(err)
	}
	return replica.Result{Result: result}
}

// notifyHolders passes a client's notification (roots list_changed) to the session's own
// upstream connections held on other replicas.
func notifyHolders(ctx context.Context, r replicaCalls, upstreams []*upstreamEntry, rec *session.Record, n *protocol.Notification) {
	for _, u := range upstreams {
		if u.pool == nil || u.pool.existing(rec.ID) != nil {
			continue
		}
		if holder := r.HolderOf(rec.Connections, u.ns.Name); holder != "" {
			r.NotifyHolder(ctx, holder, rec.ID, replica.Call{Upstream: u.ns.Name, Method: n.Method, Params: n.Params})
		}
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/tracing"
	"github.com/manifold-mcp/manifold/upstream"
)

// The gateway's traces (docs/operations.md, "Traces"): a SERVER span per client request,
// started where the pipeline takes it (requestPipeline.serve), an INTERNAL span per link of
// the policy chain, and a CLIENT span per call to an upstream (callHere), whose trace context
// the upstream gets in params._meta and, over HTTP, in headers. With tracing off
// (Options.Tracer nil) none of this costs more than a nil check.

// startRequestSpan starts the SERVER span of a request, a child of the trace context its
// client sent (params._meta, else the HTTP headers the face put in ctx).
func (g *requestPipeline) startRequestSpan(ctx context.Context, rq *request) (context.Context, tracing.Span) {
	if g.tracer == nil {
		return ctx, tracing.Span{}
	}
	return g.tracer.StartRequest(ctx, tracing.Request{
		Method:          rq.Method,
		Session:         sessionFingerprint(rq.Client.SessionID),
		ProtocolVersion: rq.Client.ProtocolVersion,
		RequestID:       rq.ID.String(),
		LogID:           rq.LogID,
		Params:          rq.Params,
		Verified:        verifiedOf(ctx),
	})
}

// tracedFrom returns ctx, in which a request that r brought is served, carrying what its span
// takes from r: the trace context of its headers, and when its credential was checked.
func tracedFrom(ctx context.Context, t *tracing.Tracer, r *http.Request) context.Context {
	if t == nil {
		return ctx
	}
	if v := verifiedOf(r.Context()); v != nil && ctx.Value(verifiedKey{}) == nil {
		ctx = context.WithValue(ctx, verifiedKey{}, v)
	}
	return t.FromHTTP(ctx, r.Header)
}

// verifiedOf returns when the request's credential was checked, if the face checked one.
func verifiedOf(ctx context.Context) *tracing.Verification {
	v, _ := ctx.Value(verifiedKey{}).(*tracing.Verification)
	return v
}

// targetSpan names on the request's span what the request addresses, as the client named it.
func targetSpan(span tracing.Span, method string, res *resolved) {
	if res == nil || !span.Recording() {
		return
	}
	kind := ""
	switch res.target.Kind {
	case pipeline.Tool:
		kind = "tool"
	case pipeline.Prompt:
		kind = "prompt"
	case pipeline.Resource:
		kind = "resource"
	}
	upstream := res.target.Upstream
	if res.target.Hidden {
		upstream = "" // as the audit record, the span does not tell where a hidden item lives
	}
	span.Target(method, kind, res.target.Exposed, upstream)
}

// failSpan marks a request's span failed with its outcome: error.type is the refusal's reason
// or the error's code, or tool_error for a tool result with isError that the upstream
// answered, as the semantic conventions name it.
func failSpan(ctx context.Context, method string, result json.RawMessage, outcome pipeline.Outcome) {
	span := tracing.SpanOf(ctx)
	if !span.Recording() {
		return
	}
	switch outcome.Result {
	case "", audit.OutcomeOK:
		if method == protocol.MethodCallTool && isToolError(result) {
			span.Fail("tool_error", 0)
		}
		return
	}
	span.Fail(orDefault(outcome.Reason, outcome.Result), outcome.Code)
}

// isToolError reports whether a tools/call result has isError true.
func isToolError(result json.RawMessage) bool {
	v, ok, err := protocol.Member(result, "isError")
	return err == nil && ok && string(v) == "true"
}

// startUpstreamSpan starts the CLIENT span of a call to upstream u, and returns params with
// its trace context in params._meta (the other members of _meta kept).
func (g *requestPipeline) startUpstreamSpan(ctx context.Context, u *upstreamEntry, method string, params json.RawMessage) (context.Context, tracing.Span, json.RawMessage) {
	if g.tracer == nil {
		return ctx, tracing.Span{}, params
	}
	target, _, _ := protocol.StringMember(params, "name")
	if method == protocol.MethodReadResource {
		target, _, _ = protocol.StringMember(params, "uri")
	}
	ctx, span := g.tracer.StartUpstream(ctx, tracing.Upstream{Name: u.ns.Name, Transport: u.transport, Method: method, Target: target})
	if withMeta, err := g.tracer.InjectMeta(ctx, params); err == nil {
		params = withMeta
	}
	return ctx, span, params
}

// endUpstreamSpan ends a call's span, marked failed when err is not nil.
func endUpstreamSpan(span tracing.Span, err error) {
	if err != nil {
		var rpcErr *upstreamRPCError
		switch {
		case errors.As(err, &rpcErr):
			span.Fail("", rpcErr.Err.Code)
		case errors.Is(err, context.Canceled):
			span.Fail("cancelled", 0)
		default:
			span.Fail(upstreamErrorType(err), 0)
		}
	}
	span.End()
}

// upstreamErrorType is a short word for why a call to an upstream failed: the reason the
// refusal table gives it, or _OTHER.
func upstreamErrorType(err error) string {
	var refusal *pipeline.Refusal
	switch {
	case errors.As(err, &refusal):
		return refusal.Reason
	case errors.Is(err, upstream.ErrInterrupted):
		return pipeline.ReasonUpstreamInterrupted
	case errors.Is(err, upstream.ErrUnavailable):
		return pipeline.ReasonUpstreamUnavailable
	case errors.Is(err, upstream.ErrTimeout):
		return pipeline.ReasonUpstreamTimeout
	case errors.Is(err, errConnectionLimit):
		return pipeline.ReasonConnectionLimit
	}
	return "_OTHER"
}

// traceHeaders is the upstream option that sets, on each HTTP request of a call, the
// traceparent and tracestate headers of the call's span; nil when tracing is off.
func traceHeaders(t *tracing.Tracer) func(context.Context, http.Header) {
	if t == nil {
		return nil
	}
	return t.InjectHTTP
}

// tracedChain returns chain with each link in a span of its own (manifold.NAME), named
// after names, which has one name per link; chain itself when tracing is off.
func tracedChain(t *tracing.Tracer, chain pipeline.Chain, names []string) pipeline.Chain {
	if t == nil {
		return chain
	}
	out := make(pipeline.Chain, len(chain))
	for i, c := range chain {
		out[i] = tracedCheck{tracer: t, name: names[i], check: c}
	}
	return out
}

// tracedCheck is a link of the policy chain in a span of its own, with the decisions the
// link recorded as the span's attributes.
type tracedCheck struct {
	tracer *tracing.Tracer
	name   string
	check  pipeline.Check
}

// Check implements pipeline.Check.
func (c tracedCheck) Check(ctx context.Context, req *pipeline.Request, t *pipeline.Target) error {
	if c.name == "approval" && req.Approval == "" && ctx.Value(takenOverKey{}) == nil {
		return c.check.Check(ctx, req, t) // no approval asked for: no span
	}
	n := len(req.Decisions)
	ctx, span := c.tracer.StartStep(ctx, c.name)
	err := c.check.Check(ctx, req, t)
	c.end(span, req, n, err)
	return err
}

// Inspect implements pipeline.Inspector: the link's after step, if it has one, in a span
// of its own (manifold.NAME.inspect).
func (c tracedCheck) Inspect(ctx context.Context, req *pipeline.Request, t *pipeline.Target, result json.RawMessage) (json.RawMessage, error) {
	in, ok := c.check.(pipeline.Inspector)
	if !ok {
		return result, nil
	}
	n := len(req.Decisions)
	ctx, span := c.tracer.StartStep(ctx, c.name+".inspect")
	out, err := in.Inspect(ctx, req, t, result)
	c.end(span, req, n, err)
	return out, err
}

// end records the decisions from the n-th on and the failure, and ends the span.
func (c tracedCheck) end(span tracing.Span, req *pipeline.Request, n int, err error) {
	if n <= len(req.Decisions) {
		for _, d := range req.Decisions[n:] {
			span.Decision(d.Check, d.Effect, d.Rule, d.DryRun)
		}
	}
	if err != nil {
		var refusal *pipeline.Refusal
		var wire *protocol.Error
		var asked *approvalAsked
		switch {
		case errors.As(err, &asked):
			// Not a failure: a 2026-07-28 client is asked to approve with an
			// input_required result, and its retry continues the call.
		case errors.As(err, &refusal):
			span.Fail(refusal.Reason, 0)
		case errors.As(err, &wire):
			span.Fail("", wire.Code)
		default:
			span.Fail("", 0)
		}
	}
	span.End()
}

// Interface guards.
var (
	_ pipeline.Check     = tracedCheck{}
	_ pipeline.Inspector = tracedCheck{}
)

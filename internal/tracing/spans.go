package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Attribute keys of the OpenTelemetry semantic conventions for MCP (gen-ai/mcp.md) and the
// gateway's own (manifold.*).
const (
	attrMethod          = "mcp.method.name"
	attrSession         = "mcp.session.id"
	attrProtocolVersion = "mcp.protocol.version"
	attrResourceURI     = "mcp.resource.uri"
	attrRequestID       = "jsonrpc.request.id"
	attrToolName        = "gen_ai.tool.name"
	attrPromptName      = "gen_ai.prompt.name"
	attrOperation       = "gen_ai.operation.name"
	attrErrorType       = "error.type"
	attrNetTransport    = "network.transport"
	attrUpstream        = "manifold.upstream.name"
	attrUpstreamTrans   = "manifold.upstream.transport"
	attrRequestLogID    = "manifold.request_id"
)

// The keys of W3C trace context, as HTTP headers (case-insensitive) and as members of
// params._meta (SEP-414 keeps them unprefixed there).
const (
	keyTraceParent = "traceparent"
	keyTraceState  = "tracestate"
)

// Span is one of the gateway's spans. The zero Span does nothing: that is what a nil Tracer
// hands out. A Span is used by the goroutine that started it.
type Span struct{ s trace.Span }

// SpanOf returns the span ctx carries, to set attributes on; one that records nothing when
// ctx carries none.
func SpanOf(ctx context.Context) Span { return Span{trace.SpanFromContext(ctx)} }

// End ends the span; the zero Span: nothing.
func (s Span) End() {
	if s.s != nil {
		s.s.End()
	}
}

// Fail marks the span failed: error.type is reason, or the JSON-RPC code when there is no
// reason; never an error's text, which may name internal addresses.
func (s Span) Fail(reason string, code int64) {
	if s.s == nil || !s.s.IsRecording() {
		return
	}
	et := errorType(reason, code)
	s.s.SetAttributes(attribute.String(attrErrorType, et))
	s.s.SetStatus(codes.Error, et)
}

// Recording reports whether the span records what is set on it.
func (s Span) Recording() bool { return s.s != nil && s.s.IsRecording() }

// Request describes a client request for its SERVER span.
type Request struct {
	// Method is the JSON-RPC method, like "tools/call".
	Method string
	// Session is the fingerprint of the client's session (never the session id, a bearer
	// secret); "" for a request without one.
	Session string
	// ProtocolVersion is the MCP version the client speaks.
	ProtocolVersion string
	// RequestID is the client's JSON-RPC id as it came on the wire (a string id with its
	// quotes, which the attribute leaves out).
	RequestID string
	// LogID is the gateway's correlation id of the request (request_id in its logs).
	LogID string
	// Params are the request's params: W3C trace context in params._meta is the span's
	// parent, before that of the HTTP headers (FromHTTP).
	Params json.RawMessage
	// Verified, when set, is when the client's credential was checked, before the request
	// was read (Verification): the span then begins when that check did, and has it as a
	// child, manifold.auth.verify.
	Verified *Verification
}

// Verification is when a client's credential was checked: from Start to End.
type Verification struct{ Start, End time.Time }

// FromHTTP returns ctx carrying the remote parent that the W3C traceparent and tracestate
// headers of h name, for a request whose params carry none; ctx itself when they are absent
// or invalid, or t is nil.
func (t *Tracer) FromHTTP(ctx context.Context, h http.Header) context.Context {
	if t == nil || h.Get(keyTraceParent) == "" {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// StartRequest starts the SERVER span of a client request, a child of the trace context the
// client sent in params._meta, or else of the one FromHTTP put in ctx, or else a new trace.
// It is named after the method until Target names what the request addresses. The returned
// ctx carries the span: spans started from it are its children.
func (t *Tracer) StartRequest(ctx context.Context, r Request) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx = t.fromMeta(ctx, r.Params)
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String(attrMethod, r.Method), attribute.String(attrRequestLogID, r.LogID))
	if r.Session != "" {
		attrs = append(attrs, attribute.String(attrSession, r.Session))
	}
	if r.ProtocolVersion != "" {
		attrs = append(attrs, attribute.String(attrProtocolVersion, r.ProtocolVersion))
	}
	if r.RequestID != "" {
		attrs = append(attrs, attribute.String(attrRequestID, idText(r.RequestID)))
	}
	if r.Method == protocol.MethodCallTool {
		attrs = append(attrs, attribute.String(attrOperation, "execute_tool"))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	if r.Verified != nil {
		opts = append(opts, trace.WithTimestamp(r.Verified.Start))
	}
	ctx, s := t.tracer.Start(ctx, r.Method, opts...)
	if r.Verified != nil && s.IsRecording() {
		_, v := t.tracer.Start(ctx, "manifold.auth.verify", trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(r.Verified.Start))
		v.End(trace.WithTimestamp(r.Verified.End))
	}
	return ctx, Span{s}
}

// fromMeta returns ctx with the remote parent params._meta names, ctx itself when it names
// none (or an invalid one).
func (t *Tracer) fromMeta(ctx context.Context, params json.RawMessage) context.Context {
	if len(params) == 0 {
		return ctx
	}
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok {
		return ctx
	}
	tp, ok, err := protocol.StringMember(meta, keyTraceParent)
	if err != nil || !ok {
		return ctx
	}
	carrier := propagation.MapCarrier{keyTraceParent: tp}
	if ts, ok, _ := protocol.StringMember(meta, keyTraceState); ok {
		carrier[keyTraceState] = ts
	}
	return t.prop.Extract(ctx, carrier)
}

// Target tells the request's span what the request addresses, once it is resolved: the
// span is renamed "{method} {name}" as the semantic conventions name MCP spans. kind is
// "tool", "prompt" or "resource"; name is the tool's or prompt's name or the resource's URI
// as the client sent it; upstream is the upstream that serves it ("" for none).
func (s Span) Target(method, kind, name, upstream string) {
	if s.s == nil || !s.s.IsRecording() || name == "" {
		return
	}
	s.s.SetName(method + " " + sanitize(name))
	switch kind {
	case "tool":
		s.s.SetAttributes(attribute.String(attrToolName, name))
	case "prompt":
		s.s.SetAttributes(attribute.String(attrPromptName, name))
	case "resource":
		s.s.SetAttributes(attribute.String(attrResourceURI, name))
	}
	if upstream != "" {
		s.s.SetAttributes(attribute.String(attrUpstream, upstream))
	}
}

// StartStep starts the INTERNAL span of a step of the request's policy chain, named
// "manifold.NAME" (auth, policy, plugins, approval, or a check's own name).
func (t *Tracer) StartStep(ctx context.Context, name string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	ctx, s := t.tracer.Start(ctx, "manifold."+name, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, Span{s}
}

// Decision records on a step's span what a policy stage decided: attributes
// manifold.CHECK.effect, manifold.CHECK.rule and, when set, manifold.CHECK.dry_run, where
// CHECK is the stage ("policy", "rate_limit", "approval", or a plugin's).
func (s Span) Decision(check, effect, rule string, dryRun bool) {
	if s.s == nil || !s.s.IsRecording() {
		return
	}
	prefix := "manifold." + attrName(check)
	s.s.SetAttributes(attribute.String(prefix+".effect", effect))
	if rule != "" {
		s.s.SetAttributes(attribute.String(prefix+".rule", rule))
	}
	if dryRun {
		s.s.SetAttributes(attribute.Bool(prefix+".dry_run", true))
	}
}

// Upstream describes a call to an upstream for its CLIENT span.
type Upstream struct {
	// Name is the upstream's name in the config.
	Name string
	// Transport is the upstream's configured transport: stdio, streamable-http, sse or
	// auto.
	Transport string
	// Method is the JSON-RPC method sent; Target is the item in the upstream's own terms
	// (its tool or prompt name, or resource URI), "" for none.
	Method, Target string
}

// StartUpstream starts the CLIENT span of a call the gateway makes to an upstream, named as
// the semantic conventions name MCP spans, with the item in the upstream's own terms.
func (t *Tracer) StartUpstream(ctx context.Context, u Upstream) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	name := u.Method
	if u.Target != "" {
		name += " " + sanitize(u.Target)
	}
	network := "tcp"
	if u.Transport == "stdio" {
		network = "pipe"
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrMethod, u.Method),
		attribute.String(attrUpstream, u.Name),
		attribute.String(attrUpstreamTrans, u.Transport),
		attribute.String(attrNetTransport, network),
	}
	if u.Method == protocol.MethodCallTool && u.Target != "" {
		attrs = append(attrs, attribute.String(attrToolName, u.Target), attribute.String(attrOperation, "execute_tool"))
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, Span{s}
}

// InjectMeta returns params with the trace context of ctx's span in params._meta
// (traceparent, and tracestate when there is one), every other member of params and of
// _meta kept as it was: the carrier the semantic conventions give MCP, for upstreams of
// every transport. params itself when t is nil or ctx has no valid span context; an error
// only for params that are not a JSON object.
func (t *Tracer) InjectMeta(ctx context.Context, params json.RawMessage) (json.RawMessage, error) {
	if t == nil {
		return params, nil
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return params, nil
	}
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{}`)
	}
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	if !ok || string(meta) == "null" {
		meta = []byte(`{}`)
	}
	if meta, err = protocol.SetMember(meta, keyTraceParent, protocol.AppendString(nil, traceParent(sc))); err != nil {
		return nil, fmt.Errorf("params._meta: %w", err)
	}
	if ts := sc.TraceState().String(); ts != "" {
		if meta, err = protocol.SetMember(meta, keyTraceState, protocol.AppendString(nil, ts)); err != nil {
			return nil, fmt.Errorf("params._meta: %w", err)
		}
	}
	out, err := protocol.SetMember(params, "_meta", meta)
	if err != nil {
		return nil, fmt.Errorf("params: %w", err)
	}
	return out, nil
}

// InjectHTTP sets the traceparent and tracestate headers of h to the trace context of ctx's
// span, for a call to an HTTP upstream; nothing when t is nil or ctx has no valid span
// context.
func (t *Tracer) InjectHTTP(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// traceParent is the W3C traceparent value of sc (version 00).
func traceParent(sc trace.SpanContext) string {
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags
}

// idText is a JSON-RPC id as span attribute text: a string id without its quotes.
func idText(raw string) string {
	if s, err := strconv.Unquote(raw); err == nil {
		return s
	}
	return raw
}

// attrName keeps a name within the characters of attribute names: a-z, 0-9 and _ (others
// become _).
func attrName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '_'
	}, s)
}

// RedisHook returns the function that traces a command sent to Redis (op is its name, or
// "pipeline") as a CLIENT span, a child of the request's span in ctx: a command sent outside
// any recorded span (the gateway's own background work) is not traced. Nil when t is nil.
func (t *Tracer) RedisHook() func(ctx context.Context, op string) (context.Context, func(error)) {
	if t == nil {
		return nil
	}
	return t.redisCommand
}

// redisCommand is RedisHook's function.
func (t *Tracer) redisCommand(ctx context.Context, op string) (context.Context, func(error)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, func(error) {}
	}
	name := strings.ToUpper(op)
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", name)))
	return ctx, func(err error) {
		if err != nil {
			s.SetAttributes(attribute.String(attrErrorType, redisErrorType(err)))
			s.SetStatus(codes.Error, "")
		}
		s.End()
	}
}

// redisErrorType is a short word for a failed Redis command: its context's end, or _OTHER
// (an error's text may name addresses).
func redisErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "_OTHER"
}

// Carry returns the W3C trace context of ctx's span (traceparent, and tracestate when set),
// for a message to another replica that continues the trace there (Carried); nil when ctx has
// no span, as with tracing off.
func Carry(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier
}

// Carried returns ctx with the remote parent that carrier (from Carry) names; ctx itself when
// it names none.
func Carried(ctx context.Context, carrier map[string]string) context.Context {
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(carrier))
}

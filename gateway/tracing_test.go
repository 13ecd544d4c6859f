package gateway_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/tracing"
)

// otlpReceiver is an OTLP/HTTP trace receiver in process: it decodes the protobuf export
// requests the gateway's exporter posts and keeps their spans.
type otlpReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex
	spans []*tracepb.Span // guarded by mu
	// service is the service.name of the last export's resource; guarded by mu.
	service string
}

func newOTLPReceiver(t testing.TB) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					r.service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// tracedReceiver is an OTLP receiver and a tracer that exports to it when flushed (its batches
// wait an hour otherwise), shut down when the test ends; service names the spans' service, ""
// for the default.
func tracedReceiver(t *testing.T, service string) (*otlpReceiver, *tracing.Tracer) {
	t.Helper()
	recv := newOTLPReceiver(t)
	tracer, err := tracing.New(&tracing.Options{Endpoint: recv.srv.URL, ServiceName: service, SampleRatio: 1, BatchTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracer.Shutdown(context.Background()) })
	return recv, tracer
}

// received returns the spans received so far.
func (r *otlpReceiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// spanNamed returns the one span of that name in trace, failing the test unless there is
// exactly one.
func spanNamed(t *testing.T, spans []*tracepb.Span, trace []byte, name string) *tracepb.Span {
	t.Helper()
	var found []*tracepb.Span
	for _, s := range spans {
		if s.Name == name && bytes.Equal(s.TraceId, trace) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, fmt.Sprintf("%s (trace %x)", s.Name, s.TraceId))
		}
		t.Fatalf("%d spans named %q in trace %x, want 1; received: %v", len(found), name, trace, names)
	}
	return found[0]
}

// attrs returns a span's string, bool and int attributes as text.
func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		switch v := kv.Value; {
		case v.GetIntValue() != 0:
			m[kv.Key] = fmt.Sprint(v.GetIntValue())
		case v.GetBoolValue():
			m[kv.Key] = "true"
		default:
			m[kv.Key] = v.GetStringValue()
		}
	}
	return m
}

// upstreamSeen is what an HTTP upstream received with one tools/call.
type upstreamSeen struct {
	traceparent string
	meta        map[string]any
}

// tracedUpstream serves a go-sdk server over Streamable HTTP and records the traceparent
// header and params._meta of each tools/call it receives.
func tracedUpstream(t *testing.T, flavor string) (*httptest.Server, <-chan upstreamSeen) {
	seen := make(chan upstreamSeen, 16)
	inner := goSDKHandler(t, flavor, false)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			data, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var msg struct {
				Method string `json:"method"`
				Params struct {
					Meta map[string]any `json:"_meta"`
				} `json:"params"`
			}
			if json.Unmarshal(data, &msg) == nil && msg.Method == "tools/call" {
				seen <- upstreamSeen{traceparent: r.Header.Get("traceparent"), meta: msg.Params.Meta}
			}
			r.Body = io.NopCloser(bytes.NewReader(data))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// headerTransport adds fixed headers to every request of a client.
type headerTransport struct {
	header http.Header
	base   http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.header {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}

// TestTracesOfAToolCall sends tools/call through a real gateway to a real HTTP upstream,
// with the client's trace context in its HTTP headers and, for a second call, in
// params._meta: the spans reach an OTLP receiver with the request's span as the child of the
// client's, the policy's and the upstream call's spans as its children, the attributes of
// the MCP semantic conventions, and the upstream gets the call's trace context in its
// headers and in _meta, beside the client's own _meta keys. The audit records carry the
// trace ids.
func TestTracesOfAToolCall(t *testing.T) {
	recv, tracer := tracedReceiver(t, "gw-test")
	up, seen := tracedUpstream(t, "alpha")
	var records lockedBuffer
	trail := audit.New(&records, nil)
	t.Cleanup(func() { _ = trail.Close() })
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
policy:
  rules:
    - {name: no-etc, effect: deny, match: {tools: [echo], arguments: [{pointer: /text, matches: "^/etc"}]}}
    - {name: echo-for-all, effect: allow, match: {tools: [echo]}}
upstreams:
  - name: remote
    url: %s
`, up.URL), &gateway.Options{Tracer: tracer, Audit: trail})
	defer tg.close()

	const (
		headerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		headerSpan   = "00f067aa0ba902b7"
		metaTrace    = "0af7651916cd43dd8448eb211c80319c"
		metaSpan     = "b7ad6b7169203331"
		deniedTrace  = "5b8efff798038103d269b633813fc60c"
		toolErrTrace = "6e0c63257de34c926f9efcd03899a4f1"
	)
	header := http.Header{"Traceparent": {"00-" + headerTrace + "-" + headerSpan + "-01"}, "Tracestate": {"client=1"}}
	client := mcp.NewClient(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url,
		HTTPClient: &http.Client{Transport: headerTransport{header: header, base: http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// 1: the trace context of the HTTP headers.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("remote__echo: %v %v", res, err)
	}
	first := <-seen
	// 2: the trace context of params._meta comes before the headers', and the client's other
	// _meta keys reach the upstream untouched.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"text": "y"},
		Meta: mcp.Meta{"traceparent": "00-" + metaTrace + "-" + metaSpan + "-01", "example.com/note": "kept"}})
	if err != nil || res.IsError {
		t.Fatalf("remote__echo with _meta: %v %v", res, err)
	}
	second := <-seen
	// 3: a call the policy denies.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"text": "/etc/passwd"},
		Meta: mcp.Meta{"traceparent": "00-" + deniedTrace + "-" + metaSpan + "-01"}})
	if err != nil || !res.IsError {
		t.Fatalf("denied call: %v %v, want a tool error", res, err)
	}
	// 4: a call the tool itself fails (arguments its schema refuses).
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"text": 5},
		Meta: mcp.Meta{"traceparent": "00-" + toolErrTrace + "-" + metaSpan + "-01"}})
	if err != nil || !res.IsError {
		t.Fatalf("call with arguments the tool refuses: %v %v, want a tool error", res, err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
	spans := recv.received()
	traceOf := func(h string) []byte { b, _ := hex.DecodeString(h); return b }
	toolErr := spanNamed(t, spans, traceOf(toolErrTrace), "tools/call remote__echo")
	if et := attrs(toolErr)["error.type"]; et != "tool_error" {
		t.Errorf("the span of a call the tool failed has error.type %q, want tool_error", et)
	}

	// The first call: its span is the child of the client's, in the client's trace.
	server := spanNamed(t, spans, traceOf(headerTrace), "tools/call remote__echo")
	if got := hex.EncodeToString(server.ParentSpanId); got != headerSpan {
		t.Errorf("request span's parent = %s, want the client's span %s", got, headerSpan)
	}
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("request span kind = %v, want SERVER", server.Kind)
	}
	a := attrs(server)
	for k, want := range map[string]string{
		"mcp.method.name":        "tools/call",
		"gen_ai.tool.name":       "remote__echo",
		"gen_ai.operation.name":  "execute_tool",
		"manifold.upstream.name": "remote",
	} {
		if a[k] != want {
			t.Errorf("request span %s = %q, want %q", k, a[k], want)
		}
	}
	if a["jsonrpc.request.id"] == "" || a["mcp.protocol.version"] == "" {
		t.Errorf("request span has jsonrpc.request.id %q and mcp.protocol.version %q, want both", a["jsonrpc.request.id"], a["mcp.protocol.version"])
	}
	if sid := a["mcp.session.id"]; len(sid) != 12 || sid == cs.ID() {
		t.Errorf("request span mcp.session.id = %q, want the session's 12-digit fingerprint, not its id", sid)
	}
	if _, ok := a["error.type"]; ok {
		t.Errorf("a successful call's span has error.type %q", a["error.type"])
	}
	policy := spanNamed(t, spans, traceOf(headerTrace), "manifold.policy")
	if !bytes.Equal(policy.ParentSpanId, server.SpanId) {
		t.Errorf("policy span's parent = %x, want the request span %x", policy.ParentSpanId, server.SpanId)
	}
	if pa := attrs(policy); pa["manifold.policy.effect"] != "allow" || pa["manifold.policy.rule"] != "echo-for-all" {
		t.Errorf("policy span attributes = %v, want effect allow by rule echo-for-all", pa)
	}
	call := spanNamed(t, spans, traceOf(headerTrace), "tools/call echo")
	if !bytes.Equal(call.ParentSpanId, server.SpanId) || call.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("upstream call span: parent %x kind %v, want the request span %x and CLIENT", call.ParentSpanId, call.Kind, server.SpanId)
	}
	ca := attrs(call)
	if ca["manifold.upstream.name"] != "remote" || ca["gen_ai.tool.name"] != "echo" || ca["network.transport"] != "tcp" {
		t.Errorf("upstream call span attributes = %v", ca)
	}
	wantParent := "00-" + headerTrace + "-" + hex.EncodeToString(call.SpanId) + "-01"
	if first.traceparent != wantParent || first.meta["traceparent"] != wantParent {
		t.Errorf("the upstream got traceparent header %q and _meta %v, want %q in both", first.traceparent, first.meta, wantParent)
	}
	if first.meta["tracestate"] != "client=1" {
		t.Errorf("the upstream got _meta.tracestate %v, want the client's client=1", first.meta["tracestate"])
	}

	// The second call: _meta names the parent.
	server2 := spanNamed(t, spans, traceOf(metaTrace), "tools/call remote__echo")
	if got := hex.EncodeToString(server2.ParentSpanId); got != metaSpan {
		t.Errorf("request span's parent = %s, want the span of _meta %s", got, metaSpan)
	}
	call2 := spanNamed(t, spans, traceOf(metaTrace), "tools/call echo")
	want2 := "00-" + metaTrace + "-" + hex.EncodeToString(call2.SpanId) + "-01"
	if diff := cmp.Diff(map[string]any{"traceparent": want2, "example.com/note": "kept"}, second.meta); diff != "" {
		t.Errorf("_meta the upstream got (-want +got):\n%s", diff)
	}
	if second.traceparent != want2 {
		t.Errorf("traceparent header the upstream got = %q, want %q", second.traceparent, want2)
	}

	// The denied call: its span says why, and so does the policy's.
	denied := spanNamed(t, spans, traceOf(deniedTrace), "tools/call remote__echo")
	if et := attrs(denied)["error.type"]; et != "denied" || denied.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("denied call's span: error.type %q status %v, want denied and ERROR", et, denied.Status.GetCode())
	}
	deniedPolicy := spanNamed(t, spans, denied.TraceId, "manifold.policy")
	if pa := attrs(deniedPolicy); pa["manifold.policy.effect"] != "deny" || pa["manifold.policy.rule"] != "no-etc" {
		t.Errorf("denied call's policy span attributes = %v, want effect deny by rule no-etc", pa)
	}
	for _, s := range spans {
		if s.Name == "tools/call echo" && bytes.Equal(s.TraceId, denied.TraceId) {
			t.Error("the denied call has an upstream call span")
		}
	}

	// The audit records name the traces.
	cs.Close()
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var traces []string
	sc := bufio.NewScanner(strings.NewReader(records.String()))
	for sc.Scan() {
		var rec struct {
			Method  string `json:"method"`
			TraceID string `json:"traceId"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if rec.Method == "tools/call" {
			traces = append(traces, rec.TraceID)
		}
	}
	if diff := cmp.Diff([]string{headerTrace, metaTrace, deniedTrace, toolErrTrace}, traces); diff != "" {
		t.Errorf("trace ids of the audit records of tools/call (-want +got):\n%s", diff)
	}
	recv.mu.Lock()
	service := recv.service
	recv.mu.Unlock()
	if service != "gw-test" {
		t.Errorf("service.name = %q, want gw-test", service)
	}
}

// TestTracesOfRedisCommands: with the sessions in Redis and a rate limit shared there, the
// limit's Redis commands are CLIENT spans under the policy's span of the call that asked, and
// nothing the gateway sends Redis outside a request starts a trace of its own.
func TestTracesOfRedisCommands(t *testing.T) {
	addr := testredis.Addr(t)
	recv, tracer := tracedReceiver(t, "")
	up := httptest.NewServer(goSDKHandler(t, "alpha", false))
	defer up.Close()
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
session_store: {type: redis, url: "redis://%s/0", key_prefix: %s}
`+keysYAML+`policy:
  rate_limits:
    - {key: principal, rate: 100/s, burst: 100, shared: true}
upstreams:
  - name: remote
    url: %s
`, addr, testredis.Prefix(t, addr), up.URL), &gateway.Options{Tracer: tracer})
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__echo", Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + trace + "-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatalf("remote__echo: %v %v", res, err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := recv.received()
	traceID, _ := hex.DecodeString(trace)
	policy := spanNamed(t, spans, traceID, "manifold.policy")
	var redisSpans int
	for _, s := range spans {
		a := attrs(s)
		if a["db.system.name"] != "redis" {
			continue
		}
		redisSpans++
		if !bytes.Equal(s.TraceId, traceID) {
			t.Errorf("Redis span %s is in trace %x, outside the call's %s", s.Name, s.TraceId, trace)
			continue
		}
		if !bytes.Equal(s.ParentSpanId, policy.SpanId) || s.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("Redis span %s: parent %x kind %v, want the policy span %x and CLIENT", s.Name, s.ParentSpanId, s.Kind, policy.SpanId)
		}
		if a["db.operation.name"] != s.Name {
			t.Errorf("Redis span %s has db.operation.name %q", s.Name, a["db.operation.name"])
		}
	}
	if redisSpans == 0 {
		t.Error("no Redis span for the shared rate limit's commands")
	}
}

// TestTraceContextBesideModernMeta: a 2026-07-28 upstream, whose requests carry the
// gateway's _meta of that era (protocol version, client capabilities), gets the call's trace
// context in the same _meta.
func TestTraceContextBesideModernMeta(t *testing.T) {
	recv, tracer := tracedReceiver(t, "")
	m, url := modernUpstreamGateway(t, &gateway.Options{Tracer: tracer})
	cs := connect(t, url, nil)
	ctx := ctxT(t)
	const trace = "0af7651916cd43dd8448eb211c80319c"
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mod__echo", Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + trace + "-b7ad6b7169203331-01"}})
	if err != nil || res.IsError {
		t.Fatalf("mod__echo: %v %v", res, err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	traceID, _ := hex.DecodeString(trace)
	call := spanNamed(t, recv.received(), traceID, "tools/call echo")
	want := "00-" + trace + "-" + hex.EncodeToString(call.SpanId) + "-01"
	var metas []map[string]any
	for _, s := range m.Seen() {
		if s.Method != "tools/call" {
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal(s.Meta, &meta); err != nil {
			t.Fatalf("_meta %s: %v", s.Meta, err)
		}
		metas = append(metas, meta)
	}
	if len(metas) != 1 {
		t.Fatalf("the upstream saw %d tools/call, want 1", len(metas))
	}
	if metas[0]["traceparent"] != want {
		t.Errorf("_meta.traceparent = %v, want %s", metas[0]["traceparent"], want)
	}
	if len(metas[0]) < 2 {
		t.Errorf("_meta = %v, want the 2026-07-28 members beside the trace context", metas[0])
	}
}

// TestTracesOfAStatelessRequest: a 2026-07-28 request, served without a session, has its span
// as the child of its HTTP traceparent, without mcp.session.id, and its upstream gets the
// call's trace context.
func TestTracesOfAStatelessRequest(t *testing.T) {
	recv, tracer := tracedReceiver(t, "")
	up, seen := tracedUpstream(t, "alpha")
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:\n  - name: remote\n    url: "+up.URL+"\n", &gateway.Options{Tracer: tracer})
	defer tg.close()
	const (
		trace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent = "00f067aa0ba902b7"
	)
	headers := modernHeaders("tools/call", "remote__echo")
	headers["traceparent"] = "00-" + trace + "-" + parent + "-01"
	reply := rawClient{t: t, url: tg.url}.do(http.MethodPost, modernBody(1, "tools/call", `{"name":"remote__echo","arguments":{"text":"x"}}`), headers)
	if reply.status != http.StatusOK || reply.msg.Error != nil {
		t.Fatalf("tools/call: %d %s", reply.status, reply.body)
	}
	got := <-seen
	if err := tracer.ForceFlush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	traceID, _ := hex.DecodeString(trace)
	spans := recv.received()
	server := spanNamed(t, spans, traceID, "tools/call remote__echo")
	if p := hex.EncodeToString(server.ParentSpanId); p != parent {
		t.Errorf("request span's parent = %s, want %s", p, parent)
	}
	a := attrs(server)
	if a["mcp.protocol.version"] != "2026-07-28" || a["mcp.session.id"] != "" {
		t.Errorf("request span: mcp.protocol.version %q, mcp.session.id %q; want 2026-07-28 and none", a["mcp.protocol.version"], a["mcp.session.id"])
	}
	call := spanNamed(t, spans, traceID, "tools/call echo")
	if want := "00-" + trace + "-" + hex.EncodeToString(call.SpanId) + "-01"; got.traceparent != want || got.meta["traceparent"] != want {
		t.Errorf("the upstream got traceparent %q and _meta %v, want %s in both", got.traceparent, got.meta, want)
	}
}

// TestTracesOfAnApprovedCall: a call held for approval has, under its request span, the
// spans of the credential's check (before the request was read), of the principal's, of the policy that asked for approval, of the wait for the user's
// answer, and of the upstream call that followed it, in that order.
func TestTracesOfAnApprovedCall(t *testing.T) {
	recv, tracer := tracedReceiver(t, "")
	tg := startGateway(t, policyYAML(`  approval: {timeout: 20s}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`), &gateway.Options{Tracer: tracer})
	defer tg.close()
	var asked atomic.Int64
	var last atomic.Value
	alice := connectAs(t, tg.url, "mfk_alice", approver("accept", true, &asked, &last))
	ctx := ctxT(t)
	const trace = "0af7651916cd43dd8448eb211c80319c"
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + trace + "-b7ad6b7169203331-01"}})
	if err != nil || res.IsError {
		t.Fatalf("approved call: %v %v", res, err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := recv.received()
	traceID, _ := hex.DecodeString(trace)
	server := spanNamed(t, spans, traceID, "tools/call a__echo")
	var steps []string
	for _, name := range []string{"manifold.auth.verify", "manifold.auth", "manifold.policy", "manifold.approval", "tools/call echo"} {
		s := spanNamed(t, spans, traceID, name)
		if !bytes.Equal(s.ParentSpanId, server.SpanId) {
			t.Errorf("%s's parent = %x, want the request span %x", name, s.ParentSpanId, server.SpanId)
		}
		steps = append(steps, fmt.Sprintf("%s %d", name, s.StartTimeUnixNano))
	}
	policy := attrs(spanNamed(t, spans, traceID, "manifold.policy"))
	if policy["manifold.policy.effect"] != "approve" || policy["manifold.policy.rule"] != "echo-needs-approval" {
		t.Errorf("policy span attributes = %v, want effect approve by rule echo-needs-approval", policy)
	}
	approval := spanNamed(t, spans, traceID, "manifold.approval")
	if a := attrs(approval); a["manifold.approval.effect"] != "allow" {
		t.Errorf("approval span attributes = %v, want effect allow", a)
	}
	// The API key was checked before the request was read: the request's span begins then.
	if verify := spanNamed(t, spans, traceID, "manifold.auth.verify"); verify.StartTimeUnixNano != server.StartTimeUnixNano || verify.EndTimeUnixNano < verify.StartTimeUnixNano {
		t.Errorf("manifold.auth.verify ran %d..%d, want it to begin with the request's span (%d)", verify.StartTimeUnixNano, verify.EndTimeUnixNano, server.StartTimeUnixNano)
	}
	call := spanNamed(t, spans, traceID, "tools/call echo")
	if call.StartTimeUnixNano < approval.EndTimeUnixNano {
		t.Errorf("the upstream call started before the approval's wait ended: %v", steps)
	}
}

// TestTraceContextToAStdioUpstream: an upstream run as a child process over stdio gets the
// call's trace context in params._meta.
func TestTraceContextToAStdioUpstream(t *testing.T) {
	recv, tracer := tracedReceiver(t, "")
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("child", "modern", ""), &gateway.Options{Tracer: tracer})
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	const trace = "0af7651916cd43dd8448eb211c80319c"
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "child__echo", Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{"traceparent": "00-" + trace + "-b7ad6b7169203331-01"}}); err != nil || res.IsError {
		t.Fatalf("child__echo: %v %v", res, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "child__seen", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("child__seen: %v %v", res, err)
	}
	var seen struct {
		Seen []struct {
			Method string         `json:"method"`
			Meta   map[string]any `json:"meta"`
		} `json:"seen"`
	}
	if err := json.Unmarshal([]byte(textOf(t, res)), &seen); err != nil {
		t.Fatal(err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	traceID, _ := hex.DecodeString(trace)
	call := spanNamed(t, recv.received(), traceID, "tools/call echo")
	if a := attrs(call); a["network.transport"] != "pipe" || a["manifold.upstream.transport"] != "stdio" {
		t.Errorf("upstream call span attributes = %v, want network.transport pipe and transport stdio", a)
	}
	want := "00-" + trace + "-" + hex.EncodeToString(call.SpanId) + "-01"
	for _, s := range seen.Seen {
		if s.Method == "tools/call" {
			if s.Meta["traceparent"] != want {
				t.Errorf("the stdio upstream's first tools/call had _meta %v, want traceparent %s", s.Meta, want)
			}
			return
		}
	}
	t.Errorf("the stdio upstream saw no tools/call: %+v", seen.Seen)
}

// TestTraceOfAForwardedCall: a session's call to an upstream whose connection of the session
// is held by the other replica runs there; the upstream call's span, made there, continues
// the trace of the request's span on the replica the client called.
func TestTraceOfAForwardedCall(t *testing.T) {
	recv, tracer := tracedReceiver(t, "")
	a, b := twoReplicasWithOptions(t, "", upstreamYAML("r", "reverse", "    isolation: session\n"), &gateway.Options{Tracer: tracer})
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	sid := onA.initializeAs("2025-11-25", `{}`)
	// The session's connection opens on A, with its first call.
	if r := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__cancels"}}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("first call on A: %d %s", r.status, r.body)
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"r__cancels","_meta":{"traceparent":"00-` + trace + `-00f067aa0ba902b7-01"}}}`
	if r := onB.do(http.MethodPost, body, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("the call on B, run on A: %d %s", r.status, r.body)
	}
	if err := tracer.ForceFlush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	spans := recv.received()
	traceID, _ := hex.DecodeString(trace)
	server := spanNamed(t, spans, traceID, "tools/call r__cancels")
	call := spanNamed(t, spans, traceID, "tools/call cancels")
	if !bytes.Equal(call.ParentSpanId, server.SpanId) {
		t.Errorf("the upstream call's span on the holder has parent %x, want the request's span %x on the replica called", call.ParentSpanId, server.SpanId)
	}
}

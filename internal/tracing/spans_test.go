package tracing

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	headerParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	metaParent   = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// newTestTracer is a Tracer whose spans go to an in-memory exporter.
func newTestTracer(t *testing.T) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(&Options{Endpoint: "http://127.0.0.1:4318", SampleRatio: 1, Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func TestNilTracerDoesNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	h := http.Header{"Traceparent": {headerParent}}
	if got := tr.FromHTTP(ctx, h); got != ctx {
		t.Error("FromHTTP of a nil Tracer changed the context")
	}
	got, span := tr.StartRequest(ctx, Request{Method: "tools/call"})
	if got != ctx || span.Recording() {
		t.Error("StartRequest of a nil Tracer started a span")
	}
	span.Target("tools/call", "tool", "x", "up")
	span.Fail("denied", 0)
	span.End()
	params := json.RawMessage(`{"name":"x"}`)
	if out, err := tr.InjectMeta(ctx, params); err != nil || string(out) != string(params) {
		t.Errorf("InjectMeta of a nil Tracer = %s, %v; want the params unchanged", out, err)
	}
	out := http.Header{}
	tr.InjectHTTP(ctx, out)
	if len(out) != 0 {
		t.Errorf("InjectHTTP of a nil Tracer set %v", out)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	if off, err := New(&Options{}); off != nil || err != nil {
		t.Errorf("New without an endpoint = %v, %v; want nil, nil", off, err)
	}
}

// TestRequestParent: the parent of a request's span is the trace context of params._meta,
// else that of the HTTP headers, else none (a new trace).
func TestRequestParent(t *testing.T) {
	tr, exp := newTestTracer(t)
	tests := []struct {
		name, header, params, wantTrace, wantParent string
	}{
		{"headers", headerParent, `{"name":"x"}`, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"_meta before headers", headerParent, `{"name":"x","_meta":{"traceparent":"` + metaParent + `"}}`, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		{"an invalid _meta falls back to the headers", headerParent, `{"_meta":{"traceparent":"00-zz"}}`, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{"_meta alone", "", `{"_meta":{"traceparent":"` + metaParent + `"}}`, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"},
		{"none", "", `{}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			h := http.Header{}
			if tt.header != "" {
				h.Set("traceparent", tt.header)
			}
			ctx := tr.FromHTTP(context.Background(), h)
			_, span := tr.StartRequest(ctx, Request{Method: "tools/call", Params: json.RawMessage(tt.params)})
			span.End()
			if err := tr.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.SpanKind != trace.SpanKindServer {
				t.Errorf("kind %v, want server", s.SpanKind)
			}
			if tt.wantTrace == "" {
				if s.Parent.IsValid() {
					t.Errorf("parent %v, want none", s.Parent)
				}
				return
			}
			if got := s.SpanContext.TraceID().String(); got != tt.wantTrace {
				t.Errorf("trace %s, want %s", got, tt.wantTrace)
			}
			if got := s.Parent.SpanID().String(); got != tt.wantParent || !s.Parent.IsRemote() {
				t.Errorf("parent span %s (remote %v), want remote %s", got, s.Parent.IsRemote(), tt.wantParent)
			}
		})
	}
}

// TestInjectMeta: the span's trace context goes into params._meta, every other member of
// params and of _meta kept, a traceparent the client sent replaced.
func TestInjectMeta(t *testing.T) {
	tr, _ := newTestTracer(t)
	ctx := tr.FromHTTP(context.Background(), http.Header{"Traceparent": {headerParent}, "Tracestate": {"a=1"}})
	ctx, span := tr.StartUpstream(ctx, Upstream{Name: "up", Transport: "stdio", Method: "tools/call", Target: "echo"})
	defer span.End()
	sc := trace.SpanContextFromContext(ctx)
	tp := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	tests := []struct{ name, params, want string }{
		{"no params", ``, `{"_meta":{"traceparent":"` + tp + `","tracestate":"a=1"}}`},
		{"null params", `null`, `{"_meta":{"traceparent":"` + tp + `","tracestate":"a=1"}}`},
		{"no _meta", `{"name":"echo"}`, `{"name":"echo","_meta":{"traceparent":"` + tp + `","tracestate":"a=1"}}`},
		{"other _meta keys kept", `{"name":"echo","_meta":{"progressToken":7,"x/y":"z"}}`,
			`{"name":"echo","_meta":{"progressToken":7,"x/y":"z","traceparent":"` + tp + `","tracestate":"a=1"}}`},
		{"the client's traceparent replaced", `{"_meta":{"traceparent":"` + metaParent + `","k":1}}`,
			`{"_meta":{"traceparent":"` + tp + `","k":1,"tracestate":"a=1"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tr.InjectMeta(ctx, json.RawMessage(tt.params))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := tr.InjectMeta(ctx, json.RawMessage(`[1]`)); err == nil {
		t.Error("InjectMeta of an array: no error")
	}
	h := http.Header{}
	tr.InjectHTTP(ctx, h)
	if h.Get("traceparent") != tp || h.Get("tracestate") != "a=1" {
		t.Errorf("InjectHTTP set %v, want traceparent %s and tracestate a=1", h, tp)
	}
}

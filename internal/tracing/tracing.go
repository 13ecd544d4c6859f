// Package tracing owns the gateway's OpenTelemetry traces: the tracer provider that exports
// spans over OTLP/HTTP, the spans of a client request (one SERVER span named after the MCP
// semantic conventions, with children for the policy chain's links and the upstream call),
// and W3C trace context taken from clients (the traceparent and tracestate HTTP headers, or
// params._meta) and passed to upstreams (params._meta for every transport, and HTTP headers
// for HTTP upstreams).
//
// A nil *Tracer is tracing switched off: every method does nothing and returns its input, at
// the cost of a nil check, so that callers need no branch of their own.
//
//	t, err := tracing.New(&tracing.Options{Endpoint: "http://127.0.0.1:4318", ServiceName: "manifold"})
//	if err != nil { ... }
//	defer t.Shutdown(context.Background()) // flushes, bounded by ShutdownTimeout
//	ctx, span := t.StartRequest(ctx, tracing.Request{Method: "tools/call", Target: "get_weather", ...})
//	defer span.End()
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Tracer. Nil, or an empty Endpoint, means tracing is off.
type Options struct {
	// Endpoint is the OTLP/HTTP base URL of the collector, like http://127.0.0.1:4318;
	// spans are posted to its path /v1/traces, or to the URL's own path when it has one
	// other than "/". Empty: tracing is off (New returns nil).
	Endpoint string
	// Headers are sent with every export, such as an authorization. Nil: none.
	Headers map[string]string
	// SampleRatio is the share of traces the gateway starts that are recorded, from 0 to 1;
	// a request whose client sent trace context is recorded as its parent was (parent-based
	// sampling). If zero, nothing the gateway starts itself is recorded: the config's
	// default of 1 is applied before.
	SampleRatio float64
	// ServiceName is the service.name of the spans. If empty, "manifold".
	ServiceName string
	// ServiceVersion is the service.version of the spans; empty leaves it out.
	ServiceVersion string
	// BatchTimeout is the longest a finished span waits before it is exported. If zero, 5
	// seconds.
	BatchTimeout time.Duration
	// ShutdownTimeout bounds Shutdown's flush of the spans not yet exported. If zero, 5
	// seconds.
	ShutdownTimeout time.Duration
	// Exporter, when set, receives the spans instead of the OTLP endpoint (Endpoint must
	// still be set to switch tracing on); for tests that read spans in process.
	Exporter sdktrace.SpanExporter
}

// Tracer makes the gateway's spans and carries trace context across its faces. A nil Tracer
// is tracing switched off. Safe for concurrent use.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
	shutdown time.Duration
}

// New builds the Tracer opts describe, nil when tracing is off (nil opts or no Endpoint).
// The exporter connects lazily: an unreachable collector is not an error here, and spans
// that cannot be exported are dropped.
func New(opts *Options) (*Tracer, error) {
	if opts == nil || opts.Endpoint == "" {
		return nil, nil
	}
	o := *opts
	if o.ServiceName == "" {
		o.ServiceName = "manifold"
	}
	if o.BatchTimeout <= 0 {
		o.BatchTimeout = 5 * time.Second
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = otlpExporter(o.Endpoint, o.Headers); err != nil {
			return nil, err
		}
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", o.ServiceName)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", o.ServiceVersion))
	}
	res := resource.NewWithAttributes("", attrs...)
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(o.BatchTimeout)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	return &Tracer{provider: provider, tracer: provider.Tracer("github.com/manifold-mcp/manifold"), shutdown: o.ShutdownTimeout}, nil
}

// otlpExporter is the OTLP/HTTP exporter to endpoint (a base URL, or one with the traces
// path).
func otlpExporter(endpoint string, headers map[string]string) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("tracing endpoint: want an http or https URL with a host")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String())}
	if len(headers) > 0 {
		opts = append(opts, otlptracehttp.WithHeaders(headers))
	}
	// The exporter's own context only builds the client; it does not connect.
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	return exp, nil
}

// Shutdown exports the spans not yet exported and stops the exporter, within the Tracer's
// ShutdownTimeout or ctx, whichever ends first. Nil Tracer: nothing. Call it once the gateway
// is closed; spans ended after it are dropped.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.shutdown)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports the spans ended so far, within ctx; for tests. Nil Tracer: nothing.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
}

// IDs returns the trace and span id of the span in ctx as lowercase hex, "" and "" when ctx
// has none with a valid trace id.
func IDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// TraceID returns the trace id of the span in ctx as lowercase hex, "" when there is none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// errorType is the error.type of a failed request or call: a short word, never an error's
// text (which may name internal addresses).
func errorType(reason string, code int64) string {
	switch {
	case reason != "":
		return reason
	case code != 0:
		return fmt.Sprint(code)
	}
	return "_OTHER"
}

// sanitize keeps a span name's target within printable characters and a bounded length.
func sanitize(s string) string {
	const maxLen = 128
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

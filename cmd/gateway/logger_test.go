package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestLogFormats: with log_format json every line is a JSON object, and it carries the same
// fields as the text line of the same record: the request's request_id, and with tracing on
// the trace_id and span_id of the span the record is logged under.
func TestLogFormats(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	fields := map[string]map[string]string{}
	for _, format := range []string{"text", "json"} {
		cfg, err := config.Parse("gw.yaml", []byte("upstreams: []\nlog_format: "+format+"\ntracing: {endpoint: \"http://127.0.0.1:4318\"}\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		logger := newLogger(cfg, &out)
		logger.With("method", "tools/call").WarnContext(ctx, "request failed", "request_id", "r7")
		logger.Info("no span")
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: %d lines, want 2:\n%s", format, len(lines), out.String())
		}
		got := map[string]string{}
		if format == "json" {
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
				t.Fatalf("json line %q: %v", lines[0], err)
			}
			for k, v := range m {
				got[k], _ = v.(string)
			}
			var second map[string]any
			if err := json.Unmarshal([]byte(lines[1]), &second); err != nil || second["trace_id"] != nil {
				t.Errorf("a line without a span: %q (%v), want JSON without trace_id", lines[1], err)
			}
		} else {
			for _, kv := range strings.Fields(lines[0]) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					got[k] = strings.Trim(v, `"`)
				}
			}
			if strings.Contains(lines[1], "trace_id") {
				t.Errorf("a line without a span: %q, want no trace_id", lines[1])
			}
		}
		delete(got, "time")
		fields[format] = got
	}
	want := map[string]string{"level": "WARN", "method": "tools/call", "request_id": "r7",
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}
	// The text line's message is quoted and holds a space: compared by its first word.
	if diff := cmp.Diff(want, fields["json"], cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == `["msg"]` }, cmp.Ignore())); diff != "" {
		t.Errorf("json fields (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(fields["json"], fields["text"], cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == `["msg"]` }, cmp.Ignore())); diff != "" {
		t.Errorf("text fields differ from json's (-json +text):\n%s", diff)
	}
	if fields["json"]["msg"] != "request failed" {
		t.Errorf("json msg = %q, want %q", fields["json"]["msg"], "request failed")
	}
}

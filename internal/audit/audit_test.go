package audit_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/audit"
)

// syncBuffer is an output the test reads while a Log's writer goroutine writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// jsonLines parses each line of out as a JSON object, failing the test on any that is not.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for line := range strings.Lines(out) {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestRecordFields(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC)
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name string
		rec  audit.Record
		want map[string]any
	}{
		{
			name: "every field",
			rec: audit.Record{
				Time: at, RequestID: "42", Session: "3f9a1c2b7d4e", Principal: "alice@example.com",
				Method: "tools/call", Upstream: "github", Target: "create_issue",
				Latency: 1500 * time.Microsecond, Outcome: audit.OutcomeRefused, Code: -32007, Reason: "rate_limited",
				Decisions: []audit.Decision{
					{Check: "visibility", Effect: "allow"},
					{Check: "rate_limit", Effect: "deny", Rule: "per-user"},
				},
			},
			want: map[string]any{
				"time": "2026-01-02T15:04:05.123456789Z", "msg": "audit",
				"requestId": "42", "session": "3f9a1c2b7d4e", "principal": "alice@example.com",
				"method": "tools/call", "upstream": "github", "target": "create_issue",
				"latencyMs": 1.5, "outcome": "refused", "code": float64(-32007), "reason": "rate_limited",
				"decisions": []any{
					map[string]any{"check": "visibility", "effect": "allow"},
					map[string]any{"check": "rate_limit", "effect": "deny", "rule": "per-user"},
				},
			},
		},
		{
			name: "optional fields left out",
			rec: audit.Record{
				Time: at, RequestID: "1", Session: "000000000000", Principal: "anonymous",
				Method: "tools/list", Latency: 250 * time.Millisecond, Outcome: audit.OutcomeOK,
			},
			want: map[string]any{
				"time": "2026-01-02T15:04:05.123456789Z", "msg": "audit",
				"requestId": "1", "session": "000000000000", "principal": "anonymous",
				"method": "tools/list", "latencyMs": float64(250), "outcome": "ok",
			},
		},
		{
			name: "error with a code, at an upstream",
			rec: audit.Record{
				Time: at, RequestID: "x-9", Session: "abcdefabcdef", Principal: "anonymous",
				Method: "resources/read", Upstream: "files", Target: "file:///etc/hosts",
				Latency: time.Nanosecond, Outcome: audit.OutcomeError, Code: -32002,
			},
			want: map[string]any{
				"time": "2026-01-02T15:04:05.123456789Z", "msg": "audit",
				"requestId": "x-9", "session": "abcdefabcdef", "principal": "anonymous",
				"method": "resources/read", "upstream": "files", "target": "file:///etc/hosts",
				"latencyMs": 0.000001, "outcome": "error", "code": float64(-32002),
			},
		},
		{
			name: "no time: the time of Record",
			rec: audit.Record{
				RequestID: "2", Session: "s", Principal: "anonymous", Method: "tools/call",
				Upstream: "github", Target: "search", Outcome: audit.OutcomeCancelled, Reason: "cancelled_by_client",
			},
			want: map[string]any{
				"time": "2026-03-04T05:06:07Z", "msg": "audit",
				"requestId": "2", "session": "s", "principal": "anonymous",
				"method": "tools/call", "upstream": "github", "target": "search",
				"latencyMs": float64(0), "outcome": "cancelled", "reason": "cancelled_by_client",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncBuffer
			l := audit.New(&out, &audit.Options{Now: func() time.Time { return now }})
			l.Record(tt.rec)
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			lines := jsonLines(t, out.String())
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1:\n%s", len(lines), out.String())
			}
			if diff := cmp.Diff(tt.want, lines[0]); diff != "" {
				t.Errorf("line mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

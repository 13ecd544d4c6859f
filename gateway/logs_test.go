package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// countOf counts op in ops.
func countOf(ops []string, op string) int {
	n := 0
	for _, o := range ops {
		if o == op {
			n++
		}
	}
	return n
}

// TestLogFanOutReadsNoRecords: with many sessions served, a logging/setLevel reads its own
// session's record only, and a broadcast log line none at all: the levels of the sessions a
// replica serves are kept in an index, not read from the store for each line (a shared store
// is a network round trip per read, on an upstream's read loop). The line still reaches
// exactly the sessions whose level admits it.
func TestLogFanOutReadsNoRecords(t *testing.T) {
	store := &countingStore{MemoryStore: session.NewMemoryStore(nil)}
	up := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(up.Close)
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: sem\n    url: %s\n    broadcast_logs: true\n", up.URL),
		&gateway.Options{Backends: withSessions(store.MemoryStore, store), ExpiryInterval: time.Hour})
	t.Cleanup(tg.close)
	ctx := ctxT(t)
	levels := []mcp.LoggingLevel{"debug", "info", "warning", "error", "debug", "warning", "critical", "info"}
	logs := make([]*logRecorder, len(levels))
	sessions := make([]*mcp.ClientSession, len(levels))
	for i, level := range levels {
		logs[i] = &logRecorder{}
		sessions[i] = connect(t, tg.url, &mcp.ClientOptions{LoggingMessageHandler: logs[i].handler})
		if err := sessions[i].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
			t.Fatal(err)
		}
	}

	store.take()
	if err := sessions[0].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if got := countOf(store.take(), "Get"); got > 1 {
		t.Errorf("a logging/setLevel read %d session records with %d sessions served, want 1 (its own)", got, len(levels))
	}

	if _, err := sessions[0].CallTool(ctx, &mcp.CallToolParams{Name: "sem__log_later", Arguments: map[string]any{"text": "L"}}); err != nil {
		t.Fatal(err)
	}
	// The line is at warning: every session but those at error and critical gets it.
	waitUntil(t, "the broadcast line at every session that admits it", func() bool {
		for i, level := range levels {
			if level != "error" && level != "critical" && !slices.Contains(logs[i].got(), "L@later") {
				return false
			}
		}
		return true
	})
	if got := countOf(store.take(), "Get"); got > 1 {
		t.Errorf("a tools/call and the broadcast log line it caused read %d session records with %d sessions served, want 1 (the call's)", got, len(levels))
	}
	// Any line sent to a session that does not admit it would have come before this one.
	if _, err := sessions[0].CallTool(ctx, &mcp.CallToolParams{Name: "sem__log_later", Arguments: map[string]any{"text": "M"}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second line", func() bool { return slices.Contains(logs[0].got(), "M@later") })
	for i, level := range levels {
		if got := strings.Join(logs[i].got(), ","); (level == "error" || level == "critical") && got != "" {
			t.Errorf("session at %s received %s, want nothing", level, got)
		}
	}
}

// TestLogLevelSetOnAnotherReplicaReachesTheStream: a session whose standalone stream one
// replica holds sets its log level through another; broadcast log lines on the first follow
// the new level, although the session made no request there since.
func TestLogLevelSetOnAnotherReplicaReachesTheStream(t *testing.T) {
	semantics := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(semantics.Close)
	a, b := twoReplicas(t, fmt.Sprintf("  - name: s\n    url: %s\n    broadcast_logs: true\n", semantics.URL))
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	listener := onA.initializeAs("2025-11-25", `{}`)
	setLevel := func(c rawClient, level string) {
		t.Helper()
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"`+level+`"}}`, map[string]string{"Mcp-Session-Id": listener})
		if r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("setLevel %s: %d %s", level, r.status, r.body)
		}
	}
	setLevel(onA, "error") // the warnings of log_later do not reach it on A
	_, stream := onA.openStandalone(t.Context(), listener)
	setLevel(onB, "warning") // now they do
	caller := onA.initializeAs("2025-11-25", `{}`)
	id := 1
	testwait.Until(t, 20*time.Second, "a warning logged on A to reach the session that asked for warnings on B", func() bool {
		if id++; id > 100 {
			t.Fatal("100 warnings logged on A, none reached the session")
		}
		if r := onA.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"s__log_later","arguments":{"text":"L"}}}`, id), map[string]string{"Mcp-Session-Id": caller}); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("log_later: %d %s", r.status, r.body)
		}
		select {
		case m := <-stream.messages:
			if m.Method != "notifications/message" {
				t.Fatalf("on A: %+v", m)
			}
			return true
		default:
			return false
		}
	})
}

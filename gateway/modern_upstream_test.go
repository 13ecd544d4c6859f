package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// TestModernUpstreamBehindA2025Session: a 2026-07-28 upstream (protocol: 2026-07-28) serves a
// 2025-11-25 session through the gateway, and an input_required it answers although the
// gateway offered it no client capability fails the call with an error naming it, rather than
// reaching the client as if it were the tool's result.
func TestModernUpstreamBehindA2025Session(t *testing.T) {
	m := testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:\n  - name: mod\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n", nil)
	t.Cleanup(tg.close)
	ctx := ctxT(t)
	cs := connect(t, tg.url, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("the client speaks %q; want a 2025-11-25 session (the 2026 face is off)", v)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mod__lookup", Arguments: map[string]any{"repo": "acme/widgets", "q": "crash"}})
	if err != nil {
		t.Fatalf("call mod__lookup: %v", err)
	}
	if got := textOf(t, res); got != "acme/widgets:crash" {
		t.Errorf("mod__lookup = %q; want acme/widgets:crash", got)
	}

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "mod__ask", Arguments: map[string]any{}})
	if err == nil || !strings.Contains(err.Error(), "input_required") {
		t.Fatalf("call mod__ask: err %v; want an error saying the upstream answered input_required", err)
	}
	if n := m.Count("initialize"); n != 0 {
		t.Errorf("the upstream saw %d initialize requests; want none", n)
	}
}

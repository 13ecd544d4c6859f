package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestModernUpstreamBehindA2025Session: a 2026-07-28 upstream (protocol: 2026-07-28) serves a
// 2025-11-25 session through the gateway, and an input_required it answers although the
// gateway offered it no client capability fails the call with an error naming it, rather than
// reaching the client as if it were the tool's result.
func TestModernUpstreamBehindA2025Session(t *testing.T) {
	m, url := modernUpstreamGateway(t, nil)
	ctx := ctxT(t)
	cs := connect(t, url, nil)
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

// TestTaskOnlyToolsHiddenFromModernClients: a tool that runs only as a task is left out of a
// 2026-07-28 client's tools/list (the gateway offers it no tasks extension), while a
// 2025-11-25 session that declared tasks still sees it.
func TestTaskOnlyToolsHiddenFromModernClients(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:"+upstreamYAML("tk", "tasks", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}

	r := c.do(http.MethodPost, modernBody(1, "tools/list", `{}`), modernHeaders("tools/list", ""))
	if r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("2026-07-28 tools/list: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.msg.Result), "tk__job") || !strings.Contains(string(r.msg.Result), "tk__now") {
		t.Errorf("a 2026-07-28 client's tools/list = %s; want tk__now and not the task-only tk__job", r.msg.Result)
	}

	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	sid := r.header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": sid})
	if !strings.Contains(string(r.msg.Result), "tk__job") {
		t.Errorf("a 2025-11-25 session with tasks lost tk__job: %s", r.msg.Result)
	}
}

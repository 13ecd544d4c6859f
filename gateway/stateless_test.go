package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/session"
)

// modernYAML is a gateway with the 2026-07-28 face on, in front of two upstream processes and
// the Streamable HTTP upstream at semURL (on which log messages are tied to their call
// exactly), with a policy that denies one tool and one prompt, and a profile endpoint of alpha
// only.
func modernYAML(on bool, semURL string) string {
	flag := "false"
	if on {
		flag = "true"
	}
	return "listen: 127.0.0.1:0\nmodern_protocol: " + flag + `
policy:
  rules:
    - {name: no-whoami, effect: deny, reason: "whoami is off limits", match: {tools: [whoami]}}
    - {name: no-greet, effect: deny, match: {prompts: [greet]}}
upstreams:` + upstreamYAML("alpha", "alpha", "    include_instructions: true\n") +
		upstreamYAML("rev", "reverse", "") + `
  - name: sem
    url: ` + semURL + `
profiles:
  - {name: ops, include: [{upstream: alpha}]}
`
}

// modernGateway starts a gateway of modernYAML; its sessions and audit records can be read.
func modernGateway(t *testing.T, on bool) (*testGateway, *session.MemoryStore, *lockedBuffer) {
	t.Helper()
	store := session.NewMemoryStore(&session.MemoryOptions{MaxSessions: 100})
	var out lockedBuffer
	trail := audit.New(&out, nil)
	t.Cleanup(func() { _ = trail.Close() })
	sem := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(sem.Close)
	tg := startGateway(t, modernYAML(on, sem.URL), &gateway.Options{Backends: backend.NewMemory(store), Audit: trail})
	t.Cleanup(tg.close)
	return tg, store, &out
}

// rpcCode returns the JSON-RPC error code of err, 0 when it carries none.
func rpcCode(err error) int64 {
	var e *jsonrpc.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestModernSDKClient: the Go SDK's client in its default mode (2026-07-28) against the
// gateway with the switch on discovers, lists, calls, is refused by policy, uses a profile
// endpoint, receives progress and the log messages its level asks for, and, having declared no
// sampling, is not asked for it when an upstream samples mid-call — all with no session ever
// created.
func TestModernSDKClient(t *testing.T) {
	tg, store, auditOut := modernGateway(t, true)
	ctx := ctxT(t)

	var progressMu sync.Mutex
	var progress []float64
	var logs logRecorder
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progressMu.Lock()
			defer progressMu.Unlock()
			progress = append(progress, req.Params.Progress)
		},
		LoggingMessageHandler: logs.handler,
	})

	t.Run("discover", func(t *testing.T) {
		init := cs.InitializeResult()
		if init.ProtocolVersion != "2026-07-28" {
			t.Fatalf("the client speaks %q, want 2026-07-28 (discover was not answered)", init.ProtocolVersion)
		}
		if cs.ID() != "" {
			t.Errorf("the client holds session %q, want none", cs.ID())
		}
		if !strings.Contains(init.Instructions, "[alpha] instructions of alpha") {
			t.Errorf("instructions %q lack alpha's", init.Instructions)
		}
		caps := init.Capabilities
		if caps.Tools == nil || !caps.Tools.ListChanged || caps.Prompts == nil || caps.Resources == nil || caps.Completions == nil || caps.Logging == nil {
			t.Errorf("capabilities %+v lack one of tools, prompts, resources, completions, logging", caps)
		}
		if init.ServerInfo == nil || init.ServerInfo.Name != "manifold" {
			t.Errorf("serverInfo %+v, want manifold's", init.ServerInfo)
		}
	})

	t.Run("list and call", func(t *testing.T) {
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range tools.Tools {
			names = append(names, tool.Name)
		}
		for _, want := range []string{"alpha__echo", "rev__progress", "sem__log"} {
			if !slices.Contains(names, want) {
				t.Errorf("tools/list lacks %s: %v", want, names)
			}
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": "hi"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := textOf(t, res); got != "alpha:hi" {
			t.Errorf("echo answered %q", got)
		}
		read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+file:///readme.txt"})
		if err != nil {
			t.Fatal(err)
		}
		if len(read.Contents) != 1 || read.Contents[0].Text != "readme of alpha" {
			t.Errorf("resources/read answered %+v", read.Contents)
		}
		if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+file:///missing.txt"}); rpcCode(err) != -32602 {
			t.Errorf("reading a missing resource: %v (code %d), want -32602", err, rpcCode(err))
		}
	})

	t.Run("policy denial", func(t *testing.T) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__whoami"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.Meta["dev.manifold/reason"] != "denied" {
			t.Errorf("a denied call answered %+v, want a refused tool result", res)
		}
		if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__greet", Arguments: map[string]string{"who": "x"}}); rpcCode(err) != -32008 {
			t.Errorf("a denied prompts/get: %v (code %d), want the gateway's -32008", err, rpcCode(err))
		}
	})

	t.Run("profile endpoint", func(t *testing.T) {
		ops := connect(t, tg.srv.URL+"/mcp/ops", nil)
		tools, err := ops.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range tools.Tools {
			if !strings.HasPrefix(tool.Name, "alpha__") {
				t.Errorf("the ops profile lists %s, which is not alpha's", tool.Name)
			}
		}
		if _, err := ops.CallTool(ctx, &mcp.CallToolParams{Name: "rev__progress"}); rpcCode(err) != -32602 {
			t.Errorf("calling a tool outside the profile: %v (code %d), want -32602", err, rpcCode(err))
		}
	})

	// The first call on rev: over stdio an upstream's request is tied to a call only while no
	// other request's call ended there within the attribution window.
	// The client declared no sampling: the upstream is refused it, as by a client without the
	// capability, and its tool fails with that (the parking of what was declared is
	// parking_test.go's).
	t.Run("input asked mid-call", func(t *testing.T) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rev__ask", Arguments: map[string]any{"text": "q"}})
		if err != nil || !res.IsError || !strings.Contains(textOf(t, res), "did not declare") {
			t.Fatalf("a call whose upstream samples: %+v, %v; want the tool's failure saying the client did not declare sampling", res, err)
		}
	})

	t.Run("progress", func(t *testing.T) {
		params := &mcp.CallToolParams{Name: "rev__progress"}
		params.SetProgressToken("tok-1")
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if got := textOf(t, res); !strings.HasPrefix(got, "token=mf-p-") {
			t.Errorf("the upstream saw progress token %q, want the gateway's own", got)
		}
		waitUntil(t, "three progress notifications", func() bool {
			progressMu.Lock()
			defer progressMu.Unlock()
			return len(progress) == 3
		})
	})

	t.Run("log level", func(t *testing.T) {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sem__log", Arguments: map[string]any{"text": "quiet"}}); err != nil {
			t.Fatal(err)
		}
		params := &mcp.CallToolParams{Name: "sem__log", Arguments: map[string]any{"text": "loud"}, Meta: mcp.Meta{"io.modelcontextprotocol/logLevel": "info"}}
		if _, err := cs.CallTool(ctx, params); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the log messages at info and above", func() bool { return len(logs.got()) >= 2 })
		if diff := cmp.Diff([]string{"loud@info", "loud@warning"}, logs.got()); diff != "" {
			t.Errorf("log messages (-want +got):\n%s", diff)
		}
	})

	if n := store.Len(); n != 0 {
		t.Errorf("the session store holds %d sessions, want none", n)
	}
	_ = cs.Close()
	tg.close()
	var calls int
	for _, rec := range auditLines(t, auditOut.String()) {
		if rec["method"] != "tools/call" {
			continue
		}
		calls++
		if rec["era"] != "2026-07-28" || rec["session"] != "" {
			t.Errorf("audit record %v: want era 2026-07-28 and no session", rec)
		}
	}
	if calls == 0 {
		t.Errorf("no audit record of a call:\n%s", auditOut.String())
	}
}

// TestModernCancelOnClose: a 2026-07-28 client that gives up on a call closes its response,
// and the upstream's call is cancelled.
func TestModernCancelOnClose(t *testing.T) {
	tg, _, _ := modernGateway(t, true)
	started := make(chan struct{}, 1)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case started <- struct{}{}:
			default:
			}
		},
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	params := &mcp.CallToolParams{Name: "rev__hold"}
	params.SetProgressToken("hold")
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, params)
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("hold ended before it was cancelled: %v", err)
	case <-ctxT(t).Done():
		t.Fatal("no progress from hold")
	}
	cancel()
	<-done
	waitUntil(t, "the upstream's call to be cancelled", func() bool {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "rev__cancels"})
		return err == nil && textOf(t, res) == "1"
	})
}

// TestModernSwitchOff: with modern_protocol off the gateway answers 2026-07-28 probes as a
// server of 2025-11-25 and earlier, and the same Go SDK client falls back to a session.
func TestModernSwitchOff(t *testing.T) {
	tg, store, _ := modernGateway(t, false)
	c := rawClient{t: t, url: tg.url}
	r := c.do(http.MethodPost, modernBody(1, "server/discover", `{}`), modernHeaders("server/discover", ""))
	if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32022 {
		t.Fatalf("discover answered %d %s, want 400 -32022", r.status, r.body)
	}
	var data struct{ Supported []string }
	_ = json.Unmarshal(r.msg.Error.Data, &data)
	if slices.Contains(data.Supported, "2026-07-28") || len(data.Supported) == 0 {
		t.Errorf("-32022 lists %v, want the session-based versions only", data.Supported)
	}
	cs := connect(t, tg.url, nil)
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("the client speaks %q, want the fallback 2025-11-25", v)
	}
	if store.Len() != 1 {
		t.Errorf("%d sessions, want the client's one", store.Len())
	}
}

// modernMeta is the _meta of a raw 2026-07-28 request.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// modernBody is a JSON-RPC request with params (an object, to which modernMeta is added
// unless it holds a _meta of its own).
func modernBody(id int, method, params string) string {
	if !strings.Contains(params, `"_meta"`) {
		if params == "{}" {
			params = "{" + modernMeta + "}"
		} else {
			params = "{" + modernMeta + "," + strings.TrimPrefix(params, "{")
		}
	}
	b, _ := json.Marshal(id)
	return `{"jsonrpc":"2.0","id":` + string(b) + `,"method":"` + method + `","params":` + params + `}`
}

// modernHeaders are the standard headers of a raw 2026-07-28 request.
func modernHeaders(method, name string) map[string]string {
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// TestModernValidationOrder: raw 2026-07-28 requests are refused in the order and with the
// status and code the conformance suite expects, each 4xx with a JSON-RPC body that echoes the
// request's id; server/discover and the lists carry resultType and cache hints.
func TestModernValidationOrder(t *testing.T) {
	tg, store, _ := modernGateway(t, true)
	c := rawClient{t: t, url: tg.url}
	without := func(h map[string]string, key string) map[string]string {
		h[key] = ""
		return h
	}
	with := func(h map[string]string, key, value string) map[string]string {
		h[key] = value
		return h
	}
	tests := []struct {
		name       string
		body       string
		headers    map[string]string
		wantStatus int
		wantCode   int
	}{
		{"discover", modernBody(1, "server/discover", `{}`), modernHeaders("server/discover", ""), 200, 0},
		{"no version header", modernBody(2, "tools/list", `{}`), without(modernHeaders("tools/list", ""), "MCP-Protocol-Version"), 400, -32020},
		{"no _meta", modernBody(3, "tools/list", `{"_meta":{}}`), modernHeaders("tools/list", ""), 400, -32602},
		{"no capabilities", modernBody(4, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}`), modernHeaders("tools/list", ""), 400, -32602},
		{"header and _meta differ", modernBody(5, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}`), modernHeaders("tools/list", ""), 400, -32020},
		{"unsupported version", modernBody(6, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}`), with(modernHeaders("tools/list", ""), "MCP-Protocol-Version", "v999.0.0"), 400, -32022},
		{"Mcp-Method differs", modernBody(7, "tools/list", `{}`), modernHeaders("prompts/list", ""), 400, -32020},
		{"Mcp-Name differs", modernBody(8, "tools/call", `{"name":"alpha__echo","arguments":{"text":"x"}}`), modernHeaders("tools/call", "alpha__whoami"), 400, -32020},
		{"initialize", modernBody(9, "initialize", `{}`), modernHeaders("initialize", ""), 404, -32601},
		{"ping", modernBody(10, "ping", `{}`), modernHeaders("ping", ""), 404, -32601},
		{"logging/setLevel", modernBody(11, "logging/setLevel", `{"level":"info"}`), modernHeaders("logging/setLevel", ""), 404, -32601},
		{"bad log level", modernBody(12, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}}`), modernHeaders("tools/list", ""), 400, -32602},
		{"unknown tool", modernBody(13, "tools/call", `{"name":"alpha__nope"}`), modernHeaders("tools/call", "alpha__nope"), 400, -32602},
		{"missing resource", modernBody(14, "resources/read", `{"uri":"alpha+file:///missing.txt"}`), modernHeaders("resources/read", "alpha+file:///missing.txt"), 400, -32602},
		{"session id ignored", modernBody(15, "tools/list", `{}`), with(modernHeaders("tools/list", ""), "Mcp-Session-Id", "no-such-session"), 200, 0},
		{"tools/list", modernBody(16, "tools/list", `{}`), modernHeaders("tools/list", ""), 200, 0},
		{"call", modernBody(17, "tools/call", `{"name":"alpha__echo","arguments":{"text":"x"}}`), modernHeaders("tools/call", "alpha__echo"), 200, 0},
	}
	t.Run("notification", func(t *testing.T) {
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,`+modernMeta+`}}`, modernHeaders("notifications/cancelled", ""))
		if r.status != http.StatusAccepted || len(r.body) != 0 {
			t.Errorf("a 2026-07-28 notification: %d %s, want 202 and no body", r.status, r.body)
		}
	})
	t.Run("GET stays session-only", func(t *testing.T) {
		r := c.do(http.MethodGet, "", with(modernHeaders("", ""), "Accept", "text/event-stream"))
		if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32006 {
			t.Errorf("GET with a 2026-07-28 header: %d %s, want 400 -32006 (no session)", r.status, r.body)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.do(http.MethodPost, tt.body, tt.headers)
			if r.status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", r.status, tt.wantStatus, r.body)
			}
			if r.header.Get("Mcp-Session-Id") != "" {
				t.Errorf("answered with session %q", r.header.Get("Mcp-Session-Id"))
			}
			var req struct{ ID json.RawMessage }
			_ = json.Unmarshal([]byte(tt.body), &req)
			if string(r.msg.ID) != string(req.ID) {
				t.Errorf("answer id %s, want %s", r.msg.ID, req.ID)
			}
			if tt.wantCode != 0 {
				if r.msg.Error == nil || r.msg.Error.Code != tt.wantCode {
					t.Fatalf("answer %s, want error %d", r.body, tt.wantCode)
				}
				return
			}
			if r.msg.Error != nil {
				t.Fatalf("error %s", r.body)
			}
			var result map[string]json.RawMessage
			if err := json.Unmarshal(r.msg.Result, &result); err != nil {
				t.Fatal(err)
			}
			if string(result["resultType"]) != `"complete"` {
				t.Errorf("resultType %s, want complete", result["resultType"])
			}
			if tt.name == "discover" || tt.name == "tools/list" || tt.name == "session id ignored" {
				if string(result["ttlMs"]) != "0" || string(result["cacheScope"]) != `"private"` {
					t.Errorf("cache hints ttlMs=%s cacheScope=%s, want 0 and private", result["ttlMs"], result["cacheScope"])
				}
			}
		})
	}
	r := c.do(http.MethodPost, modernBody(20, "server/discover", `{}`), modernHeaders("server/discover", ""))
	var discovered struct {
		SupportedVersions []string `json:"supportedVersions"`
	}
	_ = json.Unmarshal(r.msg.Result, &discovered)
	r = c.do(http.MethodPost, modernBody(21, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}`), with(modernHeaders("tools/list", ""), "MCP-Protocol-Version", "v999.0.0"))
	var refused struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}
	_ = json.Unmarshal(r.msg.Error.Data, &refused)
	if refused.Requested != "v999.0.0" || len(refused.Supported) == 0 {
		t.Errorf("-32022 data %s", r.msg.Error.Data)
	}
	for _, v := range refused.Supported {
		if !slices.Contains(discovered.SupportedVersions, v) {
			t.Errorf("-32022 lists %s, which discover's %v does not", v, discovered.SupportedVersions)
		}
	}
	if n := store.Len(); n != 0 {
		t.Errorf("the session store holds %d sessions, want none", n)
	}
}

// TestModernApproval: a 2026-07-28 client is never asked to approve a call by elicitation
// (it would take an input-required result): without an operator the call is refused, saying
// why; with the admin API the call waits in its request for an operator's decision.
func TestModernApproval(t *testing.T) {
	rules := `  approval: {timeout: 20s}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`
	t.Run("no operator", func(t *testing.T) {
		tg := startGateway(t, "modern_protocol: true\n"+policyYAML(rules), nil)
		defer tg.close()
		var asked atomic.Int64
		var last atomic.Value
		alice := connectAs(t, tg.url, "mfk_alice", approver("accept", true, &asked, &last))
		if v := alice.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("the client speaks %s", v)
		}
		res, err := alice.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hello"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError || resultText(res) != "beta:hello" {
			t.Errorf("call approved by its user: %v %q", res.IsError, resultText(res))
		}
		if asked.Load() != 1 {
			t.Errorf("the client was asked %d times, want once (with input_required)", asked.Load())
		}
	})
	t.Run("no operator, no elicitation", func(t *testing.T) {
		tg := startGateway(t, "modern_protocol: true\n"+policyYAML(rules), nil)
		defer tg.close()
		alice := connectAs(t, tg.url, "mfk_alice", nil)
		res, err := alice.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hello"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_unavailable" || !strings.Contains(resultText(res), "elicitation") {
			t.Errorf("call needing approval: %v %v %q, want a refusal saying the client declared no elicitation", res.IsError, res.Meta, resultText(res))
		}
	})
	t.Run("operator", func(t *testing.T) {
		tg := startGateway(t, "modern_protocol: true\n"+adminYAML("")+policyYAML(rules), nil)
		defer tg.close()
		adm := startAdmin(t, tg)
		alice := connectAs(t, tg.url, "mfk_alice", nil)
		if v := alice.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("the client speaks %s", v)
		}
		done := callAsync(ctxT(t), alice, "a__echo", map[string]any{"text": "hello"})
		held := adm.waitHeld(1)[0]
		if held.Session != "" || held.Principal != "apikey:alice" {
			t.Errorf("held call %+v, want alice's with no session", held)
		}
		if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
			t.Fatalf("approve: %d", code)
		}
		if res := <-done; res.IsError || resultText(res) != "beta:hello" {
			t.Fatalf("approved call: %v %q", res.IsError, resultText(res))
		}
	})
}

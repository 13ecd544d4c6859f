package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRequestWithoutSessionReachesUpstream: nothing below the face needs a session (design
// decision 12): a request value with none is resolved, forwarded and answered.
func TestRequestWithoutSessionReachesUpstream(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), nil)
	t.Cleanup(tg.close)
	serve := func(method, params string) json.RawMessage {
		t.Helper()
		res, err := tg.gw.ServeValue(ctxT(t), &pipeline.Request{
			ID: protocol.IntID(1), Method: method, Params: json.RawMessage(params),
			Client: pipeline.ClientContext{ProtocolVersion: protocol.Version20251125},
			LogID:  "t1", Received: time.Now(),
		})
		if err != nil {
			t.Fatalf("%s without a session: %v", method, err)
		}
		return res
	}
	if res := serve(protocol.MethodCallTool, `{"name":"a__echo","arguments":{"text":"hi"}}`); !strings.Contains(string(res), "alpha:hi") {
		t.Errorf("tools/call: %s", res)
	}
	if res := serve(protocol.MethodGetPrompt, `{"name":"a__greet","arguments":{"who":"you"}}`); !strings.Contains(string(res), "you") {
		t.Errorf("prompts/get: %s", res)
	}
	if res := serve(protocol.MethodReadResource, `{"uri":"a+file:///readme.txt"}`); !strings.Contains(string(res), `"uri":"a+file:///readme.txt"`) {
		t.Errorf("resources/read: %s", res)
	}
}

// TestPolicyChainDecides: every request that names a target passes the configured checks,
// which see the target in the upstream's own terms; a refusal takes the table's form, a tool
// result for tools/call and -32008 for the rest. Unknown names never reach the chain.
func TestPolicyChainDecides(t *testing.T) {
	var mu sync.Mutex
	var seen []pipeline.Target
	var clients []pipeline.ClientContext
	check := pipeline.CheckFunc(func(_ context.Context, req *pipeline.Request, target *pipeline.Target) error {
		mu.Lock()
		seen = append(seen, *target)
		clients = append(clients, req.Client)
		mu.Unlock()
		if target.Original == "whoami" || target.Kind == pipeline.Resource {
			return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Message: "denied by the test's rule: ask an operator"}
		}
		return nil
	})
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{Checks: []pipeline.Check{check}})
	t.Cleanup(tg.close)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)

	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil || textOf(t, res) != "alpha:x" {
		t.Fatalf("allowed call: %v %v", res, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__whoami"})
	if err != nil || !res.IsError || res.Meta[pipeline.MetaReason] != pipeline.ReasonDenied || !strings.Contains(textOf(t, res), "ask an operator") {
		t.Errorf("denied call: %+v %v, want an isError result with reason denied", res, err)
	}
	_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a+file:///readme.txt"})
	var wire *jsonrpc.Error
	if !errors.As(err, &wire) || wire.Code != protocol.CodeDenied {
		t.Errorf("denied read: %v, want error %d", err, protocol.CodeDenied)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__nope"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("unknown tool: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []pipeline.Target{
		{Kind: pipeline.Tool, Upstream: "a", Exposed: "a__echo", Original: "echo", Arguments: json.RawMessage(`{"text":"x"}`)},
		{Kind: pipeline.Tool, Upstream: "a", Exposed: "a__whoami", Original: "whoami", Arguments: json.RawMessage(`{}`)},
		{Kind: pipeline.Resource, Upstream: "a", Exposed: "a+file:///readme.txt", Original: "file:///readme.txt"},
	}
	if len(seen) != len(want) {
		t.Fatalf("the chain saw %+v, want %+v", seen, want)
	}
	for i := range want {
		got := seen[i]
		if got.Kind != want[i].Kind || got.Upstream != want[i].Upstream || got.Exposed != want[i].Exposed || got.Original != want[i].Original || string(got.Arguments) != string(want[i].Arguments) {
			t.Errorf("target %d: %+v, want %+v", i, got, want[i])
		}
		if c := clients[i]; c.SessionID != cs.ID() || c.ProtocolVersion == "" || !c.Principal.Anonymous() {
			t.Errorf("client context %d: %+v", i, c)
		}
	}
}

// auditLines parses the JSON lines an audit trail wrote.
func auditLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestAuditRecordPerRequest: one audit record per completed request, field by field.
func TestAuditRecordPerRequest(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{Audit: trail})
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__nope"})
	sid := cs.ID()
	_ = cs.Close()
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}

	var call, refused, initialize map[string]any
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] == "initialize" {
			initialize = rec
		}
		if rec["method"] != "tools/call" {
			continue
		}
		if rec["outcome"] == "ok" {
			call = rec
		} else {
			refused = rec
		}
	}
	if call == nil || refused == nil {
		t.Fatalf("audit lines: %s", out.String())
	}
	for key, want := range map[string]any{
		"session": sessionFingerprint(sid), "principal": "anonymous", "method": "tools/call",
		"upstream": "a", "target": "echo", "outcome": "ok", "msg": "audit",
	} {
		if call[key] != want {
			t.Errorf("call record %s = %v, want %v", key, call[key], want)
		}
	}
	if id, _ := call["requestId"].(string); id == "" {
		t.Errorf("call record without a request id: %+v", call)
	}
	if ms, ok := call["latencyMs"].(float64); !ok || ms < 0 {
		t.Errorf("call record latency %v", call["latencyMs"])
	}
	if _, ok := call["code"]; ok {
		t.Errorf("a successful call has a code: %+v", call)
	}
	if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(call["time"])); err != nil {
		t.Errorf("call record time %v: %v", call["time"], err)
	}
	for key, want := range map[string]any{"outcome": "refused", "code": float64(protocol.CodeInvalidParams), "reason": pipeline.ReasonUnknownTool} {
		if refused[key] != want {
			t.Errorf("refused record %s = %v, want %v", key, refused[key], want)
		}
	}
	if initialize == nil || initialize["session"] != sessionFingerprint(sid) || initialize["outcome"] != "ok" {
		t.Errorf("initialize record %+v", initialize)
	}
	if strings.Contains(out.String(), sid) {
		t.Error("the audit trail holds a session id")
	}
}

// stalledWriter blocks every write until released.
type stalledWriter struct{ release chan struct{} }

func (w stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// TestStalledAuditSinkNeverHoldsACall: with the audit output stuck, calls go on; the records
// that find the queue full are dropped and counted.
func TestStalledAuditSinkNeverHoldsACall(t *testing.T) {
	w := stalledWriter{release: make(chan struct{})}
	trail := audit.New(w, &audit.Options{Buffer: 2, Logger: slog.New(slog.DiscardHandler)})
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{Audit: trail})
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	const calls = 20
	for i := range calls {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": fmt.Sprint(i)}}); err != nil {
			t.Fatalf("call %d with the audit output stuck: %v", i, err)
		}
	}
	// At most the queue and the record being written are held; the rest were dropped.
	if d := trail.Dropped(); d < calls-3 {
		t.Errorf("%d records dropped, want at least %d", d, calls-3)
	}
	_ = cs.Close()
	tg.close()
	close(w.release)
	_ = trail.Close()
}

// TestUpstreamErrorsFollowTheRule: spec-defined errors of an upstream pass with their data
// (a resource's URI in the gateway's form); internal and implementation-defined ones reach
// the client as a generic -32603, their text only in the log (design decision 9).
func TestUpstreamErrorsFollowTheRule(t *testing.T) {
	var logs lockedBuffer
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("sem", "semantics", ""),
		&gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	ask := func(method, params string) (code int, message, data string) {
		t.Helper()
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`, h)
		if r.status != http.StatusOK || r.msg.Error == nil {
			t.Fatalf("%s %s: %d %s, want a JSON-RPC error", method, params, r.status, r.body)
		}
		return r.msg.Error.Code, r.msg.Error.Message, string(r.msg.Error.Data)
	}

	code, msg, data := ask("resources/subscribe", `{"uri":"sem+file:///gone.txt"}`)
	if code != protocol.CodeResourceNotFound || msg != "resource not found: sem+file:///gone.txt" || data != `{"uri":"sem+file:///gone.txt"}` {
		t.Errorf("subscribe to a resource the upstream lacks: %d %q %s, want -32002 naming the gateway's URI", code, msg, data)
	}
	// The upstream writes its not-found as -32602 with the URI (2026-07-28's form); a client of
	// 2025-11-25 gets -32002, its protocol's code, with the gateway's URI.
	code, _, data = ask("resources/read", `{"uri":"sem+file:///nothing.txt"}`)
	if code != protocol.CodeResourceNotFound || data != `{"uri":"sem+file:///nothing.txt"}` {
		t.Errorf("read of a resource the upstream lacks: %d %s, want -32002 with the gateway's URI", code, data)
	}
	code, msg, data = ask("prompts/get", `{"name":"sem__fails_params"}`)
	if code != protocol.CodeInvalidParams || msg != "argument who: must not be empty" || data != `{"argument":"who"}` {
		t.Errorf("invalid params: %d %q %s, want them as the upstream said", code, msg, data)
	}
	for _, prompt := range []struct{ name, secret string }{{"sem__fails_internal", "db.internal:5432"}, {"sem__fails_custom", "shard 7"}} {
		code, msg, _ := ask("prompts/get", `{"name":"`+prompt.name+`"}`)
		if code != protocol.CodeInternalError || strings.Contains(msg, prompt.secret) || !strings.Contains(msg, "upstream sem failed") {
			t.Errorf("%s: %d %q, want a generic -32603", prompt.name, code, msg)
		}
		if !strings.Contains(logs.String(), prompt.secret) {
			t.Errorf("%s: the log lacks the upstream's error", prompt.name)
		}
	}
}

// TestDebugLogsOneLinePerRequest: at log level debug, with no audit trail, each client request
// gets one log line with its method, session fingerprint, upstream, duration and outcome.
func TestDebugLogsOneLinePerRequest(t *testing.T) {
	var logs lockedBuffer
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	defer tg.close()
	cs := connect(t, tg.url, nil)
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"msg=request", "method=tools/call", "session=" + sessionFingerprint(cs.ID()), "upstream=a", "target=echo", "duration=", "outcome=ok"}
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if !strings.Contains(line, "method=tools/call") {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("the request's log line lacks %q: %s", w, line)
			}
		}
		return
	}
	t.Fatalf("no log line for the tools/call:\n%s", logs.String())
}

// TestStartLogsEachUpstreamReadyAndThenAll: one line per upstream when it is ready (its
// transport, counts and the time it took), then one line when all are.
func TestStartLogsEachUpstreamReadyAndThenAll(t *testing.T) {
	var logs lockedBuffer
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", "")+upstreamYAML("b", "beta", ""), &gateway.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	defer tg.close()
	waitUntil(t, "the line saying all upstreams are ready", func() bool { return strings.Contains(logs.String(), `msg="all upstreams ready" upstreams=2 took=`) })
	ready := 0
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if !strings.Contains(line, `msg="upstream ready"`) {
			continue
		}
		ready++
		for _, w := range []string{"transport=stdio", "tools=", "resources=", "prompts=", "took="} {
			if !strings.Contains(line, w) {
				t.Errorf("an upstream's ready line lacks %q: %s", w, line)
			}
		}
	}
	if ready != 2 {
		t.Errorf("%d upstream ready lines, want 2:\n%s", ready, logs.String())
	}
}

// TestUnknownResourceOfAnUpstreamIsNotFound: an upstream that answers a resources/read of a URI
// it lacks with -32602 and the URI in data (as 2026-07-28 writes "not found", and the go-sdk
// server does already) is translated for a 2025-11-25 client to -32002, what its protocol
// says; other errors pass as they are.
func TestUnknownResourceOfAnUpstreamIsNotFound(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"a+file:///nope.txt"}}`, h)
	if r.msg.Error == nil || r.msg.Error.Code != protocol.CodeResourceNotFound || !strings.Contains(string(r.msg.Error.Data), "a+file:///nope.txt") {
		t.Errorf("resources/read of a URI the upstream lacks: %s, want -32002 with the gateway's URI in data", r.body)
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":7}}}`, h)
	if r.msg.Error != nil && r.msg.Error.Code == protocol.CodeResourceNotFound {
		t.Errorf("a tool call's invalid params became -32002: %s", r.body)
	}
}

package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
)

// listenYAML is a gateway with the 2026-07-28 face on, in front of the upstream "many" (whose
// add_tool changes its tool list) and "rev" (whose progress tool sends progress), with two
// listen streams per caller and one request in flight per caller.
const listenLimits = "listen: 127.0.0.1:0\nmodern_protocol: true\nmax_listens_per_principal: 2\nmax_calls_per_principal: 1\nupstreams:"

func listenGateway(t *testing.T) *testGateway {
	t.Helper()
	tg := startGatewayHooked(t, listenLimits+upstreamYAML("many", "many", "")+upstreamYAML("rev", "reverse", ""), nil,
		func(gw *gateway.Gateway) { gw.SetListenKeepAlive(20 * time.Millisecond) })
	t.Cleanup(tg.close)
	return tg
}

// sseMessage is one message read from a listen stream.
type sseMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Notifications map[string]any             `json:"notifications"`
		Meta          map[string]json.RawMessage `json:"_meta"`
		URI           string                     `json:"uri"`
	} `json:"params"`
	Result *struct {
		ResultType string                     `json:"resultType"`
		Meta       map[string]json.RawMessage `json:"_meta"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// listenClient is one raw subscriptions/listen stream.
type listenClient struct {
	resp   *http.Response
	cancel context.CancelFunc
	// messages are the stream's messages in order; closed at the stream's end.
	messages chan sseMessage
	// keepAlives counts the keep-alive comments read.
	keepAlives atomic.Int64
}

// openListen sends subscriptions/listen with id (raw JSON) and params; the caller reads the
// response's status before the stream. The stream is closed at the end of owner (t, or the
// test a subtest of t is in, for a stream that outlives the subtest).
func openListen(t *testing.T, owner testing.TB, url, id, params string) *listenClient {
	t.Helper()
	return openListenAs(t, owner, url, id, params, "")
}

// openListenAs is openListen with an API key as the bearer token ("" for none).
func openListenAs(t *testing.T, owner testing.TB, url, id, params, key string) *listenClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	owner.Cleanup(cancel)
	body := strings.Replace(modernBody(1, "subscriptions/listen", params), `"id":1`, `"id":`+id, 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range modernHeaders("subscriptions/listen", "") {
		req.Header.Set(k, v)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lc := &listenClient{resp: resp, cancel: cancel, messages: make(chan sseMessage, 64)}
	owner.Cleanup(func() { _ = resp.Body.Close() })
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		close(lc.messages)
		return lc
	}
	// The reader ends at the stream's end, which the test's cleanup forces.
	go lc.read()
	return lc
}

func (lc *listenClient) read() {
	defer close(lc.messages)
	sc := bufio.NewScanner(lc.resp.Body)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte(": keep-alive")):
			lc.keepAlives.Add(1)
		case bytes.HasPrefix(line, []byte("data: ")):
			var m sseMessage
			if err := json.Unmarshal(line[len("data: "):], &m); err != nil {
				m.Method = "(not JSON-RPC) " + string(line) // fails whoever reads it
			}
			lc.messages <- m
		}
	}
}

// next returns the stream's next message; the test fails if none comes within waitBound or the
// stream ends.
func (lc *listenClient) next(t *testing.T, what string) sseMessage {
	t.Helper()
	select {
	case m, ok := <-lc.messages:
		if !ok {
			t.Fatalf("the listen stream ended; want %s", what)
		}
		return m
	case <-time.After(waitBound):
		t.Fatalf("no %s on the listen stream", what)
	}
	return sseMessage{}
}

// TestListenStream: a subscriptions/listen stream acknowledges the list changes asked for with
// the listen's id, of its JSON type, as subscriptionId; delivers a change of the tool list
// with it, and nothing of other requests (progress); keeps alive; is capped per caller
// without counting as a request in flight; frees its slot when the client closes it; and ends
// with the listen's completion result when the gateway closes.
func TestListenStream(t *testing.T) {
	tg := listenGateway(t)
	whole := t
	c := rawClient{t: t, url: tg.url}
	params := `{"notifications":{"toolsListChanged":true,"promptsListChanged":true,"resourceSubscriptions":["many+x:///y"]}}`
	ids := []string{`7`, `"sub-1"`}
	var streams []*listenClient
	for _, id := range ids {
		lc := openListen(t, t, tg.url, id, params)
		if lc.resp.StatusCode != http.StatusOK || lc.resp.Header.Get("X-Accel-Buffering") != "no" {
			t.Fatalf("listen %s: HTTP %d, %v; want 200, an SSE stream with X-Accel-Buffering: no", id, lc.resp.StatusCode, lc.resp.Header)
		}
		ack := lc.next(t, "acknowledgement")
		if ack.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("listen %s: first message %+v, want the acknowledgement", id, ack)
		}
		want := map[string]any{"toolsListChanged": true, "promptsListChanged": true}
		if len(ack.Params.Notifications) != 2 || ack.Params.Notifications["toolsListChanged"] != true || ack.Params.Notifications["promptsListChanged"] != true {
			t.Errorf("listen %s acknowledged %v, want %v (no resource subscriptions)", id, ack.Params.Notifications, want)
		}
		if got := string(ack.Params.Meta["io.modelcontextprotocol/subscriptionId"]); got != id {
			t.Errorf("listen %s: acknowledgement's subscriptionId %s, want %s", id, got, id)
		}
		streams = append(streams, lc)
	}

	t.Run("listens are not requests in flight", func(t *testing.T) {
		// A call with progress, read to its end: its progress is on its own response only.
		status, body := postAll(t, tg.url, modernBody(20, "tools/call", `{"name":"rev__progress","_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`),
			modernHeaders("tools/call", "rev__progress"))
		if status != http.StatusOK || !strings.Contains(body, "notifications/progress") || strings.Contains(body, "too_many_calls") {
			t.Fatalf("a call with progress beside two listens (max_calls_per_principal 1): HTTP %d %s", status, body)
		}
	})

	t.Run("a tool list change reaches each stream, and nothing else", func(t *testing.T) {
		r := c.do(http.MethodPost, modernBody(21, "tools/call", `{"name":"many__add_tool"}`), modernHeaders("tools/call", "many__add_tool"))
		if r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("add_tool: HTTP %d %s", r.status, r.body)
		}
		for i, lc := range streams {
			m := lc.next(t, "tools/list_changed")
			if m.Method != "notifications/tools/list_changed" {
				t.Errorf("listen %s: %+v, want notifications/tools/list_changed (the progress of the call before must not be here)", ids[i], m)
			}
			if got := string(m.Params.Meta["io.modelcontextprotocol/subscriptionId"]); got != ids[i] {
				t.Errorf("listen %s: list_changed's subscriptionId %s, want %s", ids[i], got, ids[i])
			}
		}
	})

	t.Run("keep-alive", func(t *testing.T) {
		waitUntil(t, "a keep-alive comment", func() bool { return streams[0].keepAlives.Load() > 0 })
	})

	t.Run("the cap refuses the next listen, and a closed stream frees its slot", func(t *testing.T) {
		over := openListen(t, t, tg.url, `9`, params)
		if over.resp.StatusCode != http.StatusTooManyRequests || over.resp.Header.Get("Retry-After") == "" {
			t.Errorf("a third listen: HTTP %d, Retry-After %q; want 429 with Retry-After", over.resp.StatusCode, over.resp.Header.Get("Retry-After"))
		}
		var refusal sseMessage
		if err := json.NewDecoder(over.resp.Body).Decode(&refusal); err != nil || refusal.Error == nil || refusal.Error.Code != -32007 || string(refusal.ID) != "9" {
			t.Errorf("a third listen's body: %+v (%v); want a -32007 error for id 9", refusal, err)
		}
		if n := tg.gw.ListenStreams(); n != 2 {
			t.Errorf("%d listen streams open, want 2", n)
		}
		streams[1].cancel()
		waitUntil(t, "the closed stream to be removed", func() bool { return tg.gw.ListenStreams() == 1 })
		again := openListen(t, whole, tg.url, `"sub-2"`, params)
		if again.resp.StatusCode != http.StatusOK || again.next(t, "acknowledgement").Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("a listen after one closed: HTTP %d, want 200 and an acknowledgement", again.resp.StatusCode)
		}
		streams[1] = again
		ids[1] = `"sub-2"`
	})

	t.Run("close ends each stream with the completion result", func(t *testing.T) {
		tg.gw.Close()
		for i, lc := range streams {
			var m sseMessage
			for m = lc.next(t, "completion result"); m.Method != ""; m = lc.next(t, "completion result") {
			}
			if string(m.ID) != ids[i] || m.Result == nil || m.Result.ResultType != "complete" || string(m.Result.Meta["io.modelcontextprotocol/subscriptionId"]) != ids[i] {
				t.Errorf("listen %s ended with %+v, want the completion result with its subscriptionId", ids[i], m)
			}
			if _, more := <-lc.messages; more {
				t.Errorf("listen %s: a message after the completion result", ids[i])
			}
		}
		if n := tg.gw.ListenStreams(); n != 0 {
			t.Errorf("%d listen streams left after Close", n)
		}
	})
}

// postAll posts a 2026-07-28 request and reads its whole response.
func postAll(t *testing.T, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// TestListenProfile: a listen on a profile's endpoint hears only of changes to that profile's
// lists: a tool added to an upstream outside it reaches a listen on /mcp, not one on the
// profile.
func TestListenProfile(t *testing.T) {
	tg := startGateway(t, listenLimits+upstreamYAML("many", "many", "")+upstreamYAML("rev", "reverse", "")+`
profiles:
  - {name: ops, include: [{upstream: rev}]}
`, nil)
	t.Cleanup(tg.close)
	params := `{"notifications":{"toolsListChanged":true}}`
	ops := openListen(t, t, strings.TrimSuffix(tg.url, "/mcp")+"/mcp/ops", `1`, params)
	all := openListen(t, t, tg.url, `2`, params)
	for _, lc := range []*listenClient{ops, all} {
		if m := lc.next(t, "acknowledgement"); m.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("first message %+v, want the acknowledgement", m)
		}
	}
	status, body := postAll(t, tg.url, modernBody(3, "tools/call", `{"name":"many__add_tool"}`), modernHeaders("tools/call", "many__add_tool"))
	if status != http.StatusOK || !strings.Contains(body, "added_") {
		t.Fatalf("add_tool: HTTP %d %s", status, body)
	}
	if m := all.next(t, "tools/list_changed"); m.Method != "notifications/tools/list_changed" {
		t.Errorf("the listen on /mcp got %+v, want notifications/tools/list_changed", m)
	}
	// The rebuild that told /mcp's listen decided for the profile's too; what it queued is
	// written before the completion result that Close sends.
	tg.gw.Close()
	if m := ops.next(t, "completion result"); m.Result == nil {
		t.Errorf("the listen on the profile got %+v before its end; want nothing (its lists did not change)", m)
	}
}

// aliceAndBobYAML is the auth and policy of a gateway that knows two callers, alice and bob,
// by their API keys, with one policy rule.
func aliceAndBobYAML(aliceKey, bobKey, rule string) string {
	return `
auth:
  api_keys:
    - {name: alice, hash: ` + auth.HashAPIKey(aliceKey) + `}
    - {name: bob, hash: ` + auth.HashAPIKey(bobKey) + `}
policy:
  rules:
    - ` + rule + "\n"
}

// TestListenPolicyView: a change the policy hides from a caller is no change of that caller's
// list: of two callers listening on /mcp, the one whose rule hides the added tools hears
// nothing, the other hears list_changed.
func TestListenPolicyView(t *testing.T) {
	const aliceKey, bobKey = "mfk_listen-alice", "mfk_listen-bob"
	tg := startGateway(t, listenLimits+upstreamYAML("many", "many", "")+
		aliceAndBobYAML(aliceKey, bobKey, `{name: no-added-for-bob, effect: hide, match: {principal: {api_keys: [bob]}, tools: ["added_*"]}}`), nil)
	t.Cleanup(tg.close)
	params := `{"notifications":{"toolsListChanged":true}}`
	alice := openListenAs(t, t, tg.url, `1`, params, aliceKey)
	bob := openListenAs(t, t, tg.url, `2`, params, bobKey)
	for _, lc := range []*listenClient{alice, bob} {
		if m := lc.next(t, "acknowledgement"); m.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("first message %+v, want the acknowledgement", m)
		}
	}
	status, body := postAll(t, tg.url, modernBody(3, "tools/call", `{"name":"many__add_tool"}`),
		map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "many__add_tool", "Authorization": "Bearer " + aliceKey})
	if status != http.StatusOK || !strings.Contains(body, "added_") {
		t.Fatalf("add_tool: HTTP %d %s", status, body)
	}
	if m := alice.next(t, "tools/list_changed"); m.Method != "notifications/tools/list_changed" {
		t.Errorf("alice's listen got %+v, want notifications/tools/list_changed", m)
	}
	// The rebuild that told alice decided for bob too; what it queued is written before the
	// completion result that Close sends.
	tg.gw.Close()
	if m := bob.next(t, "completion result"); m.Result == nil {
		t.Errorf("bob's listen got %+v before its end; want nothing (the added tool is hidden from him)", m)
	}
}

// TestListenNothingHonoured: a listen that asks only for what the gateway does not honour is
// acknowledged with nothing and answered at once.
func TestListenNothingHonoured(t *testing.T) {
	tg := listenGateway(t)
	lc := openListen(t, t, tg.url, `3`, `{"notifications":{"toolsListChanged":false,"resourceSubscriptions":["many+x:///y"]}}`)
	if ack := lc.next(t, "acknowledgement"); ack.Method != "notifications/subscriptions/acknowledged" || len(ack.Params.Notifications) != 0 {
		t.Errorf("first message %+v, want an empty acknowledgement", ack)
	}
	if m := lc.next(t, "completion result"); m.Result == nil || m.Result.ResultType != "complete" || string(m.Result.Meta["io.modelcontextprotocol/subscriptionId"]) != "3" {
		t.Errorf("then %+v, want the completion result", m)
	}
	if n := tg.gw.ListenStreams(); n != 0 {
		t.Errorf("%d listen streams open, want none", n)
	}
}

// TestListenSDKClient: the Go SDK's client in its default mode (2026-07-28) opens a listen for
// list changes and hears of a tool added upstream.
func TestListenSDKClient(t *testing.T) {
	tg := listenGateway(t)
	changed := make(chan struct{}, 1)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	ctx := ctxT(t)
	waitUntil(t, "the client's listen stream", func() bool { return tg.gw.ListenStreams() == 1 })
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "many__add_tool"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the client's ToolListChangedHandler never ran")
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tool := range tools.Tools {
		found = found || strings.HasPrefix(tool.Name, "many__added_")
	}
	if !found {
		t.Error("tools/list lacks the added tool")
	}
}

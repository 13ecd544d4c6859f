package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
)

// countingUpstream is a 2025-11-25 server over Streamable HTTP whose tool echo answers
// "ran:TEXT" and counts its runs.
func countingUpstream(t *testing.T) (url string, runs *atomic.Int64) {
	t.Helper()
	runs = new(atomic.Int64)
	server := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "echoes"}, func(_ context.Context, _ *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran:" + in.Text}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	return srv.URL, runs
}

// approvalPolicy holds a's echo for a person's approval.
const approvalPolicy = `policy:
  approval: {timeout: 1m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`

// The API keys of approvalGateway.
const approvalAliceKey, approvalBobKey = "mfk_approval-alice", "mfk_approval-bob"

// testClock is a clock tests move.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }
func bearerOf(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key}
}
func withHeaders(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// approvalGateway starts a 2026-07-28 gateway with keys for alice and bob, in front of a
// counting upstream a whose echo needs approval (no operator: the client's user is asked).
func approvalGateway(t *testing.T) (*testGateway, *atomic.Int64, *testClock) {
	t.Helper()
	url, runs := countingUpstream(t)
	clock := &testClock{}
	tg := startGateway(t, `listen: 127.0.0.1:0
modern_protocol: true
auth:
  api_keys:
    - {name: alice, hash: `+auth.HashAPIKey(approvalAliceKey)+`}
    - {name: bob, hash: `+auth.HashAPIKey(approvalBobKey)+`}
`+approvalPolicy+`upstreams:
  - name: a
    url: `+url+"\n", &gateway.Options{Now: clock.now})
	t.Cleanup(tg.close)
	return tg, runs, clock
}

// echoCall is the body of a 2026-07-28 tools/call of a__echo with text, declaring
// elicitation, with more params (",..." or "").
func echoCall(id int, text, more string) string {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":"a__echo","arguments":{"text":%q}%s}}`, id, meta, text, more)
}

// answered is the params a retry adds: the approval's answer (action, approve) or none
// (action ""), and the state.
func answered(action string, approve bool, state string) string {
	quoted, _ := json.Marshal(state)
	responses := `{}`
	if action != "" {
		responses = fmt.Sprintf(`{"approval":{"action":%q,"content":{"approve":%t}}}`, action, approve)
	}
	return `,"inputResponses":` + responses + `,"requestState":` + string(quoted)
}

// askedApproval checks that r is the approval's input_required result for a__echo and
// returns its state.
func askedApproval(t *testing.T, r rawReply) string {
	t.Helper()
	return askedApprovalOf(t, r, "server: a", "tool: a__echo (echo there)", `"text":`, "echo-needs-approval")
}

// askedApprovalOf checks that r is the approval's input_required result, whose question
// says wants, and returns its state.
func askedApprovalOf(t *testing.T, r rawReply, wants ...string) string {
	t.Helper()
	var res struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
			Params struct {
				Message         string         `json:"message"`
				RequestedSchema map[string]any `json:"requestedSchema"`
			} `json:"params"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType != "input_required" {
		t.Fatalf("call: %d %s; want input_required", r.status, r.body)
	}
	ask, ok := res.InputRequests["approval"]
	if len(res.InputRequests) != 1 || !ok || ask.Method != "elicitation/create" || res.RequestState == "" {
		t.Fatalf("call: %s; want one elicitation/create and a requestState", r.body)
	}
	for _, want := range append([]string{"Approve this call?"}, wants...) {
		if !strings.Contains(ask.Params.Message, want) {
			t.Errorf("the question lacks %q:\n%s", want, ask.Params.Message)
		}
	}
	if props, _ := ask.Params.RequestedSchema["properties"].(map[string]any); props["approve"] == nil {
		t.Errorf("requestedSchema %v; want the approve checkbox", ask.Params.RequestedSchema)
	}
	return res.RequestState
}

// ranText is the text of a completed tools/call result in r, or fails t.
func ranText(t *testing.T, r rawReply) string {
	t.Helper()
	var res struct {
		ResultType string `json:"resultType"`
		IsError    bool   `json:"isError"`
		Content    []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType != "complete" || res.IsError || len(res.Content) != 1 {
		t.Fatalf("retry: %d %s; want the tool's result", r.status, r.body)
	}
	return res.Content[0].Text
}

// refusedState checks that r is the -32602 of a requestState refused.
func refusedState(t *testing.T, r rawReply) {
	t.Helper()
	if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32602 || !strings.Contains(r.msg.Error.Message, "requestState") {
		t.Fatalf("retry: %d %s; want 400 -32602 refusing the requestState", r.status, r.body)
	}
}

// TestApprovalByInputRequired: a 2026-07-28 call that needs its user's approval is answered
// input_required with the gateway's question; the retry with an accept runs it once, a
// decline refuses it, a retry without the answer is asked again, and a state replayed,
// tampered with, expired, sent by another principal or with other arguments is refused
// with -32602 and runs nothing.
func TestApprovalByInputRequired(t *testing.T) {
	tg, runs, clock := approvalGateway(t)
	c := rawClient{t: t, url: tg.url}
	h := withHeaders(modernHeaders("tools/call", "a__echo"), bearerOf(approvalAliceKey))
	bob := withHeaders(modernHeaders("tools/call", "a__echo"), bearerOf(approvalBobKey))
	ask := func(text string) string {
		t.Helper()
		return askedApproval(t, c.do(http.MethodPost, echoCall(1, text, ""), h))
	}

	t.Run("accept runs once; a replay is refused", func(t *testing.T) {
		before := runs.Load()
		state := ask("x")
		if runs.Load() != before {
			t.Fatalf("the call ran before it was approved")
		}
		if got := ranText(t, c.do(http.MethodPost, echoCall(2, "x", answered("accept", true, state)), h)); got != "ran:x" {
			t.Errorf("approved call = %q", got)
		}
		refusedState(t, c.do(http.MethodPost, echoCall(3, "x", answered("accept", true, state)), h))
		if n := runs.Load() - before; n != 1 {
			t.Errorf("the call ran %d times, want once", n)
		}
	})
	t.Run("decline refuses", func(t *testing.T) {
		for _, tt := range []struct {
			action  string
			approve bool
		}{{"decline", false}, {"cancel", false}, {"accept", false}} {
			before := runs.Load()
			state := ask("y")
			r := c.do(http.MethodPost, echoCall(2, "y", answered(tt.action, tt.approve, state)), h)
			var res struct {
				IsError bool           `json:"isError"`
				Meta    map[string]any `json:"_meta"`
			}
			if r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
				t.Errorf("%s: %d %s; want the approval_declined refusal", tt.action, r.status, r.body)
			}
			if runs.Load() != before {
				t.Errorf("%s: the call ran", tt.action)
			}
		}
	})
	t.Run("a retry without the answer is asked again", func(t *testing.T) {
		before := runs.Load()
		state := ask("z")
		again := askedApproval(t, c.do(http.MethodPost, echoCall(2, "z", answered("", false, state)), h))
		if again == state {
			t.Errorf("asked again with the same state")
		}
		refusedState(t, c.do(http.MethodPost, echoCall(3, "z", answered("accept", true, state)), h))
		if got := ranText(t, c.do(http.MethodPost, echoCall(4, "z", answered("accept", true, again)), h)); got != "ran:z" || runs.Load()-before != 1 {
			t.Errorf("approved with the new state: %q, ran %d times; want once", got, runs.Load()-before)
		}
	})
	t.Run("refused states", func(t *testing.T) {
		before := runs.Load()
		state := ask("w")
		for _, tt := range []struct {
			name, text, state string
			headers           map[string]string
		}{
			{"tampered", "w", state + "x", h},
			{"other arguments", "v", state, h},
			{"other principal", "w", state, bob},
		} {
			t.Run(tt.name, func(t *testing.T) {
				refusedState(t, c.do(http.MethodPost, echoCall(2, tt.text, answered("accept", true, tt.state)), tt.headers))
			})
		}
		clock.advance(2 * time.Minute) // past approval.timeout
		t.Run("expired", func(t *testing.T) {
			refusedState(t, c.do(http.MethodPost, echoCall(2, "w", answered("accept", true, state)), h))
		})
		if runs.Load() != before {
			t.Errorf("a refused retry ran the call")
		}
	})
}

// TestApprovalByInputRequiredSDKClient: the Go SDK client pinned to 2026-07-28 answers the
// gateway's approval question with its elicitation handler and retries by itself: an accept
// runs the call once, a decline refuses it.
func TestApprovalByInputRequiredSDKClient(t *testing.T) {
	tg, runs, _ := approvalGateway(t)
	for _, tt := range []struct {
		action   string
		approve  bool
		wantRuns int64
	}{{"accept", true, 1}, {"decline", false, 0}} {
		t.Run(tt.action, func(t *testing.T) {
			var asked atomic.Int64
			var last atomic.Value
			client := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, approver(tt.action, tt.approve, &asked, &last))
			cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: tg.url, HTTPClient: &http.Client{Transport: bearer{approvalAliceKey, http.DefaultTransport}}},
				&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			before := runs.Load()
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": tt.action}})
			if err != nil {
				t.Fatal(err)
			}
			switch tt.action {
			case "accept":
				if res.IsError || resultText(res) != "ran:accept" {
					t.Errorf("approved call: %v %q", res.IsError, resultText(res))
				}
			default:
				if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
					t.Errorf("declined call: %v %v %q", res.IsError, res.Meta, resultText(res))
				}
			}
			if msg, _ := last.Load().(string); asked.Load() != 1 || !strings.Contains(msg, "Approve this call?") {
				t.Errorf("asked %d times, last %q; want the approval question once", asked.Load(), msg)
			}
			if n := runs.Load() - before; n != tt.wantRuns {
				t.Errorf("the call ran %d times, want %d", n, tt.wantRuns)
			}
		})
	}
}

// postRaw posts body to url with headers and returns the status and body; for goroutines,
// which may not fail a test.
func postRaw(url, body string, headers map[string]string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), err
}

// TestApprovalByInputRequiredAcrossReplicas: the approval asked by one replica is answered
// by a retry on the other, which runs the call; the same answer sent to both replicas at once
// runs it once, whichever spends the state's nonce first.
func TestApprovalByInputRequiredAcrossReplicas(t *testing.T) {
	url, runs := countingUpstream(t)
	a, b := twoReplicasWith(t, "modern_protocol: true\n"+approvalPolicy, "  - name: a\n    url: "+url+"\n")
	h := modernHeaders("tools/call", "a__echo")
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}

	state := askedApproval(t, onA.do(http.MethodPost, echoCall(1, "x", ""), h))
	if got := ranText(t, onB.do(http.MethodPost, echoCall(2, "x", answered("accept", true, state)), h)); got != "ran:x" {
		t.Errorf("approved on B = %q", got)
	}
	refusedState(t, onA.do(http.MethodPost, echoCall(3, "x", answered("accept", true, state)), h))
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times, want once", n)
	}

	state = askedApproval(t, onB.do(http.MethodPost, echoCall(4, "y", ""), h))
	var ran, refused atomic.Int64
	var wg sync.WaitGroup
	for _, tg := range []*testGateway{a, b} {
		wg.Go(func() {
			status, body, err := postRaw(tg.url, echoCall(5, "y", answered("accept", true, state)), h)
			switch {
			case err != nil:
				t.Error(err)
			case status == http.StatusOK && strings.Contains(body, "ran:y"):
				ran.Add(1)
			case status == http.StatusBadRequest && strings.Contains(body, "-32602"):
				refused.Add(1)
			default:
				t.Errorf("retry: %d %s", status, body)
			}
		})
	}
	wg.Wait()
	if ran.Load() != 1 || refused.Load() != 1 || runs.Load() != 2 {
		t.Errorf("the same answer on both replicas at once: %d ran, %d refused, %d runs upstream; want one of each and 2 runs in all", ran.Load(), refused.Load(), runs.Load())
	}
}

// TestModernOperatorApprovalAcrossReplicas: a 2026-07-28 call held for an operator waits in
// its request on the replica that took it, with keep-alives on its response, and an
// operator's decision on the other replica reaches it: the call runs once.
func TestModernOperatorApprovalAcrossReplicas(t *testing.T) {
	url, runs := countingUpstream(t)
	a, b := twoReplicasWith(t, "modern_protocol: true\n"+adminYAML("")+approvalPolicy, "  - name: a\n    url: "+url+"\n")
	a.gw.SetApprovalKeepAlive(20 * time.Millisecond)
	adminA, adminB := startAdmin(t, a), startAdmin(t, b)

	// No elicitation declared: an operator decides.
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `,"name":"a__echo","arguments":{"text":"op"}}}`
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, a.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range modernHeaders("tools/call", "a__echo") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("held call's response: %d %s; want an SSE stream", resp.StatusCode, ct)
	}
	lines := bufio.NewScanner(resp.Body)
	keepAlive := false
	for !keepAlive && lines.Scan() {
		keepAlive = lines.Text() == ": keep-alive"
	}
	if !keepAlive {
		t.Fatalf("the held call's stream ended without a keep-alive: %v", lines.Err())
	}
	held := adminB.waitHeld(1)[0]
	if got := adminA.waitHeld(1)[0]; got.ID != held.ID || runs.Load() != 0 {
		t.Fatalf("held on A: %s, listed on B: %s, runs %d", got.ID, held.ID, runs.Load())
	}
	if code := adminB.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve on B: %d", code)
	}
	var result string
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			result = data
		}
	}
	if !strings.Contains(result, `"ran:op"`) || runs.Load() != 1 {
		t.Errorf("the held call's answer %s, runs %d; want its result, once", result, runs.Load())
	}
}

// TestApprovalByInputRequiredRemembered: with approval.remember, what a 2026-07-28 client's
// user approved is remembered for its principal, tool and arguments, as a session's is; an
// anonymous caller, who has no session to bind it to, is asked every time.
func TestApprovalByInputRequiredRemembered(t *testing.T) {
	url, runs := countingUpstream(t)
	rules := `policy:
  approval: {timeout: 1m, remember: 10m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`
	for _, tt := range []struct {
		name, auth, key string
		wantAsked       int64
	}{
		{"principal", "auth:\n  api_keys:\n    - {name: alice, hash: " + auth.HashAPIKey(approvalAliceKey) + "}\n", approvalAliceKey, 1},
		{"anonymous", "", "", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\n"+tt.auth+rules+"upstreams:\n  - name: a\n    url: "+url+"\n", nil)
			defer tg.close()
			var asked atomic.Int64
			var last atomic.Value
			transport := http.RoundTripper(http.DefaultTransport)
			if tt.key != "" {
				transport = bearer{tt.key, http.DefaultTransport}
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, approver("accept", true, &asked, &last))
			cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: tg.url, HTTPClient: &http.Client{Transport: transport}},
				&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			before := runs.Load()
			for range 2 {
				res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "same"}})
				if err != nil || res.IsError {
					t.Fatalf("call: %v %v", err, res)
				}
			}
			if asked.Load() != tt.wantAsked || runs.Load()-before != 2 {
				t.Errorf("asked %d times for two like calls, ran %d; want asked %d, ran 2", asked.Load(), runs.Load()-before, tt.wantAsked)
			}
		})
	}
}

// TestApprovedCallContinuesItsUpstreamsRounds: a call approved by its 2026-07-28 client's
// user whose 2026-07-28 upstream then asks the client for input is not asked to be approved
// again on the retries that continue it: the relayed state says it was approved, for the
// same caller, call and arguments.
func TestApprovedCallContinuesItsUpstreamsRounds(t *testing.T) {
	_, tg := modernUpstreamBehind(t, `modern_protocol: true
policy:
  approval: {timeout: 1m}
  rules:
    - {name: ask-needs-approval, effect: approve, match: {upstreams: [mod], tools: [ask]}}
`, nil)
	var approvals, names atomic.Int64
	cs := approvingClient(t, tg, &approvals, &names)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "mod__ask"})
	if err != nil {
		t.Fatal(err)
	}
	if textOf(t, res) != "hello N1" || approvals.Load() != 1 || names.Load() != 1 {
		t.Errorf("approved call asking for input = %q, approval asked %d times, name %d times; want hello N1, once each", textOf(t, res), approvals.Load(), names.Load())
	}

	// The same rounds by hand: the state that continues the approved call is spent by its
	// retry, and refused when replayed.
	call := toolCaller(t, tg, "mod__ask")
	state := askedApprovalOf(t, call(1, ""), "tool: mod__ask (ask there)")
	r := call(2, answered("accept", true, state))
	var relayed struct {
		ResultType    string                     `json:"resultType"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	if r.msg.Error != nil || json.Unmarshal(r.msg.Result, &relayed) != nil || relayed.ResultType != "input_required" || len(relayed.InputRequests) != 1 {
		t.Fatalf("approved retry: %d %s; want the upstream's input_required", r.status, r.body)
	}
	var key string
	for k := range relayed.InputRequests {
		key = k
	}
	quoted, _ := json.Marshal(relayed.RequestState)
	name := `,"inputResponses":{"` + key + `":{"action":"accept","content":{"name":"Ada"}}},"requestState":` + string(quoted)
	if got := ranText(t, call(3, name)); got != "hello Ada" {
		t.Errorf("continued call = %q", got)
	}
	refusedState(t, call(4, name))
}

// approvingClient connects a Go SDK client pinned to 2026-07-28 whose user approves every
// call the gateway asks about (counted in approvals) and answers every other elicitation
// with the name N1, N2, … (counted in names).
func approvingClient(t *testing.T, tg *testGateway, approvals, names *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if strings.Contains(req.Params.Message, "Approve this call?") {
				approvals.Add(1)
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": fmt.Sprintf("N%d", names.Add(1))}}, nil
		},
	})
	cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolCaller returns a function that posts a raw 2026-07-28 tools/call of tool, declaring
// elicitation, with id and more params (",..." or "").
func toolCaller(t *testing.T, tg *testGateway, tool string) func(id int, more string) rawReply {
	c := rawClient{t: t, url: tg.url}
	h := modernHeaders("tools/call", tool)
	return func(id int, more string) rawReply {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
		return c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":%q%s}}`, id, meta, tool, more), h)
	}
}

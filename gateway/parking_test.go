package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
)

// parkingGateway starts a gateway with the 2026-07-28 face on, in front of the "reverse" test
// upstream (a 2025-11-25 server over Streamable HTTP, which ties its requests to the call
// that caused them; its tools ask their client mid-call) with extra upstream keys; the hooks
// let a test fire parked calls' expiry by hand.
func parkingGateway(t *testing.T, extra string, opts *gateway.Options) (*testGateway, *parkTimers) {
	t.Helper()
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:\n  - name: r\n    url: "+reverse.URL+"\n"+extra, opts)
	t.Cleanup(tg.close)
	timers := &parkTimers{}
	tg.gw.SetParkTimer(timers.start)
	return tg, timers
}

// parkTimers are the expiry timers of parked calls, fired by the test.
type parkTimers struct {
	mu     sync.Mutex
	timers []*parkTimer
}

type parkTimer struct {
	mu            sync.Mutex
	fire          func()
	stopped, done bool
}

func (p *parkTimers) start(_ time.Duration, fire func()) interface{ Stop() bool } {
	p.mu.Lock()
	defer p.mu.Unlock()
	tm := &parkTimer{fire: fire}
	p.timers = append(p.timers, tm)
	return tm
}

func (tm *parkTimer) Stop() bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	was := !tm.stopped && !tm.done
	tm.stopped = true
	return was
}

// expireAll fires every timer neither stopped nor fired yet.
func (p *parkTimers) expireAll() {
	p.mu.Lock()
	timers := append([]*parkTimer(nil), p.timers...)
	p.mu.Unlock()
	for _, tm := range timers {
		tm.mu.Lock()
		due := !tm.stopped && !tm.done
		tm.done = true
		tm.mu.Unlock()
		if due {
			tm.fire()
		}
	}
}

// TestParkedCallSDKClient: a Go SDK client pinned to 2026-07-28 calls a 2025-11-25 upstream
// that samples, then elicits, in the middle of its call. Each request parks the call and
// reaches the client as input_required; the client's retries carry the answers to the
// upstream's waiting requests, and the client gets the tool's result. The rounds are in the
// call's audit record.
func TestParkedCallSDKClient(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg, _ := parkingGateway(t, "", &gateway.Options{Audit: trail})
	client := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "E"}}, nil
		},
	})
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if cs.ID() != "" {
		t.Fatalf("the client holds session %q; want a 2026-07-28 client without one", cs.ID())
	}
	for i := range 3 {
		text := fmt.Sprintf("q%d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": text}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got, want := textOf(t, res), "sampled=S/"+text+";elicited=E"; got != want {
			t.Fatalf("call %d = %q, want %q", i, got, want)
		}
	}
	if n := tg.gw.ParkedCalls(); n != 0 {
		t.Errorf("%d calls still parked after their clients' last retries", n)
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] == "tools/call" && rec["target"] == "ask" {
			raw, _ := json.Marshal(rec["inputs"])
			inputs = append(inputs, string(raw))
		}
	}
	want := `[{"asked":["sampling/createMessage"],"outcome":"answered","round":1},{"asked":["elicitation/create"],"outcome":"answered","round":2}]`
	if len(inputs) != 3 || inputs[0] != want {
		t.Errorf("audit inputs of the ask calls = %v; want 3 of %s", inputs, want)
	}
}

// parkedAsk calls r__ask as a raw 2026-07-28 client that declared sampling and elicitation,
// and returns the input_required result of its first round.
func parkedAsk(t *testing.T, c rawClient, headers map[string]string) (key, state string) {
	t.Helper()
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}}`
	h := modernHeaders("tools/call", "r__ask")
	for k, v := range headers {
		h[k] = v
	}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{`+meta+`,"name":"r__ask","arguments":{"text":"x"}}}`, h)
	var res struct {
		ResultType    string                     `json:"resultType"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType != "input_required" || len(res.InputRequests) != 1 {
		t.Fatalf("first call: %d %s; want input_required with one input request", r.status, r.body)
	}
	for k, v := range res.InputRequests {
		if !strings.Contains(string(v), `"method":"sampling/createMessage"`) {
			t.Fatalf("input request %s = %s; want the upstream's sampling", k, v)
		}
		key = k
	}
	return key, res.RequestState
}

// retryAsk sends the retry of r__ask with inputResponses and requestState.
func retryAsk(c rawClient, headers map[string]string, responses, state string, arguments string) rawReply {
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}}`
	h := modernHeaders("tools/call", "r__ask")
	for k, v := range headers {
		h[k] = v
	}
	quoted, _ := json.Marshal(state)
	return c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{`+meta+`,"name":"r__ask","arguments":`+arguments+`,"inputResponses":`+responses+`,"requestState":`+string(quoted)+`}}`, h)
}

// TestParkedCallRetries: what a parked call accepts of its retries, and what it refuses. A
// retry without the answer is asked again; a tampered state, a state replayed after its round
// was answered, a retry with other arguments or by another principal are refused and reach
// nothing; a call whose expiry passed is cancelled, and its retry told so.
func TestParkedCallRetries(t *testing.T) {
	keys := map[string]string{"Authorization": "Bearer " + parkAliceKey}
	other := map[string]string{"Authorization": "Bearer " + parkBobKey}
	tg, timers := parkingGatewayWithKeys(t)
	c := rawClient{t: t, url: tg.url}
	sampled := func(key string) string {
		return `{"` + key + `":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}}`
	}
	refused := func(t *testing.T, r rawReply, want string) {
		t.Helper()
		if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32602 || !strings.Contains(r.msg.Error.Message, want) {
			t.Fatalf("retry: %d %s; want 400 -32602 saying %q", r.status, r.body, want)
		}
	}

	t.Run("a retry without the answer is asked again", func(t *testing.T) {
		_, state := parkedAsk(t, c, keys)
		r := retryAsk(c, keys, `{}`, state, `{"text":"x"}`)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"resultType":"input_required"`) || !strings.Contains(string(r.body), "sampling/createMessage") {
			t.Fatalf("retry without answers: %d %s; want the sampling asked again", r.status, r.body)
		}
		timers.expireAll()
	})
	t.Run("tampered, replayed, other arguments, other principal", func(t *testing.T) {
		key, state := parkedAsk(t, c, keys)
		refused(t, retryAsk(c, keys, sampled(key), state+"x", `{"text":"x"}`), "requestState is invalid")
		refused(t, retryAsk(c, other, sampled(key), state, `{"text":"x"}`), "requestState is invalid")
		refused(t, retryAsk(c, keys, sampled(key), state, `{"text":"y"}`), "arguments differ")
		// None of those reached the call: the right retry continues it (to its next round).
		r := retryAsk(c, keys, sampled(key), state, `{"text":"x"}`)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "elicitation/create") {
			t.Fatalf("the right retry: %d %s; want the next round's elicitation", r.status, r.body)
		}
		refused(t, retryAsk(c, keys, sampled(key), state, `{"text":"x"}`), "not the latest")
		timers.expireAll()
	})
	t.Run("expired", func(t *testing.T) {
		key, state := parkedAsk(t, c, keys)
		if n := tg.gw.ParkedCalls(); n != 1 {
			t.Fatalf("%d calls parked; want 1", n)
		}
		timers.expireAll()
		if n := tg.gw.ParkedCalls(); n != 0 {
			t.Fatalf("%d calls parked after their expiry; want none", n)
		}
		refused(t, retryAsk(c, keys, sampled(key), state, `{"text":"x"}`), "no longer waiting")
	})
}

// TestParkingRefusedByConfig: with input_bridge: refuse, a 2025-11-25 upstream's request in
// the middle of a 2026-07-28 call fails the call with -32021 naming what was asked, as before
// parking existed.
func TestParkingRefusedByConfig(t *testing.T) {
	for _, tt := range []struct {
		name, extra, capabilities, why string
	}{
		{"input_bridge refuse", "    input_bridge: refuse\n", `{"sampling":{},"elicitation":{}}`, "input_bridge is refuse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg, _ := parkingGateway(t, tt.extra, nil)
			c := rawClient{t: t, url: tg.url}
			meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + tt.capabilities + `}`
			r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{`+meta+`,"name":"r__ask","arguments":{"text":"x"}}}`, modernHeaders("tools/call", "r__ask"))
			if r.msg.Error == nil || r.msg.Error.Code != -32021 || !strings.Contains(r.msg.Error.Message, "sampling/createMessage") || !strings.Contains(r.msg.Error.Message, tt.why) {
				t.Fatalf("call: %d %s; want -32021 naming sampling/createMessage and saying %q", r.status, r.body, tt.why)
			}
			if n := tg.gw.ParkedCalls(); n != 0 {
				t.Errorf("%d calls parked; want none", n)
			}
		})
	}
}

// The API keys of parkingGatewayWithKeys.
const parkAliceKey, parkBobKey = "mfk_park-alice", "mfk_park-bob"

// parkingGatewayWithKeys is parkingGateway with API keys for alice and bob.
func parkingGatewayWithKeys(t *testing.T) (*testGateway, *parkTimers) {
	t.Helper()
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	tg := startGateway(t, `listen: 127.0.0.1:0
modern_protocol: true
auth:
  api_keys:
    - {name: alice, hash: `+auth.HashAPIKey(parkAliceKey)+`}
    - {name: bob, hash: `+auth.HashAPIKey(parkBobKey)+`}
upstreams:
  - name: r
    url: `+reverse.URL+"\n", nil)
	t.Cleanup(tg.close)
	timers := &parkTimers{}
	tg.gw.SetParkTimer(timers.start)
	return tg, timers
}

// TestParkedCallRetryOnAnotherReplica: a parked call waits on the replica that took it; its
// client's retries may reach the other replica, which passes them to that one through the bus:
// the call goes on round after round to its result, a replayed state is refused there too, and
// once the replica holding a call has stopped, a retry for it is refused with an error that
// says the call may have run in part.
func TestParkedCallRetryOnAnotherReplica(t *testing.T) {
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	a, b := twoReplicasWith(t, "modern_protocol: true\n", "  - name: r\n    url: "+reverse.URL+"\n")
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}

	key, state := parkedAsk(t, onA, nil)
	sampled := `{"` + key + `":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}}`
	r := retryAsk(onB, nil, sampled, state, `{"text":"x"}`)
	var round2 struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &round2) != nil || len(round2.InputRequests) != 1 {
		t.Fatalf("retry on B: %d %s; want the next round's elicitation, from A", r.status, r.body)
	}
	if r := retryAsk(onB, nil, sampled, state, `{"text":"x"}`); r.msg.Error == nil || !strings.Contains(r.msg.Error.Message, "not the latest") {
		t.Fatalf("the first state again, on B: %d %s; want it refused as not the latest", r.status, r.body)
	}
	var key2 string
	for k := range round2.InputRequests {
		key2 = k
	}
	r = retryAsk(onB, nil, `{"`+key2+`":{"action":"accept","content":{"answer":"E"}}}`, round2.RequestState, `{"text":"x"}`)
	if r.status != http.StatusOK || r.msg.Error != nil || !strings.Contains(string(r.msg.Result), "sampled=S;elicited=E") {
		t.Fatalf("second retry on B: %d %s; want the tool's result", r.status, r.body)
	}

	// A call parked on A, whose replica then stops.
	key, state = parkedAsk(t, onA, nil)
	a.close()
	r = retryAsk(onB, nil, `{"`+key+`":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}}`, state, `{"text":"x"}`)
	if r.msg.Error == nil || !strings.Contains(r.msg.Error.Message, "another replica") || !strings.Contains(r.msg.Error.Message, "may have run in part") {
		t.Fatalf("retry on B once A stopped: %d %s; want an error saying the call may have run in part", r.status, r.body)
	}
}

// TestParkedCallsAcrossReplicasSDKClient: a Go SDK client pinned to 2026-07-28 behind a
// balancer without affinity: each call parks on the replica that took it, and its retries,
// landing on either replica, carry it to its result.
func TestParkedCallsAcrossReplicasSDKClient(t *testing.T) {
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	a, b := twoReplicasWith(t, "modern_protocol: true\n", "  - name: r\n    url: "+reverse.URL+"\n")
	rr := newRoundRobin(t, a.url, b.url)
	client := mcp.NewClient(&mcp.Implementation{Name: "rr-modern", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "E"}}, nil
		},
	})
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: &http.Client{Transport: rr}}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	for i := range 4 {
		text := fmt.Sprintf("q%d", i)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": text}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got, want := textOf(t, res), "sampled=S/"+text+";elicited=E"; got != want {
			t.Fatalf("call %d = %q, want %q", i, got, want)
		}
	}
	if rr.sent[0].Load() == 0 || rr.sent[1].Load() == 0 {
		t.Errorf("requests per replica %d and %d: the balancer did not spread them", rr.sent[0].Load(), rr.sent[1].Load())
	}
}

// TestParkedCallProgressFollowsTheRetry: progress reported after a round of input reaches the
// retry that follows the call, under the retry's own progressToken, whichever replica the
// retry reached (from the other one, through the bus); a retry that gave none gets none.
func TestParkedCallProgressFollowsTheRetry(t *testing.T) {
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	a, b := twoReplicasWith(t, "modern_protocol: true\n", "  - name: r\n    url: "+reverse.URL+"\n")
	// call returns the whole response, JSON or an SSE stream read to its end, as text.
	call := func(url string, id int, progress, extra string) string {
		meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}` + progress + `}`
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s,"name":"r__sample_then_progress","arguments":{"text":"x"}%s}}`, id, meta, extra)
		req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range modernHeaders("tools/call", "r__sample_then_progress") {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		all, _ := io.ReadAll(resp.Body)
		return string(all)
	}
	for _, tt := range []struct {
		name, retryOn, retryProgress, want string
	}{
		{"the retry's own token", a.url, `,"progressToken":"retry-token"`, `"progressToken":"retry-token"`},
		{"no token on the retry", a.url, ``, ``},
		{"the retry's own token, on another replica", b.url, `,"progressToken":"retry-token"`, `"progressToken":"retry-token"`},
		{"no token on the retry, on another replica", b.url, ``, ``},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first := call(a.url, 1, `,"progressToken":"first-token"`, "")
			var res struct {
				Result struct {
					InputRequests map[string]json.RawMessage `json:"inputRequests"`
					RequestState  string                     `json:"requestState"`
				} `json:"result"`
			}
			if json.Unmarshal([]byte(first), &res) != nil || len(res.Result.InputRequests) != 1 {
				t.Fatalf("first call: %s", first)
			}
			var key string
			for k := range res.Result.InputRequests {
				key = k
			}
			state, _ := json.Marshal(res.Result.RequestState)
			body := call(tt.retryOn, 2, tt.retryProgress, `,"inputResponses":{"`+key+`":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}},"requestState":`+string(state))
			if !strings.Contains(body, "sampled=S") {
				t.Fatalf("retry: %s", body)
			}
			switch {
			case strings.Contains(body, "first-token"):
				t.Errorf("progress after the round went under the first request's token: %s", body)
			case tt.want != "" && !strings.Contains(body, tt.want):
				t.Errorf("retry's response %s; want progress under %s", body, tt.want)
			case tt.want == "" && strings.Contains(body, "notifications/progress"):
				t.Errorf("retry without a token got progress: %s", body)
			}
		})
	}
}

// TestParkedCallAsksOnlyWhatWasDeclared: the upstream's request for what the 2026-07-28
// request did not declare is refused to the upstream, as a client without the capability
// would; the call goes on, and the client is asked only what it declared (conformance
// input-required-result-capability-check), or gets the upstream's own answer to the refusal.
func TestParkedCallAsksOnlyWhatWasDeclared(t *testing.T) {
	tg, timers := parkingGateway(t, "", nil)
	t.Cleanup(timers.expireAll)
	c := rawClient{t: t, url: tg.url}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	// r__ask samples first: refused, the tool fails with the refusal, and nothing parks.
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{`+meta+`,"name":"r__ask","arguments":{"text":"x"}}}`, modernHeaders("tools/call", "r__ask"))
	if r.status != http.StatusOK || strings.Contains(string(r.body), "input_required") || !strings.Contains(string(r.body), "did not declare") {
		t.Fatalf("call: %d %s; want the tool's failure saying the client did not declare sampling, and no input request", r.status, r.body)
	}
	if n := tg.gw.ParkedCalls(); n != 0 {
		t.Errorf("%d calls parked; want none", n)
	}
}

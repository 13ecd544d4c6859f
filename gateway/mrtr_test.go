package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

const (
	mrtrAliceKey = "mfk_alice-key-for-mrtr-tests"
	mrtrBobKey   = "mfk_bob-key-for-mrtr-tests"
)

// mrtrGateway is a gateway with the 2026-07-28 face on, two API keys (alice and bob), in
// front of a 2026-07-28 upstream "mod" (testupstream.Modern, stateless over HTTP). Its clock
// runs skew ahead of the real one.
func mrtrGateway(t *testing.T) (tg *testGateway, m *testupstream.Modern, skew *atomic.Int64) {
	t.Helper()
	m = testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	skew = &atomic.Int64{}
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	yaml := "listen: 127.0.0.1:0\nmodern_protocol: true\nauth:\n  api_keys:\n" +
		"    - {name: alice, hash: " + auth.HashAPIKey(mrtrAliceKey) + "}\n" +
		"    - {name: bob, hash: " + auth.HashAPIKey(mrtrBobKey) + "}\n" +
		"upstreams:\n  - name: mod\n    url: " + srv.URL + "\n    protocol: 2026-07-28\n"
	tg = startGateway(t, yaml, &gateway.Options{Now: now})
	t.Cleanup(tg.close)
	return tg, m, skew
}

// TestMRTRSDKClient: a Go SDK client in its default mode (2026-07-28) completes calls whose
// 2026-07-28 upstream asks it for input through the gateway: one elicitation, two rounds of
// elicitation, sampling, roots, and a requestState-only answer.
func TestMRTRSDKClient(t *testing.T) {
	tg, m, _ := mrtrGateway(t)
	ctx := ctxT(t)
	var asked atomic.Int64
	client := mcp.NewClient(&mcp.Implementation{Name: "mrtr", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			name := "Ada"
			if strings.Contains(req.Params.Message, "last") {
				name = "Lovelace"
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "hi there"}}, nil
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url,
		HTTPClient: &http.Client{Transport: bearer{mrtrAliceKey, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %q; want 2026-07-28", v)
	}

	tests := []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"one elicitation", "mod__ask", nil, "hello Ada"},
		{"two rounds", "mod__ask_twice", nil, "hello Ada Lovelace"},
		{"sampling", "mod__ask_for", map[string]any{"what": "sampling"}, "hi there"},
		{"roots", "mod__ask_for", map[string]any{"what": "roots"}, "file:///work"},
		{"requestState only", "mod__ask_for", map[string]any{"what": "none"}, "retried"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
			if err != nil {
				t.Fatalf("call %s: %v", tt.tool, err)
			}
			if got := textOf(t, res); got != tt.want {
				t.Errorf("%s = %q; want %q", tt.tool, got, tt.want)
			}
		})
	}
	if asked.Load() != 3 {
		t.Errorf("the client was asked %d times; want 3", asked.Load())
	}
	// The upstream got its own states back, never the gateway's.
	for _, s := range m.RequestStates() {
		if s != "" && s != "asked" && s != "first" && s != "second:Ada" && s != "pending" {
			t.Errorf("the upstream got requestState %q, which it did not issue", s)
		}
	}
}

// mrtrCall posts a raw 2026-07-28 tools/call of tool as key's holder, declaring caps, with
// extra members (inputResponses, requestState) in its params.
func mrtrCall(t *testing.T, tg *testGateway, key string, id int, tool, args, caps, extra string) rawReply {
	t.Helper()
	params := `{"name":"` + tool + `","arguments":` + args + `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + caps + `}` + extra + `}`
	h := modernHeaders("tools/call", tool)
	h["Authorization"] = "Bearer " + key
	return rawClient{t: t, url: tg.url}.do(http.MethodPost, modernBody(id, "tools/call", params), h)
}

// inputRequired reads an input_required result.
type inputRequired struct {
	ResultType    string                     `json:"resultType"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	RequestState  *string                    `json:"requestState"`
	TTL           *int64                     `json:"ttlMs"`
	CacheScope    *string                    `json:"cacheScope"`
}

func readInputRequired(t *testing.T, r rawReply) inputRequired {
	t.Helper()
	var ir inputRequired
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &ir) != nil || ir.ResultType != "input_required" {
		t.Fatalf("answer %d %s; want an input_required result", r.status, r.body)
	}
	if ir.TTL != nil || ir.CacheScope != nil {
		t.Errorf("the input_required result carries cache hints: %s", r.msg.Result)
	}
	return ir
}

// wantInvalidState checks that r is 400 -32602 with a JSON-RPC body saying the requestState
// is not usable.
func wantInvalidState(t *testing.T, r rawReply, id string) {
	t.Helper()
	if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32602 ||
		!strings.Contains(r.msg.Error.Message, "requestState is invalid or expired") || string(r.msg.ID) != id || r.msg.Result != nil {
		t.Errorf("answer %d %s; want 400 with error -32602 (requestState is invalid or expired), id %s", r.status, r.body, id)
	}
}

const (
	formCaps    = `{"elicitation":{"form":{}}}`
	nameAnswers = `,"inputResponses":{"name":{"action":"accept","content":{"name":"Ada"}}}`
)

// TestMRTRSealedRequestState: the requestState a 2026-07-28 client gets is the gateway's,
// not the upstream's, and opens only unchanged, for the principal it was issued to, for the
// same tool, before it expires; what opens reaches the upstream as the upstream's own state.
func TestMRTRSealedRequestState(t *testing.T) {
	tg, m, skew := mrtrGateway(t)
	first := readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 1, "mod__ask", `{}`, formCaps, ""))
	if first.RequestState == nil || *first.RequestState == "asked" || strings.Contains(*first.RequestState, "asked") {
		t.Fatalf("requestState %v; want one sealed by the gateway, not the upstream's \"asked\"", first.RequestState)
	}
	if _, ok := first.InputRequests["name"]; !ok || len(first.InputRequests) != 1 {
		t.Errorf("inputRequests %v; want the upstream's one, \"name\"", first.InputRequests)
	}
	again := readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 2, "mod__ask", `{}`, formCaps, ""))
	if *again.RequestState == *first.RequestState {
		t.Errorf("two calls got the same sealed requestState %q", *again.RequestState)
	}
	state := *first.RequestState
	withState := func(s string) string { return nameAnswers + `,"requestState":"` + s + `"` }

	t.Run("the retry completes", func(t *testing.T) {
		r := mrtrCall(t, tg, mrtrAliceKey, 3, "mod__ask", `{}`, formCaps, withState(state))
		var res struct {
			ResultType string
			Content    []struct{ Text string }
		}
		if r.status != http.StatusOK || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType != "complete" || len(res.Content) != 1 || res.Content[0].Text != "hello Ada" {
			t.Fatalf("retry: %d %s; want a complete result \"hello Ada\"", r.status, r.body)
		}
		states := m.RequestStates()
		if got := states[len(states)-1]; got != "asked" {
			t.Errorf("the upstream got requestState %q; want its own, \"asked\"", got)
		}
	})

	tampered := []byte(state)
	tampered[len(tampered)/2] ^= 1
	if tampered[len(tampered)/2] == '.' || tampered[len(tampered)/2] == '/' {
		tampered[len(tampered)/2] = 'A'
	}
	before := len(m.RequestStates())
	tests := []struct {
		name, key, tool, state string
	}{
		{"tampered", mrtrAliceKey, "mod__ask", string(tampered)},
		{"tampered as the suite does", mrtrAliceKey, "mod__ask", state + "-TAMPERED"},
		{"not the gateway's", mrtrAliceKey, "mod__ask", "asked"},
		{"another principal's", mrtrBobKey, "mod__ask", state},
		{"another tool's", mrtrAliceKey, "mod__ask_twice", state},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantInvalidState(t, mrtrCall(t, tg, tt.key, 10+i, tt.tool, `{}`, formCaps, withState(tt.state)), jsonInt(10+i))
		})
	}
	t.Run("expired", func(t *testing.T) {
		fresh := readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 20, "mod__ask", `{}`, formCaps, ""))
		skew.Add(int64(11 * time.Minute))
		defer skew.Store(0)
		wantInvalidState(t, mrtrCall(t, tg, mrtrAliceKey, 21, "mod__ask", `{}`, formCaps, withState(*fresh.RequestState)), "21")
		before++ // the fresh call reached the upstream
	})
	if n := len(m.RequestStates()); n != before {
		t.Errorf("refused retries reached the upstream: %d calls, want %d", n, before)
	}
}

func jsonInt(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestMRTRCapabilities: the upstream is told the relayable part of what the client declared
// on this request, and an input request for anything the client did not declare fails the
// call with -32021 naming it, and is not forwarded. A requestState-only answer and one
// without requestState are wrapped too.
func TestMRTRCapabilities(t *testing.T) {
	tg, m, _ := mrtrGateway(t)

	t.Run("relayed capabilities", func(t *testing.T) {
		caps := `{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{},"context":{},"other":{}},"roots":{},"experimental":{"x":{}},"extensions":{"io.example/ext":{}}}`
		readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 1, "mod__ask", `{}`, caps, ""))
		seen := m.Seen()
		var meta struct {
			Caps json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
		}
		if err := json.Unmarshal(seen[len(seen)-1].Meta, &meta); err != nil {
			t.Fatal(err)
		}
		var got, want any
		_ = json.Unmarshal(meta.Caps, &got)
		_ = json.Unmarshal([]byte(`{"elicitation":{"form":{},"url":{}},"sampling":{"tools":{},"context":{}},"roots":{}}`), &want)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("capabilities the upstream was told (-want +got):\n%s", diff)
		}
	})

	tests := []struct {
		name, args, caps, want string
	}{
		{"no elicitation declared", `{}`, `{}`, `{"elicitation":{"form":{}}}`},
		{"form only, URL asked", `{"what":"url"}`, formCaps, `{"elicitation":{"url":{}}}`},
		{"sampling without tools", `{"what":"sampling_tools"}`, `{"sampling":{}}`, `{"sampling":{"tools":{}}}`},
		{"no roots", `{"what":"roots"}`, `{"sampling":{}}`, `{"roots":{}}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := "mod__ask_for"
			if tt.args == `{}` {
				tool = "mod__ask"
			}
			r := mrtrCall(t, tg, mrtrAliceKey, 10+i, tool, tt.args, tt.caps, "")
			if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32021 || r.msg.Result != nil {
				t.Fatalf("answer %d %s; want 400 -32021", r.status, r.body)
			}
			var data struct {
				Required json.RawMessage `json:"requiredCapabilities"`
			}
			_ = json.Unmarshal(r.msg.Error.Data, &data)
			if string(data.Required) != tt.want {
				t.Errorf("requiredCapabilities %s; want %s", data.Required, tt.want)
			}
			if strings.Contains(string(r.body), "inputRequests") {
				t.Errorf("the answer relays the input request: %s", r.body)
			}
		})
	}

	t.Run("requestState only", func(t *testing.T) {
		ir := readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 20, "mod__ask_for", `{"what":"none"}`, `{}`, ""))
		if len(ir.InputRequests) != 0 || ir.RequestState == nil || *ir.RequestState == "pending" {
			t.Fatalf("result %+v; want a sealed requestState and no input requests", ir)
		}
		r := mrtrCall(t, tg, mrtrAliceKey, 21, "mod__ask_for", `{"what":"none"}`, `{}`, `,"requestState":"`+*ir.RequestState+`"`)
		if r.status != http.StatusOK || !strings.Contains(string(r.msg.Result), "retried") {
			t.Errorf("retry: %d %s; want the upstream's answer \"retried\"", r.status, r.body)
		}
	})

	t.Run("no upstream state", func(t *testing.T) {
		urlCaps := `{"elicitation":{"url":{}}}`
		ir := readInputRequired(t, mrtrCall(t, tg, mrtrAliceKey, 30, "mod__ask_for", `{"what":"url","state":false}`, urlCaps, ""))
		if ir.RequestState == nil {
			t.Fatalf("result %+v; want a requestState of the gateway's", ir)
		}
		r := mrtrCall(t, tg, mrtrAliceKey, 31, "mod__ask_for", `{"what":"url","state":false}`, urlCaps,
			`,"inputResponses":{"q":{"action":"accept"}},"requestState":"`+*ir.RequestState+`"`)
		if r.status != http.StatusOK || !strings.Contains(string(r.msg.Result), "accept") {
			t.Fatalf("retry: %d %s; want the upstream's answer \"accept\"", r.status, r.body)
		}
		states := m.RequestStates()
		if got := states[len(states)-1]; got != "" {
			t.Errorf("the upstream got requestState %q; want none, as it sent none", got)
		}
	})
}

// TestMRTRRefusedToSessions: a client of a 2025-11-25 session that sends a requestState is
// refused with -32602; the upstream never sees it.
func TestMRTRRefusedToSessions(t *testing.T) {
	tg, m, _ := mrtrGateway(t)
	c := rawClient{t: t, url: tg.url}
	init := c.do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer " + mrtrAliceKey})
	sid := init.header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %d %s", init.status, init.body)
	}
	h := map[string]string{"Authorization": "Bearer " + mrtrAliceKey, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h)
	before := len(m.RequestStates())
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mod__ask","arguments":{},"requestState":"asked"}}`, h)
	if r.msg.Error == nil || r.msg.Error.Code != -32602 || !strings.Contains(r.msg.Error.Message, "requestState") {
		t.Errorf("answer %d %s; want error -32602 about requestState", r.status, r.body)
	}
	if n := len(m.RequestStates()); n != before {
		t.Errorf("the upstream was called")
	}
}

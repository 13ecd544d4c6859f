package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestParkedCallThreeRounds: a 2025-11-25 upstream elicits three times, one after the other, in
// one call ("ask_thrice"). A Go SDK client pinned to 2026-07-28 gets three input_required
// results in turn, each continued by its retry, and the tool's result holds the three answers
// in the order they were asked. The conformance fixture cannot show this through the gateway:
// its own bridge for 2025-11-25 clients calls a handler again only once.
func TestParkedCallThreeRounds(t *testing.T) {
	tg, timers := parkingGateway(t, "", nil)
	// A call left parked by a failure ends before the gateway closes.
	t.Cleanup(timers.expireAll)
	var mu sync.Mutex
	var asked []string // guarded by mu
	client := mcp.NewClient(&mcp.Implementation{Name: "modern", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked = append(asked, req.Params.Message)
			mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "A-" + req.Params.Message}}, nil
		},
	})
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask_thrice"})
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if got, want := textOf(t, res), "A-first,A-second,A-third"; got != want {
		t.Errorf("result = %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"first", "second", "third"}; !slices.Equal(asked, want) {
		t.Errorf("the client was asked %q; want %q, one round each", asked, want)
	}
	if n := tg.gw.ParkedCalls(); n != 0 {
		t.Errorf("%d calls still parked after the last retry", n)
	}
}

// TestParkedCallGathersSideBySideRequests: an upstream that sends its requests for input side
// by side (sampling, elicitation and roots at once, as the Go SDK's bridge does for a
// 2025-11-25 client) parks its call once, and the client gets the three as input requests of
// one input_required; its one retry with the three answers completes the call. Asked one per
// round instead, the conformance scenario input-required-result-multiple-input-requests fails.
func TestParkedCallGathersSideBySideRequests(t *testing.T) {
	tg, timers := parkingGateway(t, "", nil)
	t.Cleanup(timers.expireAll)
	c := rawClient{t: t, url: tg.url}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{},"roots":{}}}`
	h := modernHeaders("tools/call", "r__ask_together")
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{`+meta+`,"name":"r__ask_together"}}`, h)
	var res struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || res.ResultType != "input_required" {
		t.Fatalf("call: %d %s; want input_required", r.status, r.body)
	}
	answers := map[string]json.RawMessage{}
	var methods []string
	for key, ir := range res.InputRequests {
		methods = append(methods, ir.Method)
		switch ir.Method {
		case "sampling/createMessage":
			answers[key] = json.RawMessage(`{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}`)
		case "elicitation/create":
			answers[key] = json.RawMessage(`{"action":"accept","content":{"answer":"E"}}`)
		case "roots/list":
			answers[key] = json.RawMessage(`{"roots":[{"uri":"file:///a"},{"uri":"file:///b"}]}`)
		}
	}
	slices.Sort(methods)
	if want := []string{"elicitation/create", "roots/list", "sampling/createMessage"}; !slices.Equal(methods, want) {
		t.Fatalf("input requests are of %q; want one each of %q in one input_required", methods, want)
	}
	responses, _ := json.Marshal(answers)
	state, _ := json.Marshal(res.RequestState)
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{`+meta+`,"name":"r__ask_together","inputResponses":`+string(responses)+`,"requestState":`+string(state)+`}}`, h)
	if r.status != http.StatusOK || r.msg.Error != nil || !strings.Contains(string(r.msg.Result), `"resultType":"complete"`) ||
		!strings.Contains(string(r.msg.Result), "sampled=S;elicited=E;roots=2") {
		t.Fatalf("retry: %d %s; want the complete result sampled=S;elicited=E;roots=2", r.status, r.body)
	}
}

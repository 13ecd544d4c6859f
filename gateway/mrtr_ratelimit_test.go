package gateway_test

import (
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRateLimitsCountALogicalCallOnce: a 2026-07-28 call that takes several rounds (its
// user's approval, then two answers its upstream asks for) is one call to the rate limits:
// with a burst of one, every round after the first goes through, where each used to be
// counted and the second refused. A round's state replayed, or brought with other arguments,
// is counted as a new call; and the next call is refused, since the first one took the only
// token.
func TestRateLimitsCountALogicalCallOnce(t *testing.T) {
	_, tg := modernUpstreamBehind(t, `modern_protocol: true
policy:
  approval: {timeout: 1m}
  rate_limits:
    - {key: principal_tool, rate: 1/h, burst: 1, upstreams: [mod], tools: [ask_twice, ask, ask_for]}
  rules:
    - {name: twice-needs-approval, effect: approve, match: {upstreams: [mod], tools: [ask_twice]}}
`, nil)
	var approvals, names atomic.Int64
	cs := approvingClient(t, tg, &approvals, &names)
	ctx := ctxT(t)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mod__ask_twice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "hello N1 N2" || approvals.Load() != 1 {
		t.Fatalf("a call of four rounds under a burst of one = %q (meta %v), approval asked %d times; want hello N1 N2, asked once", got, res.Meta, approvals.Load())
	}

	// By hand, on the other tool the limit counts (its own bucket): the first round is
	// counted, its retry is not, and the same state replayed is a new call, refused.
	call := toolCaller(t, tg, "mod__ask")
	ir := readInputRequired(t, call(1, ""))
	var key string
	for k := range ir.InputRequests {
		key = k
	}
	quoted, _ := json.Marshal(*ir.RequestState)
	answer := `,"inputResponses":{"` + key + `":{"action":"accept","content":{"name":"Ada"}}},"requestState":` + string(quoted)
	if got := ranText(t, call(2, answer)); got != "hello Ada" {
		t.Errorf("the retry = %q, want hello Ada", got)
	}
	// A fresh state brought by a retry with other arguments continues nothing: counted, and
	// refused, since the call that got the state took its tool's only token.
	forCall := toolCaller(t, tg, "mod__ask_for")
	first := readInputRequired(t, forCall(5, `,"arguments":{"what":"none"}`))
	state, _ := json.Marshal(*first.RequestState)
	if r := forCall(6, `,"arguments":{"what":"roots"},"inputResponses":{},"requestState":`+string(state)); !rateLimited(r) {
		t.Errorf("a retry with other arguments: %d %s; want it counted as a new call, rate_limited", r.status, r.body)
	}
	for id, what := range map[int]string{3: answer, 4: ""} {
		if r := call(id, what); !rateLimited(r) {
			t.Errorf("call %d (%s): %d %s; want the tool's rate_limited error", id, map[bool]string{true: "the retry's state replayed", false: "a new call"}[what != ""], r.status, r.body)
		}
	}
}

// rateLimited reports whether r is a tool result refusing the call for the rate limits.
func rateLimited(r rawReply) bool {
	var res struct {
		IsError bool           `json:"isError"`
		Meta    map[string]any `json:"_meta"`
	}
	return r.msg.Error == nil && json.Unmarshal(r.msg.Result, &res) == nil && res.IsError && res.Meta["dev.manifold/reason"] == "rate_limited"
}

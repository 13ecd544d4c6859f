package gateway_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"github.com/manifold-mcp/manifold/upstream"
)

// downFragile starts a gateway in front of the fragile test upstream (and alpha), with the
// config's policy lines (or none), and crashes fragile with a call to its tool "crash"; a
// long restart delay keeps it down. It returns the client and the crashed call's result.
func downFragile(t *testing.T, policy string) (*mcp.ClientSession, *mcp.CallToolResult) {
	t.Helper()
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+policy+"upstreams:"+upstreamYAML("fragile", "fragile", "")+upstreamYAML("alpha", "alpha", ""),
		&gateway.Options{UpstreamOptions: &upstream.Options{RestartDelay: time.Hour}})
	t.Cleanup(tg.close)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	crashed, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__crash"})
	if err != nil {
		t.Fatalf("crash: %v, want a tool result", err)
	}
	testwait.Until(t, 10*time.Second, "the crashed upstream's tools leaving the list", func() bool {
		list, err := cs.ListTools(ctx, nil)
		return err == nil && !slices.Contains(toolNames(list.Tools), "fragile__ok")
	})
	return cs, crashed
}

// TestCallInterruptedByItsUpstreamMayHaveRun: the upstream's process exits while a call
// runs there. The call went out and may have run in part: its client is told so, and to
// check before calling again, never "unavailable, try again later".
func TestCallInterruptedByItsUpstreamMayHaveRun(t *testing.T) {
	_, res := downFragile(t, "")
	text := textOf(t, res)
	if !res.IsError || !strings.Contains(text, "may have run in part") || !strings.Contains(text, `"fragile"`) || strings.Contains(strings.ToLower(text), "try again later") {
		t.Errorf("the interrupted call's result: isError %v, %q; want an error saying it may have run in part upstream \"fragile\", with no invitation to retry", res.IsError, text)
	}
	if reason := res.Meta["dev.manifold/reason"]; reason != "upstream_interrupted" {
		t.Errorf("_meta reason %v, want upstream_interrupted", reason)
	}
	if _, ok := res.Meta["dev.manifold/retryAfterSeconds"]; ok {
		t.Errorf("_meta %v suggests a retry", res.Meta)
	}
}

// TestKnownToolOfADownUpstreamIsUnavailableUnderAPolicy: with a policy in force, a tool the
// gateway listed before its upstream went down is still "unavailable" when called by name
// (it was the unknown tool -32602 whenever a policy was configured), while a tool the policy
// hides stays unknown, as does a name never listed: the retained catalog tells no one of a
// tool they could not see.
func TestKnownToolOfADownUpstreamIsUnavailableUnderAPolicy(t *testing.T) {
	cs, _ := downFragile(t, "policy:\n  rules:\n    - {name: no-big, effect: hide, match: {upstreams: [fragile], tools: [big]}}\n")
	ctx := ctxT(t)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__ok"})
	if err != nil {
		t.Fatalf("a known tool of the down upstream: %v; want the unavailable tool result", err)
	}
	if !res.IsError || res.Meta["dev.manifold/reason"] != "upstream_unavailable" {
		t.Errorf("a known tool of the down upstream: %+v; want isError with reason upstream_unavailable", res)
	}
	for _, name := range []string{"fragile__big", "fragile__never_listed"} {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Errorf("%s: err = %v, want unknown tool", name, err)
		}
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": "x"}}); err != nil || textOf(t, res) != "alpha:x" {
		t.Errorf("alpha while fragile is down: %v %v", res, err)
	}
}

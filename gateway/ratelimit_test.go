package gateway_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// TestRateLimitCountsTheGatewaysOwnMethods: lists, ping and logging/setLevel, which the
// gateway answers itself, count against a principal's limit as calls do: past it they get
// the rate-limit error (-32007 with retryAfterSeconds), and so does a call.
func TestRateLimitCountsTheGatewaysOwnMethods(t *testing.T) {
	clock := testclock.New(time.Now())
	tg := startGateway(t, policyYAML("  rate_limits:\n    - {key: principal, rate: 1/m, burst: 3}\n"), &gateway.Options{Now: clock.Now})
	defer tg.close()
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	if _, err := alice.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list within the burst: %v", err)
	}
	if err := alice.Ping(ctx, nil); err != nil {
		t.Fatalf("ping within the burst: %v", err)
	}
	if err := alice.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatalf("logging/setLevel within the burst: %v", err)
	}
	rateLimited := func(what string, err error) {
		t.Helper()
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != -32007 || !strings.Contains(string(wire.Data), "retryAfterSeconds") {
			t.Errorf("%s past the limit: %v, want JSON-RPC error -32007 with retryAfterSeconds", what, err)
		}
	}
	_, err := alice.ListTools(ctx, nil)
	rateLimited("tools/list", err)
	rateLimited("ping", alice.Ping(ctx, nil))
	res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || !res.IsError || res.Meta["dev.manifold/reason"] != "rate_limited" {
		t.Errorf("tools/call past the limit: %v %v, want rate_limited", err, res)
	}
	if err := bob.Ping(ctx, nil); err != nil {
		t.Errorf("bob's ping: %v (limits are per principal)", err)
	}
	clock.Advance(time.Minute)
	if _, err := alice.ListTools(ctx, nil); err != nil {
		t.Errorf("tools/list a minute later: %v, want the limit recovered", err)
	}
}

package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/metrics"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"github.com/manifold-mcp/manifold/upstream"
)

// metricsYAML is a gateway with alice, an admin listener serving /metrics, a policy that
// denies whoami, holds a's echo for an operator and allows one call per tool and principal,
// and two upstreams: a (beta) and f (fragile, which can be made to crash).
func metricsYAML() string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
auth:
  api_keys:
    - {name: alice, hash: %q}
%smetrics: {enabled: true}
policy:
  approval: {timeout: 20s, by: operator}
  rate_limits:
    - {key: principal_tool, rate: 1/h, burst: 1}
  rules:
    - {name: no-whoami, effect: deny, match: {tools: [whoami]}}
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
upstreams:%s%s`, auth.HashAPIKey("mfk_alice"), adminYAML(""), upstreamYAML("a", "beta", ""), upstreamYAML("f", "fragile", ""))
}

// scrape reads GET /metrics of the admin listener with key; it returns the status and, for
// 200, every series' value.
func scrape(t *testing.T, adminURL, key string) (int, map[string]float64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, adminURL+"/metrics", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	series, err := metrics.Series(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, series
}

// TestMetricsAfterKnownCalls: after a call allowed, one rate limited, one denied by policy,
// one held and approved by an operator, and one whose upstream crashed, /metrics on the admin
// listener counts each by its outcome, the decisions and the approval, the tool-call latency
// by upstream, the crashed upstream's restart, and the config's version; it asks for the
// admin credential.
func TestMetricsAfterKnownCalls(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(metricsYAML()), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	// The rate limit does not recover while the test runs: its clock stands still.
	clock := testclock.New(time.Now())
	tg := startConfigured(t, cfg, &gateway.Options{Now: clock.Now}, true)
	defer tg.close()
	h, err := tg.gw.AdminHandler()
	if err != nil {
		t.Fatal(err)
	}
	adminSrv := httptest.NewServer(h)
	defer adminSrv.Close()
	adm := &adminClient{t: t, url: adminSrv.URL, key: adminKey}

	if code, _ := scrape(t, adminSrv.URL, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a credential: %d, want 401", code)
	}
	if code, _ := scrape(t, adminSrv.URL, "mfk_alice"); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a client's key: %d, want 401", code)
	}

	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	call := func(name string) *mcp.CallToolResult {
		t.Helper()
		res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err != nil {
			t.Fatalf("call %s: %v", name, err)
		}
		return res
	}
	reason := func(res *mcp.CallToolResult) any { return res.Meta["dev.manifold/reason"] }

	if res := call("f__ok"); res.IsError {
		t.Fatalf("allowed call: %s", textOf(t, res))
	}
	if res := call("f__ok"); reason(res) != "rate_limited" {
		t.Fatalf("second call: %v %s, want rate_limited", res.Meta, textOf(t, res))
	}
	if res := call("a__whoami"); reason(res) != "denied" {
		t.Fatalf("whoami: %v %s, want denied", res.Meta, textOf(t, res))
	}
	done := callAsync(ctx, alice, "a__echo", map[string]any{"text": "hello"})
	held := adm.waitHeld(1)[0]
	_, series := scrape(t, adminSrv.URL, adminKey)
	if got := series["manifold_approvals_pending"]; got != 1 {
		t.Errorf("manifold_approvals_pending while a call is held = %v, want 1", got)
	}
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if res := <-done; res.IsError {
		t.Fatalf("approved call: %s", resultText(res))
	}
	crashed := call("f__crash")
	crashReason, _ := reason(crashed).(string)
	if !crashed.IsError || crashReason == "" {
		t.Fatalf("crash: %v %s, want a refusal with its reason", crashed.Meta, textOf(t, crashed))
	}
	// The crashed upstream is started again, and its restart counted.
	if !testwait.Within(30*time.Second, func() bool {
		_, series = scrape(t, adminSrv.URL, adminKey)
		return series[`manifold_upstream_restarts_total{upstream="f"}`] == 1 &&
			tg.gw.UpstreamStatuses()["f"].State == upstream.StateReady &&
			series[`manifold_upstream_state{state="ready",upstream="f"}`] == 1
	}) {
		t.Fatalf("f's restart: restarts %v, state %v", series[`manifold_upstream_restarts_total{upstream="f"}`], tg.gw.UpstreamStatuses()["f"])
	}

	calls := func(outcome string) string {
		return fmt.Sprintf(`manifold_requests_total{era="2025-11-25",method="tools/call",outcome=%q}`, outcome)
	}
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{calls("ok"), 2},
		{calls("rate_limited"), 1},
		{calls("denied"), 1},
		{calls(crashReason), 1},
		{calls("approval_declined"), 0},
		{`manifold_requests_total{era="2025-11-25",method="initialize",outcome="ok"}`, 1},
		{`manifold_tool_call_duration_seconds_count{upstream="f"}`, 2},
		{`manifold_tool_call_duration_seconds_count{upstream="a"}`, 1},
		{`manifold_policy_decisions_total{check="policy",dry_run="false",effect="allow"}`, 3},
		{`manifold_policy_decisions_total{check="policy",dry_run="false",effect="deny"}`, 1},
		{`manifold_policy_decisions_total{check="policy",dry_run="false",effect="approve"}`, 1},
		{`manifold_policy_decisions_total{check="rate_limit",dry_run="false",effect="deny"}`, 1},
		{`manifold_policy_decisions_total{check="approval",dry_run="false",effect="allow"}`, 1},
		{`manifold_approvals_total{outcome="approved"}`, 1},
		{`manifold_approvals_total{outcome="declined"}`, 0},
		{`manifold_approvals_pending`, 0},
		{`manifold_upstream_restarts_total{upstream="a"}`, 0},
		{`manifold_upstream_state{state="ready",upstream="a"}`, 1},
		{`manifold_upstream_state{state="down",upstream="a"}`, 0},
		{`manifold_sessions_open`, 1},
		{fmt.Sprintf(`manifold_config_info{version=%q}`, cfg.Version()), 1},
	} {
		got, ok := series[metrics.Canonical(tt.series)]
		if !ok || got != tt.want {
			t.Errorf("%s = %v (present: %v), want %v", tt.series, got, ok, tt.want)
		}
	}
	if _, ok := series["go_goroutines"]; !ok {
		t.Error("no go_goroutines: the runtime collector is missing")
	}
}

// TestMetricsOffServesNone: without the metrics key the admin listener has no /metrics, and
// the gateway has no metrics handler to serve elsewhere.
func TestMetricsOffServesNone(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+adminYAML("")+"upstreams: []\n", nil)
	defer tg.close()
	if h := tg.gw.MetricsHandler(); h != nil {
		t.Error("MetricsHandler with metrics off is not nil")
	}
	h, err := tg.gw.AdminHandler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, _ := scrape(t, srv.URL, adminKey); code == http.StatusOK {
		t.Errorf("GET /metrics with metrics off: %d, want none served", code)
	}
}

// TestMetricsCountReverseRequests: what an upstream asks of clients mid-call is counted by
// kind and outcome: answered when the client declared the capability, refused when it did
// not; metrics.listen's handler serves them without a credential.
func TestMetricsCountReverseRequests(t *testing.T) {
	upstreamSrv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer upstreamSrv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nmetrics: {listen: 127.0.0.1:0}\nupstreams:\n  - name: r\n    url: %s\n", upstreamSrv.URL), nil)
	defer tg.close()
	h := tg.gw.MetricsHandler()
	if h == nil {
		t.Fatal("no metrics handler with metrics.listen set")
	}
	metricsSrv := httptest.NewServer(h)
	defer metricsSrv.Close()

	ctx := ctxT(t)
	full, _, _ := markedClient(t, tg.url, "A", true)
	if res, err := full.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "x"}}); err != nil || res.IsError {
		t.Fatalf("call of a client that declares both: %v %v", err, res)
	}
	noElicitation, _, _ := markedClient(t, tg.url, "B", false)
	if res, err := noElicitation.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "y"}}); err != nil || !res.IsError {
		t.Fatalf("call of a client without elicitation: %v %v, want the tool's failure", err, res)
	}
	code, series := scrape(t, metricsSrv.URL, "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics on its own listener: %d", code)
	}
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{`manifold_reverse_requests_total{kind="sampling",outcome="answered"}`, 2},
		{`manifold_reverse_requests_total{kind="elicitation",outcome="answered"}`, 1},
		{`manifold_reverse_requests_total{kind="elicitation",outcome="refused_capability"}`, 1},
		{`manifold_reverse_requests_total{kind="sampling",outcome="refused_ambiguous"}`, 0},
		{`manifold_tool_call_duration_seconds_count{upstream="r"}`, 2},
		{`manifold_sessions_open`, 2},
	} {
		if got, ok := series[metrics.Canonical(tt.series)]; !ok || got != tt.want {
			t.Errorf("%s = %v (present: %v), want %v", tt.series, got, ok, tt.want)
		}
	}
}

// TestMetricsCountPluginFailures: the plugins' time is observed for every call they are
// asked about, and a plugin that gives no answer is counted by name, whether it fails closed
// (the call is refused: plugin_unavailable) or open.
func TestMetricsCountPluginFailures(t *testing.T) {
	_, test := plugins(t)
	yaml := "listen: 127.0.0.1:0\nmetrics: {listen: 127.0.0.1:0}\nplugins:\n" +
		pluginYAML("sleeper", test, "    config: {hang: true}\n    timeout: 200ms\n    tools: [add]\n") +
		pluginYAML("lenient", test, "    config: {hang: true}\n    timeout: 50ms\n    failure: fail_open\n    tools: [whoami]\n") +
		"upstreams:" + upstreamYAML("a", "beta", "")
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	metricsSrv := httptest.NewServer(tg.gw.MetricsHandler())
	defer metricsSrv.Close()
	cs := connect(t, tg.url, nil)
	if res := callTool(t, cs, "a__add", map[string]any{"a": 1, "b": 2}); !res.IsError || res.Meta["dev.manifold/reason"] != "plugin_unavailable" {
		t.Fatalf("a call to a hanging plugin: %v %q", res.Meta, resultText(res))
	}
	if res := callTool(t, cs, "a__whoami", nil); res.IsError {
		t.Fatalf("a call past a plugin that fails open: %q", resultText(res))
	}
	if res := callTool(t, cs, "a__echo", map[string]any{"text": "x"}); res.IsError {
		t.Fatalf("a call no plugin sees: %q", resultText(res))
	}
	_, series := scrape(t, metricsSrv.URL, "")
	for _, tt := range []struct {
		series string
		want   float64
	}{
		{`manifold_plugin_failures_total{plugin="sleeper"}`, 1},
		{`manifold_plugin_failures_total{plugin="lenient"}`, 1},
		{`manifold_plugin_call_duration_seconds_count{stage="decide"}`, 3},
		{`manifold_requests_total{era="2025-11-25",method="tools/call",outcome="plugin_unavailable"}`, 1},
		{`manifold_requests_total{era="2025-11-25",method="tools/call",outcome="ok"}`, 2},
		{`manifold_tool_call_duration_seconds_count{upstream="a"}`, 2},
	} {
		if got, ok := series[metrics.Canonical(tt.series)]; !ok || got != tt.want {
			t.Errorf("%s = %v (present: %v), want %v", tt.series, got, ok, tt.want)
		}
	}
}

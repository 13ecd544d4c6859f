package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/metrics"
)

func TestSetCounts(t *testing.T) {
	s := metrics.New(&metrics.Options{Upstreams: []string{"files", "search"}, Plugins: []string{"guard"}, ConfigVersion: "0123456789abcdef"})
	s.ObserveRequest("tools/call", "2025-11-25", "ok", time.Millisecond)
	s.ObserveRequest("tools/call", "2025-11-25", "ok", time.Millisecond)
	s.ObserveRequest("tools/call", "2026-07-28", "rate_limited", time.Millisecond)
	s.ObserveRequest("made/up", "1999-01-01", "no_such_reason", time.Millisecond)
	s.ObserveToolCall("files", 2*time.Second)
	s.ObserveToolCall("nobody", time.Second)
	s.UpstreamRestarted("files", true)
	s.UpstreamRestarted("search", false)
	s.ReverseRequest("sampling/createMessage", "answered")
	s.ReverseRequest("roots/list", "refused_ambiguous")
	s.Decision("policy", "deny", false)
	s.Decision("rate_limit", "deny", true)
	s.Approval("approved")
	s.PluginFailed("guard")
	s.ObservePlugins("decide", time.Millisecond)
	s.ObserveRedis(time.Millisecond, true)
	s.ObserveRedis(time.Millisecond, false)
	s.Watch(func() metrics.State {
		return metrics.State{Upstreams: map[string]string{"files": "ready", "search": "down"}, Sessions: 3, Streams: 2,
			ApprovalsPending: 1, StreamBytes: 100, StreamBudget: 1000}
	})

	for _, tt := range []struct {
		name   string
		series string
		want   float64
	}{
		{"ok calls", `manifold_requests_total{method="tools/call",era="2025-11-25",outcome="ok"}`, 2},
		{"refusal reason", `manifold_requests_total{method="tools/call",era="2026-07-28",outcome="rate_limited"}`, 1},
		{"unknown values", `manifold_requests_total{method="other",era="other",outcome="other"}`, 1},
		{"restart", `manifold_upstream_restarts_total{upstream="files"}`, 1},
		{"reconnect", `manifold_upstream_reconnects_total{upstream="search"}`, 1},
		{"no reconnect", `manifold_upstream_reconnects_total{upstream="files"}`, 0},
		{"reverse", `manifold_reverse_requests_total{kind="sampling",outcome="answered"}`, 1},
		{"reverse refused", `manifold_reverse_requests_total{kind="roots",outcome="refused_ambiguous"}`, 1},
		{"decision", `manifold_policy_decisions_total{check="policy",effect="deny",dry_run="false"}`, 1},
		{"dry run", `manifold_policy_decisions_total{check="rate_limit",effect="deny",dry_run="true"}`, 1},
		{"approval", `manifold_approvals_total{outcome="approved"}`, 1},
		{"plugin failure", `manifold_plugin_failures_total{plugin="guard"}`, 1},
		{"tool calls", `manifold_tool_call_duration_seconds_count{upstream="files"}`, 1},
		{"tool call sum", `manifold_tool_call_duration_seconds_sum{upstream="files"}`, 2},
		{"unknown upstream", `manifold_tool_call_duration_seconds_count{upstream="other"}`, 1},
		{"state", `manifold_upstream_state{upstream="search",state="down"}`, 1},
		{"not the state", `manifold_upstream_state{upstream="search",state="ready"}`, 0},
		{"redis", `manifold_redis_command_duration_seconds_count`, 2},
		{"redis errors", `manifold_redis_errors_total`, 1},
		{"config version", `manifold_config_info{version="0123456789abcdef"}`, 1},
		{"sessions", `manifold_sessions_open`, 3},
		{"streams", `manifold_streams_open`, 2},
		{"pending", `manifold_approvals_pending`, 1},
		{"stream bytes", `manifold_stream_retained_bytes`, 100},
		{"stream budget", `manifold_stream_budget_bytes`, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := scrapeValue(t, s, tt.series); got != tt.want {
				t.Errorf("%s = %v, want %v", tt.series, got, tt.want)
			}
		})
	}
}

// TestSetConfigVersion: a new version replaces the old one: one series, the current.
func TestSetConfigVersion(t *testing.T) {
	s := metrics.New(&metrics.Options{ConfigVersion: "old"})
	s.SetConfigVersion("new")
	all, err := s.Values()
	if err != nil {
		t.Fatal(err)
	}
	if all[`manifold_config_info{version="new"}`] != 1 {
		t.Errorf("the new version's series: %v", all[`manifold_config_info{version="new"}`])
	}
	if _, ok := all[`manifold_config_info{version="old"}`]; ok {
		t.Error("the old version's series is still served")
	}
}

// TestSetUpstreamsAfterAReload: an upstream a reload adds counts under its own name, where it
// counted as "other" before; the state gauge shows the upstreams the gateway reports now,
// and no more the ones it stopped reporting.
func TestSetUpstreamsAfterAReload(t *testing.T) {
	s := metrics.New(&metrics.Options{Upstreams: []string{"a"}})
	now := map[string]string{"a": "ready"}
	s.Watch(func() metrics.State { return metrics.State{Upstreams: now} })
	s.UpstreamRestarted("b", true)
	s.SetUpstreams([]string{"b"})
	s.UpstreamRestarted("b", true)
	now = map[string]string{"b": "starting"}
	all, err := s.Values()
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`manifold_upstream_restarts_total{upstream="other"}`:     1,
		`manifold_upstream_restarts_total{upstream="b"}`:         1,
		`manifold_upstream_restarts_total{upstream="a"}`:         0,
		`manifold_upstream_state{state="starting",upstream="b"}`: 1,
	} {
		if got, ok := all[series]; !ok || got != want {
			t.Errorf("%s = %v (served %v), want %v", series, got, ok, want)
		}
	}
	if _, ok := all[`manifold_upstream_state{state="ready",upstream="a"}`]; ok {
		t.Error("the state of upstream a, no longer reported, is still served")
	}
}

// TestSetPluginsAfterAReload: a plugin a reload adds counts its failures under its own name,
// where it counted as other; one it removes keeps what it counted.
func TestSetPluginsAfterAReload(t *testing.T) {
	s := metrics.New(&metrics.Options{Plugins: []string{"a"}})
	s.PluginFailed("b")
	s.SetPlugins([]string{"b"})
	s.PluginFailed("b")
	s.PluginFailed("b")
	s.PluginFailed("a")
	all, err := s.Values()
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		`manifold_plugin_failures_total{plugin="other"}`: 1,
		`manifold_plugin_failures_total{plugin="b"}`:     2,
		`manifold_plugin_failures_total{plugin="a"}`:     1,
	} {
		if got, ok := all[series]; !ok || got != want {
			t.Errorf("%s = %v (served %v), want %v", series, got, ok, want)
		}
	}
}

func TestNilSetRecordsNothing(t *testing.T) {
	var s *metrics.Set
	s.ObserveRequest("tools/call", "2025-11-25", "ok", time.Millisecond)
	s.ObserveToolCall("files", time.Second)
	s.UpstreamRestarted("files", true)
	s.ReverseRequest("roots/list", "answered")
	s.Decision("policy", "allow", false)
	s.Approval("approved")
	s.ObservePlugins("decide", time.Millisecond)
	s.PluginFailed("guard")
	s.ObserveRedis(time.Millisecond, false)
	s.SetConfigVersion("v")
	s.Watch(func() metrics.State { return metrics.State{} })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("a nil Set's handler answered %d, want 404", rec.Code)
	}
}

func TestHandlerServesRuntimeAndManifold(t *testing.T) {
	s := metrics.New(nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "manifold_requests_total", "manifold_config_info"} {
		if !strings.Contains(string(body), "\n"+name) && !strings.HasPrefix(string(body), name) {
			t.Errorf("the exposition has no %s", name)
		}
	}
}

// scrapeValue reads one series' value from what the Set gathers.
func scrapeValue(t *testing.T, s *metrics.Set, series string) float64 {
	t.Helper()
	all, err := s.Values()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := all[metrics.Canonical(series)]
	if !ok {
		t.Fatalf("no series %s", series)
	}
	return v
}

func BenchmarkObserveRequest(b *testing.B) {
	s := metrics.New(&metrics.Options{Upstreams: []string{"files"}})
	b.ReportAllocs()
	for b.Loop() {
		s.ObserveRequest("tools/call", "2025-11-25", "ok", time.Millisecond)
		s.ObserveToolCall("files", time.Millisecond)
	}
}

func BenchmarkObserveRequestOff(b *testing.B) {
	var s *metrics.Set
	b.ReportAllocs()
	for b.Loop() {
		s.ObserveRequest("tools/call", "2025-11-25", "ok", time.Millisecond)
		s.ObserveToolCall("files", time.Millisecond)
	}
}

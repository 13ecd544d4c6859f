package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/metrics"
)

// TestServeMetricsListener: with metrics.listen, serve answers GET /metrics there, with no
// credential, counting what the gateway served, and logs where.
func TestServeMetricsListener(t *testing.T) {
	addr := freePort(t)
	g := startServed(t, "alpha", "metrics: {listen: "+addr+"}", "r__whoami")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	series, err := metrics.Series(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := series[metrics.Canonical(`manifold_requests_total{method="tools/call",era="2025-11-25",outcome="ok"}`)]; got < 1 {
		t.Errorf("tools/call ok = %v, want the probe's calls counted", got)
	}
	if got := series[metrics.Canonical(`manifold_upstream_state{upstream="r",state="ready"}`)]; got != 1 {
		t.Errorf("r ready = %v, want 1", got)
	}
	if !strings.Contains(g.logs.String(), "metrics listening") {
		t.Errorf("no log line of the metrics listener in:\n%s", g.logs.String())
	}
}

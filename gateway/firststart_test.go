package gateway_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
)

// TestFirstStartIsOncePerUpstreamNotPerIsolatedConnection: an upstream run by a command
// that may fetch its server first (npx, uvx, docker) has a longer bound for its first start,
// once. Under isolation: session each client session gets a connection of its own, a new
// start of the same command: it is not the upstream's first start, so it has
// initialize_timeout and logs nothing about a first start. One "first start" line in all,
// for the shared connection, however many sessions open their own.
func TestFirstStartIsOncePerUpstreamNotPerIsolatedConnection(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", "    isolation: session\n")),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	// As the config gives an npx command without initialize_timeout.
	cfg.Upstreams[0].FirstInitializeTimeout = 2 * time.Minute
	var logs lockedBuffer
	tg := startConfigured(t, cfg, &gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, true)
	t.Cleanup(tg.close)

	for i := range 2 {
		cs := connect(t, tg.url, nil)
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
		if err != nil || textOf(t, res) != "alpha:x" {
			t.Fatalf("session %d's call on its own connection: %v %v", i, res, err)
		}
	}
	waitUntil(t, "both sessions' own connections", func() bool {
		return strings.Count(logs.String(), "opened a session's own upstream connection") == 2
	})
	if n := strings.Count(logs.String(), "first start"); n != 1 {
		t.Errorf("%d log lines of a first start, want 1 (the upstream's, not each session's connection's):\n%s", n, logs.String())
	}
}

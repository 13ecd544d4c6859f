package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestFirstStartOfAFetchingCommandGetsTwoMinutes: npx, uvx and docker may fetch their server
// on first use, which 30 s does not always cover. An upstream run by one of them, without
// initialize_timeout of its own, gets 2 minutes for its first start; initialize_timeout set
// for it (in its entry, or in an override of an imported server) wins, and other commands
// keep the one timeout.
func TestFirstStartOfAFetchingCommandGetsTwoMinutes(t *testing.T) {
	dir := t.TempDir()
	claude := filepath.Join(dir, "claude.json")
	if err := os.WriteFile(claude, []byte(`{"mcpServers": {
  "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
  "db": {"command": "uvx", "args": ["mcp-server-sqlite"]}
}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(gw, []byte(`upstreams:
  - name: npx
    command: npx
    args: [-y, some-server]
  - name: uvx
    command: /usr/local/bin/uvx
    args: [some-server]
  - name: docker
    command: docker
    args: [run, -i, --rm, some/server]
  - name: patient
    command: npx
    initialize_timeout: 45s
  - name: local
    command: node
    args: [server.js]
  - name: remote
    url: https://mcp.example.com/mcp
overrides:
  - name: db
    initialize_timeout: 10s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Build(gw, []string{claude}, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := map[string]struct{ first, later time.Duration }{
		"npx":     {2 * time.Minute, 30 * time.Second},
		"uvx":     {2 * time.Minute, 30 * time.Second},
		"docker":  {2 * time.Minute, 30 * time.Second},
		"patient": {0, 45 * time.Second},
		"local":   {0, 30 * time.Second},
		"remote":  {0, 30 * time.Second},
		"files":   {2 * time.Minute, 30 * time.Second},
		"db":      {0, 10 * time.Second},
	}
	for _, u := range cfg.Upstreams {
		w, ok := want[u.Name]
		if !ok {
			t.Errorf("unexpected upstream %s", u.Name)
			continue
		}
		if u.FirstInitializeTimeout != w.first || u.InitializeTimeout != w.later {
			t.Errorf("%s: first start %s, later %s; want %s and %s", u.Name, u.FirstInitializeTimeout, u.InitializeTimeout, w.first, w.later)
		}
	}
}

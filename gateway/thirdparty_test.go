package gateway_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// thirdPartyServer returns the path of a third-party MCP server's entry point installed by
// scripts/thirdparty. A missing one skips the test, or fails it when MANIFOLD_THIRD_PARTY is
// "require" (as scripts/test sets it), so that CI never passes without running it.
func thirdPartyServer(t *testing.T, pkg, entry string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", ".cache", "thirdparty", "node_modules", pkg, entry))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("MANIFOLD_THIRD_PARTY") == "require" {
			t.Fatalf("%s is not installed (%v): run scripts/thirdparty", pkg, err)
		}
		t.Skipf("%s is not installed: run scripts/thirdparty (scripts/test does)", pkg)
	}
	return path
}

// TestImportedFilesystemServerGetsTheClientsRoots: server-filesystem, imported from a Claude
// Desktop server list, asks its client for roots to learn which directories it may serve.
// Behind the default shared connection the gateway cannot tell whose roots to give it
// (design decision 4): it answers with the config's roots, none here, so the server serves
// nothing. An override to isolation: session gives each client session its own server,
// which then lists and reads the root that client declared.
func TestImportedFilesystemServerGetsTheClientsRoots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server-filesystem under node")
	}
	entry := thirdPartyServer(t, "@modelcontextprotocol/server-filesystem", "dist/index.js")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}

	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("from the client's root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rootURI := "file://" + root

	dir := t.TempDir()
	desktop := filepath.Join(dir, "claude_desktop_config.json")
	list := `{"mcpServers": {"filesystem": {"command": ` + quoteJSON(node) + `, "args": [` + quoteJSON(entry) + `]}}}`
	if err := os.WriteFile(desktop, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, overrides string
		wantRead        bool
	}{
		{name: "shared", overrides: "", wantRead: false},
		{name: "isolation session", overrides: "overrides:\n  - name: filesystem\n    isolation: session\n", wantRead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\n"+tc.overrides), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Build(path, []string{desktop}, os.LookupEnv)
			if err != nil {
				t.Fatalf("config: %v", err)
			}
			want := "shared"
			if tc.wantRead {
				want = "session"
			}
			if got := cfg.Upstreams[0].Isolation; got != want {
				t.Fatalf("imported filesystem: isolation %q, want %q", got, want)
			}
			tg := startConfigured(t, cfg, nil, true)
			defer tg.close()

			client := mcp.NewClient(&mcp.Implementation{Name: "roots", Version: "1"}, nil)
			client.AddRoots(&mcp.Root{URI: rootURI, Name: "work"})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()

			// The server learns its roots right after initialize, asynchronously: list the
			// allowed directories until they settle (a session connection answers its first
			// call only once it is initialized; its roots request follows at once).
			var allowed string
			for {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "filesystem__list_allowed_directories", Arguments: map[string]any{}})
				if err != nil {
					t.Fatal(err)
				}
				allowed = textOf(t, res)
				if !tc.wantRead || strings.Contains(allowed, root) || ctx.Err() != nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			if got := strings.Contains(allowed, root); got != tc.wantRead {
				t.Errorf("allowed directories %q: contains the client's root = %v, want %v", allowed, got, tc.wantRead)
			}

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "filesystem__read_text_file", Arguments: map[string]any{"path": filepath.Join(root, "notes.txt")}})
			if err != nil {
				t.Fatal(err)
			}
			text := textOf(t, res)
			if tc.wantRead {
				if res.IsError || !strings.Contains(text, "from the client's root") {
					t.Errorf("read of the root's file: isError %v, %q; want its content", res.IsError, text)
				}
				listed, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "filesystem__list_directory", Arguments: map[string]any{"path": root}})
				if err != nil {
					t.Fatal(err)
				}
				if got := textOf(t, listed); !strings.Contains(got, "notes.txt") {
					t.Errorf("list of the root = %q, want notes.txt", got)
				}
			} else if !res.IsError {
				t.Errorf("read through a shared connection without roots succeeded: %q", text)
			}
		})
	}
}

func quoteJSON(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

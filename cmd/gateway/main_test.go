package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

func TestMain(m *testing.M) {
	os.Exit(testupstream.RunTests(m, nil))
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", "upstreams:\n  - name: a\n    command: a-server\n")
	bad := writeFile(t, "bad.yaml", "listen: nowhere\nupstreams:\n  - name: a\n    comand: a-server\n")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"good", []string{"validate", "-config", good}, 0, []string{"good.yaml: ok (1 upstreams enabled)"}},
		{"every problem with file and line", []string{"validate", "-config", bad}, 1, []string{
			"bad.yaml:1: listen:",
			"bad.yaml:4: upstreams[0].comand: unknown field",
			"bad.yaml:3: upstreams[0].command: required",
		}},
		{"missing file", []string{"validate", "-config", filepath.Join(t.TempDir(), "none.yaml")}, 1, []string{"none.yaml"}},
		{"no -config", []string{"validate"}, 2, []string{"-config FILE (or -mcp-servers FILE) is required"}},
		{"unknown command", []string{"launch"}, 2, []string{`unknown command "launch"`}},
		{"version", []string{"version"}, 0, []string{"manifold dev"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := run(tc.args, &out, &out); code != tc.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out.String())
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestServeDrainsAndStopsUpstreams runs the gateway as serve does, with a client holding a
// standalone stream open, and stops it: the stream is closed by the server, serve returns
// cleanly, and no upstream process is left.
func TestServeDrainsAndStopsUpstreams(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg, err := config.Parse("serve.yaml", []byte(fmt.Sprintf(`
listen: %s
upstreams:
  - name: alpha
    command: %q
    env: {%s: alpha, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
`, addr, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- serveUntilDone(ctx, cfg, slog.New(slog.DiscardHandler)) }()

	url := "http://" + addr + "/mcp"
	post := func(sid, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	var sid string
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		if resp != nil {
			sid = resp.Header.Get("Mcp-Session-Id")
			if _, body := post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"up"}}}`); strings.Contains(body, "alpha:up") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never answered alpha__echo")
		}
		time.Sleep(50 * time.Millisecond)
	}

	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", err, stream)
	}
	streamEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stream.Body)
		stream.Body.Close()
		close(streamEnded)
	}()

	cancel() // what SIGTERM does
	select {
	case <-streamEnded:
	case <-time.After(shutdownGrace - time.Second):
		t.Fatal("shutdown did not close the open stream")
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return")
	}
	if left := testupstream.Leftovers(testupstream.Marker); len(left) > 0 {
		t.Errorf("upstream processes left after serve returned: %v", left)
	}
}

func TestImportedServerLists(t *testing.T) {
	claude := writeFile(t, "claude_desktop_config.json", `{
  "mcpServers": {
    "files": {"command": "mcp-files", "args": ["--root", "/srv"], "env": {"LEVEL": "debug"}},
    "remote": {"url": "https://mcp.example.com/mcp"}
  }
}`)
	vscode := writeFile(t, "mcp.json", `{
  // VS Code's format: JSONC
  "servers": {
    "search": {"type": "http", "url": "https://search.example.com/mcp",},
    "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
  },
}`)
	var out bytes.Buffer
	if code := run([]string{"validate", "-mcp-servers", claude, "-mcp-servers", vscode}, &out, &out); code != 0 {
		t.Fatalf("validate: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "ok (4 upstreams enabled)") {
		t.Errorf("output %q, want 4 upstreams", out.String())
	}
	dup := writeFile(t, "dup.json", `{"mcpServers": {"files": {"command": "other"}}}`)
	out.Reset()
	if code := run([]string{"validate", "-mcp-servers", claude, "-mcp-servers", dup}, &out, &out); code != 1 {
		t.Fatalf("duplicate name across files: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "dup.json:1:") || !strings.Contains(out.String(), "claude_desktop_config.json") {
		t.Errorf("the duplicate is not reported with both files:\n%s", out.String())
	}
}

func TestCatalogCommand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "catalog.yaml", fmt.Sprintf(`
upstreams:
  - name: alpha
    command: %[1]q
    prefix: ""
    env: {%[2]s: alpha, %[3]s: %[4]s}
    inherit_env: [GOCOVERDIR, GORACE]
  - name: beta
    command: %[1]q
    prefix: "b"
    env: {%[2]s: beta, %[3]s: %[4]s}
    inherit_env: [GOCOVERDIR, GORACE]
  - name: gamma
    command: %[1]q
    prefix: "g"
    env: {%[2]s: alpha, %[3]s: %[4]s}
    inherit_env: [GOCOVERDIR, GORACE]
  - name: broken
    command: /nonexistent/mcp-server
`, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker))
	var out, errOut bytes.Buffer
	if code := run([]string{"catalog", "-config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("catalog: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		"tool      echo ", // alpha's, unprefixed
		"b__echo",
		"g__whoami",
		"resource  file:///readme.txt",
		"template  g+file:///notes/{id}",
		"alpha: ready",
		"broken: down",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("catalog output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := run([]string{"catalog", "-json", "-config", cfg}, &out, io.Discard); code != 0 {
		t.Fatalf("catalog -json: exit %d", code)
	}
	var view struct {
		Items []struct{ Kind, Name, Upstream, Original string }
	}
	if err := json.Unmarshal(out.Bytes(), &view); err != nil {
		t.Fatalf("catalog -json is not JSON: %v\n%s", err, out.String())
	}
	owners := map[string]string{}
	for _, it := range view.Items {
		owners[it.Name] = it.Upstream
	}
	if owners["echo"] != "alpha" || owners["b__add"] != "beta" || owners["g__echo"] != "gamma" {
		t.Errorf("owners %v", owners)
	}
}

// TestExampleConfigServesTheDemo runs what the README's first command runs: the gateway with
// config.example.yaml (on a free port), which starts the demo server twice with `go run`;
// a client reaches demo__echo through /mcp.
func TestExampleConfigServesTheDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the demo server")
	}
	cfg, err := config.Load(filepath.Join("..", "..", "config.example.yaml"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg.Listen = addr
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		u.Dir = root // the README runs it from the repository root
		if u.Env == nil {
			u.Env = map[string]string{}
		}
		u.Env[testupstream.EnvRun] = testupstream.Marker
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- serveUntilDone(ctx, cfg, slog.New(slog.DiscardHandler)) }()

	url := "http://" + addr + "/mcp"
	post := func(sid, body string) (string, string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Mcp-Session-Id"), string(b)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		sid, _ := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		if sid != "" {
			if _, body := post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hello demo"}}}`); strings.Contains(body, "hello demo") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the example config never served demo__echo")
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if left := testupstream.Leftovers(testupstream.Marker); len(left) > 0 {
		t.Errorf("demo processes left: %v", left)
	}
}

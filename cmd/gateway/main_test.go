package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// envServe makes the test binary a gateway process: `serve` with the arguments after the
// test flags, for tests that run replicas as processes of their own.
const envServe = "MANIFOLD_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(envServe) == "1" {
		os.Exit(run(strings.Fields(os.Getenv(envServe+"_ARGS")), os.Stdout, os.Stderr))
	}
	if os.Getenv(envGateway) == "1" {
		// The walkthrough's `gateway` command (see walkthrough_test.go).
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "demo" {
		// Started as an upstream with command "@self": this test binary stands for the
		// gateway's own program, and serves its demo server.
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	code := testupstream.RunTests(m, nil)
	testredis.Stop()
	os.Exit(code)
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
	servers := writeFile(t, "servers.json", `{"mcpServers": {"b": {"command": "b-server"}}}`)
	// A problem of content and a program that does not exist: both at once, not the program
	// only once the content is fixed.
	both := writeFile(t, "both.yaml", "listen: nowhere\nupstreams:\n  - name: a\n    command: /no/such/mcp-server\n")
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
		{"several files are all named", []string{"validate", "-config", good, "-mcp-servers", servers}, 0, []string{"good.yaml, " + servers + ": ok (2 upstreams enabled)"}},
		{"content and programs at once", []string{"validate", "-config", both}, 1, []string{
			"both.yaml:1: listen:",
			"both.yaml:3: a (upstreams[0]).command: /no/such/mcp-server does not exist",
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

// servedGateway is a gateway run as serve runs it, in this process, with a channel standing
// for the signals the process receives.
type servedGateway struct {
	t       *testing.T
	url     string
	signals chan os.Signal
	// done is closed when serveUntilDone has returned err.
	done chan struct{}
	err  error
	logs *syncBuffer
}

// startServed runs serveUntilDone on a config of one upstream "r" of the given test flavor,
// with extra top-level settings, and waits until probeTool answers.
func startServed(t *testing.T, flavor, extra, probeTool string) *servedGateway {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg, err := config.Parse("serve.yaml", []byte(fmt.Sprintf(`
listen: %s
%s
upstreams:
  - name: r
    command: %q
    env: {%s: %s, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
`, addr, extra, exe, testupstream.EnvFlavor, flavor, testupstream.EnvRun, testupstream.Marker)), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := serveConfig(t, cfg)
	waitFor(t, "the gateway to answer "+probeTool, func() bool {
		_, body := g.post(g.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+probeTool+`","arguments":{}}}`)
		return strings.Contains(body, `"result"`) && !strings.Contains(body, `"isError":true`)
	})
	return g
}

// serveConfig runs serveUntilDone on cfg, its log kept; the test's end stops it (two signals)
// if the test did not.
func serveConfig(t *testing.T, cfg *config.Config) *servedGateway {
	t.Helper()
	return serveReloading(t, cfg, nil)
}

// serveReloading is serveConfig with reloads.
func serveReloading(t *testing.T, cfg *config.Config, reloads *reloader) *servedGateway {
	t.Helper()
	g := &servedGateway{t: t, url: "http://" + cfg.Listen + "/mcp", signals: make(chan os.Signal, 2), done: make(chan struct{}), logs: &syncBuffer{}}
	go func() {
		defer close(g.done)
		g.err = serveUntilDone(g.signals, cfg, slog.New(slog.NewTextHandler(g.logs, nil)), reloads)
	}()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			g.signals <- syscall.SIGTERM
			g.signals <- syscall.SIGTERM
			<-g.done
		}
	})
	return g
}

// request is a POST of one JSON-RPC message to the gateway, within session sid ("" for none).
func (g *servedGateway) request(sid, body string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	return req
}

// post sends one JSON-RPC message and reads the whole answer; nil when the request failed.
func (g *servedGateway) post(sid, body string) (*http.Response, string) {
	resp, err := http.DefaultClient.Do(g.request(sid, body))
	if err != nil {
		return nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// startCall posts a request whose answer is a stream: inFlight is closed at its first progress
// notification, answered receives the whole body once it ends.
func (g *servedGateway) startCall(sid, body string) (inFlight <-chan struct{}, answered <-chan string) {
	progressed, done := make(chan struct{}), make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(g.request(sid, body))
		if err != nil {
			done <- "request failed: " + err.Error()
			return
		}
		defer resp.Body.Close()
		var all strings.Builder
		sc := bufio.NewScanner(resp.Body)
		once := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "notifications/progress") {
				once = true
				close(progressed)
			}
		}
		done <- all.String()
	}()
	return progressed, done
}

// waitFor checks cond every 10 ms until it holds, for at most 20 seconds: for what happens in
// another process, which has no event to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 20*time.Second, what, cond)
}

// waitWithin is waitFor with another bound.
func waitWithin(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, bound, what, cond)
}

// syncBuffer is a buffer safe for the logger's writes and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// initialize starts a session and returns its id ("" when the gateway refused).
func (g *servedGateway) initialize() string {
	resp, _ := g.post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if resp == nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	g.post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// stopped waits for serveUntilDone to return and checks that it stopped cleanly.
func (g *servedGateway) stopped() {
	g.t.Helper()
	select {
	case <-g.done:
		if g.err != nil {
			g.t.Fatalf("serve returned %v", g.err)
		}
	case <-time.After(30 * time.Second):
		g.t.Fatal("serve did not return")
	}
	if left := testupstream.Leftovers(testupstream.Marker); len(left) > 0 {
		g.t.Errorf("upstream processes left after serve returned: %v", left)
	}
	if !strings.Contains(g.logs.String(), "msg=\"gateway stopped\" drain=") {
		g.t.Errorf("no last line saying the gateway stopped and how long the drain took:\n%s", g.logs.String())
	}
}

// TestServeDrainsAndStopsUpstreams: with nothing in flight the drain ends at once, however
// long drain_timeout is; the open standalone stream ends and the upstream's process is reaped.
func TestServeDrainsAndStopsUpstreams(t *testing.T) {
	g := startServed(t, "alpha", "drain_timeout: 1h", "r__whoami")
	sid := g.initialize()
	req, _ := http.NewRequest(http.MethodGet, g.url, nil)
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

	g.signals <- syscall.SIGTERM
	select {
	case <-streamEnded:
	case <-time.After(20 * time.Second):
		t.Fatal("the drain did not close the open stream")
	}
	g.stopped()
}

// rpcAnswer is the JSON-RPC answer with the given id in an HTTP answer's body, JSON or SSE.
func rpcAnswer(t *testing.T, body string, id int) (code int64, message string) {
	t.Helper()
	candidates := []string{body}
	for line := range strings.SplitSeq(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			candidates = append(candidates, data)
		}
	}
	for _, c := range candidates {
		var m struct {
			ID    int `json:"id"`
			Error *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(c), &m) == nil && m.ID == id {
			if m.Error == nil {
				return 0, ""
			}
			return m.Error.Code, m.Error.Message
		}
	}
	t.Fatalf("no answer with id %d in %q", id, body)
	return 0, ""
}

// TestServeDrainTellsACallThatDidNotRun: a call still waiting for an operator's approval
// when the drain ends never reached its upstream, so its answer is -32009 (send it again),
// not -32010 (it may have run in part), which the call the upstream was running gets.
func TestServeDrainTellsACallThatDidNotRun(t *testing.T) {
	g := startServed(t, "reverse", fmt.Sprintf(`drain_timeout: 1h
admin:
  listen: %s
  api_keys: [{name: ops, hash: %q}]
policy:
  approval: {timeout: 1h, by: operator}
  rules: [{name: hold-progress, effect: approve, match: {tools: [progress]}}]`, freePort(t), auth.HashAPIKey("mfk_ops")), "r__cancels")
	sid := g.initialize()
	_, answered := g.startCall(sid, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"r__progress","arguments":{}}}`)
	waitFor(t, "the call to be held for approval", func() bool {
		return strings.Contains(g.logs.String(), "held for an operator's approval")
	})
	g.signals <- syscall.SIGTERM
	g.signals <- syscall.SIGINT
	select {
	case body := <-answered:
		if code, msg := rpcAnswer(t, body, 9); code != -32009 || !strings.Contains(msg, "did not run") {
			t.Errorf("the held call: code %d %q, want -32009 saying it did not run", code, msg)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held call was never answered")
	}
}

// TestServeDrainAnswersWhatIsStillRunning: during the drain the gateway still listens, /readyz
// answers 503, a new session and a new request get 503, and the call in flight goes on; when
// the drain ends (its time over, or a second signal) that call is answered with a JSON-RPC
// error on its stream, not cut off, and the upstream's process is reaped.
func TestServeDrainAnswersWhatIsStillRunning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extra  string
		second bool
	}{
		{"drain time over", "drain_timeout: 300ms", false},
		{"second signal", "drain_timeout: 1h", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startServed(t, "reverse", tc.extra, "r__cancels")
			sid := g.initialize()
			inFlight, answered := g.startCall(sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"r__hold","_meta":{"progressToken":"p"}}}`)
			select {
			case <-inFlight: // the upstream reported progress: the call runs there
			case <-time.After(20 * time.Second):
				t.Fatal("the held call never reached the upstream")
			}
			g.signals <- syscall.SIGTERM
			if tc.second {
				waitFor(t, "/readyz to answer 503", func() bool {
					resp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusServiceUnavailable
				})
				if resp, body := g.post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`); resp == nil || resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "-32009") {
					t.Errorf("initialize during the drain: %v %s, want 503 with -32009", resp, body)
				}
				if resp, body := g.post(sid, `{"jsonrpc":"2.0","id":8,"method":"ping"}`); resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
					t.Errorf("a new request during the drain: %v %s, want 503", resp, body)
				}
				select {
				case body := <-answered:
					t.Fatalf("the call in flight was answered before the drain ended: %s", body)
				default:
				}
				g.signals <- syscall.SIGINT
			}
			select {
			case body := <-answered:
				// Not -32009, which tells a client to send the request again: this one may
				// have run.
				if code, msg := rpcAnswer(t, body, 7); code != -32010 || !strings.Contains(msg, "shut down") || !strings.Contains(msg, "may have run") {
					t.Errorf("the call still running: code %d %q, want -32010 saying the gateway shut down and it may have run", code, msg)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the call still running was never answered")
			}
			g.stopped()
		})
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
    tools:
      exclude: [whoami]
      overrides:
        echo: {name: say}
  - name: broken
    command: /nonexistent/mcp-server
profiles:
  - name: bonly
    include:
      - upstream: beta
`, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker))
	// broken fails: the catalog of the others is printed, and the exit status says so.
	var out, errOut bytes.Buffer
	if code := run([]string{"catalog", "-config", cfg}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "an upstream is not ready") {
		t.Fatalf("catalog with an upstream down: exit %d, want 1 and a word on stderr\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		"tool      echo ", // alpha's, unprefixed
		"b__echo",
		"g__say ",
		"resource  file:///readme.txt",
		"template  g+file:///notes/{id}",
		"alpha: ready",
		"broken: down",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("catalog output lacks %q:\n%s", want, out.String())
		}
	}

	if strings.Contains(out.String(), "g__whoami") || strings.Contains(out.String(), "g__echo") {
		t.Errorf("catalog output has a tool the config drops or renames:\n%s", out.String())
	}

	// A profile's catalog: beta's items only.
	out.Reset()
	if code := run([]string{"catalog", "-profile", "bonly", "-config", cfg}, &out, io.Discard); code != 1 {
		t.Fatalf("catalog -profile with an upstream down: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "b__echo") || strings.Contains(out.String(), "g__say") || strings.Contains(out.String(), "tool      echo ") {
		t.Errorf("catalog -profile bonly lists more or less than beta's items:\n%s", out.String())
	}
	errOut.Reset()
	if code := run([]string{"catalog", "-profile", "nope", "-config", cfg}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), `no profile "nope"`) || !strings.Contains(errOut.String(), "bonly") {
		t.Errorf("catalog -profile nope: exit %d, stderr %q; want 2, naming the profiles", code, errOut.String())
	}

	out.Reset()
	if code := run([]string{"catalog", "-json", "-config", cfg}, &out, io.Discard); code != 1 {
		t.Fatalf("catalog -json with an upstream down: exit %d, want 1", code)
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
	if owners["echo"] != "alpha" || owners["b__add"] != "beta" || owners["g__say"] != "gamma" {
		t.Errorf("owners %v", owners)
	}
}

// TestExampleConfigServesTheDemo runs what the README's first command runs: the gateway with
// config.example.yaml (on a free port), which starts the demo server twice as the gateway's
// own program (command "@self"; this test binary stands for it, see TestMain). The first
// tools/list once the gateway is ready holds the demo's tools (it once came back empty while
// `go run` built the demo), and a client reaches demo__echo through /mcp.
func TestExampleConfigServesTheDemo(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "config.example.yaml"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg.Listen = addr
	// The example's admin listener and state directory, on this test's own.
	cfg.Admin.Listen, cfg.StateDir = freePort(t), t.TempDir()
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		if u.Env == nil {
			u.Env = map[string]string{}
		}
		u.Env[testupstream.EnvRun] = testupstream.Marker
	}
	g := serveConfig(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", g.logs.String())
		}
	})
	// Ready means listening, not the upstreams' state. The demo's upstreams are the
	// gateway's own program, started at once: the first list, which waits (first_list_wait)
	// for upstreams still starting, holds their tools, with no loop of the client's.
	waitWithin(t, time.Minute, "the gateway to be ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if _, body := g.post(g.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); !strings.Contains(body, `"demo__echo"`) || !strings.Contains(body, `"notes__say"`) {
		t.Fatalf("the first tools/list after the gateway is ready lacks the demo's tools: %s", body)
	}
	if _, body := g.post(g.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"hello demo"}}}`); !strings.Contains(body, "hello demo") {
		t.Errorf("demo__echo: %s", body)
	}
	// The example's shaping: notes' echo is called as notes__say; its add is not listed.
	if _, body := g.post(g.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notes__say","arguments":{"text":"hello notes"}}}`); !strings.Contains(body, "hello notes") {
		t.Errorf("notes__say: %s", body)
	}
	// The example's destructive tool waits for a person: this client cannot be asked, so
	// an operator approves it on the admin API, with the example's key.
	_, answered := g.startCall(g.initialize(), `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__delete_note","arguments":{"id":"7"}}}`)
	admin := func(method, path, body string) string {
		req, _ := http.NewRequest(method, "http://"+cfg.Admin.Listen+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer mfk_example-admin-key-replace-me")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return string(data)
	}
	var held struct {
		Approvals []struct{ ID, Tool, Rule string } `json:"approvals"`
	}
	waitFor(t, "demo__delete_note to be held for approval", func() bool {
		return json.Unmarshal([]byte(admin(http.MethodGet, "/api/approvals", "")), &held) == nil && len(held.Approvals) == 1
	})
	if a := held.Approvals[0]; a.Tool != "demo__delete_note" || a.Rule != "deletes-need-approval" {
		t.Errorf("held: %+v", a)
	}
	admin(http.MethodPost, "/api/approvals/"+held.Approvals[0].ID, `{"decision":"approve"}`)
	if got := <-answered; !strings.Contains(got, "deleted note 7") {
		t.Errorf("demo__delete_note, approved: %s", got)
	}
	sid := g.initialize()
	_, body := g.post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if strings.Contains(body, "notes__add") || strings.Contains(body, `"notes__echo"`) {
		t.Errorf("/mcp lists a tool the example drops or renames: %s", body)
	}
	// Its profile: /mcp/lean lists demo's echo and add, nothing else.
	lean := *g
	lean.url += "/lean"
	_, body = lean.post(lean.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var listed struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &listed); err != nil {
		t.Fatalf("tools/list on /mcp/lean: %v: %s", err, body)
	}
	var names []string
	for _, tool := range listed.Result.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"demo__add", "demo__echo"}) {
		t.Errorf("/mcp/lean lists %v, want [demo__add demo__echo]", names)
	}
	g.signals <- syscall.SIGTERM
	g.stopped()
}

func TestHealthURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/healthz"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/healthz"},
		{"http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/healthz"},
		{"http://127.0.0.1:8080/healthz", "http://127.0.0.1:8080/healthz"},
		{"https://gw.example.com/tools/readyz", "https://gw.example.com/tools/healthz"},
		{"127.0.0.1:8080", ""},
		{"ftp://gw/", ""},
	}
	for _, tc := range cases {
		got, err := healthURL(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("healthURL(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("healthURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestEndpointURLNamesLoopbackForAllInterfaces(t *testing.T) {
	cases := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080/mcp"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080/mcp"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000}, "http://127.0.0.1:9000/mcp"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 9000}, "http://[::1]:9000/mcp"},
	}
	for _, tc := range cases {
		if got := endpointURL(tc.addr); got != tc.want {
			t.Errorf("endpointURL(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestServeRefusesABadListenFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"serve", "-listen", "8080"}, &out, &out); code != 2 || !strings.Contains(out.String(), "want host:port") {
		t.Errorf("serve -listen 8080: exit %d, output %q; want 2 and what to write", code, out.String())
	}
}

// TestValidateChecksCommands: validate fails on a stdio command path that does not exist, is
// a directory or is not executable, naming the file and line; a bare name not on PATH is a
// warning only.
func TestValidateChecksCommands(t *testing.T) {
	dir := t.TempDir()
	program := filepath.Join(dir, "server")
	plain := filepath.Join(dir, "notes.txt")
	for path, mode := range map[string]os.FileMode{program: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	onPath := func(name string) (string, error) {
		if name == "installed-server" {
			return "/usr/bin/installed-server", nil
		}
		return "", exec.ErrNotFound
	}
	cases := []struct {
		name, command     string
		wantErr, wantWarn string
	}{
		{"an executable path", program, "", ""},
		{"a missing path", "/no/such/mcp-server", "cfg.yaml:2: up (upstreams[0]).command: /no/such/mcp-server does not exist", ""},
		{"a directory", dir, "is a directory", ""},
		{"a file that is not executable", plain, "is not executable", ""},
		{"a name on PATH", "installed-server", "", ""},
		{"a name not on PATH", "missing-server", "", `"missing-server" is not on the gateway's PATH`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("cfg.yaml", fmt.Appendf(nil, "upstreams:\n  - name: up\n    command: %q\n", tc.command), nil)
			if err != nil {
				t.Fatal(err)
			}
			errs, warnings := checkCommands(cfg, onPath)
			check := func(kind string, got []string, want string) {
				t.Helper()
				switch {
				case want == "" && len(got) > 0:
					t.Errorf("%s %q, want none", kind, got)
				case want != "" && (len(got) != 1 || !strings.Contains(got[0], want)):
					t.Errorf("%s %q, want one containing %q", kind, got, want)
				}
			}
			check("errors", errs, tc.wantErr)
			check("warnings", warnings, tc.wantWarn)
		})
	}

	// Through the command: exit 1 for a missing path.
	bad := writeFile(t, "bad.yaml", "upstreams:\n  - name: gone\n    command: /no/such/mcp-server\n")
	var out bytes.Buffer
	if code := run([]string{"validate", "-config", bad}, &out, &out); code != 1 || !strings.Contains(out.String(), "bad.yaml:2: gone (upstreams[0]).command: /no/such/mcp-server does not exist") {
		t.Errorf("validate with a missing command: exit %d\n%s", code, out.String())
	}
}

// TestContainerConfigServedByTheDockerfileBuild builds the gateway exactly as the Dockerfile
// does (scripts/build) and serves config.container.yaml with it, as the image does: the demo
// upstream is the binary itself (command "@self"), whatever PATH holds, here a directory
// without it; `gateway health -config` (the image's HEALTHCHECK) follows the config's port.
// Only the listen address is changed, to loopback: no test listens beyond it. No container
// engine runs here, so the image itself is not built.
func TestContainerConfigServedByTheDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway")
	}
	bin := t.TempDir()
	exe := filepath.Join(bin, "gateway")
	build := exec.Command("bash", filepath.Join("..", "..", "scripts", "build"), exe)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build: %v\n%s", err, out)
	}
	text, err := os.ReadFile(filepath.Join("..", "..", "config.container.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	if !bytes.Contains(text, []byte("listen: 0.0.0.0:8080\n")) {
		t.Fatal("config.container.yaml no longer listens on 0.0.0.0:8080: update this test")
	}
	cfg := writeFile(t, "container.yaml", string(bytes.Replace(text, []byte("listen: 0.0.0.0:8080\n"), []byte("listen: "+addr+"\n"), 1)))
	// No gateway on PATH: the demo upstream must not depend on where the image puts it.
	env := append(os.Environ(), "PATH="+t.TempDir())

	var logs syncBuffer
	serve := exec.Command(exe, "serve", "-config", cfg)
	serve.Env, serve.Stdout, serve.Stderr = env, &logs, &logs
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the gateway exited with %v after SIGTERM\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
			t.Error("the gateway did not stop on SIGTERM")
		}
	}()

	healthy := func() bool {
		check := exec.Command(exe, "health", "-config", cfg)
		check.Env = env
		return check.Run() == nil
	}
	waitFor(t, "gateway health -config to pass", healthy)

	g := &servedGateway{t: t, url: "http://" + addr + "/mcp"}
	var body string
	waitFor(t, "demo__echo through the container config", func() bool {
		_, body = g.post(g.initialize(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"from the image"}}}`)
		return strings.Contains(body, "from the image")
	})
}

// TestServeRefusesUnauthenticatedBeyondLoopback: with authentication off, -listen on all
// interfaces is refused before anything starts, saying how to fix it; the config's explicit
// opt-out allows it.
func TestServeRefusesUnauthenticatedBeyondLoopback(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte("upstreams: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run([]string{"serve", "-config", cfg, "-listen", "0.0.0.0:0"}, &out, &out); code != 1 || !strings.Contains(out.String(), "no authentication is configured") || !strings.Contains(out.String(), "allow_unauthenticated") {
		t.Errorf("serve -listen 0.0.0.0:0 without auth: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"validate", "-config", writeConfig(t, "listen: 0.0.0.0:8080\nupstreams: []\n")}, &out, &out); code != 1 || !strings.Contains(out.String(), "gw.yaml:1: listen:") {
		t.Errorf("validate of a config listening beyond loopback without auth: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"validate", "-config", writeConfig(t, "listen: 0.0.0.0:8080\nauth: {allow_unauthenticated: true}\nupstreams: []\n")}, &out, &out); code != 0 {
		t.Errorf("validate with the explicit opt-out: exit %d, output %q", code, out.String())
	}
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAPIKeyCommand: gateway apikey prints a key and the config entry holding its hash, and
// that entry authenticates the key.
func TestAPIKeyCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"apikey"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-name") {
		t.Errorf("apikey without -name: exit %d, %q", code, errOut.String())
	}
	if code := run([]string{"apikey", "-name", "ci-bot"}, &out, &errOut); code != 0 {
		t.Fatalf("apikey: exit %d, %q", code, errOut.String())
	}
	text := out.String()
	key := regexp.MustCompile(`mfk_[A-Za-z0-9_-]+`).FindString(text)
	hash := regexp.MustCompile(`sha256:[0-9a-f]{64}`).FindString(text)
	if key == "" || hash == "" || auth.HashAPIKey(key) != hash || !strings.Contains(text, "name: ci-bot") {
		t.Errorf("apikey printed %q: want a key, and an entry with its hash", text)
	}
	entry := text[strings.Index(text, "auth:"):]
	if code := run([]string{"validate", "-config", writeConfig(t, entry+"upstreams: []\n")}, io.Discard, &errOut); code != 0 {
		t.Errorf("the printed entry does not validate: %q", errOut.String())
	}
}

// TestExplainCommand: gateway explain names the deciding rule and why the rules before it did
// not match, for a principal and a call given on the command line.
func TestExplainCommand(t *testing.T) {
	cfg := writeConfig(t, fmt.Sprintf(`auth:
  api_keys: [{name: ci, hash: %q, groups: [eng]}]
upstreams:
  - {name: docs, command: x, trust_annotations: true}
policy:
  default: deny
  rules:
    - name: contractors-no-delete
      effect: hide
      match: {principal: {groups: [contractors]}, tools: ["delete_*"]}
    - name: read-only
      effect: allow
      match: {annotations: {readOnlyHint: true}}
`, auth.HashAPIKey("mfk_ci")))
	var out, errOut bytes.Buffer
	code := run([]string{"explain", "-config", cfg, "-api-key", "ci", "-upstream", "docs", "-tool", "search", "-annotations", `{"readOnlyHint":true}`}, &out, &errOut)
	if code != 0 {
		t.Fatalf("explain: exit %d, %s", code, errOut.String())
	}
	text := out.String()
	for _, want := range []string{"apikey:ci", "no  contractors-no-delete (", `"search" matches none of ["delete_*"]`, "YES read-only", "decision: allow by read-only"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain output lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if code := run([]string{"explain", "-config", cfg, "-subject", "sam", "-groups", "contractors", "-upstream", "docs", "-tool", "delete_all"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "decision: hide by contractors-no-delete") {
		t.Errorf("explain of a hidden tool: exit %d:\n%s", code, out.String())
	}
	if code := run([]string{"explain", "-config", cfg, "-upstream", "docs"}, io.Discard, &errOut); code != 2 {
		t.Errorf("explain without a target: exit %d, want 2", code)
	}
}

// TestValidateChecksPlugins: `gateway validate` finds a plugin program that is missing, not
// executable, or not the one whose SHA-256 the config names, at the plugin's line.
func TestValidateChecksPlugins(t *testing.T) {
	dir := t.TempDir()
	program, plain := filepath.Join(dir, "guard"), filepath.Join(dir, "notes.txt")
	for path, mode := range map[string]os.FileMode{program: 0o755, plain: 0o644} {
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256([]byte("#!/bin/sh\n"))
	good, wrong := hex.EncodeToString(sum[:]), strings.Repeat("0", 64)
	cases := []struct{ name, path, sum, want string }{
		{"the right program", program, good, ""},
		{"another program", program, wrong, "cfg.yaml:2: guard (plugins[0]).sha256: the program at " + program + " has SHA-256 " + good + ", not " + wrong},
		{"a missing program", filepath.Join(dir, "gone"), good, "does not exist"},
		{"a directory", dir, good, "is a directory"},
		{"a file that is not executable", plain, good, "is not executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("cfg.yaml", fmt.Appendf(nil, "plugins:\n  - {name: guard, path: %q, sha256: %s}\nupstreams: []\n", tc.path, tc.sum), nil)
			if err != nil {
				t.Fatal(err)
			}
			errs := checkPlugins(cfg)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("errors %q, want none", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.want)):
				t.Errorf("errors %q, want one containing %q", errs, tc.want)
			}
		})
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"github.com/manifold-mcp/manifold/upstream"
)

// fastRestart makes a failed upstream come back within a second.
var fastRestart = &gateway.Options{UpstreamOptions: &upstream.Options{RestartDelay: 100 * time.Millisecond, MaxRestartDelay: 400 * time.Millisecond}}

// goSDKHandler serves a go-sdk server of a test flavor over Streamable HTTP or legacy SSE.
func goSDKHandler(t *testing.T, flavor string, legacy bool) http.Handler {
	t.Helper()
	server, err := testupstream.New(flavor)
	if err != nil {
		t.Fatal(err)
	}
	if legacy {
		return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil)
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
}

func TestHTTPAndSSEUpstreams(t *testing.T) {
	streamable := httptest.NewServer(goSDKHandler(t, "alpha", false))
	defer streamable.Close()
	legacy := httptest.NewServer(goSDKHandler(t, "beta", true))
	defer legacy.Close()
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
upstreams:
  - name: remote
    url: %s
    headers: {X-Api-Key: "${API_KEY:-k}"}
  - name: old
    url: %s
    transport: auto
`, streamable.URL, legacy.URL), nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	for _, tc := range []struct{ tool, want string }{
		{"remote__echo", "alpha:x"},
		{"old__echo", "beta:x"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: map[string]any{"text": "x"}})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		if got := textOf(t, res); got != tc.want {
			t.Errorf("%s = %q, want %q", tc.tool, got, tc.want)
		}
	}
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "old+file:///notes/9"})
	if err != nil || res.Contents[0].Text != "beta note 9" {
		t.Errorf("template read over legacy SSE: %v %v", res, err)
	}
}

// TestLateUpstreamAppears starts an HTTP upstream three seconds after the gateway: the
// gateway serves meanwhile, and the client learns of the new tools by list_changed.
func TestLateUpstreamAppears(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the upstream starts

	tg := startGatewayNoWait(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: late\n    url: http://%s/mcp\n", addr), fastRestart)
	defer tg.close()
	changed := make(chan struct{}, 4)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	if list, err := cs.ListTools(ctx, nil); err != nil || len(list.Tools) != 0 {
		t.Fatalf("before the upstream is up: %v %v, want an empty list", list, err)
	}
	// The first attempt fails as soon as the connection is refused.
	testwait.Within(waitBound, func() bool { return tg.gw.UpstreamStatuses()["late"].State != upstream.StateStarting })
	if st := tg.gw.UpstreamStatuses()["late"].State; st != upstream.StateDown {
		t.Errorf("state %q before the upstream is up, want down", st)
	}

	time.Sleep(3 * time.Second) // the upstream starts late; this is the scenario, not an assertion
	upLn, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s again: %v", addr, err)
	}
	srv := &http.Server{Handler: goSDKHandler(t, "alpha", false)}
	go srv.Serve(upLn)
	defer srv.Close()

	select {
	case <-changed:
	case <-time.After(15 * time.Second):
		t.Fatal("no tools/list_changed after the upstream came up")
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "late__echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil || textOf(t, res) != "alpha:hello" {
		t.Fatalf("late__echo: %v %v", res, err)
	}
}

// startGatewayNoWait is startGateway without waiting for the upstreams to be ready.
func startGatewayNoWait(t *testing.T, yaml string, opts *gateway.Options) *testGateway {
	t.Helper()
	return startGatewayWith(t, yaml, opts, false)
}

// TestKilledUpstreamComesBack kills a stdio upstream's whole process group — a wrapper
// script, the server it runs and a grandchild — in the middle of a run: only its calls fail,
// it is restarted, and nothing is left behind (TestMain checks that at the end).
func TestKilledUpstreamComesBack(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "wrapper.sh")
	// "; exit" keeps the shell from exec'ing the server: it stays a grandchild, like the sleep.
	script := "#!/bin/sh\nsleep 300 &\n\"$UPSTREAM_EXE\"; exit $?\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
upstreams:
  - name: wrapped
    command: %s
    env: {UPSTREAM_EXE: %q, %s: beta, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
%s`, wrapper, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker, upstreamYAML("alpha", "alpha", "")), fastRestart)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	call := func(tool string) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	if got := textOf(t, call("wrapped__echo")); got != "beta:x" {
		t.Fatalf("wrapped__echo = %q", got)
	}

	pgid := wrapperGroup(t, wrapper)
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the upstream's group: %v", err)
	}
	// Until it is back, its calls fail as unavailable; the other upstream is untouched.
	sawDown := false
	if !testwait.Within(15*time.Second, func() bool {
		res := call("wrapped__echo")
		if !res.IsError && textOf(t, res) == "beta:x" && sawDown {
			return true
		}
		if res.IsError {
			sawDown = true
			if !strings.Contains(textOf(t, res), "unavailable") {
				t.Errorf("while down: %q, want unavailable", textOf(t, res))
			}
		}
		if got := textOf(t, call("alpha__echo")); got != "alpha:x" {
			t.Errorf("alpha__echo while wrapped is down = %q", got)
		}
		return false
	}) {
		t.Fatalf("the killed upstream did not come back (saw it down: %v)", sawDown)
	}
}

// wrapperGroup finds the process group of the running wrapper script.
func wrapperGroup(t *testing.T, wrapper string) int {
	t.Helper()
	for _, pid := range testupstream.Leftovers(testupstream.Marker) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), wrapper) {
			pgid, err := syscall.Getpgid(pid)
			if err != nil {
				t.Fatal(err)
			}
			return pgid
		}
	}
	t.Fatal("the wrapper script is not running")
	return 0
}

func TestHealthEndpoints(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	tg := startGatewayNoWait(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("alpha", "alpha", "")+
		"\n  - name: gone\n    url: "+downURL+"\n"+
		"  - name: quitter\n    command: sh\n    args: [-c, 'echo \"fatal: no key in /etc/quitter\" >&2; exit 3']\n", fastRestart)
	defer tg.close()
	base := strings.TrimSuffix(tg.url, "/mcp")

	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	var ready struct {
		Status    string `json:"status"`
		Upstreams map[string]struct {
			State    string `json:"state"`
			Error    string `json:"error"`
			Reason   string `json:"reason"`
			ExitCode *int   `json:"exit_code"`
		} `json:"upstreams"`
	}
	var readyBody []byte
	if !testwait.Within(15*time.Second, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz answered %d with one upstream down: %s", resp.StatusCode, body)
		}
		if err := json.Unmarshal(body, &ready); err != nil {
			t.Fatal(err)
		}
		readyBody = body
		return ready.Upstreams["alpha"].State == "ready" && ready.Upstreams["gone"].State == "down" && ready.Upstreams["quitter"].State == "down"
	}) {
		t.Fatalf("/readyz never showed alpha ready and gone down: %s", readyBody)
	}
	// A probe learns why in a word; the error, with the upstream's address, stays in the log
	// and in `gateway catalog`.
	if ready.Status != "ready" || ready.Upstreams["gone"].Reason != upstream.ReasonUnreachable || ready.Upstreams["gone"].Error != "" {
		t.Errorf("readyz %+v: want status ready, reason %q and no error text for the down upstream", ready, upstream.ReasonUnreachable)
	}
	if u := strings.TrimPrefix(downURL, "http://"); strings.Contains(string(readyBody), u) {
		t.Errorf("/readyz names the upstream's address %s: %s", u, readyBody)
	}
	if st := tg.gw.UpstreamStatuses()["gone"]; !strings.Contains(st.Error, strings.TrimPrefix(downURL, "http://")) {
		t.Errorf("the operator's status of the down upstream lacks the error naming its address: %+v", st)
	}
	// A process that exited: its status in the probe, its stderr only for the operator.
	if q := ready.Upstreams["quitter"]; q.Reason != upstream.ReasonExited || q.ExitCode == nil || *q.ExitCode != 3 || strings.Contains(string(readyBody), "fatal") {
		t.Errorf("/readyz for a process that exited 3: %+v, want reason exited and exit code 3, and no stderr in %s", q, readyBody)
	}
	if st := tg.gw.UpstreamStatuses()["quitter"]; !strings.Contains(st.Error, "fatal: no key in /etc/quitter") {
		t.Errorf("the operator's status of the exited upstream lacks its last stderr line: %+v", st)
	}

	// On a loopback listener the probes answer only loopback names, as /mcp does: a page using
	// DNS rebinding must not read them.
	for _, path := range []string{"/healthz", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Host = "rebound.example:80"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with Host rebound.example: %d, want 403", path, resp.StatusCode)
		}
	}
	if !slices.Contains([]string{"ready"}, ready.Upstreams["alpha"].State) {
		t.Errorf("alpha %+v", ready.Upstreams["alpha"])
	}
}

func TestNameCollisionConfigOrderWins(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+
		upstreamYAML("collide", "collide", "    prefix: \"\"\n")+upstreamYAML("beta", "beta", ""), nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "collide:x" {
		t.Errorf("beta__echo answered %q: the upstream listed first must win", got)
	}
	view := tg.gw.Catalog()
	want := gateway.Collision{Kind: "tool", Name: "beta__echo", KeptUpstream: "collide", DroppedUpstream: "beta", DroppedOriginal: "echo"}
	if !slices.Contains(view.Collisions, want) {
		t.Errorf("collisions %+v, want %+v", view.Collisions, want)
	}
}

// TestOversizedAnswerFailsOnlyItsCall: an answer over max_response_bytes is an error for that
// call; the stdio upstream serves on.
func TestOversizedAnswerFailsOnlyItsCall(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("fragile", "fragile", "    max_response_bytes: 10000\n"), nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__big"})
	if err == nil || !strings.Contains(err.Error(), "max_response_bytes") {
		t.Fatalf("big answer: err = %v, want a max_response_bytes error", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__ok"})
	if err != nil || textOf(t, res) != "ok" {
		t.Errorf("after the oversized answer: %v %v", res, err)
	}
	if st := tg.gw.UpstreamStatuses()["fragile"].State; st != upstream.StateReady {
		t.Errorf("upstream state %q, want ready", st)
	}
}

// TestFirstListWaitsForUpstreamsStillStarting: a client that connects while an upstream is
// still making its first start (this one takes a second) sees its tools in its first list,
// without waiting for list_changed, which some hosts ignore.
func TestFirstListWaitsForUpstreamsStillStarting(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
first_list_wait: 30s
upstreams:
  - name: slow
    command: sh
    args: [-c, 'sleep 1; exec "$EXE"']
    env: {EXE: %q, %s: alpha, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
`, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker)
	tg := startGatewayNoWait(t, yaml, nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "slow__echo") {
		t.Errorf("first tools/list right after start: %v, want slow__echo among them", names)
	}
}

package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// runMarker tags every process this test binary starts, so that TestMain can prove none is
// left behind. Tests that check their own processes use markers of their own, made by
// newMarker, which TestMain checks as well.
var runMarker = testupstream.Marker

var markers struct {
	sync.Mutex
	extra []string
}

// newMarker returns a marker for the processes of one test.
func newMarker() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	m := runMarker + "-" + hex.EncodeToString(b[:])
	markers.Lock()
	markers.extra = append(markers.extra, m)
	markers.Unlock()
	return m
}

func TestMain(m *testing.M) {
	code := testupstream.RunTests(m, nil)
	markers.Lock()
	extra := slices.Clone(markers.extra)
	markers.Unlock()
	for _, marker := range extra {
		if left := waitNoLeftovers(marker, 5*time.Second); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: upstream processes left behind (marker %s): %v\n", marker, left)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeftovers waits up to limit for the processes carrying marker to be gone, and returns
// those still there. A SIGKILLed process dies asynchronously, hence the wait.
func waitNoLeftovers(marker string, limit time.Duration) []int {
	var left []int
	testwait.Within(limit, func() bool {
		left = testupstream.Leftovers(marker)
		return len(left) == 0
	})
	return left
}

// waitTimeout bounds every wait for something an upstream does.
const waitTimeout = 10 * time.Second

// waitUntil polls cond until it holds, failing the test after waitTimeout.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, waitTimeout, what, cond)
}

// goSpec runs this test binary as the go-sdk test upstream of flavor.
func goSpec(t *testing.T, flavor string) Spec {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Spec{
		Name:    flavor,
		Command: exe,
		Env: map[string]string{
			testupstream.EnvFlavor: flavor,
			testupstream.EnvRun:    runMarker,
			// Under -race a child lingers a second at exit by default, which slows every Close.
			"GORACE": strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0"),
		},
		// A child built with -cover leaves its coverage where the run's goes.
		InheritEnv: []string{"GOCOVERDIR"},
	}
}

// fakeSpec runs testdata/fake_upstream.sh in mode; its log of what it read is at logPath.
func fakeSpec(t *testing.T, mode string, env map[string]string) (spec Spec, logPath string) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "fake_upstream.sh"))
	if err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(t.TempDir(), "read.log")
	spec = Spec{
		Name:    "fake-" + mode,
		Command: "bash",
		Args:    []string{script},
		Env:     map[string]string{"FAKE_MODE": mode, "FAKE_LOG": logPath, testupstream.EnvRun: runMarker},
	}
	for k, v := range env {
		spec.Env[k] = v
	}
	return spec, logPath
}

// start runs c until the test ends.
func start(t *testing.T, c *Client) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(context.Background())
	}()
	t.Cleanup(func() {
		c.Close()
		<-done
	})
}

// recorder is an OnChange callback that remembers the state and tool names at each call.
type recorder struct {
	mu    sync.Mutex
	calls []change
}

type change struct {
	State State
	Tools []string
}

func (r *recorder) onChange(c *Client) {
	ch := change{State: c.State(), Tools: keys(c.Catalog().List(Tools))}
	r.mu.Lock()
	r.calls = append(r.calls, ch)
	r.mu.Unlock()
}

func (r *recorder) changes() []change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// states returns the states OnChange saw, runs of one state collapsed.
func (r *recorder) states() []State {
	var states []State
	for _, ch := range r.changes() {
		if len(states) == 0 || states[len(states)-1] != ch.State {
			states = append(states, ch.State)
		}
	}
	return states
}

func keys(items []Item) []string {
	var ks []string
	for _, it := range items {
		ks = append(ks, it.Key)
	}
	return ks
}

// logRecorder is a slog.Handler that keeps "LEVEL message" of every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }

// Handle keeps each record as "LEVEL message key=value ...".
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, line)
	h.mu.Unlock()
	return nil
}

// count is how many records have exactly the level and message of rec ("LEVEL message").
func (h *logRecorder) count(rec string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r == rec || strings.HasPrefix(r, rec+" ") {
			n++
		}
	}
	return n
}

// matching returns the records that start with prefix.
func (h *logRecorder) matching(prefix string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// readLog returns the messages an upstream script logged as read, each decoded; nothing while
// the log does not exist yet.
func readLog(path string) []map[string]any {
	data, _ := os.ReadFile(path)
	var msgs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			// The last line may still be half written.
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// findLogged waits for a message the script logged that match accepts, and returns it.
func findLogged(t *testing.T, path, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	var found map[string]any
	waitUntil(t, what, func() bool {
		for _, m := range readLog(path) {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// toolResult is the part of a tools/call result the tests read.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError,omitempty"`
}

func callTool(t *testing.T, c *Client, name string, args any) (toolResult, error) {
	t.Helper()
	params, err := json.Marshal(map[string]any{"name": name, "arguments": args})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.Call(t.Context(), protocol.MethodCallTool, params)
	if err != nil {
		return toolResult{}, err
	}
	var res toolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("tools/call %s: malformed result %s: %v", name, raw, err)
	}
	return res, nil
}

func textResult(s string) toolResult {
	var r toolResult
	r.Content = append(r.Content, struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", s})
	return r
}

func TestClientServesAlpha(t *testing.T) {
	rec := &recorder{}
	c := New(goSpec(t, "alpha"), &Options{OnChange: rec.onChange})
	if got := c.State(); got != StateStarting {
		t.Errorf("State() before Run = %q, want %q", got, StateStarting)
	}
	if c.Catalog() != nil || c.Server() != nil {
		t.Errorf("before Run: Catalog() = %v, Server() = %v; want both nil", c.Catalog(), c.Server())
	}
	if _, err := c.Call(t.Context(), protocol.MethodPing, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call before Run: error %v, want ErrUnavailable", err)
	}
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	gotCatalog := map[string][]string{}
	for _, k := range Kinds {
		ks := keys(c.Catalog().List(k))
		slices.Sort(ks)
		gotCatalog[k.String()] = ks
	}
	wantCatalog := map[string][]string{
		"tools":              {"echo", "whoami"},
		"resources":          {"file:///readme.txt"},
		"resource templates": {"file:///notes/{id}"},
		"prompts":            {"greet"},
	}
	if diff := cmp.Diff(wantCatalog, gotCatalog); diff != "" {
		t.Errorf("Catalog() keys mismatch (-want +got):\n%s", diff)
	}

	server := c.Server()
	if server == nil {
		t.Fatal("Server() = nil while ready")
	}
	gotServer := []string{server.ProtocolVersion, server.ServerInfo.Name, server.Instructions}
	wantServer := []string{"2025-11-25", "test-alpha", "instructions of alpha"}
	if diff := cmp.Diff(wantServer, gotServer); diff != "" {
		t.Errorf("Server() protocolVersion, serverInfo.name, instructions mismatch (-want +got):\n%s", diff)
	}
	if server.Capabilities.Tools == nil || server.Capabilities.Resources == nil || server.Capabilities.Prompts == nil {
		t.Errorf("Server().Capabilities = %+v, want tools, resources and prompts", server.Capabilities)
	}

	calls := []struct {
		name   string
		method string
		params string
		want   any // decoded JSON result
	}{
		{"echo", protocol.MethodCallTool, `{"name":"echo","arguments":{"text":"hello"}}`,
			map[string]any{"content": []any{map[string]any{"type": "text", "text": "alpha:hello"}}}},
		{"whoami", protocol.MethodCallTool, `{"name":"whoami","arguments":{}}`,
			map[string]any{"content": []any{map[string]any{"type": "text", "text": "alpha"}}}},
		{"read resource", protocol.MethodReadResource, `{"uri":"file:///notes/7"}`,
			map[string]any{"contents": []any{map[string]any{"uri": "file:///notes/7", "mimeType": "text/plain", "text": "alpha note 7"}}}},
		{"ping", protocol.MethodPing, ``, map[string]any{}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := c.Call(t.Context(), tc.method, json.RawMessage(tc.params))
			if err != nil {
				t.Fatalf("Call(%s) error: %v", tc.method, err)
			}
			var got any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("Call(%s) result %s: %v", tc.method, raw, err)
			}
			// Keep to the fields the case names; the SDK may add others.
			if m, ok := got.(map[string]any); ok {
				for k := range m {
					if _, want := tc.want.(map[string]any)[k]; !want {
						delete(m, k)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Call(%s) result mismatch (-want +got):\n%s", tc.method, diff)
			}
		})
	}

	t.Run("upstream error", func(t *testing.T) {
		_, err := c.Call(t.Context(), "no/such/method", nil)
		var rpcErr *protocol.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != protocol.CodeMethodNotFound {
			t.Errorf("Call(no/such/method) error = %v, want a *protocol.Error with code %d", err, protocol.CodeMethodNotFound)
		}
		if c.State() != StateReady {
			t.Errorf("State() after an error response = %q, want %q", c.State(), StateReady)
		}
	})

	c.Close()
	if got := c.State(); got != StateClosed {
		t.Errorf("State() after Close = %q, want %q", got, StateClosed)
	}
	if diff := cmp.Diff([]State{StateReady, StateClosed}, rec.states()); diff != "" {
		t.Errorf("states seen by OnChange mismatch (-want +got):\n%s", diff)
	}
	if _, err := c.Call(t.Context(), protocol.MethodPing, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call after Close: error %v, want ErrUnavailable", err)
	}
	if c.Catalog() != nil || c.Server() != nil {
		t.Errorf("after Close: Catalog() = %v, Server() = %v; want both nil", c.Catalog(), c.Server())
	}
}

func TestClientRefetchesOnListChanged(t *testing.T) {
	rec := &recorder{}
	c := New(goSpec(t, "many"), &Options{OnChange: rec.onChange})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
	before := keys(c.Catalog().List(Tools))
	if len(before) != 26 || slices.Contains(before, "added_1") {
		t.Fatalf("tools before add_tool = %v, want tool_00…tool_24 and add_tool", before)
	}

	got, err := callTool(t, c, "add_tool", map[string]any{})
	if err != nil {
		t.Fatalf("add_tool: %v", err)
	}
	if diff := cmp.Diff(textResult("added_1"), got); diff != "" {
		t.Errorf("add_tool result mismatch (-want +got):\n%s", diff)
	}
	// OnChange must run once the refetched list is published.
	waitUntil(t, "OnChange with added_1 in the tools", func() bool {
		for _, ch := range rec.changes() {
			if slices.Contains(ch.Tools, "added_1") {
				return true
			}
		}
		return false
	})
	after := keys(c.Catalog().List(Tools))
	if want := append(slices.Clone(before), "added_1"); !cmp.Equal(sorted(want), sorted(after)) {
		t.Errorf("tools after add_tool = %v, want %v", after, want)
	}
	got, err = callTool(t, c, "added_1", map[string]any{})
	if err != nil {
		t.Fatalf("added_1: %v", err)
	}
	if diff := cmp.Diff(textResult("added_1"), got); diff != "" {
		t.Errorf("added_1 result mismatch (-want +got):\n%s", diff)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestClientRestartsAfterCrash(t *testing.T) {
	rec := &recorder{}
	c := New(goSpec(t, "fragile"), &Options{
		OnChange:        rec.onChange,
		RestartDelay:    50 * time.Millisecond,
		MaxRestartDelay: 100 * time.Millisecond,
	})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	// The process exits while the call runs: the call went out and may have run in part.
	if _, err := callTool(t, c, "crash", map[string]any{}); !errors.Is(err, ErrInterrupted) || errors.Is(err, ErrUnavailable) {
		t.Errorf("crash: error %v, want one wrapping ErrInterrupted, not ErrUnavailable", err)
	}
	want := []State{StateReady, StateDown, StateReady}
	waitUntil(t, "ready, down, ready again", func() bool { return len(rec.states()) >= len(want) })
	if diff := cmp.Diff(want, rec.states()); diff != "" {
		t.Errorf("states seen by OnChange mismatch (-want +got):\n%s", diff)
	}
	got, err := callTool(t, c, "ok", map[string]any{})
	if err != nil {
		t.Fatalf("ok after restart: %v", err)
	}
	if diff := cmp.Diff(textResult("ok"), got); diff != "" {
		t.Errorf("ok result mismatch (-want +got):\n%s", diff)
	}
	if c.Catalog() == nil || c.Server() == nil {
		t.Errorf("after restart: Catalog() = %v, Server() = %v; want both set", c.Catalog(), c.Server())
	}
}

func TestClientCallTimeout(t *testing.T) {
	spec, logPath := fakeSpec(t, "hang", nil)
	spec.RequestTimeout = 300 * time.Millisecond
	c := New(spec, nil)
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	// calledID returns the upstream id of the tools/call that carried tag.
	calledID := func(t *testing.T, tag string) float64 {
		m := findLogged(t, logPath, "tools/call "+tag, func(m map[string]any) bool {
			p, _ := m["params"].(map[string]any)
			args, _ := p["arguments"].(map[string]any)
			return m["method"] == protocol.MethodCallTool && args["tag"] == tag
		})
		id, _ := m["id"].(float64)
		return id
	}

	tests := []struct {
		name string
		// ctx returns the context of the call; it may cancel it once the upstream has the call.
		ctx     func(t *testing.T) context.Context
		wantErr error
	}{
		{
			name:    "request timeout",
			ctx:     func(t *testing.T) context.Context { return t.Context() },
			wantErr: ErrTimeout,
		},
		{
			name: "caller cancels",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				go func() {
					defer cancel()
					if !testwait.Within(waitTimeout, func() bool {
						for _, m := range readLog(logPath) {
							p, _ := m["params"].(map[string]any)
							args, _ := p["arguments"].(map[string]any)
							if args["tag"] == t.Name() {
								return true
							}
						}
						return ctx.Err() != nil
					}) {
						t.Errorf("the call never reached the upstream within %s", waitTimeout)
					}
				}()
				return ctx
			},
			wantErr: context.Canceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			params, _ := json.Marshal(map[string]any{"name": "slow", "arguments": map[string]any{"tag": t.Name()}})
			_, err := c.Call(tc.ctx(t), protocol.MethodCallTool, params)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Call error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != ErrTimeout && errors.Is(err, ErrTimeout) {
				t.Errorf("Call error = %v, want no ErrTimeout", err)
			}
			id := calledID(t, t.Name())
			findLogged(t, logPath, fmt.Sprintf("notifications/cancelled for request %v", id), func(m map[string]any) bool {
				p, _ := m["params"].(map[string]any)
				return m["method"] == protocol.NotificationCancelled && p["requestId"] == id
			})
			// One unanswered call does not end the connection.
			if _, err := c.Call(t.Context(), protocol.MethodPing, nil); err != nil {
				t.Errorf("ping after the abandoned call: %v", err)
			}
			if got := c.State(); got != StateReady {
				t.Errorf("State() = %q, want %q", got, StateReady)
			}
		})
	}
}

// alive reports whether pid is a running process (a zombie counts as gone).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	end := bytes.LastIndexByte(stat, ')')
	fields := bytes.Fields(stat[end+1:])
	return len(fields) > 0 && string(fields[0]) != "Z"
}

func TestClientCloseKillsStubbornProcessGroup(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to find processes")
	}
	marker := newMarker()
	pidsPath := filepath.Join(t.TempDir(), "pids")
	spec, _ := fakeSpec(t, "stubborn", map[string]string{"FAKE_PIDS": pidsPath, testupstream.EnvRun: marker})
	c := New(spec, &Options{StopGrace: 200 * time.Millisecond})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	data, err := os.ReadFile(pidsPath)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids file %q: %v", data, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("pids file %q, want the script's and its grandchild's", data)
	}
	if got := sorted(intsToStrings(testupstream.Leftovers(marker))); !cmp.Equal(sorted(intsToStrings(pids)), got) {
		t.Fatalf("processes with the test's marker = %v, want the script and its grandchild %v", got, pids)
	}

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	// StopGrace is 200ms twice; anything near the bound means SIGKILL never came.
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s with StopGrace 200ms")
	}
	if left := waitNoLeftovers(marker, 2*time.Second); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d still running after Close", pid)
		}
	}
}

func intsToStrings(ns []int) []string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return s
}

// TestClientSkipsGarbageLines: lines that are not JSON-RPC and messages over the size limit
// are skipped, and warned of at most once a second each, however many the upstream writes
// (the clock stands still here).
func TestClientSkipsGarbageLines(t *testing.T) {
	logs := &logRecorder{}
	spec, _ := fakeSpec(t, "noisy", map[string]string{"FAKE_BIG": "70000", "FAKE_GARBAGE": "2000"})
	spec.MaxMessageBytes = 4096
	now := time.Unix(1000, 0)
	c := New(spec, &Options{Logger: slog.New(logs), Now: func() time.Time { return now }})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	if diff := cmp.Diff([]string{"slow"}, keys(c.Catalog().List(Tools))); diff != "" {
		t.Errorf("tools mismatch (-want +got):\n%s", diff)
	}
	for _, rec := range []string{
		"WARN upstream wrote something that is not a JSON-RPC message; it was skipped",
		"WARN upstream sent a message over the size limit; it was dropped",
	} {
		if n := logs.count(rec); n != 1 {
			t.Errorf("log has %d × %q, want 1", n, rec)
		}
	}
}

func TestClientDrainsLongStderrLines(t *testing.T) {
	// A stderr line longer than any buffer must not stop the client from reading stderr:
	// a child blocked writing to a full stderr pipe never answers.
	spec, _ := fakeSpec(t, "chatty", map[string]string{"FAKE_BIG": "200000"})
	spec.InitializeTimeout = 5 * time.Second
	c := New(spec, nil)
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
}

func TestClientCommandMissing(t *testing.T) {
	logs := &logRecorder{}
	rec := &recorder{}
	spec := Spec{Name: "missing", Command: filepath.Join(t.TempDir(), "no-such-upstream")}
	c := New(spec, &Options{
		Logger:          slog.New(logs),
		OnChange:        rec.onChange,
		RestartDelay:    10 * time.Millisecond,
		MaxRestartDelay: 20 * time.Millisecond,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(context.Background())
	}()
	t.Cleanup(func() { c.Close() })

	waitUntil(t, "state down", func() bool { return c.State() == StateDown })
	if _, err := c.Call(t.Context(), protocol.MethodPing, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Call: error %v, want ErrUnavailable", err)
	}
	// Run keeps trying: each attempt is logged (the repeats at debug level).
	const attempt = "upstream failed to start"
	waitUntil(t, "three start attempts", func() bool {
		return logs.count("WARN "+attempt)+logs.count("DEBUG "+attempt) >= 3
	})
	if n := logs.count("WARN " + attempt); n != 1 {
		t.Errorf("%q logged %d times at warning level, want once", attempt, n)
	}

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	for what, ch := range map[string]chan struct{}{"Close": closed, "Run": done} {
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s did not return within 2s of Close", what)
		}
	}
	if got := c.State(); got != StateClosed {
		t.Errorf("State() after Close = %q, want %q", got, StateClosed)
	}
	// OnChange is documented to run after every state change.
	if diff := cmp.Diff([]State{StateDown, StateClosed}, rec.states()); diff != "" {
		t.Errorf("states seen by OnChange mismatch (-want +got):\n%s", diff)
	}
}

func TestClientReverseRequests(t *testing.T) {
	type response struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Result  any    `json:"result,omitempty"`
		Error   *struct {
			Code int64 `json:"code"`
		} `json:"error,omitempty"`
	}
	errCode := func(code int64) *struct {
		Code int64 `json:"code"`
	} {
		return &struct {
			Code int64 `json:"code"`
		}{code}
	}
	sampled := map[string]any{
		"role":    "assistant",
		"content": map[string]any{"type": "text", "text": "hello from the client"},
		"model":   "test-model",
	}
	tests := []struct {
		name      string
		onRequest func(ctx context.Context, c *Client, req *protocol.Request) (json.RawMessage, error)
		want      response
	}{
		{
			name: "no callback",
			want: response{JSONRPC: "2.0", ID: "s1", Error: errCode(protocol.CodeMethodNotFound)},
		},
		{
			name: "callback result",
			onRequest: func(ctx context.Context, c *Client, req *protocol.Request) (json.RawMessage, error) {
				return json.Marshal(sampled)
			},
			want: response{JSONRPC: "2.0", ID: "s1", Result: sampled},
		},
		{
			name: "callback protocol error",
			onRequest: func(ctx context.Context, c *Client, req *protocol.Request) (json.RawMessage, error) {
				return nil, protocol.Errorf(protocol.CodeInvalidParams, "the user declined")
			},
			want: response{JSONRPC: "2.0", ID: "s1", Error: errCode(protocol.CodeInvalidParams)},
		},
		{
			name: "callback plain error",
			onRequest: func(ctx context.Context, c *Client, req *protocol.Request) (json.RawMessage, error) {
				return nil, errors.New("no client session to ask")
			},
			want: response{JSONRPC: "2.0", ID: "s1", Error: errCode(protocol.CodeInternalError)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, logPath := fakeSpec(t, "reverse", nil)
			type seen struct {
				Client *Client
				ID     string
				Method string
				Params string
			}
			var mu sync.Mutex
			var got []seen
			opts := &Options{}
			if tc.onRequest != nil {
				opts.OnRequest = func(ctx context.Context, c *Client, req *protocol.Request, _ Origin) (json.RawMessage, error) {
					mu.Lock()
					got = append(got, seen{c, req.ID.String(), req.Method, string(req.Params)})
					mu.Unlock()
					return tc.onRequest(ctx, c, req)
				}
			}
			c := New(spec, opts)
			start(t, c)

			for _, want := range []response{tc.want, {JSONRPC: "2.0", ID: "p1", Result: map[string]any{}}} {
				m := findLogged(t, logPath, fmt.Sprintf("the response to %v", want.ID), func(m map[string]any) bool {
					_, hasMethod := m["method"]
					return m["id"] == want.ID && !hasMethod
				})
				raw, _ := json.Marshal(m)
				var resp response
				if err := json.Unmarshal(raw, &resp); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, resp); diff != "" {
					t.Errorf("response to %v mismatch (-want +got):\n%s", want.ID, diff)
				}
			}
			if tc.onRequest != nil {
				mu.Lock()
				defer mu.Unlock()
				want := []seen{{c, `"s1"`, protocol.MethodCreateMessage, `{"messages":[],"maxTokens":1}`}}
				if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b *Client) bool { return a == b })); diff != "" {
					t.Errorf("OnRequest calls mismatch (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestReasonOfClassesStartFailures: what a probe may show of a failure is one word; the error
// text stays with the operator.
func TestReasonOfClassesStartFailures(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"command missing", fmt.Errorf("start: %w", exec.ErrNotFound), ReasonCommandNotFound},
		{"path missing", fmt.Errorf("start: %w", fs.ErrNotExist), ReasonCommandNotFound},
		{"not executable", fmt.Errorf("start: %w", fs.ErrPermission), ReasonCommandNotFound},
		{"refused", fmt.Errorf("POST: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), ReasonUnreachable},
		{"initialize timed out", fmt.Errorf("initialize: %w", ErrTimeout), ReasonTimeout},
		{"anything else", errors.New("initialize: the upstream answered protocol version \"1999\""), ReasonStartFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := reasonOf(tc.err); got != tc.want {
				t.Errorf("reasonOf(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}

// TestClientReportsHowAChildExited: a stdio upstream that exits at start is down with reason
// "exited", its exit status, and an error carrying its last stderr lines (for the log and
// `gateway catalog`).
func TestClientReportsHowAChildExited(t *testing.T) {
	spec := Spec{Name: "quitter", Command: "sh", Args: []string{"-c", `echo "reading /etc/quitter.conf" >&2; echo "fatal: no API key" >&2; exit 3`}}
	c := New(spec, &Options{Logger: slog.New(&logRecorder{}), RestartDelay: time.Hour})
	go c.Run(context.Background())
	t.Cleanup(func() { c.Close() })

	waitUntil(t, "state down", func() bool { return c.State() == StateDown })
	st := c.Status()
	if st.Reason != ReasonExited || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Errorf("status %+v (exit code %v), want reason %q and exit code 3", st, st.ExitCode, ReasonExited)
	}
	for _, want := range []string{"exited with status 3", "reading /etc/quitter.conf | fatal: no API key"} {
		if !strings.Contains(st.Error, want) {
			t.Errorf("error %q lacks %q", st.Error, want)
		}
	}
}

// TestRetriesOfAFailingUpstreamAreQuiet: an upstream that fails to start, again and again, is
// logged in full once (its process, its stderr, the failure), its retries at debug level only;
// when it is ready at last, that line says after how many failed attempts.
func TestRetriesOfAFailingUpstreamAreQuiet(t *testing.T) {
	tries := filepath.Join(t.TempDir(), "tries")
	spec := goSpec(t, "alpha")
	exe := spec.Command
	spec.Name, spec.Command = "flaky", "sh"
	// Fails its first three starts, then runs the test upstream.
	spec.Args = []string{"-c", `echo x >> "$TRIES"; if [ "$(wc -l < "$TRIES")" -gt 3 ]; then exec "$EXE"; fi; echo "not yet" >&2; exit 1`}
	spec.Env["TRIES"], spec.Env["EXE"] = tries, exe
	logs := &logRecorder{}
	c := New(spec, &Options{Logger: slog.New(logs), RestartDelay: time.Millisecond, MaxRestartDelay: 2 * time.Millisecond})
	go c.Run(context.Background())
	t.Cleanup(func() { c.Close() })

	waitUntil(t, "the upstream ready after its failures", func() bool { return c.State() == StateReady })
	for _, msg := range []string{"upstream stderr", "upstream process exited", "upstream failed to start"} {
		if n := len(logs.matching("INFO "+msg)) + len(logs.matching("WARN "+msg)); n != 1 {
			t.Errorf("%q logged %d times at info or warning level over 3 failed attempts, want once:\n%s", msg, n, strings.Join(logs.matching(""), "\n"))
		}
	}
	ready := logs.matching("INFO upstream ready")
	if len(ready) != 1 || !strings.Contains(ready[0], "after_failed_attempts=3") {
		t.Errorf("ready lines %q, want one saying after_failed_attempts=3", ready)
	}
}

// TestInitializeTimeoutIsLoggedAsItsCause: a child that never answers initialize is stopped
// when its time to start is over. The failure says so first ("did not answer initialize
// within …; stopped it"), with the child's last stderr lines; it is a timeout, not a crash:
// no "process exited with status 0" (it exited because the gateway stopped it). The first
// start is given FirstInitializeTimeout, said in the log; later ones InitializeTimeout.
func TestInitializeTimeoutIsLoggedAsItsCause(t *testing.T) {
	spec, _ := fakeSpec(t, "mute", nil)
	spec.InitializeTimeout, spec.FirstInitializeTimeout = 300*time.Millisecond, 200*time.Millisecond
	logs := &logRecorder{}
	c := New(spec, &Options{Logger: slog.New(logs), RestartDelay: 10 * time.Millisecond, MaxRestartDelay: 20 * time.Millisecond, StopGrace: time.Second})
	start(t, c)

	waitUntil(t, "state down", func() bool { return c.State() == StateDown })
	st := c.Status()
	const first = "did not answer initialize within 200ms; stopped it"
	if !strings.HasPrefix(st.Error, first) || !strings.Contains(st.Error, "fetching the server, please wait") || strings.Contains(st.Error, "exited") {
		t.Errorf("error %q; want it to start with %q and carry the last stderr line, not an exit", st.Error, first)
	}
	if st.Reason != ReasonTimeout || st.ExitCode != nil {
		t.Errorf("status %+v (exit code %v), want reason %q and no exit code", st, st.ExitCode, ReasonTimeout)
	}
	if said := logs.matching("INFO first start"); len(said) != 1 || !strings.Contains(said[0], "initialize_timeout=200ms") {
		t.Errorf("log of the first start %q, want one line giving its initialize_timeout of 200ms", said)
	}
	waitUntil(t, "a later start, given initialize_timeout", func() bool {
		return strings.HasPrefix(c.Status().Error, "did not answer initialize within 300ms; stopped it")
	})
}

// TestFirstStartIsSharedByTheClientsOfAnUpstream: the Clients of one upstream (its shared
// connection and those of its isolated sessions) share one first start. Once a start of the
// upstream has ended, another Client's first start has InitializeTimeout, not
// FirstInitializeTimeout, and says nothing of a first start.
func TestFirstStartIsSharedByTheClientsOfAnUpstream(t *testing.T) {
	spec, _ := fakeSpec(t, "mute", nil)
	spec.InitializeTimeout, spec.FirstInitializeTimeout = 300*time.Millisecond, 200*time.Millisecond
	logs := &logRecorder{}
	opts := &Options{Logger: slog.New(logs), RestartDelay: time.Hour, StopGrace: time.Second, FirstStart: &FirstStart{}}
	shared := New(spec, opts)
	start(t, shared)
	waitUntil(t, "the shared connection's first start to fail", func() bool { return shared.State() == StateDown })
	if got := shared.Status().Error; !strings.HasPrefix(got, "did not answer initialize within 200ms") {
		t.Fatalf("the first start failed with %q, want the first start's bound of 200ms", got)
	}

	own := New(spec, opts) // a session's own connection, started later
	start(t, own)
	waitUntil(t, "the session connection's start to fail", func() bool { return own.State() == StateDown })
	if got := own.Status().Error; !strings.HasPrefix(got, "did not answer initialize within 300ms") {
		t.Errorf("a later Client's start failed with %q, want initialize_timeout's bound of 300ms", got)
	}
	if said := logs.matching("INFO first start"); len(said) != 1 {
		t.Errorf("log lines of a first start %q, want one, of the upstream's first start", said)
	}
}

// TestStartsBeforeTheFirstEndsAreFirstStarts: a start that begins while the upstream's first
// start still runs (an isolated session's connection opened meanwhile) may be waiting for the
// same fetch: it is a first start too, though only the first one says so in the log. A start
// that Close cut short is no end of one.
func TestStartsBeforeTheFirstEndsAreFirstStarts(t *testing.T) {
	var f FirstStart
	if first, announce := f.begin(); !first || !announce {
		t.Errorf("the first start: first %v, announce %v; want both", first, announce)
	}
	if first, announce := f.begin(); !first || announce {
		t.Errorf("a start while the first runs: first %v, announce %v; want a first start, not announced", first, announce)
	}
	if f.Over() {
		t.Error("Over before any start ended")
	}
	f.end()
	if first, announce := f.begin(); first || announce || !f.Over() {
		t.Errorf("a start after one ended: first %v, announce %v, over %v; want a later start", first, announce, f.Over())
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// echoServer is the echo-server binary built by TestMain, or "" when go is missing.
var echoServer string

// envFakeStdio makes the test binary act as a stdio server that answers initialize and
// exits at the next line (the helper-process pattern).
const envFakeStdio = "MCPLOAD_TEST_EXITING_SERVER"

func TestMain(m *testing.M) {
	testupstream.Main() // serve, when started as a go-sdk upstream by a stdio test
	if os.Getenv(envFakeStdio) != "" {
		exitingServer()
	}
	// Every process the tests start carries the marker, so RunTests can find leftovers.
	os.Setenv(testupstream.EnvRun, testupstream.Marker)
	dir, err := os.MkdirTemp("", "mcpload-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := exec.LookPath("go"); err == nil {
		exe := filepath.Join(dir, "echo-server")
		out, err := exec.Command("go", "build", "-o", exe, "../echo-server").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build echo-server: %v\n%s", err, out)
			os.Exit(1)
		}
		echoServer = exe
	}
	os.Exit(testupstream.RunTests(m, func() { os.RemoveAll(dir) }))
}

// fakeServer is a Streamable HTTP echo endpoint whose faults are chosen per call: call n
// (counted from 1 across all sessions) gets the fault fault(n) returns.
type fakeServer struct {
	t     *testing.T
	sse   bool                 // answer with SSE streams instead of JSON
	fault func(n int64) string // "", "wrong", "rpc", "500" or "hang"; nil means none
	tools int                  // the number of tools tools/list lists
	// bearer, when set, is the token every request must carry as "Authorization: Bearer
	// <bearer>"; a request without it gets 401 and is counted in unauthorized.
	bearer string
	// modern makes the fake a 2026-07-28 server: it opens no session, and every request must
	// carry the version, capabilities and client info in its _meta and headers that match
	// its body (a request that does not gets 400 and is counted in malformed).
	modern bool

	malformed atomic.Int64

	unauthorized atomic.Int64

	calls   atomic.Int64
	opened  atomic.Int64
	deleted atomic.Int64
	// mu guards sessions.
	mu       sync.Mutex
	sessions map[string]bool
}

// fakeVersion is the protocol version the fake negotiates; mcpload must send it back.
const fakeVersion = "2025-06-18"

func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	f.t = t
	f.sessions = make(map[string]bool)
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.bearer != "" && (len(r.Header.Values("Authorization")) != 1 || r.Header.Get("Authorization") != "Bearer "+f.bearer) {
		f.unauthorized.Add(1)
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	session := r.Header.Get("MCP-Session-Id")
	f.mu.Lock()
	known := f.sessions[session]
	f.mu.Unlock()
	if r.Method == http.MethodDelete {
		if !known {
			http.Error(w, "unknown session", http.StatusNotFound)
			return
		}
		f.mu.Lock()
		delete(f.sessions, session)
		f.mu.Unlock()
		f.deleted.Add(1)
		return
	}
	var msg struct {
		ID     json.RawMessage
		Method string
		Params *fakeParams
	}
	if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.modern {
		if problem := modernProblem(r.Header, msg.Method, msg.Params); problem != "" {
			f.malformed.Add(1)
			http.Error(w, problem, http.StatusBadRequest)
			return
		}
		msg.Params.Meta = nil
		if msg.Method == "tools/list" {
			msg.Params = nil
		}
		known = true
		r.Header.Set("MCP-Protocol-Version", fakeVersion)
	}
	if msg.Params == nil && msg.Method != "tools/list" && msg.Method != "notifications/initialized" ||
		msg.Params != nil && msg.Method == "tools/list" {
		http.Error(w, "params missing, or given to tools/list", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Content-Type") != "application/json" || !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		http.Error(w, "bad Content-Type or Accept", http.StatusNotAcceptable)
		return
	}
	if msg.Method == "initialize" {
		id := fmt.Sprintf("session-%d", f.opened.Add(1))
		f.mu.Lock()
		f.sessions[id] = true
		f.mu.Unlock()
		w.Header().Set("MCP-Session-Id", id)
		f.answer(w, msg.ID, `{"protocolVersion":"`+fakeVersion+`","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`)
		return
	}
	if !known || r.Header.Get("MCP-Protocol-Version") != fakeVersion {
		http.Error(w, "unknown session or wrong version", http.StatusBadRequest)
		return
	}
	if msg.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	n := f.calls.Add(1)
	var fault string
	if f.fault != nil {
		fault = f.fault(n)
	}
	switch fault {
	case "500":
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	case "hang":
		<-r.Context().Done()
		return
	case "rpc":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"internal"}}`, msg.ID)
		return
	}
	if msg.Method == "tools/list" {
		tools := `{"tools":[`
		if fault == "wrong" {
			tools = `{"tools":{"echo":[`
		}
		for i := range f.tools {
			if i > 0 {
				tools += ","
			}
			// Brackets, braces and commas in strings must not confuse the count.
			tools += fmt.Sprintf(`{"name":"tool_%d","description":"a [tool], {really}\"]","inputSchema":{"type":"object","required":["a","b"]}}`, i)
		}
		tools += "]"
		if fault == "wrong" {
			tools += "}"
		}
		f.answer(w, msg.ID, tools+`,"nextCursor":"c1"}`)
		return
	}
	text := msg.Params.Arguments.Text
	if fault == "wrong" {
		text += "!"
	}
	quoted, _ := json.Marshal(text)
	f.answer(w, msg.ID, `{"content":[{"type":"text","text":`+string(quoted)+`}]}`)
}

// fakeParams is what the fake reads of a request's params.
type fakeParams struct {
	Name      string
	Arguments struct{ Text string }
	Meta      map[string]json.RawMessage `json:"_meta"`
}

// modernProblem says what is wrong with a 2026-07-28 request of method with params, sent with
// header, or "" when nothing is: it must not be initialize, and its _meta and its headers
// must name the version, and the headers the method and tool (mcp-2026-notes §1.2, §1.5).
func modernProblem(header http.Header, method string, params *fakeParams) string {
	switch {
	case method == "initialize" || method == "notifications/initialized":
		return "a 2026-07-28 client does not initialize"
	case params == nil:
		return "no params, so no _meta"
	case string(params.Meta["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"`:
		return "_meta lacks the version"
	case string(params.Meta["io.modelcontextprotocol/clientCapabilities"]) != "{}":
		return "_meta lacks the client capabilities"
	case !strings.Contains(string(params.Meta["io.modelcontextprotocol/clientInfo"]), `"name":"mcpload"`):
		return "_meta lacks the client info"
	case header.Get("MCP-Protocol-Version") != "2026-07-28":
		return "MCP-Protocol-Version is not 2026-07-28"
	case header.Get("Mcp-Method") != method:
		return "Mcp-Method does not match the body"
	case method == "tools/call" && header.Get("Mcp-Name") != params.Name,
		method != "tools/call" && header.Get("Mcp-Name") != "":
		return "Mcp-Name does not match the body"
	case header.Get("Mcp-Session-Id") != "":
		return "a 2026-07-28 request names no session"
	}
	return ""
}

// answer writes a result response, as JSON or as an SSE stream with a priming event, a
// notification and the response split over two data lines with CRLF line ends.
func (f *fakeServer) answer(w http.ResponseWriter, id json.RawMessage, result string) {
	if !f.sse {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "id: 0\ndata:\n\n")
	fmt.Fprint(w, ": a comment\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hi\"}}\n\n")
	w.(http.Flusher).Flush()
	fmt.Fprintf(w, "id: 1\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata: \"id\":%s,\"result\":%s}\r\n\r\n", id, result)
}

// every returns a fault function that answers fault on calls k, 2k, 3k, …
func every(k int64, fault string) func(int64) string {
	return func(n int64) string {
		if n%k == 0 {
			return fault
		}
		return ""
	}
}

func run1(t *testing.T, cfg Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return r
}

// checkCounts compares ok calls, sessions and errors, and that every ok call has a latency.
func checkCounts(t *testing.T, r *Result, calls int64, sessions int, errs map[string]int64) {
	t.Helper()
	if r.Calls != calls || r.Sessions != sessions {
		t.Errorf("calls %d, sessions %d; want %d, %d", r.Calls, r.Sessions, calls, sessions)
	}
	if d := cmp.Diff(errs, r.Errors); d != "" {
		t.Errorf("errors (-want +got):\n%s\nsamples: %v", d, r.Samples)
	}
	if r.Latency.count() != uint64(r.Calls) {
		t.Errorf("%d latencies for %d calls", r.Latency.count(), r.Calls)
	}
	if !slices.Equal(slices.Sorted(maps.Keys(r.Errors)), slices.Sorted(maps.Keys(r.Samples))) {
		t.Errorf("samples %v do not match errors %v", r.Samples, r.Errors)
	}
}

func TestHTTP(t *testing.T) {
	const workers, calls = 4, 30 // 120 calls in all
	for _, tc := range []struct {
		name  string
		sse   bool
		fault func(int64) string
		ok    int64
		errs  map[string]int64
	}{
		{"json", false, nil, 120, map[string]int64{}},
		{"sse", true, nil, 120, map[string]int64{}},
		{"wrong echo", false, every(10, "wrong"), 108, map[string]int64{"wrong-echo": 12}},
		{"wrong echo sse", true, every(10, "wrong"), 108, map[string]int64{"wrong-echo": 12}},
		{"rpc error", false, every(20, "rpc"), 114, map[string]int64{"rpc-32603": 6}},
		{"http 500", true, every(40, "500"), 117, map[string]int64{"http-500": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{sse: tc.sse, fault: tc.fault}
			url := startFake(t, f)
			r := run1(t, Config{URL: url, Workers: workers, Calls: calls, Delete: true})
			checkCounts(t, r, tc.ok, workers, tc.errs)
			if f.calls.Load() != workers*calls {
				t.Errorf("server saw %d calls, want %d", f.calls.Load(), workers*calls)
			}
			if len(r.Init) != workers || f.deleted.Load() != workers {
				t.Errorf("%d initialize latencies, %d sessions deleted; want %d", len(r.Init), f.deleted.Load(), workers)
			}
		})
	}
}

// TestHTTPModern: with -protocol 2026-07-28 no worker initializes or deletes a session, and
// every call and list carries the version, capabilities and client info in its _meta and the
// headers that match its body (the fake refuses one that does not).
func TestHTTPModern(t *testing.T) {
	const workers, calls = 3, 20
	for _, tc := range []struct {
		name   string
		sse    bool
		method string
	}{
		{"call json", false, MethodCall},
		{"call sse", true, MethodCall},
		{"list json", false, MethodList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{sse: tc.sse, modern: true, tools: 2}
			url := startFake(t, f)
			r := run1(t, Config{URL: url, Workers: workers, Calls: calls, Delete: true, Method: tc.method, Protocol: ProtocolModern})
			checkCounts(t, r, workers*calls, 0, map[string]int64{})
			if f.opened.Load() != 0 || f.deleted.Load() != 0 || len(r.Init) != 0 {
				t.Errorf("%d sessions opened, %d deleted, %d initialize latencies; want none", f.opened.Load(), f.deleted.Load(), len(r.Init))
			}
			if f.calls.Load() != workers*calls || f.malformed.Load() != 0 {
				t.Errorf("server saw %d requests (%d malformed), want %d well-formed", f.calls.Load()+f.malformed.Load(), f.malformed.Load(), workers*calls)
			}
		})
	}
}

// TestHTTPLegacyClientRefusedByModernFake: the modern fake refuses a 2025-11-25 client's
// initialize, which shows that TestHTTPModern's checks can fail.
func TestHTTPLegacyClientRefusedByModernFake(t *testing.T) {
	f := &fakeServer{modern: true}
	url := startFake(t, f)
	r := run1(t, Config{URL: url, Workers: 1, Calls: 3})
	checkCounts(t, r, 0, 0, map[string]int64{"http-400": 1})
	if f.malformed.Load() != 1 {
		t.Errorf("the server refused %d requests, want the initialize", f.malformed.Load())
	}
}

func TestHeaderValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"echo", "echo"},
		{"alpha__echo", "alpha__echo"},
		{" echo", "=?base64?IGVjaG8=?="},
		{"écho", "=?base64?w6ljaG8=?="},
		{"=?base64?x?=", "=?base64?PT9iYXNlNjQ/eD89?="},
	} {
		if got := headerValue(tc.in); got != tc.want {
			t.Errorf("headerValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestHTTPTimeout(t *testing.T) {
	f := &fakeServer{fault: func(n int64) string {
		if n == 3 {
			return "hang"
		}
		return ""
	}}
	url := startFake(t, f)
	start := time.Now()
	r := run1(t, Config{URL: url, Workers: 2, Calls: 5, Timeout: 200 * time.Millisecond})
	checkCounts(t, r, 9, 2, map[string]int64{"timeout": 1})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("run took %v", el)
	}
	if f.deleted.Load() != 0 {
		t.Errorf("sessions deleted without Delete")
	}
}

func TestHTTPDurationAndWarmup(t *testing.T) {
	f := &fakeServer{}
	url := startFake(t, f)
	r := run1(t, Config{URL: url, Workers: 2, Duration: 150 * time.Millisecond, Warmup: 100 * time.Millisecond})
	if r.ErrorCount() != 0 || r.Calls == 0 {
		t.Fatalf("calls %d, errors %v", r.Calls, r.Errors)
	}
	if r.Duration < 150*time.Millisecond || r.Duration > 2*time.Second {
		t.Errorf("measured %v, want about 150ms", r.Duration)
	}
	if f.calls.Load() <= r.Calls {
		t.Errorf("server saw %d calls, no more than the %d measured: no warm-up", f.calls.Load(), r.Calls)
	}

	// With both limits the first one reached ends the run.
	r = run1(t, Config{URL: url, Workers: 2, Calls: 3, Duration: time.Minute})
	checkCounts(t, r, 6, 2, map[string]int64{})
}

// TestHTTPBearer: with a bearer token, every request of every session carries it, the
// initialize, the calls and the DELETEs; without one, the server's 401s are counted.
func TestHTTPBearer(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJiZW5jaCJ9.c2ln"
	f := &fakeServer{bearer: token}
	url := startFake(t, f)
	r := run1(t, Config{URL: url, Workers: 3, Calls: 5, Delete: true, Bearer: token})
	checkCounts(t, r, 15, 3, map[string]int64{})
	if f.deleted.Load() != 3 || f.unauthorized.Load() != 0 {
		t.Errorf("%d sessions deleted, %d requests refused; want 3, 0", f.deleted.Load(), f.unauthorized.Load())
	}

	r = run1(t, Config{URL: url, Workers: 2, Calls: 5, Delete: true})
	checkCounts(t, r, 0, 0, map[string]int64{"http-401": 2})

	// The command line takes the token from the environment when -bearer is not given.
	t.Setenv(envBearer, token)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-url", url, "-n", "2", "-calls", "3", "-json"}, &stdout, &stderr); code != 0 {
		t.Errorf("with $%s: exit %d, stdout %s, stderr %s", envBearer, code, stdout.String(), stderr.String())
	}
	// -bearer wins over the environment.
	t.Setenv(envBearer, "wrong")
	stdout.Reset()
	if code := run(context.Background(), []string{"-url", url, "-bearer", token, "-calls", "3", "-json"}, &stdout, &stderr); code != 0 {
		t.Errorf("with -bearer: exit %d, stdout %s, stderr %s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"-url", url, "-calls", "3", "-json"}, &stdout, &stderr); code != 1 {
		t.Errorf("with a wrong $%s: exit %d, want 1; stdout %s", envBearer, code, stdout.String())
	}
	if f.deleted.Load() != 6 {
		t.Errorf("%d sessions deleted, want 6", f.deleted.Load())
	}

	for _, args := range [][]string{
		{"-stdio", "x", "-bearer", token, "-calls", "1"},
		{"-url", url, "-bearer", "two words", "-calls", "1"},
	} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("run %v: exit %d, want 2", args, code)
		}
	}
}

func TestHTTPUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r := run1(t, Config{URL: "http://" + addr + "/mcp", Workers: 3, Calls: 10})
	checkCounts(t, r, 0, 0, map[string]int64{"transport": 3})
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Calls: 1},
		{URL: "http://x/mcp", Command: []string{"x"}, Calls: 1},
		{URL: "http://x/mcp"},
		{URL: "ftp://x/mcp", Calls: 1},
		{Command: []string{"x"}, Calls: 1, Bearer: "tok"},
		{URL: "http://x/mcp", Calls: 1, Bearer: "tok\r\nX-Evil: 1"},
		{Command: []string{"x"}, Calls: 1, Protocol: ProtocolModern},
		{URL: "http://x/mcp", Calls: 1, Protocol: "2024-11-05"},
	} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) succeeded", cfg)
		}
	}
}

func needEchoServer(t *testing.T) {
	t.Helper()
	if echoServer == "" {
		t.Skip("go is not on PATH: cannot build echo-server for the stdio tests")
	}
}

func TestStdioEchoServer(t *testing.T) {
	needEchoServer(t)
	for _, coalesce := range []bool{false, true} {
		r := run1(t, Config{Command: []string{echoServer}, Workers: 4, Calls: 200, Text: `q"u\o<t>e é`, CoalesceWrites: coalesce})
		checkCounts(t, r, 800, 1, map[string]int64{})
		if len(r.Init) != 1 {
			t.Errorf("coalesce=%v: %d initialize latencies, want 1", coalesce, len(r.Init))
		}
	}

	r := run1(t, Config{Command: []string{echoServer, "-tools", "3"}, Workers: 4, Calls: 5, Tool: "tool_001"})
	checkCounts(t, r, 0, 1, map[string]int64{"wrong-echo": 20})
}

// TestStdioSDKServer drives a go-sdk server, which answers concurrently (so out of order)
// and prefixes its echo: every call must come back, as a wrong echo.
func TestStdioSDKServer(t *testing.T) {
	t.Setenv(testupstream.EnvFlavor, "alpha")
	r := run1(t, Config{Command: []string{os.Args[0]}, Workers: 8, Calls: 25})
	checkCounts(t, r, 0, 1, map[string]int64{"wrong-echo": 200})
	if got := r.Samples["wrong-echo"]; !strings.HasPrefix(got, `echoed "alpha:hello-`) {
		t.Errorf("sample %q, want one like %q", got, `echoed "alpha:hello-0-1", want "hello-0-1"`)
	}
}

// exitingServer answers initialize, reads notifications/initialized, and exits when the
// next line arrives.
func exitingServer() {
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		os.Exit(1)
	}
	var req struct{ ID int }
	_ = json.Unmarshal(in.Bytes(), &req)
	fmt.Printf(`{"jsonrpc":"2.0","id":%d,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"exiting","version":"1"}}}`+"\n", req.ID)
	in.Scan() // notifications/initialized
	in.Scan() // the first call
	os.Exit(3)
}

// TestStdioServerExits: the server dies at the first call; every call fails fast.
func TestStdioServerExits(t *testing.T) {
	t.Setenv(envFakeStdio, "1")
	start := time.Now()
	r := run1(t, Config{Command: []string{os.Args[0]}, Workers: 4, Calls: 10})
	checkCounts(t, r, 0, 1, map[string]int64{"transport": 40})
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("run took %v", el)
	}
}

// TestStdioServerSilent: a server that never answers times initialize out, and is
// stopped by the shutdown ladder.
func TestStdioServerSilent(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	start := time.Now()
	r := run1(t, Config{Command: []string{sleep, "60"}, Workers: 2, Calls: 10, Timeout: 200 * time.Millisecond})
	checkCounts(t, r, 0, 0, map[string]int64{"timeout": 1})
	if el := time.Since(start); el > 4*stopGrace {
		t.Errorf("run took %v", el)
	}
}

func TestStdioCommandMissing(t *testing.T) {
	if _, err := Run(context.Background(), Config{Command: []string{"/nonexistent/server"}, Calls: 1}); err == nil {
		t.Error("Run succeeded with a missing command")
	}
}

func TestCLI(t *testing.T) {
	url := startFake(t, &fakeServer{})
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-url", url, "-n", "2", "-calls", "5", "-json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	var got map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	keys := slices.Sorted(maps.Keys(got))
	want := []string{"calls", "calls_per_s", "duration_s", "errors", "init_us", "latency_us", "n"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	if got["n"] != 2.0 || got["calls"] != 10.0 || fmt.Sprint(got["errors"]) != "map[]" {
		t.Errorf("output %s", stdout.String())
	}
	for _, k := range []string{"latency_us", "init_us"} {
		m, _ := got[k].(map[string]any)
		if m["p50"] == nil || m["max"] == nil {
			t.Errorf("%s: %v", k, got[k])
		}
	}

	stdout.Reset()
	url = startFake(t, &fakeServer{fault: every(2, "500")})
	if code := run(context.Background(), []string{"-url", url, "-calls", "4"}, &stdout, &stderr); code != 1 {
		t.Errorf("exit %d with errors, want 1", code)
	}
	for _, s := range []string{"calls       2 ok, 2 errors", "http-500", "latency     p50 "} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, stdout.String())
		}
	}

	if echoServer != "" {
		stdout.Reset()
		args := []string{"-stdio", echoServer + " -tools 2", "-n", "3", "-calls", "10", "-json"}
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Errorf("run %v: exit %d, stderr %s", args, code, stderr.String())
		}
		if !strings.HasPrefix(stdout.String(), `{"n":3,"calls":30,"errors":{},`) {
			t.Errorf("run %v: output %s", args, stdout.String())
		}
	}

	for _, args := range [][]string{
		{"-calls", "1"},
		{"-url", url},
		{"-url", url, "-stdio", "x", "-calls", "1"},
		{"-url", url, "-calls", "1", "-n", "0"},
		{"-url", url, "-calls", "1", "extra"},
		{"-bogus"},
	} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("run %v: exit %d, want 2", args, code)
		}
	}
}

func TestCheckEcho(t *testing.T) {
	for _, tc := range []struct {
		name, msg, kind string
	}{
		{"ok", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi \"x\""}]}}`, ""},
		{"escaped", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"hi \u0022x\"","type":"text"}]}}`, ""},
		{"spaces", ` { "id" : 7 , "result" : { "content" : [ { "text" : "hi \"x\"" } ] } } `, ""},
		{"wrong text", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}`, kindWrongEcho},
		{"second block", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"},{"type":"text","text":"hi \"x\""}]}}`, kindWrongEcho},
		{"no content", `{"jsonrpc":"2.0","id":7,"result":{}}`, kindWrongEcho},
		{"wrong id", `{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"hi \"x\""}]}}`, kindWrongEcho},
		{"string id", `{"jsonrpc":"2.0","id":"7","result":{"content":[{"type":"text","text":"hi \"x\""}]}}`, kindWrongEcho},
		{"no result", `{"jsonrpc":"2.0","id":7}`, kindWrongEcho},
		{"rpc error", `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}`, "rpc-32601"},
		{"positive code", `{"jsonrpc":"2.0","id":7,"error":{"code":5,"message":"no"}}`, "rpc+5"},
		{"error without code", `{"jsonrpc":"2.0","id":7,"error":{"message":"no"}}`, kindDecode},
		{"malformed", `{"jsonrpc":"2.0","id":7,"result":{"content":[`, kindDecode},
		{"array", `[1]`, kindDecode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, err := checkEcho([]byte(tc.msg), 7, []byte(`hi "x"`))
			if kind != tc.kind || (kind == "") != (err == nil) {
				t.Errorf("kind %q (%v), want %q", kind, err, tc.kind)
			}
		})
	}
}

func TestRouteID(t *testing.T) {
	for _, tc := range []struct {
		line string
		id   int64
		ok   bool
	}{
		{`{"jsonrpc":"2.0","id":42,"result":{}}`, 42, true},
		{`{"result":{"id":1},"id":0}`, 0, true},
		{`{"jsonrpc":"2.0","id":42,"method":"ping"}`, 0, false},
		{`{"jsonrpc":"2.0","id":"42","result":{}}`, 0, false},
		{`{"jsonrpc":"2.0","id":-1,"result":{}}`, 0, false},
		{`{"jsonrpc":"2.0","method":"notifications/message"}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
		{`{"id":`, 0, false},
	} {
		id, ok := routeID([]byte(tc.line))
		if id != tc.id || ok != tc.ok {
			t.Errorf("routeID(%s) = %d, %v; want %d, %v", tc.line, id, ok, tc.id, tc.ok)
		}
	}
}

// FuzzRouteID checks that the stdio reader's scanner never panics on server output and
// agrees with encoding/json on valid messages.
func FuzzRouteID(f *testing.F) {
	for _, s := range []string{`{"id":1,"result":{}}`, `{"id":"x"}`, `{"a":[1,{"b":"\"}"}],"id":7}`, `{"id":`, `{`, `"`, `{"\\":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		id, ok := routeID(line)
		if !ok || !json.Valid(line) {
			return
		}
		var m struct{ ID json.Number }
		if err := json.Unmarshal(line, &m); err != nil {
			return // e.g. a duplicate "id" of another type
		}
		if want, err := m.ID.Int64(); err == nil && want != id {
			t.Errorf("routeID(%s) = %d, encoding/json says %d", line, id, want)
		}
	})
}

func TestHistogram(t *testing.T) {
	// Every value lies in the bucket it is counted in.
	for v := uint64(0); v < 1<<22; v += 1 + v/97 {
		low, width := bucketRange(bucketOf(v))
		if v < low || v >= low+width {
			t.Fatalf("value %d in bucket [%d, %d)", v, low, low+width)
		}
	}
	if got := bucketOf(math.MaxInt64); got != numBuckets-1 {
		t.Errorf("bucketOf(max) = %d, want %d", got, numBuckets-1)
	}

	// Quantiles of 1..100000 µs are within 1%.
	var a, b histogram
	for i := 1; i <= 100000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.record(time.Duration(i) * time.Microsecond)
	}
	a.merge(&b)
	for _, q := range []float64{0.5, 0.95, 0.99, 1} {
		want := q * 100000 * float64(time.Microsecond)
		if got := float64(a.quantile(q)); math.Abs(got-want) > want/100 {
			t.Errorf("quantile(%v) = %v, want about %v", q, time.Duration(got), time.Duration(want))
		}
	}
	if a.count() != 100000 || a.max != 100*time.Millisecond {
		t.Errorf("count %d, max %v", a.count(), a.max)
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Error("quantile of an empty histogram is not 0")
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		712 * time.Microsecond:   "712µs",
		1412 * time.Microsecond:  "1.41ms",
		14120 * time.Microsecond: "14.1ms",
		141 * time.Millisecond:   "141ms",
		3 * time.Second:          "3.00s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// BenchmarkCheckEcho is the per-answer cost of checking an echo.
func BenchmarkCheckEcho(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":123456,"result":{"content":[{"type":"text","text":"hello-17-123456"}]}}`)
	text := []byte("hello-17-123456")
	b.ReportAllocs()
	for b.Loop() {
		if kind, err := checkEcho(msg, 123456, text); kind != "" {
			b.Fatal(err)
		}
	}
}

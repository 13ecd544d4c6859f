package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stdioPeer drives serveStdio over io.Pipe, as a client would over a child's stdin/stdout.
type stdioPeer struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Scanner
	done chan error
}

func startStdio(t *testing.T, srv *server) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, out: bufio.NewScanner(outR), done: make(chan error, 1)}
	p.out.Buffer(nil, 1<<20)
	go func() {
		err := serveStdio(srv, inR, outW)
		outW.CloseWithError(io.EOF)
		p.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		if err := <-p.done; err != nil {
			t.Errorf("serveStdio: %v", err)
		}
	})
	return p
}

// roundTrip sends one line and returns the next line of output.
func (p *stdioPeer) roundTrip(line string) string {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatalf("write: %v", err)
	}
	if !p.out.Scan() {
		p.t.Fatalf("no answer to %s: %v", line, p.out.Err())
	}
	return p.out.Text()
}

// jsonEqual fails the test unless got and want are the same JSON value.
func jsonEqual(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("answer %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("answer mismatch (-want +got):\n%s\ngot: %s", d, got)
	}
}

const initializeResult = `{"protocolVersion":"%s","capabilities":{"tools":{}},"serverInfo":{"name":"echo-server","version":"0.1.0"}}`

func initialize(version string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version +
		`","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`
}

func initialized(version string) string {
	return `{"jsonrpc":"2.0","id":1,"result":` + strings.Replace(initializeResult, "%s", version, 1) + `}`
}

const echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// messageCases are request/answer pairs for both transports.
var messageCases = []struct {
	name, in, want string
}{
	{"initialize 2025-11-25", initialize("2025-11-25"), initialized("2025-11-25")},
	{"initialize 2025-06-18", initialize("2025-06-18"), initialized("2025-06-18")},
	{"initialize 2024-11-05", initialize("2024-11-05"), initialized("2024-11-05")},
	{"initialize unknown version", initialize("2099-01-01"), initialized("2025-11-25")},
	{"ping", `{"jsonrpc":"2.0","id":"p","method":"ping"}`, `{"jsonrpc":"2.0","id":"p","result":{}}`},
	{
		"tools/list",
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[` +
			`{"name":"echo","description":"Returns its text argument unchanged.","inputSchema":` + echoSchema + `},` +
			`{"name":"tool_000","description":"A catalog filler tool; calling it fails.","inputSchema":` + echoSchema + `},` +
			`{"name":"tool_001","description":"A catalog filler tool; calling it fails.","inputSchema":` + echoSchema + `}]}}`,
	},
	{
		"echo",
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}}`,
	},
	{
		"escaped member names",
		`{"jsonrpc":"2.0","id":4,"\u006dethod":"tools/call","params":{"name":"\u0065cho","arguments":{"te\u0078t":"x"}}}`,
		`{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"x"}]}}`,
	},
	{
		"unknown tool",
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope\"","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"unknown tool: nope\""}],"isError":true}}`,
	},
	{
		"filler tool",
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"tool_000","arguments":{"text":"x"}}}`,
		`{"jsonrpc":"2.0","id":6,"result":{"content":[{"type":"text","text":"unknown tool: tool_000"}],"isError":true}}`,
	},
	{
		"echo without text",
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":7}}}`,
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"echo needs a string argument \"text\""}],"isError":true}}`,
	},
	{
		"unknown method",
		`{"jsonrpc":"2.0","id":8,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"method not found"}}`,
	},
	{"malformed JSON", `{"jsonrpc":"2.0","id":9,`, `{"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}}`},
	{"batch", `[{"jsonrpc":"2.0","id":10,"method":"ping"}]`, `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request"}}`},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request"}}`},
	{"no jsonrpc", `{"id":11,"method":"ping"}`, `{"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request"}}`},
}

func TestStdioMessages(t *testing.T) {
	p := startStdio(t, newServer(2))
	for _, tc := range messageCases {
		t.Run(tc.name, func(t *testing.T) {
			jsonEqual(t, p.roundTrip(tc.in), tc.want)
		})
	}
}

// echoTexts round-trip through the echo tool exactly.
var echoTexts = []string{
	"",
	"plain",
	`quotes " and \ backslash \" \\`,
	"new\nlines\r\nand\ttabs",
	"unicode: héllo, 日本語, emoji 🚀, combining é",
	"html <b>&amp;</b> \u2028 \u2029",
	"control \x00 \x01 \x1f",
	strings.Repeat("long ", 40000), // longer than the stdio read buffer
}

func echoRequest(t *testing.T, id int, text string) string {
	t.Helper()
	args, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		t.Fatal(err)
	}
	return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"echo","arguments":` + string(args) + `}}`
}

// echoedText decodes an echo answer and returns its text.
func echoedText(t *testing.T, answer []byte) string {
	t.Helper()
	var resp struct {
		Result struct {
			Content []struct{ Type, Text string }
			IsError bool
		}
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		t.Fatalf("answer %.200s: %v", answer, err)
	}
	c := resp.Result.Content
	if resp.Result.IsError || len(c) != 1 || c[0].Type != "text" {
		t.Fatalf("answer %.200s: want one text block", answer)
	}
	return c[0].Text
}

func TestStdioEchoRoundTrip(t *testing.T) {
	p := startStdio(t, newServer(0))
	for i, text := range echoTexts {
		got := echoedText(t, []byte(p.roundTrip(echoRequest(t, i, text))))
		if got != text {
			t.Errorf("echo %d: got %.80q, want %.80q", i, got, text)
		}
	}
}

func TestStdioNotificationsAndPipelining(t *testing.T) {
	in := `{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		"\n   \n" + // blank lines are skipped
		`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" // a response: dropped
	for i := range 100 {
		in += `{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"ping"}` + "\r\n"
	}
	in += `{"jsonrpc":"2.0","id":"last","method":"ping"}` // no final newline
	var out countingWriter
	if err := serveStdio(newServer(0), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 101 {
		t.Fatalf("got %d answers, want 101:\n%s", len(lines), out.String())
	}
	for i, l := range lines[:100] {
		jsonEqual(t, l, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"result":{}}`)
	}
	jsonEqual(t, lines[100], `{"jsonrpc":"2.0","id":"last","result":{}}`)
	if out.writes != 1 {
		t.Errorf("answers took %d writes, want 1 for input read in one go", out.writes)
	}
}

func TestStdioLineTooLong(t *testing.T) {
	in := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
		strings.Repeat("x", maxLine) + `"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"
	var out countingWriter
	if err := serveStdio(newServer(0), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d answers, want 2", len(lines))
	}
	jsonEqual(t, lines[0], `{"jsonrpc":"2.0","error":{"code":-32700,"message":"message too long"}}`)
	jsonEqual(t, lines[1], `{"jsonrpc":"2.0","id":2,"result":{}}`)
}

// countingWriter is a bytes.Buffer that counts Write calls.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// httpPeer is a client of the HTTP handler under httptest.
type httpPeer struct {
	t   *testing.T
	url string
}

func startHTTP(t *testing.T, srv *server) *httpPeer {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mcp", newHTTPHandler(srv))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return &httpPeer{t: t, url: ts.URL + "/mcp"}
}

// do sends one request and returns the status, the response headers and the body.
func (p *httpPeer) do(method, session, body string, header ...string) (int, http.Header, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// open initializes a session and returns its id.
func (p *httpPeer) open() string {
	p.t.Helper()
	status, hdr, body := p.do("POST", "", initialize("2025-11-25"))
	if status != http.StatusOK {
		p.t.Fatalf("initialize: %d %s", status, body)
	}
	jsonEqual(p.t, body, initialized("2025-11-25"))
	id := hdr.Get("MCP-Session-Id")
	if id == "" {
		p.t.Fatal("initialize: no MCP-Session-Id")
	}
	for _, c := range []byte(id) {
		if c < 0x21 || c > 0x7e {
			p.t.Fatalf("session id %q has a byte outside 0x21–0x7E", id)
		}
	}
	return id
}

func TestHTTPMessages(t *testing.T) {
	p := startHTTP(t, newServer(2))
	session := p.open()
	for _, tc := range messageCases {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := p.do("POST", session, tc.in)
			want := http.StatusOK
			if !strings.Contains(tc.want, `"id"`) {
				want = http.StatusBadRequest // unreadable messages have no id
			}
			if status != want || hdr.Get("Content-Type") != "application/json" {
				t.Errorf("status %d, Content-Type %q; want %d, application/json", status, hdr.Get("Content-Type"), want)
			}
			jsonEqual(t, body, tc.want)
		})
	}
}

func TestHTTPEchoRoundTrip(t *testing.T) {
	p := startHTTP(t, newServer(0))
	session := p.open()
	for i, text := range echoTexts {
		status, _, body := p.do("POST", session, echoRequest(t, i, text))
		if status != http.StatusOK {
			t.Fatalf("echo %d: status %d", i, status)
		}
		if got := echoedText(t, []byte(body)); got != text {
			t.Errorf("echo %d: got %.80q, want %.80q", i, got, text)
		}
	}
}

func TestHTTPSessions(t *testing.T) {
	p := startHTTP(t, newServer(0))
	a, b := p.open(), p.open()
	if a == b {
		t.Fatalf("two sessions share the id %q", a)
	}
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	notification := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	steps := []struct {
		name, method, session, body string
		header                      []string
		want                        int
	}{
		{"notification", "POST", a, notification, nil, http.StatusAccepted},
		{"response", "POST", a, `{"jsonrpc":"2.0","id":"s1","result":{}}`, nil, http.StatusAccepted},
		{"request", "POST", a, ping, nil, http.StatusOK},
		{"protocol version header", "POST", a, ping, []string{"MCP-Protocol-Version", "2025-11-25"}, http.StatusOK},
		{"bad protocol version header", "POST", a, ping, []string{"MCP-Protocol-Version", "1999-01-01"}, http.StatusBadRequest},
		{"foreign origin", "POST", a, ping, []string{"Origin", "http://evil.example.com"}, http.StatusForbidden},
		{"loopback origin", "POST", a, ping, []string{"Origin", "http://localhost:3000"}, http.StatusOK},
		{"missing session", "POST", "", ping, nil, http.StatusBadRequest},
		{"missing session, notification", "POST", "", notification, nil, http.StatusBadRequest},
		{"unknown session", "POST", "nope", ping, nil, http.StatusNotFound},
		{"GET", "GET", a, "", nil, http.StatusMethodNotAllowed},
		{"PUT", "PUT", a, ping, nil, http.StatusMethodNotAllowed},
		{"DELETE", "DELETE", a, "", nil, http.StatusOK},
		{"deleted session", "POST", a, ping, nil, http.StatusNotFound},
		{"DELETE again", "DELETE", a, "", nil, http.StatusNotFound},
		{"DELETE without session", "DELETE", "", "", nil, http.StatusBadRequest},
		{"other session lives on", "POST", b, ping, nil, http.StatusOK},
	}
	for _, s := range steps {
		status, _, body := p.do(s.method, s.session, s.body, s.header...)
		if status != s.want {
			t.Errorf("%s: status %d, want %d (body %q)", s.name, status, s.want, body)
		}
		if status == http.StatusAccepted && body != "" {
			t.Errorf("%s: 202 with body %q", s.name, body)
		}
	}
}

func TestHTTPBodyTooLarge(t *testing.T) {
	p := startHTTP(t, newServer(0))
	session := p.open()
	status, _, _ := p.do("POST", session, `{"jsonrpc":"2.0","id":1,"method":"ping","x":"`+strings.Repeat("x", maxBody)+`"}`)
	if status != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", status)
	}
}

// repeatReader yields line n times.
type repeatReader struct {
	line []byte
	n    int
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	k := 0
	for k < len(p) && r.n > 0 {
		c := copy(p[k:], r.line[r.off:])
		k += c
		r.off += c
		if r.off == len(r.line) {
			r.off = 0
			r.n--
		}
	}
	if k == 0 {
		return 0, io.EOF
	}
	return k, nil
}

// BenchmarkEchoStdio measures the per-message cost of the stdio loop: read, parse,
// answer and buffered write of one echo tools/call.
func BenchmarkEchoStdio(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":123456,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello-17-123456"}}}` + "\n")
	srv := newServer(0)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	b.ResetTimer()
	if err := serveStdio(srv, &repeatReader{line: line, n: b.N}, io.Discard); err != nil {
		b.Fatal(err)
	}
}

func TestRunStdio(t *testing.T) {
	var stdout, stderr bytes.Buffer
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}` + "\n")
	if code := run([]string{"-tools", "1"}, in, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"tool_000"`) || strings.Contains(stdout.String(), `"tool_001"`) {
		t.Errorf("tools/list with -tools 1: %s", stdout.String())
	}
	for _, args := range [][]string{{"-tools", "-1"}, {"extra"}, {"-bogus"}} {
		if code := run(args, strings.NewReader(""), io.Discard, io.Discard); code != 2 {
			t.Errorf("run %v: exit %d, want 2", args, code)
		}
	}
}

func TestServeHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logR, logW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, newServer(0), "127.0.0.1:0", logW)
		logW.Close()
	}()
	line, err := bufio.NewReader(logR).ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v", err)
	}
	go io.Copy(io.Discard, logR)
	_, url, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("listening line %q", line)
	}
	p := &httpPeer{t: t, url: url}
	p.open()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveHTTP: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serveHTTP did not return after cancel")
	}
}

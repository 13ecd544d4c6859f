package main

// End-to-end tests of cross-replica delivery: three gateway processes share one Redis (a key
// prefix of their own per test), with no load balancer in front. The test picks the replica of
// every HTTP request and speaks the raw Streamable HTTP protocol (2025-11-25), so that a
// session's requests, answers, cancels and streams land on different processes. The upstreams
// are go-sdk servers of internal/testupstream served by this test process over Streamable
// HTTP, so that every replica reaches the same upstream server.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// crossVersion is the protocol version the test's sessions speak.
const crossVersion = "2025-11-25"

// askingCaps are the capabilities of a client that answers sampling and elicitation.
const askingCaps = `{"sampling":{},"elicitation":{}}`

// eventBound bounds each wait for an event a replica should send; it fails a test that would
// otherwise hang, it never asserts speed.
const eventBound = 20 * time.Second

// crossCluster is the set-up shared by a test's replicas: the Redis prefix, the upstreams
// served by this process, and the config text every replica runs.
type crossCluster struct {
	t      *testing.T
	redis  string
	prefix string
	config string
	hc     *http.Client
}

// newCrossCluster serves the semantics ("sem"), reverse ("rev") and alpha ("alpha") test
// upstreams over Streamable HTTP and prepares the config of replicas on the test Redis under a
// prefix of the test's own, with a replica lease of one second. It skips under -short.
func newCrossCluster(t *testing.T, logLevel string) *crossCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("runs several gateway processes")
	}
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	sem, rev, alpha := serveUpstream(t, "semantics"), serveUpstream(t, "reverse"), serveUpstream(t, "alpha")
	// Every client of these tests connects from 127.0.0.1: the caps per address are ones for
	// hundreds of clients.
	cfg := fmt.Sprintf(`log_level: %s
drain_timeout: 10s
max_connections_per_address: 4096
auth:
  max_sessions_per_address: 1000
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
`+testKeysYAML+`upstreams:
  - name: sem
    transport: streamable-http
    url: %s
  - name: rev
    transport: streamable-http
    url: %s
  - name: alpha
    transport: streamable-http
    url: %s
`, logLevel, addr, prefix, sem, rev, alpha)
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	t.Cleanup(tr.CloseIdleConnections)
	return &crossCluster{t: t, redis: addr, prefix: prefix, config: cfg, hc: &http.Client{Transport: tr}}
}

// serveUpstream serves one go-sdk server of a test flavor, shared by all its clients, over
// Streamable HTTP on loopback, until the test ends; it returns its URL.
func serveUpstream(t *testing.T, flavor string) string {
	t.Helper()
	server, err := testupstream.New(flavor)
	if err != nil {
		t.Fatal(err)
	}
	// A replica killed mid-call leaves its call running here ("hold" runs until cancelled,
	// and nobody is left to cancel it): the test's end cancels every call still running.
	ended, endCalls := context.WithCancel(context.Background())
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(ended, cancel)()
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(func() {
		// The replicas have stopped: their cleanups, registered later, ran first.
		endCalls()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// node is a replica with the name the test gave it.
type node struct {
	name string
	*replica
}

// start starts a replica process of the cluster's config.
func (cl *crossCluster) start(name string) *node {
	cl.t.Helper()
	return &node{name: name, replica: startReplica(cl.t, name, cl.config)}
}

// kill ends a replica's process with SIGKILL: it leaves everything as it was.
func (n *node) kill(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatalf("SIGKILL %s: %v", n.name, err)
	}
}

// terminate sends SIGTERM, which makes the replica drain.
func (n *node) terminate(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", n.name, err)
	}
}

// logTail is what a failure message shows of a replica's log: how often each warning and
// error was logged, then the log's end.
func (n *node) logTail() string {
	s := n.logs.String()
	var counts []string
	seen := map[string]int{}
	for line := range strings.Lines(s) {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		_, msg, _ := strings.Cut(line, "msg=")
		if i := strings.Index(msg, `" `); strings.HasPrefix(msg, `"`) && i > 0 {
			msg = msg[:i+1]
		}
		if seen[msg] == 0 {
			counts = append(counts, msg)
		}
		seen[msg]++
	}
	var b strings.Builder
	b.WriteString("--- log of " + n.name + " ---\n")
	for _, msg := range counts {
		fmt.Fprintf(&b, "  %d× %s", seen[msg], strings.TrimSpace(msg)+"\n")
	}
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	b.WriteString(s)
	return b.String()
}

// readyStatus is the status of the replica's /readyz, 0 when it does not answer.
func (n *node) readyStatus() int {
	resp, err := http.Get(strings.TrimSuffix(n.url, "/mcp") + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLogged waits until the Redis event log of stream streamID holds an event whose message
// is data: what a replica about to be killed has written for the others.
func (cl *crossCluster) waitLogged(t *testing.T, streamID, data string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.redis})
	defer c.Close()
	waitFor(t, "the event log to hold the event of stream "+streamID, func() bool {
		keys, err := testredis.Keys(cl.redis, cl.prefix)
		if err != nil {
			return false
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, ":ev:"+streamID) {
				continue
			}
			entries, err := c.XRange(context.Background(), k, "-", "+").Result()
			if err != nil {
				return false
			}
			for _, e := range entries {
				for _, v := range e.Values {
					if v == data {
						return true
					}
				}
			}
		}
		return false
	})
}

// rpcMsg is one JSON-RPC message as the test reads it.
type rpcMsg struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func parseMsg(data string) (rpcMsg, error) {
	var m rpcMsg
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return m, fmt.Errorf("not a JSON-RPC message: %q", data)
	}
	return m, nil
}

// isResponse reports whether m answers request id (its JSON text).
func (m rpcMsg) isResponse(id string) bool {
	return m.Method == "" && string(m.ID) == id
}

// isAnyResponse reports whether m is a response.
func (m rpcMsg) isAnyResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// toolText is the text of a tools/call result, with an error when it is not a successful
// tool result.
func (m rpcMsg) toolText() (string, error) {
	if m.Error != nil {
		return "", fmt.Errorf("error %d: %s", m.Error.Code, m.Error.Message)
	}
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		return "", fmt.Errorf("result %s: %v", m.Result, err)
	}
	var parts []string
	for _, c := range r.Content {
		parts = append(parts, c.Text)
	}
	text := strings.Join(parts, "")
	if r.IsError {
		return text, fmt.Errorf("tool error: %s", text)
	}
	return text, nil
}

// param returns a string member of the message's params, following a path of member names.
func (m rpcMsg) param(path ...string) string {
	var v any
	if json.Unmarshal(m.Params, &v) != nil {
		return ""
	}
	for _, p := range path {
		obj, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = obj[p]
	}
	switch v := v.(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// samplingPrompt is the text of the first message of a sampling/createMessage request.
func (m rpcMsg) samplingPrompt() string {
	var p struct {
		Messages []struct {
			Content struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(m.Params, &p) != nil || len(p.Messages) == 0 {
		return ""
	}
	return p.Messages[0].Content.Text
}

// request is the text of a JSON-RPC request.
func request(id int64, method string, params any) string {
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	return string(b)
}

// toolCall is the text of a tools/call request; a non-empty progress token goes in _meta.
func toolCall(id int64, tool string, args map[string]any, progressToken string) string {
	if args == nil {
		args = map[string]any{}
	}
	params := map[string]any{"name": tool, "arguments": args}
	if progressToken != "" {
		params["_meta"] = map[string]any{"progressToken": progressToken}
	}
	return request(id, "tools/call", params)
}

// notification is the text of a JSON-RPC notification.
func notification(method string, params any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	return string(b)
}

// answerText is the text of a client's answer to a request it received.
func answerText(id json.RawMessage, result string) string {
	return `{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`
}

// samplingResult is a sampling answer whose text is text.
func samplingResult(text string) string {
	b, _ := json.Marshal(map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": text}})
	return string(b)
}

// elicitResult is an accepted elicitation answering answer.
func elicitResult(answer string) string {
	b, _ := json.Marshal(map[string]any{"action": "accept", "content": map[string]any{"answer": answer}})
	return string(b)
}

// statusError is an HTTP answer other than the one a request expected.
type statusError struct {
	code       int
	retryAfter string
	body       string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d (Retry-After %q): %s", e.code, e.retryAfter, strings.TrimSpace(e.body))
}

// sseFrame is one event of an SSE stream, a plain JSON answer standing as one event with its
// body as data. The priming event has an id and no data.
type sseFrame struct {
	id, data, retry string
	hasRetry        bool
}

// errStreamEnded is returned when a stream ended before what the caller waited for.
var errStreamEnded = errors.New("the stream ended")

// eventStream is one answer of a replica: a POST's, or a GET's stream.
type eventStream struct {
	frames <-chan sseFrame
	cancel context.CancelFunc
}

// close stops reading the stream and closes its connection.
func (s *eventStream) close() { s.cancel() }

// next returns the stream's next event; errStreamEnded once it has ended.
func (s *eventStream) next(bound time.Duration) (sseFrame, error) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case f, ok := <-s.frames:
		if !ok {
			return sseFrame{}, errStreamEnded
		}
		return f, nil
	case <-timer.C:
		return sseFrame{}, fmt.Errorf("no event within %s", bound)
	}
}

// nextMessage returns the next event that carries a message, skipping priming events and
// hints.
func (s *eventStream) nextMessage(bound time.Duration) (sseFrame, rpcMsg, error) {
	deadline := time.Now().Add(bound)
	for {
		f, err := s.next(time.Until(deadline))
		if err != nil {
			return f, rpcMsg{}, err
		}
		if f.data == "" {
			continue
		}
		m, err := parseMsg(f.data)
		return f, m, err
	}
}

// rest returns the stream's remaining events, once it has ended within bound.
func (s *eventStream) rest(bound time.Duration) ([]sseFrame, error) {
	deadline := time.Now().Add(bound)
	var got []sseFrame
	for {
		f, err := s.next(time.Until(deadline))
		if errors.Is(err, errStreamEnded) {
			return got, nil
		}
		if err != nil {
			return got, fmt.Errorf("the stream did not end: %w", err)
		}
		got = append(got, f)
	}
}

// readFrames parses an SSE body into frames until it ends or ctx does.
func readFrames(ctx context.Context, body io.ReadCloser, out chan<- sseFrame) {
	defer close(out)
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var f sseFrame
	var data []string
	have := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if have {
				f.data = strings.Join(data, "\n")
				select {
				case out <- f:
				case <-ctx.Done():
					return
				}
			}
			f, data, have = sseFrame{}, nil, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			f.id, have = value, true
		case "data":
			data, have = append(data, value), true
		case "retry":
			f.retry, f.hasRetry, have = value, true, true
		}
	}
}

// mcpClient speaks the raw Streamable HTTP protocol for one session; each request names the
// replica it goes to.
type mcpClient struct {
	hc  *http.Client
	sid string
	ids atomic.Int64
}

// nextID returns a request id unused in the session.
func (c *mcpClient) nextID() int64 { return c.ids.Add(1) + 100 }

// open sends a request and returns its answer as a stream of events: a POST of body, or a GET
// (body "") resuming after lastEventID when that is set. Any status but 200 is a
// *statusError.
func (c *mcpClient) open(ctx context.Context, url, body, lastEventID string) (*eventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	method, rd := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		cancel()
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	} else {
		req.Header.Set("Accept", "text/event-stream")
	}
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("Mcp-Protocol-Version", crossVersion)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, &statusError{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	}
	frames := make(chan sseFrame, 256)
	st := &eventStream{frames: frames, cancel: cancel}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			cancel()
			return nil, err
		}
		frames <- sseFrame{data: string(b)}
		close(frames)
		return st, nil
	}
	go readFrames(ctx, resp.Body, frames)
	return st, nil
}

// send posts a notification or an answer to url and checks that it was accepted (202).
func (c *mcpClient) send(ctx context.Context, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.sid)
	req.Header.Set("Mcp-Protocol-Version", crossVersion)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return &statusError{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	}
	return nil
}

// answer answers a request the client received (by its id) with result, on url.
func (c *mcpClient) answer(ctx context.Context, url string, id json.RawMessage, result string) error {
	if err := c.send(ctx, url, answerText(id, result)); err != nil {
		return fmt.Errorf("answer to %s: %w", id, err)
	}
	return nil
}

// refusedForNow reports whether err is a 503 with Retry-After: the request did not run.
func refusedForNow(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusServiceUnavailable && se.retryAfter != ""
}

// call posts request id to url and reads its answer to the end: the response, and the other
// messages that came before it.
func (c *mcpClient) call(ctx context.Context, url string, id int64, body string) (rpcMsg, []rpcMsg, error) {
	st, err := c.open(ctx, url, body, "")
	for try := 1; try < 3 && refusedForNow(err); try++ {
		// Refused before it ran (a store round trip timed out on a loaded machine), with
		// Retry-After: a client sends it again.
		st, err = c.open(ctx, url, body, "")
	}
	if err != nil {
		return rpcMsg{}, nil, err
	}
	defer st.close()
	want := fmt.Sprint(id)
	var others []rpcMsg
	for {
		_, m, err := st.nextMessage(eventBound)
		if err != nil {
			return rpcMsg{}, others, fmt.Errorf("waiting for the response %s: %w", want, err)
		}
		if m.isResponse(want) {
			return m, others, nil
		}
		others = append(others, m)
	}
}

// callTool calls a tool on url and returns its text; an error result is an error.
func (c *mcpClient) callTool(ctx context.Context, url, tool string, args map[string]any) (string, error) {
	id := c.nextID()
	resp, _, err := c.call(ctx, url, id, toolCall(id, tool, args, ""))
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	text, err := resp.toolText()
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	return text, nil
}

// initialize starts a session on url with the given client capabilities.
func initialize(ctx context.Context, hc *http.Client, url, caps string) (*mcpClient, error) {
	c := &mcpClient{hc: hc}
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + crossVersion + `","capabilities":` + caps + `,"clientInfo":{"name":"crossreplica","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
		return nil, fmt.Errorf("initialize: %w", &statusError{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)})
	}
	c.sid = resp.Header.Get("Mcp-Session-Id")
	if err := c.send(ctx, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	return c, nil
}

// testCtx is a context for one test's requests, ended with the test.
func testCtx(t *testing.T, bound time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// session starts a session on n for the test goroutine.
func (cl *crossCluster) session(t *testing.T, ctx context.Context, n *node, caps string) *mcpClient {
	t.Helper()
	c, err := initialize(ctx, cl.hc, n.url, caps)
	if err != nil {
		t.Fatalf("on %s: %v\n%s", n.name, err, n.logTail())
	}
	return c
}

// watchedURI lists the resources on n and returns the URI under which the gateway exposes the
// semantics upstream's subscribable file:///watched.txt.
func watchedURI(t *testing.T, ctx context.Context, c *mcpClient, n *node) string {
	t.Helper()
	id := c.nextID()
	resp, _, err := c.call(ctx, n.url, id, request(id, "resources/list", nil))
	if err != nil || resp.Error != nil {
		t.Fatalf("resources/list on %s: %v %+v\n%s", n.name, err, resp.Error, n.logTail())
	}
	var list struct {
		Resources []struct {
			URI string `json:"uri"`
		} `json:"resources"`
	}
	_ = json.Unmarshal(resp.Result, &list)
	for _, r := range list.Resources {
		if strings.HasPrefix(r.URI, "sem") && strings.HasSuffix(r.URI, "watched.txt") {
			return r.URI
		}
	}
	t.Fatalf("resources/list on %s has no watched.txt of upstream sem: %s", n.name, resp.Result)
	return ""
}

// subscribe sends resources/subscribe (or unsubscribe) for uri on n.
func subscribe(ctx context.Context, c *mcpClient, n *node, uri string, on bool) error {
	method := "resources/subscribe"
	if !on {
		method = "resources/unsubscribe"
	}
	id := c.nextID()
	resp, _, err := c.call(ctx, n.url, id, request(id, method, map[string]any{"uri": uri}))
	if err == nil && resp.Error != nil {
		err = fmt.Errorf("error %d: %s", resp.Error.Code, resp.Error.Message)
	}
	if err != nil {
		return fmt.Errorf("%s on %s: %w", method, n.name, err)
	}
	return nil
}

// openStandalone opens the session's standalone stream (GET) on n.
func openStandalone(t *testing.T, ctx context.Context, c *mcpClient, n *node) *eventStream {
	t.Helper()
	st, err := c.open(ctx, n.url, "", "")
	if err != nil {
		t.Fatalf("GET on %s: %v\n%s", n.name, err, n.logTail())
	}
	t.Cleanup(st.close)
	return st
}

// waitUpdate reads a stream until notifications/resources/updated for uri comes; other
// messages are errors.
func waitUpdate(t *testing.T, st *eventStream, uri string, where ...*node) {
	t.Helper()
	for {
		_, m, err := st.nextMessage(eventBound)
		if err != nil {
			t.Fatalf("waiting for notifications/resources/updated of %s: %v%s", uri, err, tails(where...))
		}
		if m.Method == "notifications/resources/updated" && m.param("uri") == uri {
			return
		}
		t.Fatalf("on the standalone stream, waiting for the update of %s: %s", uri, m.Method+string(m.Params)+string(m.Result))
	}
}

// tails joins the log tails of replicas, for failure messages.
func tails(ns ...*node) string {
	var b strings.Builder
	for _, n := range ns {
		b.WriteString("\n" + n.logTail())
	}
	return b.String()
}

// TestCrossReplicaCallOnAnotherReplica: a session initialized on A lists and calls tools on B;
// each answer, with the messages about the call (progress), comes on B's POST response.
func TestCrossReplicaCallOnAnotherReplica(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b := cl.start("a"), cl.start("b")
	ctx := testCtx(t, time.Minute)
	c := cl.session(t, ctx, a, "{}")

	id := c.nextID()
	resp, _, err := c.call(ctx, b.url, id, request(id, "tools/list", nil))
	if err != nil || resp.Error != nil || !strings.Contains(string(resp.Result), `"rev__hold"`) || !strings.Contains(string(resp.Result), `"sem__touch"`) {
		t.Fatalf("tools/list on B of A's session: %v %+v %s%s", err, resp.Error, resp.Result, tails(a, b))
	}
	if text, err := c.callTool(ctx, b.url, "alpha__echo", map[string]any{"text": "from b"}); err != nil || text != "alpha:from b" {
		t.Errorf("alpha__echo on B: %q %v, want alpha:from b", text, err)
	}
	id = c.nextID()
	resp, others, err := c.call(ctx, b.url, id, toolCall(id, "rev__progress", nil, "tok-b"))
	if err != nil {
		t.Fatalf("rev__progress on B: %v%s", err, tails(a, b))
	}
	if text, err := resp.toolText(); err != nil || !strings.HasPrefix(text, "token=") {
		t.Errorf("rev__progress on B answered %q %v", text, err)
	}
	progress := 0
	for _, m := range others {
		if m.Method != "notifications/progress" || m.param("progressToken") != "tok-b" {
			t.Errorf("on the call's stream: %s %s, want only progress with the client's token", m.Method, m.Params)
			continue
		}
		progress++
	}
	if progress != 3 {
		t.Errorf("%d progress notifications on B's POST stream, want 3", progress)
	}
}

// TestCrossReplicaResourceUpdateReachesTheStreamElsewhere: the session subscribes on C while
// its standalone stream is open on B; a tool called through A announces the resource updated:
// the notification reaches the stream on B.
func TestCrossReplicaResourceUpdateReachesTheStreamElsewhere(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, a, "{}")
	uri := watchedURI(t, ctx, s, c)

	stream := openStandalone(t, ctx, s, b)
	if err := subscribe(ctx, s, c, uri, true); err != nil {
		t.Fatalf("%v%s", err, tails(c))
	}
	if text, err := s.callTool(ctx, a.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on A: %q %v%s", text, err, tails(a))
	}
	waitUpdate(t, stream, uri, a, b, c)

	// Again, touched through the replica that made the subscription: still delivered on B.
	if text, err := s.callTool(ctx, c.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on C: %q %v%s", text, err, tails(c))
	}
	waitUpdate(t, stream, uri, a, b, c)
}

// TestCrossReplicaSamplingAnsweredOnAnotherReplica: a tool running on B samples and elicits;
// the client reads both requests on B's POST stream and answers them on other replicas (the
// sampling on A, the elicitation on C); the call on B completes with what they answered.
func TestCrossReplicaSamplingAnsweredOnAnotherReplica(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, c, askingCaps)

	const callID = 3
	st, err := s.open(ctx, b.url, toolCall(callID, "rev__ask", map[string]any{"text": "q3"}, ""), "")
	if err != nil {
		t.Fatalf("rev__ask on B: %v%s", err, tails(b))
	}
	defer st.close()
	_, sampling, err := st.nextMessage(eventBound)
	if err != nil || sampling.Method != "sampling/createMessage" || sampling.samplingPrompt() != "q3" {
		t.Fatalf("first message on B's stream: %v %s %s, want the sampling request for q3%s", err, sampling.Method, sampling.Params, tails(b))
	}
	if err := s.answer(ctx, a.url, sampling.ID, samplingResult("from-a")); err != nil {
		t.Fatalf("the sampling answer on A: %v%s", err, tails(a))
	}
	_, elicit, err := st.nextMessage(eventBound)
	if err != nil || elicit.Method != "elicitation/create" {
		t.Fatalf("after the sampling answer on A, B's stream: %v %s %s, want the elicitation%s", err, elicit.Method, elicit.Params, tails(a, b))
	}
	if err := s.answer(ctx, c.url, elicit.ID, elicitResult("from-c")); err != nil {
		t.Fatalf("the elicitation answer on C: %v%s", err, tails(c))
	}
	_, resp, err := st.nextMessage(eventBound)
	if err != nil || !resp.isResponse(fmt.Sprint(callID)) {
		t.Fatalf("after the elicitation answer on C, B's stream: %v %+v, want the call's response%s", err, resp, tails(b, c))
	}
	if text, err := resp.toolText(); err != nil || text != "sampled=from-a;elicited=from-c" {
		t.Errorf("the call on B answered %q %v, want sampled=from-a;elicited=from-c", text, err)
	}
	if rest, err := st.rest(eventBound); err != nil || len(rest) != 0 {
		t.Errorf("after the response, B's stream: %v %+v, want its end", err, rest)
	}
}

// TestCrossReplicaCancelOnAnotherReplica: a call runs on B; the client cancels it with a
// notification sent to C; the upstream call stops, and B's POST stream ends with no response
// for it (the receiver of a cancel SHOULD NOT answer, 2025-11-25 cancellation). The tool is
// "hold" ("block" that reports progress once), so that the test knows the upstream has the
// call before it cancels.
func TestCrossReplicaCancelOnAnotherReplica(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, a, "{}")

	const callID = 5
	st, err := s.open(ctx, b.url, toolCall(callID, "rev__hold", nil, "h5"), "")
	if err != nil {
		t.Fatalf("rev__hold on B: %v%s", err, tails(b))
	}
	defer st.close()
	if _, m, err := st.nextMessage(eventBound); err != nil || m.Method != "notifications/progress" {
		t.Fatalf("B's stream: %v %s, want the progress of the held call%s", err, m.Method, tails(b))
	}
	if err := s.send(ctx, c.url, notification("notifications/cancelled", map[string]any{"requestId": callID, "reason": "the test cancels"})); err != nil {
		t.Fatalf("notifications/cancelled on C: %v%s", err, tails(c))
	}
	var cancels string
	waitWithin(t, eventBound, "the upstream call to stop (rev__cancels = 1)", func() bool {
		cancels, _ = s.callTool(ctx, a.url, "rev__cancels", nil)
		return cancels == "1"
	})
	rest, err := st.rest(eventBound)
	if err != nil {
		t.Errorf("B's POST stream of the cancelled call: %v%s", err, tails(b, c))
	}
	for _, f := range rest {
		if m, err := parseMsg(f.data); err == nil && f.data != "" && m.isResponse(fmt.Sprint(callID)) {
			t.Errorf("the cancelled call was answered on B: %s", f.data)
		}
	}
}

// TestCrossReplicaResumeAfterOwnerKilled: a call runs on A, its POST stream read up to its
// progress event; A is killed (SIGKILL). The client resumes on B from the priming event: it
// gets the progress event A logged, once, then, once A's lease has run out, an error response
// for the call A was running, and the stream ends. Nothing comes twice.
func TestCrossReplicaResumeAfterOwnerKilled(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, c, "{}")

	const callID = 7
	st, err := s.open(ctx, a.url, toolCall(callID, "rev__hold", nil, "h7"), "")
	if err != nil {
		t.Fatalf("rev__hold on A: %v%s", err, tails(a))
	}
	defer st.close()
	prime, err := st.next(eventBound)
	if err != nil || prime.id == "" || prime.data != "" {
		t.Fatalf("first event on A's stream: %v %+v, want the priming event%s", err, prime, tails(a))
	}
	progress, m, err := st.nextMessage(eventBound)
	if err != nil || m.Method != "notifications/progress" || progress.id == "" {
		t.Fatalf("A's stream: %v %+v, want the progress event with an id%s", err, progress, tails(a))
	}
	streamID := progress.id[:strings.LastIndexByte(progress.id, '.')]
	cl.waitLogged(t, streamID, progress.data)

	a.kill(t)
	if _, err := st.rest(eventBound); err != nil {
		t.Fatalf("A's stream after SIGKILL: %v", err)
	}

	resumed, err := s.open(ctx, b.url, "", prime.id)
	if err != nil {
		t.Fatalf("resume on B after %s: %v%s", prime.id, err, tails(b, c))
	}
	defer resumed.close()
	got, err := resumed.rest(eventBound)
	if err != nil {
		t.Errorf("the stream resumed on B: %v%s", err, tails(b, c))
	}
	var messages []sseFrame
	seen := map[string]bool{}
	for _, f := range got {
		if f.id != "" && seen[f.id] {
			t.Errorf("event %s came twice", f.id)
		}
		seen[f.id] = true
		if f.data != "" {
			messages = append(messages, f)
		}
	}
	if len(messages) != 2 {
		t.Fatalf("resumed on B: %d messages %+v, want the progress event and an error response%s", len(messages), messages, tails(b, c))
	}
	if messages[0].id != progress.id || messages[0].data != progress.data {
		t.Errorf("first message resumed: %+v, want the progress event A sent (%s)", messages[0], progress.id)
	}
	last, err := parseMsg(messages[1].data)
	if err != nil || !last.isResponse(fmt.Sprint(callID)) || last.Error == nil {
		t.Errorf("last message resumed: %s, want an error response for request %d", messages[1].data, callID)
	}
}

// TestCrossReplicaSubscriptionTakeover: a session subscribes on A, its standalone stream open
// on B; A is killed. Once A's lease has run out another replica subscribes upstream for A's
// subscribers, and a touch through B reaches the stream on B.
func TestCrossReplicaSubscriptionTakeover(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, a, "{}")
	uri := watchedURI(t, ctx, s, a)

	stream := openStandalone(t, ctx, s, b)
	if err := subscribe(ctx, s, a, uri, true); err != nil {
		t.Fatalf("%v%s", err, tails(a))
	}
	if counts, err := s.callTool(ctx, c.url, "sem__sub_counts", nil); err != nil || counts != "subscribe=1 unsubscribe=0" {
		t.Fatalf("after the subscribe on A, the upstream saw %q %v", counts, err)
	}
	// Before the kill: delivered across replicas.
	if text, err := s.callTool(ctx, c.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on C: %q %v", text, err)
	}
	waitUpdate(t, stream, uri, a, b, c)

	a.kill(t)
	var counts string
	waitWithin(t, eventBound, "another replica to subscribe upstream for A's subscriber", func() bool {
		counts, _ = s.callTool(ctx, b.url, "sem__sub_counts", nil)
		return counts == "subscribe=2 unsubscribe=0"
	})
	if text, err := s.callTool(ctx, b.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on B: %q %v%s", text, err, tails(b))
	}
	waitUpdate(t, stream, uri, b, c)
	if counts, err := s.callTool(ctx, c.url, "sem__sub_counts", nil); err != nil || counts != "subscribe=2 unsubscribe=0" {
		t.Errorf("after the takeover the upstream saw %q %v, want one subscription more than before", counts, err)
	}
}

// soakSessions is how many sessions TestCrossReplicaSoak runs at once.
const soakSessions = 256

// soakLog collects what went wrong in the soak, from its sessions' goroutines.
type soakLog struct {
	mu sync.Mutex
	// errs are failures; crossed are messages that reached a session or request they were not
	// for. Guarded by mu.
	errs, crossed []string
}

func (l *soakLog) fail(marker, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, marker+": "+fmt.Sprintf(format, args...))
}

// failed reports whether anything went wrong yet.
func (l *soakLog) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)+len(l.crossed) > 0
}

func (l *soakLog) cross(marker, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.crossed = append(l.crossed, marker+": "+fmt.Sprintf(format, args...))
}

// TestCrossReplicaSoak: many sessions at once over two replicas, each request sent to one of
// them by the test's own round-robin: echo calls, a call with progress, an ask whose sampling
// and elicitation are answered on the other replica, a subscribe with a touch through the other
// replica, on a standalone stream held by the other replica. Every response must answer its
// own request, every message carry its own session's marker: zero errors, zero crossed.
func TestCrossReplicaSoak(t *testing.T) {
	cl := newCrossCluster(t, "info")
	nodes := [2]*node{cl.start("a"), cl.start("b")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	probe := cl.session(t, ctx, nodes[0], "{}")
	uri := watchedURI(t, ctx, probe, nodes[1])

	began := time.Now()
	var log soakLog
	var wg sync.WaitGroup
	for i := range soakSessions {
		wg.Go(func() { soakSession(ctx, cl, nodes[i%2], nodes[(i+1)%2], fmt.Sprintf("s%03d", i), uri, &log) })
	}
	wg.Wait()
	t.Logf("%d sessions in %s", soakSessions, time.Since(began).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Errorf("the soak did not finish within its bound")
	}
	for _, e := range log.errs[:min(len(log.errs), 20)] {
		t.Error(e)
	}
	for _, e := range log.crossed[:min(len(log.crossed), 20)] {
		t.Error("CROSSED " + e)
	}
	if len(log.errs)+len(log.crossed) > 0 {
		t.Fatalf("%d errors, %d crossed%s", len(log.errs), len(log.crossed), tails(nodes[0], nodes[1]))
	}
}

// soakSession is one session of the soak, initialized on home; other is the other replica.
func soakSession(ctx context.Context, cl *crossCluster, home, other *node, marker, uri string, log *soakLog) {
	nodes := [2]*node{home, other}
	s, err := initialize(ctx, cl.hc, home.url, askingCaps)
	if err != nil {
		log.fail(marker, "on %s: %v", home.name, err)
		return
	}
	stream, err := s.open(ctx, other.url, "", "")
	if err != nil {
		log.fail(marker, "GET on %s: %v", other.name, err)
		return
	}
	defer stream.close()
	// The standalone stream may carry resource updates (of the session's subscription) and
	// list changes, nothing else.
	updates := make(chan struct{}, 64)
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		for f := range stream.frames {
			if f.data == "" {
				continue
			}
			m, err := parseMsg(f.data)
			switch {
			case err != nil:
				log.fail(marker, "standalone stream: %v", err)
			case m.Method == "notifications/resources/updated" && m.param("uri") == uri:
				select {
				case updates <- struct{}{}:
				default:
				}
			case strings.HasSuffix(m.Method, "/list_changed"):
			default:
				log.cross(marker, "on the standalone stream: %s", f.data)
			}
		}
	}()

	// checked reads a call's answer: its response, with only messages of its own on the way.
	checked := func(n *node, id int64, body string, token string) (rpcMsg, bool) {
		resp, others, err := s.call(ctx, n.url, id, body)
		for _, m := range others {
			switch {
			case m.isAnyResponse():
				log.cross(marker, "request %d on %s got the response of %s", id, n.name, m.ID)
			case m.Method == "notifications/progress" && token != "" && m.param("progressToken") == token:
			default:
				log.cross(marker, "request %d on %s: %s %s", id, n.name, m.Method, m.Params)
			}
		}
		if err != nil {
			log.fail(marker, "request %d on %s: %v", id, n.name, err)
			return rpcMsg{}, false
		}
		return resp, true
	}

	for k := range 3 {
		n := nodes[k%2]
		id := s.nextID()
		want := fmt.Sprintf("%s/%d", marker, k)
		if resp, ok := checked(n, id, toolCall(id, "alpha__echo", map[string]any{"text": want}, ""), ""); ok {
			if text, err := resp.toolText(); err != nil || text != "alpha:"+want {
				log.cross(marker, "echo %q on %s answered %q %v", want, n.name, text, err)
			}
		}
	}
	id := s.nextID()
	if resp, ok := checked(other, id, toolCall(id, "rev__progress", nil, marker), marker); ok {
		if _, err := resp.toolText(); err != nil {
			log.fail(marker, "rev__progress on %s: %v", other.name, err)
		}
	}

	// An ask on home, answered on other.
	id = s.nextID()
	st, err := s.open(ctx, home.url, toolCall(id, "rev__ask", map[string]any{"text": marker}, ""), "")
	if err != nil {
		log.fail(marker, "rev__ask on %s: %v", home.name, err)
		return
	}
	defer st.close()
	asked := 0
	for done := false; !done; {
		_, m, err := st.nextMessage(eventBound)
		switch {
		case err != nil:
			log.fail(marker, "rev__ask on %s after %d answers: %v", home.name, asked, err)
			return
		case m.Method == "sampling/createMessage":
			if m.samplingPrompt() != marker {
				log.cross(marker, "sampling request for %q", m.samplingPrompt())
			}
			if err := s.answer(ctx, other.url, m.ID, samplingResult(marker+"-s")); err != nil {
				log.fail(marker, "sampling answer on %s: %v", other.name, err)
				return
			}
			asked++
		case m.Method == "elicitation/create":
			if !strings.HasSuffix(m.param("message"), marker) {
				log.cross(marker, "elicitation %q", m.param("message"))
			}
			if err := s.answer(ctx, other.url, m.ID, elicitResult(marker+"-e")); err != nil {
				log.fail(marker, "elicitation answer on %s: %v", other.name, err)
				return
			}
			asked++
		case m.isResponse(fmt.Sprint(id)):
			if text, err := m.toolText(); err != nil || text != "sampled="+marker+"-s;elicited="+marker+"-e" {
				log.cross(marker, "rev__ask answered %q %v", text, err)
			}
			done = true
		default:
			log.cross(marker, "on the stream of rev__ask: %s %s %s", m.Method, m.ID, m.Params)
		}
	}

	// A subscription on home, touched through other: the update reaches the stream on other.
	if err := subscribe(ctx, s, home, uri, true); err != nil {
		log.fail(marker, "%v", err)
		return
	}
	for drained := false; !drained; {
		select {
		case <-updates: // of others' touches, before this session's own
		default:
			drained = true
		}
	}
	if _, err := s.callTool(ctx, other.url, "sem__touch", nil); err != nil {
		log.fail(marker, "on %s: %v", other.name, err)
		return
	}
	select {
	case <-updates:
	case <-time.After(eventBound):
		log.fail(marker, "no resources/updated on the stream on %s within %s", other.name, eventBound)
	}
	if err := subscribe(ctx, s, other, uri, false); err != nil {
		log.fail(marker, "%v", err)
	}

	del, _ := http.NewRequestWithContext(ctx, http.MethodDelete, home.url, nil)
	del.Header.Set("Mcp-Session-Id", s.sid)
	resp, err := cl.hc.Do(del)
	if err == nil {
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusNoContent {
		log.fail(marker, "DELETE on %s: %v %v", home.name, status(resp), err)
	}
	select {
	case <-listened:
	case <-time.After(eventBound):
		log.fail(marker, "the standalone stream on %s did not end with the session", other.name)
	}
}

// replicaPool is the replicas the load clients of the rolling restart send to, round-robin;
// the restart replaces them.
type replicaPool struct {
	mu sync.Mutex
	// nodes are the replicas in use; next is where the round-robin goes next. Guarded by mu.
	nodes []*node
	next  int
}

func (p *replicaPool) pick() *node {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.nodes[p.next%len(p.nodes)]
	p.next++
	return n
}

func (p *replicaPool) replace(old, repl *node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, n := range p.nodes {
		if n == old {
			p.nodes[i] = repl
		}
	}
}

// loadClient is one client of the rolling restart: it calls in a loop, going round the
// replicas, retrying on the next one when a replica is gone or refuses with 503, resuming a
// stream that broke with Last-Event-ID, and keeps its standalone stream open, reopening it
// where it can when a replica closes it.
type loadClient struct {
	name string
	s    *mcpClient
	pool *replicaPool
	log  *soakLog
	// calls counts the calls answered; drainedStreams the standalone streams a replica ended,
	// hinted those that ended with a retry field.
	calls, drainedStreams, hinted, retries atomic.Int64
}

// maxAttempts bounds the replicas a load client tries for one request.
const maxAttempts = 100

// open sends a request (body) or a GET (resuming after lastEventID when set) to the replicas
// in turn until one takes it.
func (lc *loadClient) open(ctx context.Context, body, lastEventID string) (*eventStream, *node, error) {
	var last error
	for range maxAttempts {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		n := lc.pool.pick()
		st, err := lc.s.open(ctx, n.url, body, lastEventID)
		var se *statusError
		switch {
		case err == nil:
			return st, n, nil
		case errors.As(err, &se) && se.code == http.StatusServiceUnavailable:
			if body != "" && se.retryAfter == "" {
				return nil, n, fmt.Errorf("%s refused with 503 and no Retry-After: %v", n.name, err)
			}
		case errors.As(err, &se) && se.code == http.StatusConflict && body == "":
			// The standalone stream is still attached where it was: it is ending.
		case errors.As(err, &se):
			return nil, n, fmt.Errorf("on %s: %w", n.name, err)
		}
		lc.retries.Add(1)
		last = err
	}
	return nil, nil, fmt.Errorf("no replica took the request in %d attempts, last: %v", maxAttempts, last)
}

// call sends a tool call until it gets its result: a broken stream is resumed from its last
// event id on another replica, or, when it broke before it had one, sent again (the tools are
// idempotent) under a new id.
func (lc *loadClient) call(ctx context.Context, tool string, args map[string]any, token string) (string, error) {
	id := lc.s.nextID()
	st, n, err := lc.open(ctx, toolCall(id, tool, args, token), "")
	if err != nil {
		return "", err
	}
	lastID := ""
	for range maxAttempts {
		f, err := st.next(eventBound)
		switch {
		case errors.Is(err, errStreamEnded):
			st.close()
			if lastID == "" {
				id = lc.s.nextID()
				st, n, err = lc.open(ctx, toolCall(id, tool, args, token), "")
			} else {
				st, n, err = lc.open(ctx, "", lastID)
			}
			if err != nil {
				return "", err
			}
			lc.retries.Add(1)
			continue
		case err != nil:
			st.close()
			return "", fmt.Errorf("request %d on %s: %w", id, n.name, err)
		}
		if f.id != "" {
			lastID = f.id
		}
		if f.data == "" {
			continue
		}
		m, err := parseMsg(f.data)
		switch {
		case err != nil:
			st.close()
			return "", err
		case m.isResponse(fmt.Sprint(id)):
			st.close()
			lc.calls.Add(1)
			return m.toolText()
		case m.Method == "notifications/progress" && token != "" && m.param("progressToken") == token:
		default:
			lc.log.cross(lc.name, "request %d on %s: %s", id, n.name, f.data)
		}
	}
	st.close()
	return "", fmt.Errorf("request %d: no result after %d resumes", id, maxAttempts)
}

// listen keeps the session's standalone stream open until ctx ends.
func (lc *loadClient) listen(ctx context.Context) {
	for ctx.Err() == nil {
		st, n, err := lc.open(ctx, "", "")
		if err != nil {
			if ctx.Err() == nil {
				lc.log.fail(lc.name, "standalone stream: %v", err)
			}
			return
		}
		var frames []sseFrame
		for f := range st.frames {
			frames = append(frames, f)
			if f.data == "" {
				continue
			}
			if m, err := parseMsg(f.data); err != nil || !strings.HasSuffix(m.Method, "/list_changed") {
				lc.log.cross(lc.name, "on the standalone stream on %s: %s", n.name, f.data)
			}
		}
		st.close()
		if ctx.Err() != nil {
			return
		}
		// The replica ended the stream: a drain, which says when to come back.
		lc.drainedStreams.Add(1)
		if len(frames) > 1 && frames[len(frames)-1].hasRetry {
			lc.hinted.Add(1)
		}
	}
}

// TestCrossReplicaRollingRestart: clients call without pause over two replicas while each in
// turn is stopped with SIGTERM (it drains: /readyz and new requests get 503 with Retry-After,
// a call in flight finishes, standalone streams close with a retry hint) and replaced by a new
// process. The clients retry on the other replica and resume broken streams: every call gets
// its result, no client sees an error it cannot get past.
func TestCrossReplicaRollingRestart(t *testing.T) {
	cl := newCrossCluster(t, "info")
	a, b := cl.start("a"), cl.start("b")
	pool := &replicaPool{nodes: []*node{a, b}}
	ctx := testCtx(t, 3*time.Minute)

	const clients = 16
	var log soakLog
	loads := make([]*loadClient, clients)
	for i := range loads {
		n := pool.pick()
		s := cl.session(t, ctx, n, "{}")
		loads[i] = &loadClient{name: fmt.Sprintf("c%02d", i), s: s, pool: pool, log: &log}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, lc := range loads {
		wg.Go(func() { lc.listen(loadCtx) })
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				want := fmt.Sprintf("%s/%d", lc.name, k)
				if k%4 == 3 {
					if _, err := lc.call(ctx, "rev__progress", nil, want); err != nil {
						lc.log.fail(lc.name, "rev__progress: %v", err)
						return
					}
					continue
				}
				text, err := lc.call(ctx, "alpha__echo", map[string]any{"text": want}, "")
				if err != nil {
					lc.log.fail(lc.name, "alpha__echo: %v", err)
					return
				}
				if text != "alpha:"+want {
					lc.log.cross(lc.name, "echo %q answered %q", want, text)
				}
			}
		})
	}
	total := func() int64 {
		var n int64
		for _, lc := range loads {
			n += lc.calls.Load()
		}
		return n
	}
	progressed := func(what string) {
		t.Helper()
		from := total()
		waitWithin(t, eventBound, "the clients to go on calling "+what, func() bool { return total() >= from+4*clients || log.failed() })
	}
	progressed("before the restart")

	restart := func(old *node, other *node, name string) *node {
		t.Helper()
		// A call the drain must wait for: it asks the client, which answers only once the
		// test has seen the drain refuse new requests.
		ctl := cl.session(t, ctx, other, askingCaps)
		const askID = 1
		st, err := ctl.open(ctx, old.url, toolCall(askID, "rev__ask", map[string]any{"text": "drain"}, ""), "")
		if err != nil {
			t.Fatalf("rev__ask on %s: %v%s", old.name, err, tails(old))
		}
		defer st.close()
		_, sampling, err := st.nextMessage(eventBound)
		if err != nil || sampling.Method != "sampling/createMessage" {
			t.Fatalf("on %s: %v %s, want the sampling request%s", old.name, err, sampling.Method, tails(old))
		}

		old.terminate(t)
		waitFor(t, old.name+"'s /readyz to answer 503", func() bool { return old.readyStatus() == http.StatusServiceUnavailable })
		id := ctl.nextID()
		pinged, err := ctl.open(ctx, old.url, request(id, "ping", nil), "")
		if err == nil {
			pinged.close()
		}
		var se *statusError
		if !errors.As(err, &se) || se.code != http.StatusServiceUnavailable || se.retryAfter == "" {
			t.Errorf("a new request to %s while it drains: %v, want 503 with Retry-After", old.name, err)
		}

		if err := ctl.answer(ctx, old.url, sampling.ID, samplingResult("s")); err != nil {
			t.Fatalf("the sampling answer on %s while it drains: %v%s", old.name, err, tails(old))
		}
		_, elicit, err := st.nextMessage(eventBound)
		if err != nil || elicit.Method != "elicitation/create" {
			t.Fatalf("on %s: %v %s, want the elicitation%s", old.name, err, elicit.Method, tails(old))
		}
		if err := ctl.answer(ctx, old.url, elicit.ID, elicitResult("e")); err != nil {
			t.Fatalf("the elicitation answer on %s while it drains: %v%s", old.name, err, tails(old))
		}
		_, resp, err := st.nextMessage(eventBound)
		if text, terr := resp.toolText(); err != nil || !resp.isResponse(fmt.Sprint(askID)) || terr != nil || text != "sampled=s;elicited=e" {
			t.Errorf("the call in flight on %s when it drained: %v %+v %q %v, want its result", old.name, err, resp, text, terr)
		}
		waitWithin(t, 30*time.Second, old.name+" to stop", func() bool { return strings.Contains(old.logs.String(), `msg="gateway stopped"`) })

		repl := cl.start(name)
		pool.replace(old, repl)
		progressed("after " + old.name + " was replaced by " + name)
		return repl
	}
	a2 := restart(a, b, "a2")
	b2 := restart(b, a2, "b2")
	progressed("after the restart")

	// The callers end after their call in flight, the listeners at once.
	stop.Store(true)
	stopLoad()
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(eventBound):
		t.Fatal("the load clients did not stop")
	}

	var calls, drained, hinted, retries int64
	for _, lc := range loads {
		if lc.calls.Load() == 0 {
			t.Errorf("client %s got no result at all", lc.name)
		}
		calls += lc.calls.Load()
		drained += lc.drainedStreams.Load()
		hinted += lc.hinted.Load()
		retries += lc.retries.Load()
	}
	t.Logf("%d calls answered, %d retries or resumes, %d standalone streams ended by a drain (%d with a retry hint)", calls, retries, drained, hinted)
	for _, e := range log.errs[:min(len(log.errs), 20)] {
		t.Error(e)
	}
	for _, e := range log.crossed[:min(len(log.crossed), 20)] {
		t.Error("CROSSED " + e)
	}
	if len(log.errs)+len(log.crossed) > 0 {
		t.Fatalf("%d errors, %d crossed%s", len(log.errs), len(log.crossed), tails(a, b, a2, b2))
	}
	if drained == 0 || hinted != drained {
		t.Errorf("%d standalone streams ended by a drain, %d of them with a retry hint: want some, all hinted", drained, hinted)
	}
}

// TestCrossReplicaHeldCallTakenOverAfterHolderKilled: a tool call held for an operator's
// approval on A (the client cannot be asked) is read on A's stream up to its priming event;
// A is killed (SIGKILL) before anyone decides. The call never ran, so once A's lease has run
// out another replica takes it over: the client's stream, resumed on B, stays open; an
// operator approves on B's admin API; the call runs and its result arrives on the resumed
// stream, once, and nothing else does.
func TestCrossReplicaHeldCallTakenOverAfterHolderKilled(t *testing.T) {
	for _, resumeFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("resumed before the takeover %v", resumeFirst), func(t *testing.T) { heldCallTakenOver(t, resumeFirst, false) })
	}
}

// TestHeldCallTakenOverAsksItsClient: as TestCrossReplicaHeldCallTakenOverAfterHolderKilled,
// with a tool that samples the client mid-call: the sampling request of the call taken over
// reaches the stream the client resumed on B, and the client's answer, sent to B, reaches
// the call wherever it runs.
func TestHeldCallTakenOverAsksItsClient(t *testing.T) {
	for _, resumeFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("resumed before the takeover %v", resumeFirst), func(t *testing.T) { heldCallTakenOver(t, resumeFirst, true) })
	}
}

// heldCallTakenOver runs TestCrossReplicaHeldCallTakenOverAfterHolderKilled with the client
// resuming its stream before the takeover (followed while A's lease runs), or after it (read
// back from the log); asks calls a tool that samples the client mid-call (which declares
// sampling, not elicitation: the call is held for an operator all the same).
// heldCluster is a cluster of three replicas, a, b and c, each with an admin API, whose
// policy holds alpha__echo and rev__slow_ask for an operator's approval.
type heldCluster struct {
	*crossCluster
	a, b, c *node
	admins  map[string]string
}

// heldClusterKey is the admin API key of a heldCluster's operator.
const heldClusterKey = "mfk_ops-admin-key-of-the-cluster"

func newHeldCluster(t *testing.T) *heldCluster {
	t.Helper()
	cl := newCrossCluster(t, "debug")
	cl.config += `policy:
  approval: {timeout: 1m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [alpha], tools: [echo]}}
    - {name: asking-needs-approval, effect: approve, match: {upstreams: [rev], tools: [slow_ask]}}
`
	hc := &heldCluster{crossCluster: cl, admins: map[string]string{}}
	start := func(name string) *node {
		port := freePort(t)
		hc.admins[name] = "http://" + port
		return &node{name: name, replica: startReplica(t, name, cl.config+fmt.Sprintf("admin:\n  listen: %s\n  api_keys:\n    - {name: ops, hash: %q}\n", port, auth.HashAPIKey(heldClusterKey)))}
	}
	hc.a, hc.b, hc.c = start("a"), start("b"), start("c")
	return hc
}

// admin calls n's admin API and returns the status and body of its answer.
func (hc *heldCluster) admin(ctx context.Context, n *node, method, path, body string) (int, string) {
	hc.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, hc.admins[n.name]+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+heldClusterKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		hc.t.Fatalf("admin API of %s: %v", n.name, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// heldID returns the id of the one call held, as n's admin API lists it; "" unless one is.
func (hc *heldCluster) heldID(ctx context.Context, n *node) string {
	_, body := hc.admin(ctx, n, http.MethodGet, "/api/approvals", "")
	var list struct {
		Approvals []struct{ ID string } `json:"approvals"`
	}
	_ = json.Unmarshal([]byte(body), &list)
	if len(list.Approvals) != 1 {
		return ""
	}
	return list.Approvals[0].ID
}

func heldCallTakenOver(t *testing.T, resumeFirst, asks bool) {
	hc := newHeldCluster(t)
	cl, a, b, c := hc.crossCluster, hc.a, hc.b, hc.c
	ctx := testCtx(t, time.Minute)
	admin := func(n *node, method, path, body string) (int, string) { return hc.admin(ctx, n, method, path, body) }
	heldID := func(n *node) string { return hc.heldID(ctx, n) }

	caps, tool, want := "{}", "alpha__echo", "alpha:deploy"
	if asks {
		caps, tool, want = `{"sampling":{}}`, "rev__slow_ask", "sampled=from-b"
	}
	s := cl.session(t, ctx, c, caps)
	const callID = 9
	st, err := s.open(ctx, a.url, toolCall(callID, tool, map[string]any{"text": "deploy"}, ""), "")
	if err != nil {
		t.Fatalf("alpha__echo on A: %v%s", err, tails(a))
	}
	defer st.close()
	prime, err := st.next(eventBound)
	if err != nil || prime.id == "" || prime.data != "" {
		t.Fatalf("first event on A's stream: %v %+v, want the priming event%s", err, prime, tails(a))
	}
	var id string
	waitWithin(t, eventBound, "the call held on A to be listed on B", func() bool { id = heldID(b); return id != "" })

	a.kill(t)
	if _, err := st.rest(eventBound); err != nil {
		t.Fatalf("A's stream after SIGKILL: %v", err)
	}
	resume := func() *eventStream {
		resumed, err := s.open(ctx, b.url, "", prime.id)
		if err != nil {
			t.Fatalf("resume on B after %s: %v%s", prime.id, err, tails(b, c))
		}
		t.Cleanup(resumed.close)
		return resumed
	}
	var resumed *eventStream
	if resumeFirst {
		resumed = resume()
	}
	waitWithin(t, eventBound, "B or C to take the held call over", func() bool {
		return strings.Contains(b.logs.String(), "took over a held call") || strings.Contains(c.logs.String(), "took over a held call")
	})
	if !resumeFirst {
		resumed = resume()
	}
	if got := heldID(c); got != id {
		t.Fatalf("held call after the takeover: %q, want %q%s", got, id, tails(b, c))
	}
	if status, body := admin(b, http.MethodPost, "/api/approvals/"+id, `{"decision":"approve"}`); status != http.StatusOK {
		t.Fatalf("approve on B: %d %s%s", status, body, tails(b, c))
	}
	if asks {
		_, sampling, err := resumed.nextMessage(eventBound)
		if err != nil || sampling.Method != "sampling/createMessage" || sampling.samplingPrompt() != "deploy" {
			t.Fatalf("the stream resumed on B: %v %s %s, want the taken-over call's sampling request%s", err, sampling.Method, sampling.Params, tails(b, c))
		}
		if err := s.answer(ctx, b.url, sampling.ID, samplingResult("from-b")); err != nil {
			t.Fatalf("the sampling answer on B: %v%s", err, tails(b, c))
		}
	}
	got, err := resumed.rest(eventBound)
	if err != nil {
		t.Errorf("the stream resumed on B: %v%s", err, tails(b, c))
	}
	var messages []string
	for _, f := range got {
		if f.data != "" {
			messages = append(messages, f.data)
		}
	}
	if len(messages) != 1 {
		t.Fatalf("resumed on B: %q, want the call's one result%s", messages, tails(b, c))
	}
	m, err := parseMsg(messages[0])
	if err != nil || !m.isResponse(fmt.Sprint(callID)) || m.Error != nil || !strings.Contains(string(m.Result), want) {
		t.Errorf("the taken-over call's answer: %s, want its result%s", messages[0], tails(b, c))
	}
}

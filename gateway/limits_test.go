package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// Regression tests for the defects that hostile clients found: unbounded batches and calls in
// flight, bodies and connections held open for ever, sessions kept alive by other sessions'
// activity, an answer to a cancelled request, and session ids (bearer secrets) in logs.

// waitBound bounds every wait of these tests for an event that should come at once.
const waitBound = 10 * time.Second

// waitUntil checks cond every 10 ms until it holds; the test fails if it does not within
// waitBound.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, waitBound, what, cond)
}

// startSession sends initialize for protocol version with the given client capabilities (a
// JSON object) and returns the session id, without notifications/initialized.
func (c rawClient) startSession(version, capabilities string) string {
	c.t.Helper()
	r := c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":%s,"clientInfo":{"name":"raw","version":"1"}}}`, version, capabilities), nil)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" || r.msg.Error != nil {
		c.t.Fatalf("initialize %s: %d %s", version, r.status, r.body)
	}
	return sid
}

// initializeAs starts a session and sends notifications/initialized, which also makes the
// session live in the gateway's process.
func (c rawClient) initializeAs(version, capabilities string) string {
	c.t.Helper()
	sid := c.startSession(version, capabilities)
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %d %s", r.status, r.body)
	}
	return sid
}

// post sends body in session sid and returns the response with its body unread: the caller
// reads it (it may be an SSE stream) and closes it. It waits for the response headers.
func (c rawClient) post(ctx context.Context, sid, body string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST %s: %v", body, err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// rpcMessage is any JSON-RPC message as the tests look at it.
type rpcMessage struct {
	// EventID is the SSE id of the event that carried the message, if any.
	EventID string          `json:"-"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (m rpcMessage) isResponse() bool { return m.Method == "" && (m.Result != nil || m.Error != nil) }

// sseStream is the messages of an SSE body, read on a goroutine that ends with the body (or
// the test).
type sseStream struct {
	messages chan rpcMessage
	// lastID is the id of the last priming event read.
	lastID atomic.Pointer[string]
	// err is the error that ended the body (nil at a clean end); set before messages closes.
	err error
}

func readSSE(t *testing.T, body io.Reader) *sseStream {
	s := &sseStream{messages: make(chan rpcMessage)}
	ctx := t.Context()
	go func() {
		defer close(s.messages)
		r := bufio.NewReader(body)
		eventID := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.err = err
				}
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				eventID = id
				continue
			}
			data, ok := strings.CutPrefix(line, "data:")
			if !ok {
				continue
			}
			data = strings.TrimPrefix(data, " ")
			if data == "" {
				// A priming event: an id to resume with, no message.
				s.lastID.Store(&eventID)
				continue
			}
			var m rpcMessage
			m.EventID = eventID
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				s.err = fmt.Errorf("event %q is not JSON-RPC: %w", data, err)
				return
			}
			select {
			case s.messages <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

// next returns the stream's next message; the test fails if the stream ends first or nothing
// comes within waitBound.
func (s *sseStream) next(t *testing.T, what string) rpcMessage {
	t.Helper()
	select {
	case m, ok := <-s.messages:
		if !ok {
			t.Fatalf("waiting for %s: the stream ended (error %v)", what, s.err)
		}
		return m
	case <-time.After(waitBound):
		t.Fatalf("waiting for %s: nothing came within %s", what, waitBound)
	}
	panic("unreachable")
}

// rest returns the messages left until the stream ends, and the error that ended it.
func (s *sseStream) rest(t *testing.T) ([]rpcMessage, error) {
	t.Helper()
	var ms []rpcMessage
	timeout := time.After(waitBound)
	for {
		select {
		case m, ok := <-s.messages:
			if !ok {
				return ms, s.err
			}
			ms = append(ms, m)
		case <-timeout:
			t.Fatalf("the stream did not end within %s (%d messages so far)", waitBound, len(ms))
		}
	}
}

// TestBatchEntriesAreCapped: a 2025-03-26 client could send a batch of any length, every
// request of which the gateway served at once. Past max_batch_entries the batch is refused
// whole; a batch at the limit is served.
func TestBatchEntriesAreCapped(t *testing.T) {
	c := bareGateway(t, "max_batch_entries: 3\n", nil)
	sid := c.initializeAs("2025-03-26", `{}`)
	batch := func(n int) string {
		entries := make([]string, n)
		for i := range entries {
			entries[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+1)
		}
		return "[" + strings.Join(entries, ",") + "]"
	}

	r := c.do(http.MethodPost, batch(4), map[string]string{"Mcp-Session-Id": sid})
	if r.status != http.StatusBadRequest || r.msg.Error == nil || r.msg.Error.Code != -32600 {
		t.Fatalf("a batch of 4 with max_batch_entries 3: %d %s, want 400 with -32600", r.status, r.body)
	}
	if msg := r.msg.Error.Message; !strings.Contains(msg, "max_batch_entries") || !strings.Contains(msg, "3") {
		t.Errorf("error message %q does not name the limit (max_batch_entries, 3)", msg)
	}

	resp := c.post(t.Context(), sid, batch(3))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("a batch of 3: %d %q, want 200 with an SSE stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ms, err := readSSE(t, resp.Body).rest(t)
	if err != nil {
		t.Fatalf("reading the batch's stream: %v", err)
	}
	answered := map[string]bool{}
	for _, m := range ms {
		if !m.isResponse() || m.Error != nil {
			t.Errorf("unexpected message in the batch's answer: %+v", m)
			continue
		}
		answered[string(m.ID)] = true
	}
	if len(answered) != 3 || !answered["1"] || !answered["2"] || !answered["3"] {
		t.Errorf("answered ids %v, want 1, 2 and 3", answered)
	}
}

// resultJSON shows a tool result in a failure message.
func resultJSON(res *mcp.CallToolResult) string {
	data, err := json.Marshal(res)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// TestCallsInFlightAreCapped: a client could keep any number of requests in flight, each
// holding a goroutine and an upstream call. Past max_calls_per_session a session's tools/call
// gets a tool error the model can act on and any other request gets -32007; past max_calls the
// other sessions are refused too. Once calls end, requests are served again.
func TestCallsInFlightAreCapped(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmax_calls_per_session: 2\nmax_calls: 3\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	// A held call reports progress once it runs: that is how the test knows it is in flight.
	progress := make(chan any, 8)
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		progress <- req.Params.ProgressToken
	}}
	a := connect(t, tg.url, opts)
	b := connect(t, tg.url, opts)
	ctx := ctxT(t)

	holdCtx, release := context.WithCancel(ctx)
	defer release()
	var held sync.WaitGroup
	defer held.Wait()
	hold := func(cs *mcp.ClientSession, token string) {
		t.Helper()
		params := &mcp.CallToolParams{Name: "r__hold"}
		params.SetProgressToken(token)
		held.Go(func() {
			res, err := cs.CallTool(holdCtx, params)
			if err == nil {
				t.Errorf("held call %s ended before it was cancelled: %s", token, resultJSON(res))
			}
		})
		select {
		case got := <-progress:
			if got != token {
				t.Fatalf("progress for %v, want %s", got, token)
			}
		case <-time.After(waitBound):
			t.Fatalf("held call %s never got in flight", token)
		}
	}
	quick := &mcp.CallToolParams{Name: "r__cancels"}
	refused := func(who string, cs *mcp.ClientSession) {
		t.Helper()
		res, err := cs.CallTool(ctx, quick)
		if err != nil {
			t.Fatalf("%s: tools/call past the cap: %v, want a tool result", who, err)
		}
		if !res.IsError || res.Meta["dev.manifold/reason"] != "too_many_calls" {
			t.Fatalf("%s: tools/call past the cap answered %s, want isError with _meta reason too_many_calls", who, resultJSON(res))
		}
		err = cs.Ping(ctx, nil)
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != -32007 {
			t.Errorf("%s: ping past the cap: %v, want JSON-RPC error -32007", who, err)
		}
	}
	served := func(who string, cs *mcp.ClientSession) {
		t.Helper()
		if res, err := cs.CallTool(ctx, quick); err != nil || res.IsError {
			t.Fatalf("%s: tools/call under the caps: %v %s", who, err, resultJSON(res))
		}
	}

	hold(a, "a1")
	hold(a, "a2")
	refused("session A with 2 calls in flight", a)
	served("session B with 2 calls in flight in all", b)
	hold(b, "b1")
	refused("session B with 3 calls in flight in all", b)

	release() // the go-sdk client sends notifications/cancelled for each held call
	held.Wait()
	for who, cs := range map[string]*mcp.ClientSession{"A": a, "B": b} {
		waitUntil(t, "session "+who+"'s calls being served again", func() bool {
			res, err := cs.CallTool(ctx, quick)
			return err == nil && !res.IsError
		})
		if err := cs.Ping(ctx, nil); err != nil {
			t.Errorf("session %s: ping after the held calls ended: %v", who, err)
		}
	}
}

// openStandalone opens the session's standalone GET stream.
func (c rawClient) openStandalone(ctx context.Context, sid string) (*http.Response, *sseStream) {
	c.t.Helper()
	return c.resume(ctx, sid, "")
}

// resume opens a GET stream, with Last-Event-ID unless it is empty, which must succeed.
func (c rawClient) resume(ctx context.Context, sid, lastEventID string) (*http.Response, *sseStream) {
	c.t.Helper()
	resp := c.get(ctx, sid, lastEventID)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("GET stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return resp, readSSE(c.t, resp.Body)
}

// get sends a GET for the stream of session sid, with Last-Event-ID unless it is empty.
func (c rawClient) get(ctx context.Context, sid, lastEventID string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("GET stream: %v", err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// rawRequest writes an HTTP/1.1 request by hand on a connection of its own to the gateway.
func rawRequest(t *testing.T, tg *testGateway, head string, body string) net.Conn {
	t.Helper()
	addr := tg.srv.Listener.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "%s\r\nHost: %s\r\n\r\n%s", head, addr, body); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowBodyIsCutOff: a client that sent a POST's headers and dribbled its body held a
// connection and a goroutine for ever. The body must arrive within body_read_timeout, or the
// answer is 408; streams the gateway sends (a POST's answer, the standalone stream) are not
// cut by it.
func TestSlowBodyIsCutOff(t *testing.T) {
	// Fails on the gateway as it is: when the body times out, servePOST lifts the read
	// deadline and writes 408, and net/http, before it sends a response on a connection it
	// keeps, reads the rest of the body (up to 256 KiB) with no deadline: the 408 never
	// leaves and the connection stays for ever. Answering with "Connection: close" (or keeping
	// the deadline) makes it pass.
	tg := startGateway(t, "listen: 127.0.0.1:0\nbody_read_timeout: 200ms\nupstreams:"+
		upstreamYAML("r", "reverse", "")+upstreamYAML("m", "many", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{"sampling":{},"elicitation":{}}`)
	h := map[string]string{"Mcp-Session-Id": sid}

	// Two streams open before the slow body: the standalone stream, and the answer to a call
	// that samples, then elicits, and waits for the client each time.
	_, standalone := c.openStandalone(t.Context(), sid)
	resp := c.post(t.Context(), sid, `{"jsonrpc":"2.0","id":"ask","method":"tools/call","params":{"name":"r__ask","arguments":{"text":"slow"}}}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tools/call ask: %d %q, want an SSE stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	call := readSSE(t, resp.Body)
	sampling := call.next(t, "the sampling request")
	if sampling.Method != "sampling/createMessage" {
		t.Fatalf("first message on the call's stream: %+v, want sampling/createMessage", sampling)
	}

	// The slow client: Content-Length 100, 17 bytes of body, then nothing.
	conn := rawRequest(t, tg, "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100", `{"jsonrpc":"2.0",`)
	_ = conn.SetReadDeadline(time.Now().Add(waitBound)) // without the fix the gateway waits for ever
	slow, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body that stopped arriving: %v", err)
	}
	body, _ := io.ReadAll(slow.Body)
	var m rpcMessage
	if slow.StatusCode != http.StatusRequestTimeout || json.Unmarshal(body, &m) != nil || m.Error == nil || m.Error.Code != -32006 {
		t.Errorf("a body that stopped arriving: %d %s, want 408 with -32006", slow.StatusCode, body)
	}

	// The 408 came body_read_timeout after the slow request began, so both streams are older
	// than that: each must still carry what comes next.
	if r := c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"model":"m","role":"assistant","content":{"type":"text","text":"late"}}}`, sampling.ID), h); r.status != http.StatusAccepted {
		t.Fatalf("answering the sampling request: %d %s", r.status, r.body)
	}
	elicitation := call.next(t, "the elicitation request after body_read_timeout")
	if elicitation.Method != "elicitation/create" {
		t.Fatalf("second message on the call's stream: %+v, want elicitation/create", elicitation)
	}
	if r := c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"answer":"yes"}}}`, elicitation.ID), h); r.status != http.StatusAccepted {
		t.Fatalf("answering the elicitation request: %d %s", r.status, r.body)
	}
	result := call.next(t, "the call's result")
	if !result.isResponse() || string(result.ID) != `"ask"` || !strings.Contains(string(result.Result), "sampled=late;elicited=yes") {
		t.Errorf("the call's answer: %+v, want its result", result)
	}

	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"m__add_tool"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("add_tool: %d %s", r.status, r.body)
	}
	if n := standalone.next(t, "list_changed on the standalone stream"); n.Method != "notifications/tools/list_changed" {
		t.Errorf("standalone stream carried %+v, want notifications/tools/list_changed", n)
	}
}

// TestIdleConnectionIsClosed: an idle keep-alive connection stayed open for ever, a file
// descriptor each. It closes after http_idle_timeout; a standalone stream is not idle.
func TestIdleConnectionIsClosed(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nhttp_idle_timeout: 200ms\nupstreams:"+upstreamYAML("m", "many", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	_, standalone := c.openStandalone(t.Context(), sid)

	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	conn := rawRequest(t, tg, fmt.Sprintf("POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: %d", sid, len(ping)), ping)
	_ = conn.SetReadDeadline(time.Now().Add(waitBound)) // without the fix the connection stays open for ever
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("ping on a keep-alive connection: %d (close %v, error %v)", resp.StatusCode, resp.Close, err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection: read gave %v, want EOF (closed by the gateway)", err)
	}

	// The standalone stream, open all along and longer than the idle timeout, still carries
	// notifications.
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"m__add_tool"}}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("add_tool: %d %s", r.status, r.body)
	}
	if n := standalone.next(t, "list_changed on the standalone stream"); n.Method != "notifications/tools/list_changed" {
		t.Errorf("standalone stream carried %+v, want notifications/tools/list_changed", n)
	}
}

// TestReadingASessionDoesNotKeepItAlive: reading a session's record marked it used, so one
// client's logging/setLevel (which reads every live session's level) kept every other session
// from expiring. Only a session's own requests keep it alive.
func TestReadingASessionDoesNotKeepItAlive(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := session.NewMemoryStore(&session.MemoryOptions{Now: clock.Now, MaxSessions: 10})
	c := bareGateway(t, "session_idle_timeout: 1m\n", &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond, Backends: backend.NewMemory(store)})
	a := c.initializeAs("2025-11-25", `{}`)
	b := c.initializeAs("2025-11-25", `{}`)
	if n := store.Len(); n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}

	// Within the idle timeout only B is used; its requests read A's record. (B acts before
	// the clock passes A's timeout: once both are past it, either may expire first.)
	clock.Advance(50 * time.Second)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"debug"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"info"}}`,
	} {
		if r := c.do(http.MethodPost, body, map[string]string{"Mcp-Session-Id": b}); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("session B: %s: %d %s", body, r.status, r.body)
		}
	}

	// A was last used 70 s ago, B 20 s ago: A expires, B stays.
	clock.Advance(20 * time.Second)
	waitUntil(t, "the expiry of the unused session", func() bool { return store.Len() == 1 })
	ctx := ctxT(t)
	if _, err := store.Get(ctx, a); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("the unused session A is still stored (%v): the session that expired is B", err)
	}
	if _, err := store.Get(ctx, b); err != nil {
		t.Errorf("the used session B: %v", err)
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":5,"method":"ping"}`, map[string]string{"Mcp-Session-Id": b}); r.status != http.StatusOK {
		t.Errorf("session B after A expired: %d %s", r.status, r.body)
	}
}

// cancelHeldCall POSTs a "hold" call of upstream r with a progress token, waits until the
// gateway has it in flight (its progress came), cancels it with notifications/cancelled, and
// returns the call's HTTP response with the rest of its stream.
func cancelHeldCall(t *testing.T, c rawClient, sid string) (*http.Response, *sseStream) {
	t.Helper()
	resp := c.post(t.Context(), sid, `{"jsonrpc":"2.0","id":"held","method":"tools/call","params":{"name":"r__hold","_meta":{"progressToken":"h"}}}`)
	stream := readSSE(t, resp.Body)
	if m := stream.next(t, "the held call's progress"); m.Method != "notifications/progress" {
		t.Fatalf("first message of the held call: %+v", m)
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"held","reason":"test"}}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d %s", r.status, r.body)
	}
	return resp, stream
}

// TestCancelledRequestGetsNoResponse: the receiver of a cancelled request should not answer
// it (mcp-notes §8.2), and the gateway did not; but its POST then ended as a 200 with an empty
// body and no Content-Type, which is neither a JSON response nor a stream. It is an SSE stream
// that ends without a response.
func TestCancelledRequestGetsNoResponse(t *testing.T) {
	store := session.NewMemoryStore(&session.MemoryOptions{MaxSessions: 10})
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), &gateway.Options{Backends: backend.NewMemory(store)})
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)

	resp, stream := cancelHeldCall(t, c, sid)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the cancelled call's POST: %d, Content-Type %q; want 200 with an SSE stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ms, err := stream.rest(t)
	if err != nil {
		t.Errorf("the cancelled call's stream ended with %v, want a clean end", err)
	}
	for _, m := range ms {
		if m.isResponse() {
			t.Errorf("the cancelled call was answered: %+v", m)
		}
	}

	// The session goes on.
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.msg.Error != nil {
		t.Errorf("ping after the cancel: %d %s", r.status, r.body)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use: the gateway logs from many
// goroutines while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer // guarded by mu
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// errStoreDown is what faultyStore's writes fail with.
var errStoreDown = errors.New("session store down (test)")

// faultyStore is a MemoryStore whose writes fail while failing is set, so that the gateway
// logs its store errors.
type faultyStore struct {
	*session.MemoryStore
	failing atomic.Bool
}

func (s *faultyStore) Touch(ctx context.Context, id string) error {
	if s.failing.Load() {
		return errStoreDown
	}
	return s.MemoryStore.Touch(ctx, id)
}

func (s *faultyStore) Update(ctx context.Context, id string, change func(*session.Record)) (*session.Record, error) {
	if s.failing.Load() {
		return nil, errStoreDown
	}
	return s.MemoryStore.Update(ctx, id, change)
}

func (s *faultyStore) Delete(ctx context.Context, id string) error {
	if s.failing.Load() {
		return errStoreDown
	}
	return s.MemoryStore.Delete(ctx, id)
}

// sessionFingerprint is how the gateway names a session in logs: the first 6 bytes of the
// SHA-256 of its id, in hex.
func sessionFingerprint(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:6])
}

// checkLogsNameSessionsByFingerprint fails the test if the logs hold a session id, or a
// prefix of one long enough to be mostly of it, or lack a session's fingerprint.
func checkLogsNameSessionsByFingerprint(t *testing.T, logs string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if strings.Contains(logs, id[:16]) {
			t.Errorf("the logs hold session id %s:\n%s", id, logs)
		}
		if !strings.Contains(logs, sessionFingerprint(id)) {
			t.Errorf("the logs lack session %s's fingerprint %s:\n%s", id, sessionFingerprint(id), logs)
		}
	}
}

// TestLogsCarryNoSessionID: session ids are bearer secrets (whoever holds one acts in the
// session), yet the gateway logged them. Every log line about a session names it by
// fingerprint.
func TestLogsCarryNoSessionID(t *testing.T) {
	var logs lockedBuffer
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := &faultyStore{MemoryStore: session.NewMemoryStore(&session.MemoryOptions{Now: clock.Now, MaxSessions: 10})}
	tg := startGateway(t, "listen: 127.0.0.1:0\nsession_idle_timeout: 1m\nupstreams:"+upstreamYAML("r", "reverse", ""), &gateway.Options{
		Logger:         slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:            clock.Now,
		ExpiryInterval: 10 * time.Millisecond,
		Backends:       withSessions(store.MemoryStore, store),
	})
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.startSession("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}

	// While the store fails: marking the session used and initialized, and deleting the session fail, and are logged.
	store.failing.Store(true)
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h); r.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, h); r.status != http.StatusOK {
		t.Fatalf("ping: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodDelete, "", h); r.status != http.StatusServiceUnavailable {
		t.Fatalf("DELETE while the store fails: %d %s, want 503", r.status, r.body)
	}
	store.failing.Store(false)

	// A tool call; a call cancelled; an answer to a request that is not pending.
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"r__cancels"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("tools/call: %d %s", r.status, r.body)
	}
	cancelHeldCall(t, c, sid)
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":"nobody","result":{}}`, h); r.status != http.StatusAccepted {
		t.Fatalf("an answer to nothing: %d %s", r.status, r.body)
	}

	// A call whose client leaves before its answer: the gateway cannot deliver it.
	leave, left := context.WithCancel(t.Context())
	resp := c.post(leave, sid, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"r__progress","_meta":{"progressToken":"p"}}}`)
	n := readSSE(t, resp.Body).next(t, "progress")
	if n.Method != "notifications/progress" {
		t.Fatalf("first message of the progress call: %+v", n)
	}
	left()
	// Its answer waits for the client to resume the stream.
	_, resumed := c.resume(t.Context(), sid, n.EventID)
	if ms, err := resumed.rest(t); err != nil || len(ms) == 0 || !ms[len(ms)-1].isResponse() {
		t.Fatalf("resumed stream: %+v, %v; want it to end with the call's answer", ms, err)
	}

	// The standalone stream, opened and closed.
	streamCtx, closeStream := context.WithCancel(t.Context())
	c.openStandalone(streamCtx, sid)
	closeStream()

	if r := c.do(http.MethodDelete, "", h); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}

	// Another session expires.
	idle := c.initializeAs("2025-11-25", `{}`)
	clock.Advance(2 * time.Minute)
	waitUntil(t, "the idle session's expiry", func() bool { return store.Len() == 0 })
	waitUntil(t, "the idle session's expiry being logged", func() bool { return strings.Contains(logs.String(), "expired") })

	checkLogsNameSessionsByFingerprint(t, logs.String(), sid, idle)
}

// TestIsolatedConnectionLogsCarryNoSessionID: with isolation: session the gateway logs when it
// opens and closes a session's own upstream connection; those lines too name the session by
// fingerprint.
func TestIsolatedConnectionLogsCarryNoSessionID(t *testing.T) {
	// Fails on the gateway as it is: connPool.openLocked and closeConn log "session_id" with
	// the raw id.
	var logs lockedBuffer
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", "    isolation: session\n"), &gateway.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	// The session's first call opens its own connection; DELETE closes it.
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"r__cancels"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("tools/call: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodDelete, "", h); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	waitUntil(t, "the session's own connection closing", func() bool {
		return strings.Contains(logs.String(), "closed a session's own upstream connection")
	})
	checkLogsNameSessionsByFingerprint(t, logs.String(), sid)
}

// TestCallWhoseAnswerNobodyCanReceiveStops: a client of 2025-06-18, whose streams cannot be
// resumed, leaves while its call runs: the gateway stops the call upstream rather than run it
// for no one.
func TestCallWhoseAnswerNobodyCanReceiveStops(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-06-18", `{}`)
	leave, left := context.WithCancel(t.Context())
	resp := c.post(leave, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"r__hold","_meta":{"progressToken":"p"}}}`)
	if n := readSSE(t, resp.Body).next(t, "progress"); n.Method != "notifications/progress" {
		t.Fatalf("first message of the held call: %+v", n)
	}
	left()
	h := map[string]string{"Mcp-Session-Id": sid}
	waitUntil(t, "the held call being cancelled upstream", func() bool {
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"r__cancels"}}`, h)
		return r.status == http.StatusOK && strings.Contains(string(r.msg.Result), `"text":"1"`)
	})
}

package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// httpUpstream is a go-sdk server behind a real HTTP listener, with a record of what the
// gateway's client sent it.
type httpUpstream struct {
	srv     *httptest.Server
	server  *mcp.Server
	handler atomic.Pointer[http.Handler]

	mu       sync.Mutex
	requests []seenRequest // guarded by mu
	// refuseGET makes the upstream answer GET with 405.
	refuseGET atomic.Bool
	// held releases the runs of tool "held"; heldRuns counts them, heldStarted hears of them.
	held        chan struct{}
	heldRuns    atomic.Int64
	heldStarted chan struct{}
	// A call of tool "hang" gets no answer, not even headers, until its connection ends;
	// hangs counts them, hanging hears of them.
	hangs   atomic.Int64
	hanging chan struct{}
}

type seenRequest struct {
	Method, SessionID, Version string
}

func (u *httpUpstream) seen() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.requests...)
}

func newHTTPUpstream(t *testing.T, legacy bool) *httpUpstream {
	t.Helper()
	u := &httpUpstream{server: mcp.NewServer(&mcp.Implementation{Name: "http-upstream", Version: "1"}, nil)}
	mcp.AddTool(u.server, &mcp.Tool{Name: "echo", Description: "echo"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(u.server, &mcp.Tool{Name: "roots_inside", Description: "asks for roots during the call"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Roots[0].URI}}}, nil, nil
		})
	mcp.AddTool(u.server, &mcp.Tool{Name: "roots_later", Description: "asks for roots after the call returned"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			session := req.Session
			go func() {
				time.Sleep(50 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, _ = session.ListRoots(ctx, nil)
			}()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "later"}}}, nil, nil
		})
	mcp.AddTool(u.server, &mcp.Tool{Name: "big", Description: "answers 100 kB"},
		func(_ context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 100_000)}}}, nil, nil
		})
	u.held = make(chan struct{})
	mcp.AddTool(u.server, &mcp.Tool{Name: "held", Description: "counts its runs, reports progress, then waits until the test releases it"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			u.heldRuns.Add(1)
			// The progress notification opens the response stream: the call is accepted.
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1}); err != nil {
				return nil, nil, err
			}
			select {
			case u.heldStarted <- struct{}{}:
			default:
			}
			select {
			case <-u.held:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
		})
	u.heldStarted = make(chan struct{}, 1)
	u.hanging = make(chan struct{}, 1)
	u.reset(legacy)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.requests = append(u.requests, seenRequest{r.Method, r.Header.Get("Mcp-Session-Id"), r.Header.Get("Mcp-Protocol-Version")})
		u.mu.Unlock()
		if r.Method == http.MethodGet && u.refuseGET.Load() && !legacy {
			http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
			return
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"name":"hang"`)) {
				u.hangs.Add(1)
				select {
				case u.hanging <- struct{}{}:
				default:
				}
				<-r.Context().Done()
				return
			}
		}
		(*u.handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// reset replaces the handler: every session the upstream knew is forgotten.
func (u *httpUpstream) reset(legacy bool) {
	var h http.Handler
	if legacy {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return u.server }, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, &mcp.StreamableHTTPOptions{Stateless: false})
	}
	u.handler.Store(&h)
}

// reverseRecorder answers roots/list and records the origin of each request it saw.
type reverseRecorder struct {
	mu      sync.Mutex
	callers []any
	last    Arrival
	seen    chan struct{}
}

func (r *reverseRecorder) onRequest(_ context.Context, _ *Client, req *protocol.Request, origin Origin) (json.RawMessage, error) {
	r.mu.Lock()
	r.callers = append(r.callers, origin.Caller)
	r.last = origin.Arrival
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	if req.Method != protocol.MethodListRoots {
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "no %s here", req.Method)
	}
	return json.RawMessage(`{"roots":[{"uri":"file:///work","name":"work"}]}`), nil
}

func (r *reverseRecorder) lastCaller() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.callers) == 0 {
		return "none"
	}
	return r.callers[len(r.callers)-1]
}

func startHTTPClient(t *testing.T, spec Spec, rec *reverseRecorder) *Client {
	t.Helper()
	spec.Name = "http"
	opts := &Options{RestartDelay: 20 * time.Millisecond, MaxRestartDelay: 50 * time.Millisecond}
	if rec != nil {
		opts.OnRequest = rec.onRequest
	}
	c := New(spec, opts)
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
	return c
}

func callText(t *testing.T, ctx context.Context, c *Client, tool string) string {
	t.Helper()
	args := `{}`
	if tool == "echo" {
		args = `{"Text":"hi"}`
	}
	raw, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"`+tool+`","arguments":`+args+`}`))
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return resultText(t, raw)
}

// resultText returns the text of the first content block of a tool result.
func resultText(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("malformed tool result %s: %v", raw, err)
	}
	return res.Content[0].Text
}

func TestStreamableHTTPUpstream(t *testing.T) {
	u := newHTTPUpstream(t, false)
	rec := &reverseRecorder{seen: make(chan struct{}, 1)}
	c := startHTTPClient(t, Spec{URL: u.srv.URL, Headers: map[string]string{"Authorization": "Bearer upstream-token"}}, rec)
	ctx := context.Background()

	if got := callText(t, ctx, c, "echo"); got != "hi" {
		t.Errorf("echo = %q", got)
	}
	// A request the upstream sends during a call arrives on that call's POST stream: the
	// client reports which call it belongs to.
	if got := callText(t, WithCaller(ctx, "caller-A", "A"), c, "roots_inside"); got != "file:///work" {
		t.Errorf("roots_inside = %q", got)
	}
	if got := rec.lastCaller(); got != "caller-A" {
		t.Errorf("reverse request during the call came with caller %v, want caller-A", got)
	}
	// One sent after the call returned travels on the standalone GET stream: no caller.
	callText(t, WithCaller(ctx, "caller-B", "B"), c, "roots_later")
	waitUntil(t, "a reverse request on the standalone stream", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.callers) == 2 && rec.callers[1] == nil && rec.last == OnStandalone
	})

	// A notification outside any call comes on the standalone stream: a tool added upstream
	// reaches the catalog through list_changed.
	u.server.AddTool(&mcp.Tool{Name: "added", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	waitUntil(t, "the added tool in the catalog", func() bool {
		return slices.ContainsFunc(c.Catalog().List(Tools), func(it Item) bool { return it.Key == "added" })
	})

	// After initialize every request carries the session and the negotiated version.
	var sawGET bool
	for i, r := range u.seen() {
		if i == 0 {
			if r.SessionID != "" {
				t.Errorf("initialize carried session %q", r.SessionID)
			}
			continue
		}
		if r.SessionID == "" || r.Version != "2025-11-25" {
			t.Errorf("request %d (%s) carried session %q version %q", i, r.Method, r.SessionID, r.Version)
		}
		sawGET = sawGET || r.Method == http.MethodGet
	}
	if !sawGET {
		t.Error("the client never opened the standalone GET stream")
	}

	// An answer over the size limit fails that call only.
	small := startHTTPClient(t, Spec{URL: u.srv.URL, MaxMessageBytes: 10_000}, nil)
	if _, err := small.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"big"}`)); err == nil || !strings.Contains(err.Error(), "max_response_bytes") {
		t.Errorf("big answer: err = %v, want a size error", err)
	}
	if got := callText(t, ctx, small, "echo"); got != "hi" {
		t.Errorf("echo after a too-large answer = %q", got)
	}

	// Close ends the upstream session with DELETE.
	c.Close()
	small.Close()
	var deletes int
	for _, r := range u.seen() {
		if r.Method == http.MethodDelete && r.SessionID != "" {
			deletes++
		}
	}
	if deletes != 2 {
		t.Errorf("saw %d DELETEs, want one per client", deletes)
	}
}

func TestStreamableHTTPUpstreamWithoutStandaloneStream(t *testing.T) {
	u := newHTTPUpstream(t, false)
	u.refuseGET.Store(true)
	c := startHTTPClient(t, Spec{URL: u.srv.URL}, nil)
	gets := func() (n int) {
		for _, r := range u.seen() {
			if r.Method == http.MethodGet {
				n++
			}
		}
		return n
	}
	// The standalone stream is opened beside the first calls, not before them: wait for its
	// attempt, then make sure no call tries again.
	waitUntil(t, "the client's attempt at the standalone stream", func() bool { return gets() > 0 })
	for range 3 {
		if got := callText(t, context.Background(), c, "echo"); got != "hi" {
			t.Errorf("echo = %q", got)
		}
	}
	if gets := gets(); gets != 1 {
		t.Errorf("the client tried the standalone stream %d times after a 405, want once", gets)
	}
}

func TestStreamableHTTPUpstreamSessionExpiry(t *testing.T) {
	u := newHTTPUpstream(t, false)
	c := startHTTPClient(t, Spec{URL: u.srv.URL}, nil)
	ctx := context.Background()
	callText(t, ctx, c, "echo")
	u.reset(false) // the upstream forgets every session: the next request gets 404
	for i := range 3 {
		if got := callText(t, ctx, c, "echo"); got != "hi" {
			t.Errorf("call %d after the upstream lost the session = %q", i, got)
		}
	}
	var inits int
	for _, r := range u.seen() {
		if r.Method == http.MethodPost && r.SessionID == "" {
			inits++
		}
	}
	if inits != 2 {
		t.Errorf("saw %d initializes, want 2 (start, and once after the 404)", inits)
	}
}

// TestToolNeverRunsTwiceAfterSessionExpiry: when an HTTP upstream forgets the session, only
// the request that got the 404 (which never ran) is sent again; a call that was already
// running fails as interrupted (it may have run in part) instead of being sent a second time.
func TestToolNeverRunsTwiceAfterSessionExpiry(t *testing.T) {
	u := newHTTPUpstream(t, false)
	progressed := make(chan struct{}, 1)
	c := New(Spec{Name: "http", URL: u.srv.URL}, &Options{OnNotification: func(_ *Client, n *protocol.Notification, _ Origin) {
		if n.Method == protocol.NotificationProgress {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}
	}})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
	ctx := context.Background()
	heldErr := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"held","arguments":{},"_meta":{"progressToken":"p"}}`))
		heldErr <- err
	}()
	<-progressed   // the call runs upstream and its response stream is open
	u.reset(false) // the upstream forgets the session: the next request gets 404
	if got := callText(t, ctx, c, "echo"); got != "hi" {
		t.Errorf("the refused call, sent again = %q", got)
	}
	close(u.held)
	err := <-heldErr
	if !errors.Is(err, ErrInterrupted) || errors.Is(err, ErrUnavailable) {
		t.Errorf("the call that was running when the session ended: %v, want ErrInterrupted (it may have run), not ErrUnavailable", err)
	}
	if runs := u.heldRuns.Load(); runs != 1 {
		t.Errorf("the tool ran %d times, want once", runs)
	}
}

func TestLegacySSEUpstream(t *testing.T) {
	u := newHTTPUpstream(t, true)
	for _, transport := range []string{TransportSSE, TransportAuto} {
		t.Run(transport, func(t *testing.T) {
			rec := &reverseRecorder{seen: make(chan struct{}, 1)}
			c := startHTTPClient(t, Spec{URL: u.srv.URL, Transport: transport}, rec)
			if got := c.live.Load().transport; got != TransportSSE {
				t.Errorf("transport in use %q, want sse", got)
			}
			ctx := context.Background()
			if got := callText(t, ctx, c, "echo"); got != "hi" {
				t.Errorf("echo = %q", got)
			}
			// Server requests work over the legacy stream too. It cannot tell the call, so the
			// caller is the only one in flight, reported as unattributed.
			if got := callText(t, WithCaller(ctx, "x", "X"), c, "roots_inside"); got != "file:///work" {
				t.Errorf("roots_inside = %q", got)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if got := rec.callers[len(rec.callers)-1]; got != "x" || rec.last != Unattributed {
				t.Errorf("legacy SSE reported caller %v, arrival %v; want the only call in flight, unattributed", got, rec.last)
			}
		})
	}
}

func TestAutoPrefersStreamableHTTP(t *testing.T) {
	u := newHTTPUpstream(t, false)
	c := startHTTPClient(t, Spec{URL: u.srv.URL, Transport: TransportAuto}, nil)
	if got := c.live.Load().transport; got != TransportStreamableHTTP {
		t.Errorf("transport in use %q, want Streamable HTTP", got)
	}
	if got := callText(t, context.Background(), c, "echo"); got != "hi" {
		t.Errorf("echo = %q", got)
	}
}

func TestHTTPUpstreamDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	c := New(Spec{Name: "gone", URL: url}, &Options{RestartDelay: 10 * time.Millisecond, MaxRestartDelay: 20 * time.Millisecond})
	start(t, c)
	waitUntil(t, "state down", func() bool { return c.State() == StateDown })
	if _, err := c.Call(context.Background(), protocol.MethodPing, nil); !errors.Is(err, ErrUnavailable) {
		t.Errorf("call to a down upstream: %v, want ErrUnavailable", err)
	}
	if st := c.Status(); st.Error == "" {
		t.Errorf("status %+v names no error", st)
	}
}

// resumingUpstream is a hand-written Streamable HTTP server that breaks its streams on
// purpose: the answer to tools/call comes only on a GET that resumes the POST stream with
// Last-Event-ID, and its standalone stream ends after each event.
type resumingUpstream struct {
	mu          sync.Mutex
	callID      json.RawMessage // id of the tools/call in flight. Guarded by mu.
	lastEventID []string        // Last-Event-ID of every GET. Guarded by mu.
	standalone  int             // standalone streams opened. Guarded by mu.
}

func (u *resumingUpstream) lastEventIDs() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.lastEventID...)
}

func (u *resumingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sse := func() {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
	}
	flush := func() { w.(http.Flusher).Flush() }
	switch r.Method {
	case http.MethodDelete:
		return
	case http.MethodGet:
		last := r.Header.Get("Last-Event-ID")
		u.mu.Lock()
		u.lastEventID = append(u.lastEventID, last)
		callID := u.callID
		n := u.standalone
		if last == "" || strings.HasPrefix(last, "g") {
			u.standalone++
		}
		u.mu.Unlock()
		sse()
		if last == "call-1" {
			// Resume the broken POST stream: the response to the call.
			fmt.Fprintf(w, "id: call-2\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n", callID)
			flush()
			return
		}
		// The standalone stream: one event with an id and a short retry, then it ends.
		fmt.Fprintf(w, "id: g%d\nretry: 20\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"hello\"}}\n\n", n+1)
		flush()
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	_ = json.NewDecoder(r.Body).Decode(&msg)
	switch msg.Method {
	case "initialize":
		w.Header().Set("Mcp-Session-Id", "s-1")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"resuming","version":"1"}}}`, msg.ID)
	case "tools/list":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"slow","inputSchema":{"type":"object"}}]}}`, msg.ID)
	case "tools/call":
		u.mu.Lock()
		u.callID = msg.ID
		u.mu.Unlock()
		sse()
		// A priming event with an id and a retry, then the connection closes: the client
		// must resume with GET and Last-Event-ID.
		fmt.Fprint(w, "id: call-1\nretry: 20\ndata: \n\n")
		flush()
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

func TestStreamableHTTPResumesStreams(t *testing.T) {
	u := &resumingUpstream{}
	srv := httptest.NewServer(u)
	defer srv.Close()
	var notes atomic.Int64
	c := New(Spec{Name: "resuming", URL: srv.URL}, &Options{
		OnNotification: func(_ *Client, n *protocol.Notification, _ Origin) {
			if n.Method == protocol.NotificationMessage {
				notes.Add(1)
			}
		},
	})
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })

	raw, err := c.Call(context.Background(), protocol.MethodCallTool, json.RawMessage(`{"name":"slow"}`))
	if err != nil {
		t.Fatalf("call over a broken POST stream: %v", err)
	}
	if !strings.Contains(string(raw), "resumed") {
		t.Errorf("result %s, want the resumed answer", raw)
	}
	// The standalone stream ends after every event; the client reconnects each time with the
	// id of the last event it saw.
	waitUntil(t, "three standalone notifications", func() bool { return notes.Load() >= 3 })
	ids := u.lastEventIDs()
	if !slices.Contains(ids, "call-1") {
		t.Errorf("GETs carried Last-Event-ID %v; none resumed the POST stream (call-1)", ids)
	}
	if !slices.Contains(ids, "g1") || !slices.Contains(ids, "g2") {
		t.Errorf("GETs carried Last-Event-ID %v; the standalone stream was not resumed from its last event", ids)
	}
}

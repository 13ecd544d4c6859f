package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestReadEvents: the data of every event with data, lines of one event joined; priming
// events, comments and a last event cut off by the end of the stream give nothing.
func TestReadEvents(t *testing.T) {
	stream := "id: 1\ndata:\n\n" + // a priming event
		": keep-alive\n\n" +
		"event: message\nid: 2\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" +
		"data:{\"b\":2}\n\n" +
		"data: {\"cut\":"
	var got []string
	err := readEvents(strings.NewReader(stream), func(id string, data []byte) { got = append(got, id+" "+string(data)) })
	if err != io.EOF {
		t.Errorf("readEvents ended with %v, want io.EOF", err)
	}
	// The id is the last the stream named, as an SSE client's last event ID is: the one to
	// resume after.
	want := []string{"2 {\"a\":\n1}", `2 {"b":2}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// TestLineWriterOneMessageALine: a message with line breaks goes out compacted on one line; one
// that is not JSON is dropped rather than break the framing.
func TestLineWriterOneMessageALine(t *testing.T) {
	var out bytes.Buffer
	lw := &lineWriter{w: &out, logger: slog.New(slog.DiscardHandler)}
	lw.write([]byte("{\"a\":\n 1,\r\n\"b\":\"x\\ny\"}"))
	lw.write([]byte("not\njson"))
	lw.write([]byte(`{"c":3}`))
	if got, want := out.String(), "{\"a\":1,\"b\":\"x\\ny\"}\n{\"c\":3}\n"; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
}

// stdioBound bounds each wait of the stdio face's tests: it fails a test that would otherwise
// hang, it never asserts speed.
const stdioBound = 20 * time.Second

// stdioHarness is a Stdio face of a gateway in front of one upstream, "up", served in this
// process by the Go SDK over Streamable HTTP, whose tool block reports progress, when asked
// to, and runs until its call is cancelled; the test speaks to the face line by line.
type stdioHarness struct {
	t     *testing.T
	g     *Gateway
	face  *Stdio
	in    *io.PipeWriter
	lines chan []byte
	// logs are the gateway's, at debug level; a failed test shows them.
	logs *syncBuffer
	// blocking receives once a block call runs upstream.
	blocking chan struct{}
}

// startStdioHarness starts the harness; the test's end closes the face's input and the face,
// as `gateway stdio` does at the end of stdin, then the gateway and the upstream.
func startStdioHarness(t *testing.T) *stdioHarness {
	t.Helper()
	h := &stdioHarness{t: t, lines: make(chan []byte, 64), logs: &syncBuffer{}, blocking: make(chan struct{}, 8)}
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "block", Description: "runs until cancelled"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if token := req.Params.GetProgressToken(); token != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: 1}); err != nil {
					return nil, nil, err
				}
			}
			h.blocking <- struct{}{}
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	upstream := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	cfg, err := config.Parse("stdio.yaml", []byte(fmt.Sprintf("upstreams:\n  - {name: up, url: %s}\n", upstream.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.g, err = New(cfg, &Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h.in = inW
	h.face = h.g.NewStdio(inR, outW, nil)
	h.g.Start()
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			h.lines <- bytes.Clone(sc.Bytes())
		}
	}()
	served := make(chan error, 1)
	go func() { served <- h.face.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = h.in.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		go func() { // what the face still writes is read and dropped
			for range h.lines {
			}
		}()
		h.g.Drain()
		h.g.EndRequests()
		ctx, cancel := context.WithTimeout(context.Background(), stdioBound)
		defer cancel()
		if err := h.face.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		_ = outW.Close()
		<-read
		close(h.lines)
		_ = h.g.Close()
		upstream.Close()
		if t.Failed() {
			t.Logf("logs:\n%s", h.logs)
		}
	})
	return h
}

// send writes one line to the face.
func (h *stdioHarness) send(line string) {
	h.t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		h.t.Fatal(err)
	}
}

// next reads the face's output until a message that match accepts, and returns it.
func (h *stdioHarness) next(what string, match func(protocol.Message) bool) protocol.Message {
	h.t.Helper()
	timeout := time.NewTimer(stdioBound)
	defer timeout.Stop()
	for {
		select {
		case line := <-h.lines:
			msg, err := protocol.Decode(line)
			if err != nil {
				h.t.Fatalf("the face wrote a line that is no JSON-RPC message (%v): %q", err, line)
			}
			if match(msg) {
				return msg
			}
		case <-timeout.C:
			h.t.Fatalf("the face wrote no %s", what)
		}
	}
}

// answer reads the face's output until the response to id, and returns it.
func (h *stdioHarness) answer(id protocol.ID) *protocol.Response {
	h.t.Helper()
	return h.next("answer to "+id.String(), func(m protocol.Message) bool {
		r, ok := m.(*protocol.Response)
		return ok && r.ID == id
	}).(*protocol.Response)
}

// initialize makes the client's session, waits for the upstream's tools to be listed, and
// returns the session's id.
func (h *stdioHarness) initialize() string {
	h.t.Helper()
	h.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := h.answer(protocol.StringID("init")); r.Error != nil {
		h.t.Fatalf("initialize: %v", r.Error)
	}
	h.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	h.send(`{"jsonrpc":"2.0","id":"first-list","method":"tools/list"}`) // waits for the upstream's first list
	if r := h.answer(protocol.StringID("first-list")); r.Error != nil || !bytes.Contains(r.Result, []byte("up__block")) {
		h.t.Fatalf("tools/list answered %+v", r)
	}
	sid, _ := h.face.sessionOf()
	return sid
}

// TestStdioRequestWhoseSessionEndsIsAnswered: a request whose answer stream ends without its
// response (here its session ended while it ran upstream, as at its expiry or a reload that
// removes its profile, after its progress began the stream) was never answered over stdio,
// and the host waited for ever. It is now answered with an error saying what happened; a
// request the client cancelled is not.
func TestStdioRequestWhoseSessionEndsIsAnswered(t *testing.T) {
	h := startStdioHarness(t)
	h.initialize()
	h.send(`{"jsonrpc":"2.0","id":"cancelled","method":"tools/call","params":{"name":"up__block","arguments":{}}}`)
	h.waitBlocking()
	h.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"cancelled"}}`)
	// Its progress makes the answer an SSE stream, which the session's end cuts off.
	h.send(`{"jsonrpc":"2.0","id":"blocked","method":"tools/call","params":{"name":"up__block","arguments":{},"_meta":{"progressToken":"p"}}}`)
	h.waitBlocking()
	h.next("progress of the blocked call", func(m protocol.Message) bool {
		n, ok := m.(*protocol.Notification)
		return ok && n.Method == protocol.NotificationProgress
	})

	// The session ends while the call runs, as a DELETE ends it.
	req, err := h.face.request(context.Background(), http.MethodDelete, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.face.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE of the session: %s", resp.Status)
	}

	var cancelled []protocol.Message // answers to the cancelled call, on the way
	r := h.next("answer to blocked", func(m protocol.Message) bool {
		r, ok := m.(*protocol.Response)
		if ok && r.ID == protocol.StringID("cancelled") {
			cancelled = append(cancelled, m)
		}
		return ok && r.ID == protocol.StringID("blocked")
	}).(*protocol.Response)
	if r.Error == nil || r.Error.Code != protocol.CodeInternalError || !strings.Contains(r.Error.Message, "session may have ended") {
		t.Errorf("the call whose session ended was answered %+v; want an internal error saying why", r)
	}
	select {
	case <-h.face.Idle():
	case <-time.After(stdioBound):
		t.Fatal("the relays of the calls did not end")
	}
	// Whatever the relays wrote comes before the answer to a request sent after they ended.
	h.send(`{"jsonrpc":"2.0","id":"after","method":"ping"}`)
	h.next("answer to after", func(m protocol.Message) bool {
		r, ok := m.(*protocol.Response)
		if ok && r.ID == protocol.StringID("cancelled") {
			cancelled = append(cancelled, m)
		}
		return ok && r.ID == protocol.StringID("after")
	})
	if len(cancelled) > 0 {
		t.Errorf("the call the client cancelled was answered %v; want no answer", cancelled)
	}
	// The session is gone: the face stops relaying its standalone stream rather than try
	// to open it again.
	testwait.Until(t, stdioBound, "the face to stop relaying the ended session's stream", func() bool {
		return strings.Contains(h.logs.String(), "the session ended: no more notifications reach the client")
	})
}

// waitBlocking waits until a block call runs upstream.
func (h *stdioHarness) waitBlocking() {
	h.t.Helper()
	select {
	case <-h.blocking:
	case <-time.After(stdioBound):
		h.t.Fatal("the block call did not begin upstream")
	}
}

// TestStdioRefusesSecondInitialize: a second initialize over stdio made a second session and
// left the first one's standalone stream writing its notifications to stdout. A client
// initializes once per connection (MCP 2025-11-25): the second is refused, and the session
// stays the first.
func TestStdioRefusesSecondInitialize(t *testing.T) {
	h := startStdioHarness(t)
	sid := h.initialize()
	h.send(`{"jsonrpc":"2.0","id":"again","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	r := h.answer(protocol.StringID("again"))
	if r.Error == nil || r.Error.Code != protocol.CodeInvalidRequest || !strings.Contains(r.Error.Message, "once per connection") {
		t.Errorf("the second initialize was answered %+v; want an invalid request saying why", r)
	}
	if got, _ := h.face.sessionOf(); got != sid {
		t.Errorf("the face's session is %q after the second initialize, want the first, %q", got, sid)
	}
	if n := len(h.g.hub.Sessions()); n != 1 {
		t.Errorf("%d sessions after the second initialize, want 1", n)
	}
	h.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`)
	if r := h.answer(protocol.StringID("list")); r.Error != nil {
		t.Errorf("tools/list after the refused initialize: %v", r.Error)
	}
}

// TestStdioReopensStandaloneStream: the face never opened the session's standalone stream
// again once it ended while the session went on (the gateway dropped it), and list_changed
// notifications were lost from then on. It opens it again.
func TestStdioReopensStandaloneStream(t *testing.T) {
	h := startStdioHarness(t)
	sid := h.initialize()
	ls := h.g.hub.Lookup(sid)
	if ls == nil {
		t.Fatal("the session is not in the hub")
	}
	testwait.Until(t, stdioBound, "the face to open the standalone stream", ls.Listening)
	old := ls.Standalone()
	ls.DropStandalone("")
	testwait.Until(t, stdioBound, "the face to open the standalone stream again", func() bool {
		st := ls.Standalone()
		return st != nil && st != old && ls.Listening()
	})
	h.g.router.notifySessions(&protocol.Notification{Method: protocol.NotificationToolsChanged}, sid)
	h.next("tools/list_changed", func(m protocol.Message) bool {
		n, ok := m.(*protocol.Notification)
		return ok && n.Method == protocol.NotificationToolsChanged
	})
}

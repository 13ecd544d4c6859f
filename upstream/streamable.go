package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// ErrSessionExpired is returned when a Streamable HTTP upstream answered 404 for the
// gateway's session: the upstream forgot it, and the Client re-initializes.
var ErrSessionExpired = errors.New("upstream session expired")

// requestError is a failure of one request that leaves the connection usable, such as an
// HTTP error status for one POST.
type requestError struct {
	Status int // HTTP status, or 0
	Err    error
}

func (e *requestError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("HTTP %d: %v", e.Status, e.Err)
	}
	return e.Err.Error()
}
func (e *requestError) Unwrap() error { return e.Err }

// httpOptions are the settings shared by the HTTP transports.
type httpOptions struct {
	URL     string
	Headers map[string]string
	// MaxMessageBytes caps a JSON body or one SSE event.
	MaxMessageBytes int
	Client          *http.Client
	// CallHeaders is Options.CallHeaders.
	CallHeaders func(ctx context.Context, h http.Header)
}

// inboundMsg is a message read from the upstream and where it arrived.
type inboundMsg struct {
	msg  protocol.Message
	from arrival
}

// inbox is the queue of messages read by a transport's stream goroutines, and its end.
type inbox struct {
	ch       chan inboundMsg
	failed   chan struct{}
	failOnce sync.Once
	err      error // set before failed is closed
}

func newInbox() *inbox {
	return &inbox{ch: make(chan inboundMsg, 64), failed: make(chan struct{})}
}

func (b *inbox) fail(err error) {
	b.failOnce.Do(func() {
		b.err = err
		close(b.failed)
	})
}

// put queues a message; it gives up when the inbox has failed.
func (b *inbox) put(ctx context.Context, m inboundMsg) {
	select {
	case b.ch <- m:
	case <-b.failed:
	case <-ctx.Done():
	}
}

// read returns the next message, or the failure once every queued message was read.
func (b *inbox) read() (protocol.Message, arrival, error) {
	select {
	case m := <-b.ch:
		return m.msg, m.from, nil
	default:
	}
	select {
	case m := <-b.ch:
		return m.msg, m.from, nil
	case <-b.failed:
		return nil, arrival{}, b.err
	}
}

// streamableConn is a client connection over the Streamable HTTP transport (2025-11-25): each
// message is a POST whose answer is JSON or an SSE stream; a standalone GET stream carries the
// upstream's own notifications and requests. It keeps which POST stream a message arrived on,
// sends Mcp-Session-Id and Mcp-Protocol-Version after initialize, resumes broken streams with
// Last-Event-ID, re-initializes on 404, and sends DELETE on close.
type streamableConn struct {
	name   string
	opts   httpOptions
	logger *slog.Logger
	in     *inbox

	// ctx ends at Close; every stream goroutine runs under it and is counted in streams.
	ctx     context.Context
	cancel  context.CancelFunc
	streams sync.WaitGroup

	mu sync.Mutex
	// posting counts the POSTs waiting for their answer's headers; expiring is set once the
	// standalone stream learnt that the upstream forgot the session, so that no POST starts
	// after. Guarded by mu.
	posting  int
	expiring bool
	// sessionID and version are learnt from initialize, or version is set by speakModern.
	// Guarded by mu.
	sessionID string
	version   string
	// stateless is set while the connection speaks a 2026-07-28 version (speakModern):
	// every POST then carries the standard headers of its message, the Mcp-Param-* ones
	// from toolParams. Guarded by mu.
	stateless  bool
	toolParams func(tool string) []modern.Param
	// closed is set by Close before it waits for the streams: no stream goroutine starts
	// after (streams.Add must not race streams.Wait). Guarded by mu.
	closed    bool
	closeOnce sync.Once
}

// beforeStreamStart, when set (by tests only), runs when a POST's answer turned out to be a
// stream, just before its goroutine is counted.
var beforeStreamStart func(*streamableConn)

// startStream counts a stream goroutine about to start, unless the connection is closing;
// it reports whether the goroutine may start.
func (c *streamableConn) startStream() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.streams.Add(1)
	return true
}

var (
	_ conn            = (*streamableConn)(nil)
	_ initializedConn = (*streamableConn)(nil)
	_ answeringConn   = (*streamableConn)(nil)
	_ modernConn      = (*streamableConn)(nil)
)

// modernConn is a conn whose messages carry the 2026-07-28 standard headers when they are
// of that era (Streamable HTTP, SEP-2243). A request's cancellation then is the closing of
// its response stream, not a notification.
type modernConn interface {
	// speakModern makes every later message one of version: MCP-Protocol-Version is
	// version, and Mcp-Method, Mcp-Name and Mcp-Param-* are computed from the message, the
	// last from toolParams (the called tool's x-mcp-header arguments; nil: none). With
	// version "", messages are of the session-based era again.
	speakModern(version string, toolParams func(tool string) []modern.Param)
}

// speakModern implements modernConn.
func (c *streamableConn) speakModern(version string, toolParams func(tool string) []modern.Param) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version, c.stateless, c.toolParams = version, version != "", toolParams
}

// isStateless reports whether the connection speaks a 2026-07-28 version.
func (c *streamableConn) isStateless() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateless
}

// standardHeaders returns the Mcp-Method, Mcp-Name and Mcp-Param-* headers of m when the
// connection is stateless (nil otherwise), computed from m itself and, for Mcp-Param-*, the
// upstream's own schema of the called tool: never copied from anything a client sent.
func (c *streamableConn) standardHeaders(m protocol.Message) (http.Header, error) {
	c.mu.Lock()
	stateless, toolParams := c.stateless, c.toolParams
	c.mu.Unlock()
	if !stateless {
		return nil, nil
	}
	var method string
	var params json.RawMessage
	switch m := m.(type) {
	case *protocol.Request:
		method, params = m.Method, m.Params
	case *protocol.Notification:
		method, params = m.Method, m.Params
	default:
		return nil, nil
	}
	var name string
	var args json.RawMessage
	var mirrored []modern.Param
	if len(params) > 0 {
		switch method {
		case protocol.MethodCallTool, protocol.MethodGetPrompt:
			name, _, _ = protocol.StringMember(params, "name")
		case protocol.MethodReadResource:
			name, _, _ = protocol.StringMember(params, "uri")
		}
		if method == protocol.MethodCallTool {
			args, _, _ = protocol.Member(params, "arguments")
			if toolParams != nil {
				mirrored = toolParams(name)
			}
		}
	}
	return modern.UpstreamHeaders(method, name, args, mirrored)
}

func newStreamableConn(name string, opts httpOptions, logger *slog.Logger) *streamableConn {
	c := &streamableConn{name: name, opts: opts, logger: logger, in: newInbox()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Read implements conn.
func (c *streamableConn) Read() (protocol.Message, arrival, error) { return c.in.read() }

// onStream returns the arrival of messages on the response stream of request reqID, or on
// the standalone stream when reqID is 0.
func onStream(reqID int64) arrival {
	if reqID == 0 {
		return arrival{kind: OnStandalone}
	}
	return arrival{kind: OnCall, call: reqID}
}

func (c *streamableConn) headers(h http.Header) {
	for k, v := range c.opts.Headers {
		h.Set(k, v)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessionID != "" {
		h.Set("Mcp-Session-Id", c.sessionID)
	}
	if c.version != "" {
		h.Set("Mcp-Protocol-Version", c.version)
	}
}

func (c *streamableConn) hasSession() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessionID != ""
}

// Write implements conn: one POST. A request's answer is read on its own goroutine when it
// comes as a stream; Write returns once the POST was accepted.
func (c *streamableConn) Write(ctx context.Context, m protocol.Message) error {
	answer, err := c.post(ctx, m)
	if answer != nil {
		c.in.put(ctx, inboundMsg{msg: answer, from: onStream(idOfRequest(m))})
	}
	return err
}

// WriteRequest implements answeringConn: the answer of a POST answered with JSON goes back
// to the caller itself, not through Read and the connection's read loop.
func (c *streamableConn) WriteRequest(ctx context.Context, r *protocol.Request) (*protocol.Response, error) {
	answer, err := c.post(ctx, r)
	if answer == nil {
		return nil, err
	}
	if resp, ok := answer.(*protocol.Response); ok && resp.ID == r.ID {
		return resp, err
	}
	// Not the answer to r (an upstream that answers a POST with another message): it goes
	// the way of every message read.
	c.in.put(ctx, inboundMsg{msg: answer, from: onStream(idOfRequest(r))})
	return nil, err
}

// idOfRequest is the integer id of m when it is a request, else 0.
func idOfRequest(m protocol.Message) int64 {
	if r, ok := m.(*protocol.Request); ok {
		id, _ := r.ID.Int()
		return id
	}
	return 0
}

// post sends m as one POST. It returns the message the POST was answered with when that was
// one JSON body (or a JSON-RPC error with an error status); a stream is read on its own
// goroutine, into the inbox.
func (c *streamableConn) post(ctx context.Context, m protocol.Message) (protocol.Message, error) {
	data, err := protocol.Encode(m)
	if err != nil {
		return nil, &requestError{Err: err}
	}
	standard, err := c.standardHeaders(m)
	if err != nil {
		return nil, &requestError{Err: err}
	}
	c.mu.Lock()
	if c.expiring {
		// The upstream forgot the session: this request was never sent, and may be sent
		// again on the next connection.
		c.mu.Unlock()
		return nil, ErrSessionExpired
	}
	c.posting++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.posting--
		c.mu.Unlock()
	}()
	reqID := idOfRequest(m)
	r, isRequest := m.(*protocol.Request)
	isInitialize := isRequest && r.Method == protocol.MethodInitialize
	// The answer may outlive this call's wait but not the connection: the request runs under
	// the connection's lifetime and ends early only when ctx does.
	reqCtx, cancelReq := context.WithCancel(c.ctx)
	stop := context.AfterFunc(ctx, cancelReq)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, c.opts.URL, bytes.NewReader(data))
	if err != nil {
		stop()
		cancelReq()
		return nil, &requestError{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.opts.CallHeaders != nil {
		c.opts.CallHeaders(ctx, req.Header)
	}
	c.headers(req.Header)
	for k, v := range standard {
		req.Header[k] = v
	}
	req, wrote := traceWrite(req)
	resp, err := c.opts.Client.Do(req)
	if err != nil {
		stop()
		cancelReq()
		if c.ctx.Err() != nil {
			err = fmt.Errorf("connection closed: %w", c.ctx.Err())
		} else {
			err = fmt.Errorf("POST %s: %w", c.name, err)
		}
		if wrote() {
			return nil, fmt.Errorf("%w: %w", errUnanswered, err)
		}
		return nil, err
	}
	if isInitialize && resp.StatusCode == http.StatusOK {
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			c.mu.Lock()
			c.sessionID = sid
			c.mu.Unlock()
		}
	}
	done := func() {
		resp.Body.Close()
		stop()
		cancelReq()
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent:
		done()
		return nil, nil
	case resp.StatusCode == http.StatusOK && mt == "text/event-stream":
		if beforeStreamStart != nil {
			beforeStreamStart(c)
		}
		if !c.startStream() {
			done()
			return nil, errors.New("connection closed")
		}
		go func() {
			defer c.streams.Done()
			defer done()
			c.readPostStream(reqCtx, resp.Body, reqID)
		}()
		return nil, nil
	case resp.StatusCode == http.StatusOK:
		defer done()
		body, err := readLimited(resp.Body, c.opts.MaxMessageBytes)
		if err != nil {
			return nil, &requestError{Status: resp.StatusCode, Err: err}
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return nil, nil
		}
		msg, err := protocol.Decode(body)
		if err != nil {
			return nil, &requestError{Status: resp.StatusCode, Err: fmt.Errorf("malformed response: %w", err)}
		}
		return msg, nil
	case resp.StatusCode == http.StatusNotFound && c.hasSession():
		done()
		c.in.fail(ErrSessionExpired)
		return nil, ErrSessionExpired
	}
	defer done()
	// An error status: a JSON-RPC error body answers the request; anything else fails it.
	body, _ := readLimited(resp.Body, 64<<10)
	if msg, err := protocol.Decode(body); err == nil {
		if r, ok := msg.(*protocol.Response); ok && r.Error != nil && !r.ID.IsZero() {
			return r, nil
		}
	}
	return nil, &requestError{Status: resp.StatusCode, Err: fmt.Errorf("%s", bytes.TrimSpace(truncate(body, 200)))}
}

// readPostStream reads the SSE answer to request reqID: messages related to it, then its
// response. When the stream breaks before the response, it is resumed with GET and
// Last-Event-ID (mcp-notes §4.5); when it cannot be, the request fails.
func (c *streamableConn) readPostStream(ctx context.Context, body io.ReadCloser, reqID int64) {
	lastID, retry := "", time.Second
	answered := false
	for attempt := 0; ; attempt++ {
		var err error
		lastID, retry, answered, err = c.readEvents(ctx, body, reqID, lastID, retry)
		body.Close()
		if answered || ctx.Err() != nil {
			return
		}
		// A 2026-07-28 stream is never resumed: the revision has no resumption.
		if lastID == "" || attempt == 5 || c.isStateless() {
			c.logger.Warn("the upstream ended a response stream before answering", "request", reqID, "error", errString(err))
			c.lost(ctx, reqID)
			return
		}
		select {
		case <-time.After(retry):
		case <-ctx.Done():
			return
		}
		resp, err := c.get(ctx, lastID)
		if err != nil {
			continue
		}
		if resp.StatusCode == http.StatusNotFound {
			// The upstream forgot the session (it restarted, say): the stream is gone with it.
			resp.Body.Close()
			c.logger.Warn("the upstream forgot the session while a request ran; its answer is lost", "request", reqID)
			c.forgotten()
			c.lost(ctx, reqID)
			return
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			continue
		}
		body = resp.Body
	}
}

// lost ends request reqID, whose answer will never come: the request went out and may
// have run.
func (c *streamableConn) lost(ctx context.Context, reqID int64) {
	c.in.put(ctx, inboundMsg{from: onStream(reqID), msg: &protocol.Response{ID: protocol.IntID(reqID), Error: streamLost}})
}

// forgotten ends the connection once a stream learnt that the upstream forgot the session,
// unless a POST is on its way: that POST meets the same 404 and ends the connection itself,
// its request known unsent and sent again; ending it from here would cut that POST off with
// nothing known of its fate. No POST starts after.
func (c *streamableConn) forgotten() {
	c.mu.Lock()
	busy := c.posting > 0
	if !busy {
		c.expiring = true
	}
	c.mu.Unlock()
	if !busy {
		c.in.fail(ErrSessionExpired)
	}
}

// traceWrite returns req with a trace that notes whether it was written out in full, and
// the function that tells: a request that was may have reached the upstream even when no
// answer came back.
func traceWrite(req *http.Request) (*http.Request, func() bool) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wrote.Store(true)
		}
	}}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), wrote.Load
}

// readEvents reads events until the stream ends or, when reqID is not 0, until its response.
func (c *streamableConn) readEvents(ctx context.Context, body io.Reader, reqID int64, lastID string, retry time.Duration) (string, time.Duration, bool, error) {
	sr := newSSEReader(body, c.opts.MaxMessageBytes)
	for {
		ev, err := sr.Next()
		if err != nil {
			if errors.Is(err, errEventTooLarge) && reqID != 0 {
				c.in.put(ctx, inboundMsg{from: onStream(reqID), msg: &protocol.Response{ID: protocol.IntID(reqID),
					Error: tooLarge}})
				return lastID, retry, true, err
			}
			return lastID, retry, false, err
		}
		if ev.ID != "" {
			lastID = ev.ID
		}
		if ev.Retry > 0 {
			retry = ev.Retry
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 || (ev.Event != "" && ev.Event != "message") {
			continue // a priming event, or not a message
		}
		msg, err := protocol.Decode(ev.Data)
		if err != nil {
			c.logger.Warn("the upstream sent an SSE event that is not a JSON-RPC message; it was skipped", "error", err.Error())
			continue
		}
		c.in.put(ctx, inboundMsg{msg: msg, from: onStream(reqID)})
		if r, ok := msg.(*protocol.Response); ok && reqID != 0 {
			if id, _ := r.ID.Int(); id == reqID {
				return lastID, retry, true, nil
			}
		}
	}
}

func (c *streamableConn) get(ctx context.Context, lastEventID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.opts.URL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	c.headers(req.Header)
	return c.opts.Client.Do(req)
}

// negotiated implements initializedConn: from now on requests carry the version.
func (c *streamableConn) negotiated(version string) {
	c.mu.Lock()
	c.version = version
	c.mu.Unlock()
}

// initialized implements initializedConn: the standalone stream is opened.
func (c *streamableConn) initialized() {
	if c.startStream() {
		go c.listen()
	}
}

// listen keeps the standalone GET stream open (mcp-notes §4.3), resuming it after breaks.
// An upstream that offers none (405) is fine: the connection goes on without it.
func (c *streamableConn) listen() {
	defer c.streams.Done()
	lastID, retry := "", time.Second
	backoff := time.Second
	for c.ctx.Err() == nil {
		resp, err := c.get(c.ctx, lastID)
		switch {
		case err != nil:
			if c.ctx.Err() != nil {
				return
			}
			c.logger.Debug("opening the upstream's standalone stream failed", "error", err.Error())
		case resp.StatusCode == http.StatusMethodNotAllowed:
			resp.Body.Close()
			c.logger.Debug("the upstream offers no standalone stream (405); going on without it")
			return
		case resp.StatusCode == http.StatusConflict:
			resp.Body.Close()
			c.logger.Debug("the upstream already has a standalone stream for this session (409)")
			return
		case resp.StatusCode == http.StatusNotFound:
			resp.Body.Close()
			// The upstream forgot the session: the connection ends, unless a POST is on its way.
			c.forgotten()
			c.mu.Lock()
			expiring := c.expiring
			c.mu.Unlock()
			if expiring {
				return
			}
		case resp.StatusCode != http.StatusOK:
			resp.Body.Close()
			c.logger.Debug("the upstream refused the standalone stream", "status", resp.StatusCode)
		default:
			backoff = time.Second
			lastID, retry, _, err = c.readEvents(c.ctx, resp.Body, 0, lastID, retry)
			resp.Body.Close()
			if errors.Is(err, errEventTooLarge) {
				c.logger.Warn("the upstream sent an event over max_response_bytes on its standalone stream; reconnecting", "limit_bytes", c.opts.MaxMessageBytes)
			}
			select {
			case <-time.After(retry):
			case <-c.ctx.Done():
			}
			continue
		}
		select {
		case <-time.After(backoff):
		case <-c.ctx.Done():
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// Close implements conn: streams end, then the upstream session is ended with DELETE (best
// effort; 405 is fine).
func (c *streamableConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.in.fail(errors.New("connection closed"))
		c.streams.Wait()
		if !c.hasSession() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, c.opts.URL, nil)
		if err != nil {
			return
		}
		c.headers(req.Header)
		if resp, err := c.opts.Client.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return nil
}

// readLimited reads at most max bytes; more is an error.
func readLimited(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		return io.ReadAll(r)
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%w (%d)", ErrResponseTooLarge, max)
	}
	return b, nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

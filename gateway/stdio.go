package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// The stdio face (`gateway stdio`) serves one MCP client over a byte stream of newline-delimited
// JSON-RPC messages, the MCP stdio transport, as desktop hosts start their servers. It relays
// each message to the gateway's own Streamable HTTP endpoint in this process, over an in-memory
// listener (nothing listens on a port), with the principal set by the face instead of proven
// by a credential. So everything the HTTP face does holds over stdio as well: sessions, what
// upstreams ask the client (sampling, elicitation, roots), progress, cancellation,
// list_changed, policy, audit, and both protocol eras. What differs is the transport, and the
// face does only that:
//
//   - Era: a request whose params._meta names a protocol version is a 2026-07-28 request,
//     posted with no session and validated with no headers (stdio has none, mcp-2026-notes
//     §1.14); initialize makes a 2025-11-25 session, to which every other message then goes.
//   - Cancellation: a 2026-07-28 request is cancelled with notifications/cancelled on stdio,
//     and by closing its response on HTTP: the face ends the request's POST.
//   - What a session is sent outside any request (list_changed, resource updates, a log
//     message after its call) comes on the session's standalone stream, which the face opens
//     once initialize is answered.

// localRequestKey marks, in a request's context, a request of the stdio face: it carries no
// headers of its client's (mcp-2026-notes §1.14).
type localRequestKey struct{}

// isLocalRequest reports whether the request of ctx came through the stdio face.
func isLocalRequest(ctx context.Context) bool {
	local, _ := ctx.Value(localRequestKey{}).(bool)
	return local
}

// stdioClientAddr is the client address of the stdio face's requests, for logs and limits.
const stdioClientAddr = "stdio"

// localHandler is the MCP endpoint, /mcp and /mcp/{profile}, for requests made in this
// process on behalf of principal p: no authentication, no origin or host checks (no browser
// reaches it), and p as the principal of every request.
func (g *Gateway) localHandler(p session.Principal) http.Handler {
	s := g.streamable
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		ctx = context.WithValue(ctx, clientAddrKey{}, stdioClientAddr)
		ctx = context.WithValue(ctx, localRequestKey{}, true)
		s.serveMCP(w, r.WithContext(ctx))
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", serve)
	mux.Handle("/mcp/{profile}", serve)
	return mux
}

// StdioOptions are the optional settings of a Stdio face.
type StdioOptions struct {
	// Principal is the name of the local user the face serves: the Subject of its principal,
	// whose Issuer is session.LocalIssuer. Policy rules match it by principal.subjects, as
	// any authenticated principal. If empty, "local".
	Principal string
	// Profile is the profile the client is served, as the endpoint /mcp/NAME serves it. If
	// empty, the whole catalog, as /mcp.
	Profile string
}

// Stdio is the gateway's stdio face: it serves one client, whose messages it reads from in and
// whose answers and requests it writes to out, one JSON-RPC message a line. Serve runs it;
// Close ends it. Its methods are not for concurrent use with each other.
type Stdio struct {
	g        *Gateway
	in       io.Reader
	out      *lineWriter
	endpoint string
	logger   *slog.Logger

	// listener, server and client are the in-memory HTTP hop to the gateway's endpoint.
	// Lifecycle: the server serves from Serve to Close, which waits for it (served).
	listener *pipeListener
	server   *http.Server
	client   *http.Client
	served   chan struct{}

	// ctx ends the relays at Close. relays counts the goroutines relaying one exchange (a
	// request's answer, the standalone stream): Close waits for them; requests counts those
	// of the client's requests, for Idle.
	ctx      context.Context
	stop     context.CancelFunc
	relays   sync.WaitGroup
	requests sync.WaitGroup

	mu sync.Mutex
	// session is the id of the 2025-11-25 session initialize made, "" before. Guarded by mu.
	session string
	// version is the protocol version that initialize negotiated. Guarded by mu.
	version string
	// modern are the 2026-07-28 requests being relayed, by id: notifications/cancelled for
	// one ends its POST. Guarded by mu.
	modern map[protocol.ID]*modernRelay
	// calls are the client's other requests being relayed, by id: notifications/cancelled
	// for one marks it, so that its relay, whose stream then ends without an answer (the
	// receiver of a cancelled request does not answer it), does not answer it either.
	// Guarded by mu.
	calls map[protocol.ID]*callRelay
}

// modernRelay is a 2026-07-28 request being relayed.
type modernRelay struct{ cancel context.CancelFunc }

// callRelay is a request of a 2025-11-25 session's being relayed.
type callRelay struct {
	// cancelled is set when the client cancelled the request. Guarded by Stdio.mu.
	cancelled bool
}

// NewStdio returns the stdio face of the gateway, reading the client's messages from in and
// writing to out. Nothing runs until Serve. A gateway may have several; each serves one client.
func (g *Gateway) NewStdio(in io.Reader, out io.Writer, opts *StdioOptions) *Stdio {
	var o StdioOptions
	if opts != nil {
		o = *opts
	}
	if o.Principal == "" {
		o.Principal = "local"
	}
	endpoint := "http://" + stdioClientAddr + "/mcp"
	if o.Profile != "" {
		endpoint += "/" + url.PathEscape(o.Profile)
	}
	principal := session.Principal{Issuer: session.LocalIssuer, Subject: o.Principal}
	logger := g.logger.With("principal", principal.String())
	l := newPipeListener()
	s := &Stdio{
		g:        g,
		in:       in,
		out:      &lineWriter{w: out, logger: logger},
		endpoint: endpoint,
		logger:   logger,
		listener: l,
		server: &http.Server{
			Handler:  g.localHandler(principal),
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError),
		},
		client: &http.Client{Transport: &http.Transport{
			DialContext:         l.DialContext,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 16,
		}},
		modern: map[protocol.ID]*modernRelay{},
		calls:  map[protocol.ID]*callRelay{},
	}
	s.ctx, s.stop = context.WithCancel(g.ctx)
	return s
}

// Serve serves the client until in ends, when it returns nil, or until ctx ends, when it
// returns ctx's error. Then the caller waits for Idle (within a bound), drains the gateway
// (Drain, EndRequests) and calls Close, which lets the answers still coming reach out. Each request is relayed on its own, so
// that a slow one does not hold the others; notifications and the client's answers are relayed
// in the order they come.
//
// Reading in is not interruptible: when ctx ends first, the goroutine reading it stays blocked
// until in ends, or the process exits.
func (s *Stdio) Serve(ctx context.Context) error {
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.server.Serve(s.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("the stdio face's in-memory server stopped", "error", err.Error())
		}
	}()
	lines := make(chan []byte)
	ended := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go readLines(s.in, lines, ended, done)
	for {
		select {
		case line := <-lines:
			s.dispatch(line)
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read the client's messages: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// readLines sends each line of in to lines until in ends, with its error on ended, or until
// done is closed. A line may be of any length: one longer than max_body_bytes is refused by the
// endpoint as over HTTP.
func readLines(in io.Reader, lines chan<- []byte, ended chan<- error, done <-chan struct{}) {
	r := bufio.NewReader(in)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			select {
			case lines <- line:
			case <-done:
				return
			}
		}
		if err != nil {
			ended <- err
			return
		}
	}
}

// dispatch relays one line of the client's.
func (s *Stdio) dispatch(line []byte) {
	line = bytes.TrimSpace(line)
	msg, err := protocol.Decode(line)
	if err != nil || protocol.IsBatch(line) {
		// The endpoint answers what it cannot read, or a batch, as it would over HTTP.
		s.goRequest(func() { s.exchange(s.ctx, line, true, protocol.ID{}, nil) })
		return
	}
	session, _ := s.sessionOf()
	switch m := msg.(type) {
	case *protocol.Request:
		if modern.Classify("", session != "", m.Method, m.Params) == modern.Modern {
			s.goRequest(func() { s.relayModern(m.ID, line) })
			return
		}
		if m.Method == protocol.MethodInitialize {
			if session != "" {
				s.refuseInitialize(m.ID)
				return
			}
			// Relayed before the next line is read: what follows goes to its session.
			s.relayInitialize(m.ID, line)
			return
		}
		s.goRequest(func() { s.exchange(s.ctx, line, true, m.ID, nil) })
	case *protocol.Notification:
		if m.Method == protocol.NotificationCancelled && s.cancelModern(m.Params) {
			return
		}
		if m.Method == protocol.NotificationCancelled {
			s.cancelCall(m.Params) // and passed on, which ends the call upstream
		}
		if modern.Classify("", session != "", m.Method, m.Params) == modern.Modern {
			return // a 2026-07-28 notification carries nothing more over stdio
		}
		s.exchange(s.ctx, line, true, protocol.ID{}, nil)
	case *protocol.Response:
		s.exchange(s.ctx, line, true, protocol.ID{}, nil)
	}
}

// goRelay runs relay on a goroutine of its own, which Close waits for.
func (s *Stdio) goRelay(relay func()) {
	s.relays.Add(1)
	go func() {
		defer s.relays.Done()
		relay()
	}()
}

// goRequest is goRelay for the relay of one of the client's requests, which Idle waits for.
func (s *Stdio) goRequest(relay func()) {
	s.requests.Add(1)
	s.goRelay(func() {
		defer s.requests.Done()
		relay()
	})
}

// Idle returns a channel closed once the relay of every request the client sent has ended:
// its answer is written, or it was cancelled. Call it after Serve returned.
func (s *Stdio) Idle() <-chan struct{} {
	idle := make(chan struct{})
	go func() { // ends with the last relay, at the latest at Close
		s.requests.Wait()
		close(idle)
	}()
	return idle
}

// sessionOf returns the session's id and protocol version; "" before initialize.
func (s *Stdio) sessionOf() (id, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session, s.version
}

// refuseInitialize answers an initialize after the one that made the session: a client
// initializes once per connection (MCP 2025-11-25, lifecycle), and a second session would
// leave the first one's standalone stream writing its notifications to out.
func (s *Stdio) refuseInitialize(id protocol.ID) {
	s.logger.Warn("the client sent initialize again; it was refused")
	s.answer(id, protocol.Errorf(protocol.CodeInvalidRequest,
		"this connection is already initialized: MCP initializes once per connection; to start a new session, restart the server"))
}

// relayInitialize relays initialize: the session its answer makes is the one every later
// message of the client's goes to, and once it is known, its standalone stream is opened.
func (s *Stdio) relayInitialize(id protocol.ID, body []byte) {
	started := false
	s.exchange(s.ctx, body, false, id, func(resp *http.Response, msg []byte) {
		sid := resp.Header.Get(headerSessionID)
		answer, err := protocol.Decode(msg)
		r, ok := answer.(*protocol.Response)
		if sid == "" || err != nil || !ok || r.ID != id || r.Result == nil {
			return
		}
		var result struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(r.Result, &result)
		s.mu.Lock()
		s.session, s.version = sid, result.ProtocolVersion
		s.mu.Unlock()
		started = true
	})
	if started {
		s.goRelay(s.relayStandalone)
	}
}

// relayModern relays a 2026-07-28 request, which notifications/cancelled for its id ends.
func (s *Stdio) relayModern(id protocol.ID, body []byte) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	relay := &modernRelay{cancel: cancel}
	s.mu.Lock()
	s.modern[id] = relay
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.modern[id] == relay {
			delete(s.modern, id)
		}
		s.mu.Unlock()
	}()
	s.exchange(ctx, body, false, id, nil)
}

// cancelModern ends the relay of the 2026-07-28 request that a notifications/cancelled with
// params names, and reports whether there was one: the gateway then sends nothing more for
// it, and the upstream is told as for a closed HTTP response.
func (s *Stdio) cancelModern(params json.RawMessage) bool {
	id, ok := cancelledID(params)
	if !ok {
		return false
	}
	s.mu.Lock()
	relay := s.modern[id]
	delete(s.modern, id)
	s.mu.Unlock()
	if relay == nil {
		return false
	}
	relay.cancel()
	return true
}

// cancelCall marks the request that a notifications/cancelled with params names, if it is
// being relayed, as cancelled by the client.
func (s *Stdio) cancelCall(params json.RawMessage) {
	id, ok := cancelledID(params)
	if !ok {
		return
	}
	s.mu.Lock()
	if call := s.calls[id]; call != nil {
		call.cancelled = true
	}
	s.mu.Unlock()
}

// cancelledID is the requestId that the params of a notifications/cancelled name.
func cancelledID(params json.RawMessage) (protocol.ID, bool) {
	raw, ok, err := protocol.Member(params, "requestId")
	if err != nil || !ok {
		return protocol.ID{}, false
	}
	id, err := protocol.ParseID(raw)
	if err != nil {
		return protocol.ID{}, false
	}
	return id, true
}

// trackCall notes the request id as being relayed, and returns its record and what forgets
// it once its relay ended.
func (s *Stdio) trackCall(id protocol.ID) (*callRelay, func()) {
	call := &callRelay{}
	s.mu.Lock()
	s.calls[id] = call
	s.mu.Unlock()
	return call, func() {
		s.mu.Lock()
		if s.calls[id] == call {
			delete(s.calls, id)
		}
		s.mu.Unlock()
	}
}

// cancelledByClient reports whether the client cancelled the request of call.
func (s *Stdio) cancelledByClient(call *callRelay) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return call.cancelled
}

// Reopening the standalone stream: at once after a stream that carried messages, else after
// a delay that doubles from standaloneBackoff up to standaloneMaxBackoff; after
// standaloneRetries attempts in a row that got no stream, or a stream that carried nothing,
// the face stops trying.
const (
	standaloneRetries    = 8
	standaloneBackoff    = 100 * time.Millisecond
	standaloneMaxBackoff = 5 * time.Second
)

// relayStandalone relays the session's standalone stream, and opens it again when it ends
// while the session goes on (the gateway dropped it: it overflowed, or it was replaced), so
// that what the session is sent outside its requests (list_changed) keeps reaching the
// client. It stops at Close, at the drain, when the session has ended, or when the stream
// cannot be opened again (standaloneRetries), which it logs.
func (s *Stdio) relayStandalone() {
	failures := 0
	lastEventID := "" // of the last event relayed: the stream opened again resumes after it
	for {
		status, relayed := s.followStandalone(&lastEventID)
		switch {
		case s.ctx.Err() != nil || s.g.streamable.isDraining():
			return
		case status == http.StatusNotFound:
			s.logger.Info("the session ended: no more notifications reach the client; restart the server to start a new session")
			return
		case status == http.StatusBadRequest && lastEventID != "":
			// The stream cannot be resumed (the gateway dropped it, or no longer holds its
			// events): a new one, at once.
			s.logger.Warn("the session's standalone stream could not be resumed: opening a new one; notifications sent since its last event may be lost", "last_event_id", lastEventID)
			lastEventID = ""
			continue
		case relayed:
			failures = 0
		default:
			failures++
		}
		if failures > standaloneRetries {
			s.logger.Error("the session's standalone stream cannot be opened again: list_changed and other notifications outside requests no longer reach the client; restart the server",
				"attempts", failures, "status", status)
			return
		}
		s.logger.Debug("the session's standalone stream ended: opening it again", "status", status, "attempt", failures+1)
		if failures == 0 {
			continue
		}
		delay := min(standaloneBackoff<<(failures-1), standaloneMaxBackoff)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
	}
}

// followStandalone opens the session's standalone stream, after the event *lastEventID
// names when it names one (Last-Event-ID: the gateway sends again what the stream carried
// since), and writes each of its messages to out until it ends, keeping the id of the last in
// *lastEventID. It returns the status the stream was answered with (0 when it was not), and
// whether it carried any message.
func (s *Stdio) followStandalone(lastEventID *string) (status int, relayed bool) {
	req, err := s.request(s.ctx, http.MethodGet, nil, true)
	if err != nil {
		return 0, false
	}
	if *lastEventID != "" {
		req.Header.Set("Last-Event-ID", *lastEventID)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.logger.Debug("the session's standalone stream was refused", "status", resp.StatusCode)
		return resp.StatusCode, false
	}
	_ = readEvents(resp.Body, func(id string, data []byte) {
		relayed = true
		if id != "" {
			*lastEventID = id
		}
		s.out.write(data)
	})
	return resp.StatusCode, relayed
}

// request makes a request to the endpoint, with the session's headers when withSession and
// there is a session.
func (s *Stdio) request(ctx context.Context, method string, body []byte, withSession bool) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.endpoint, rd)
	if err != nil {
		return nil, fmt.Errorf("stdio face: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	} else {
		req.Header.Set("Accept", "text/event-stream")
	}
	if sid, version := s.sessionOf(); withSession && sid != "" {
		req.Header.Set(headerSessionID, sid)
		if version != "" {
			req.Header.Set(headerProtocolVersion, version)
		}
	}
	return req, nil
}

// exchange posts one message of the client's, body, and writes every message of the answer
// to out: the JSON answer, or each message of the SSE stream, until it ends. id is the
// request's (zero for a notification or an answer): a refusal without an id is given it, and
// a request whose answer ends without its response is answered with an error, so that the
// client is never left waiting, unless the client cancelled it. seen, if not nil, sees each
// message before it is written. A request ended by ctx writes nothing more.
func (s *Stdio) exchange(ctx context.Context, body []byte, withSession bool, id protocol.ID, seen func(*http.Response, []byte)) {
	var call *callRelay
	if !id.IsZero() {
		var forget func()
		call, forget = s.trackCall(id)
		defer forget()
	}
	req, err := s.request(ctx, http.MethodPost, body, withSession)
	if err != nil {
		s.logger.Error("relaying a message failed", "error", err.Error())
		return
	}
	answered := false
	// unanswered answers the request, unless it was answered, with an error saying failure,
	// when it was not ended by ctx or cancelled by the client; it reports whether it did.
	unanswered := func(failure string) bool {
		if call == nil || answered || ctx.Err() != nil || s.cancelledByClient(call) {
			return false
		}
		s.answerFailure(id, failure)
		return true
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("relaying a message failed", "error", err.Error())
		}
		unanswered("the gateway did not answer; its log has the details")
		return
	}
	defer resp.Body.Close()
	deliver := func(msg []byte) {
		if seen != nil {
			seen(resp, msg)
		}
		if call != nil && !answered {
			answered = isResponseTo(msg, id)
		}
		s.out.write(msg)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == "text/event-stream" || mt == "" && resp.StatusCode == http.StatusOK:
		// An SSE stream; or an answer with nothing in it, when the request's stream was
		// dropped (its session ended) before it began.
		if mt != "" {
			err := readEvents(resp.Body, func(_ string, msg []byte) { deliver(msg) })
			if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
				s.logger.Warn("the answer's stream broke off", "error", err.Error())
			}
		}
		if unanswered("the gateway ended this request without answering it: its session may have ended " +
			"(a configuration reload, its expiry) or its stream was dropped; it may have run in part upstream. " +
			"Check before sending it again; if the gateway says the session is gone, restart the server") {
			s.logger.Warn("a request's stream ended without its answer: it was answered with an error", "request", id.String())
		}
	case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent:
	case mt == "application/json":
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			unanswered("the gateway's answer could not be read")
			return
		}
		if resp.StatusCode >= 300 {
			s.logger.Debug("a message was refused", "status", resp.StatusCode)
			data = withID(data, id)
		}
		if data != nil {
			deliver(data)
		}
		unanswered("the gateway's reply carried no answer to this request; its log has the details")
	default:
		s.logger.Warn("the gateway answered a message with no JSON-RPC", "status", resp.StatusCode, "content_type", resp.Header.Get("Content-Type"))
		unanswered(fmt.Sprintf("the gateway answered HTTP %d; its log has the details", resp.StatusCode))
	}
}

// isResponseTo reports whether msg is the response to the request id.
func isResponseTo(msg []byte, id protocol.ID) bool {
	m, err := protocol.Decode(msg)
	r, ok := m.(*protocol.Response)
	return err == nil && ok && r.ID == id
}

// withID returns a refusal's message with id set when it has none (a refusal of a request
// before its id was read); nil when it is not a response or there is no id to give.
func withID(data []byte, id protocol.ID) []byte {
	msg, err := protocol.Decode(data)
	r, ok := msg.(*protocol.Response)
	if err != nil || !ok {
		return nil
	}
	if !r.ID.IsZero() {
		return data
	}
	if id.IsZero() {
		return nil // a refused notification or answer: there is nobody to tell
	}
	r.ID = id
	out, err := protocol.Encode(r)
	if err != nil {
		return nil
	}
	return out
}

// answerFailure answers the request id, if any, with an internal error saying msg.
func (s *Stdio) answerFailure(id protocol.ID, msg string) {
	s.answer(id, protocol.Errorf(protocol.CodeInternalError, "%s", msg))
}

// answer answers the request id, if any, with the error e.
func (s *Stdio) answer(id protocol.ID, e *protocol.Error) {
	if id.IsZero() {
		return
	}
	data, err := protocol.Encode(&protocol.Response{ID: id, Error: e})
	if err == nil {
		s.out.write(data)
	}
}

// Close ends the face: it waits, until ctx ends, for the answers still coming to be written,
// then ends the relays left, ends the client's session (as DELETE does over HTTP, which ends
// its calls upstream) and stops the in-memory server. Call it after Serve returned.
func (s *Stdio) Close(ctx context.Context) error {
	relayed := make(chan struct{})
	go func() {
		s.relays.Wait()
		close(relayed)
	}()
	select {
	case <-relayed:
	case <-ctx.Done():
	}
	s.stop()
	select {
	case <-relayed:
	case <-time.After(sessionEndTimeout):
		// A relay still writing to a client that reads no more; it ends with the process.
		s.logger.Warn("the client does not read its answers: closing without them")
	}
	if sid, _ := s.sessionOf(); sid != "" {
		ended, cancel := context.WithTimeout(context.WithoutCancel(ctx), sessionEndTimeout)
		if req, err := s.request(ended, http.MethodDelete, nil, true); err == nil {
			if resp, err := s.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		cancel()
	}
	err := s.server.Close()
	s.listener.Close()
	if s.served != nil {
		<-s.served
	}
	s.client.CloseIdleConnections()
	return err
}

// sessionEndTimeout bounds the end of the stdio client's session at Close.
const sessionEndTimeout = 5 * time.Second

// lineWriter writes one JSON-RPC message a line, whole, whoever writes: the stdio framing.
// Safe for concurrent use.
type lineWriter struct {
	logger *slog.Logger

	mu sync.Mutex
	// w is where the lines go. Guarded by mu.
	w io.Writer
	// failed is set once a write failed: the client is gone, and nothing more is written.
	// Guarded by mu.
	failed bool
}

// write writes msg and a newline; a message with line breaks inside is compacted first (a JSON
// string has none unescaped).
func (lw *lineWriter) write(msg []byte) {
	line := make([]byte, 0, len(msg)+1)
	if bytes.ContainsAny(msg, "\r\n") {
		var b bytes.Buffer
		if err := json.Compact(&b, msg); err != nil {
			lw.logger.Error("a message for the client is not JSON; it was dropped", "error", err.Error())
			return
		}
		msg = b.Bytes()
	}
	line = append(append(line, msg...), '\n')
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.failed {
		return
	}
	if _, err := lw.w.Write(line); err != nil {
		lw.failed = true
		lw.logger.Warn("writing to the client failed; nothing more is written to it", "error", err.Error())
	}
}

// readEvents calls each with the id (the last the stream named, "" before any) and the data
// of every event of the SSE stream body until it ends; events without data (priming events, keep-alive comments) are skipped. It returns the error
// that ended the stream, io.EOF at its end.
func readEvents(body io.Reader, each func(id string, data []byte)) error {
	r := bufio.NewReader(body)
	var data []byte
	id := ""
	hasData := false
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && (err == nil || err == io.EOF) {
			line = bytes.TrimRight(line, "\r\n")
			switch {
			case len(line) == 0:
				if hasData && len(bytes.TrimSpace(data)) > 0 {
					each(id, data)
				}
				data, hasData = data[:0], false
			case bytes.HasPrefix(line, []byte("id:")):
				id = string(bytes.TrimPrefix(line[len("id:"):], []byte(" ")))
			case bytes.HasPrefix(line, []byte("data:")):
				v := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
				if hasData {
					data = append(data, '\n')
				}
				data, hasData = append(data, v...), true
			}
		}
		if err != nil {
			return err
		}
	}
}

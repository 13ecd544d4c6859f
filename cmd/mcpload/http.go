package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names, in canonical form (header names are case-insensitive, mcp-notes §4.6).
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
	headerName            = "Mcp-Name"
)

// deleteTimeout bounds each DELETE at the end of a run.
const deleteTimeout = 5 * time.Second

// maxDrain bounds what is read and thrown away of an answer, so that the connection can be
// reused.
const maxDrain = 64 << 10

// runHTTP runs cfg against a Streamable HTTP endpoint: every worker initializes its own
// session, then all call together, then each session is deleted. With ProtocolModern no
// worker initializes: each request stands alone, and there is nothing to delete.
func runHTTP(ctx context.Context, cfg *Config) (*Result, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url %q: want an http:// or https:// URL", cfg.URL)
	}
	tr := &http.Transport{
		// No Proxy: a load test measures the target, not a proxy from the environment.
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: cfg.Timeout,
		MaxIdleConnsPerHost: cfg.Workers, // every worker keeps its connection alive
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout, // bounds each exchange, reading the body included
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is an error status here
		},
	}

	r := newResult(cfg, cfg.URL)
	sessions := make([]*httpSession, cfg.Workers)
	initStats := make([]stats, cfg.Workers)
	initTimes := make([]time.Duration, cfg.Workers)
	var wg sync.WaitGroup
	// Each worker initializes on its own; a session that fails is counted and its worker
	// sits the run out.
	for w := range sessions {
		wg.Go(func() {
			s := newHTTPSession(ctx, client, u, cfg.Bearer)
			if cfg.Protocol == ProtocolModern {
				s.modern(cfg.Method, cfg.Tool)
				sessions[w] = s
				return
			}
			d, kind, err := s.initialize(ctx)
			switch kind {
			case "":
				sessions[w], initTimes[w] = s, d
			case kindCanceled:
			default:
				initStats[w].fail(kind, fmt.Errorf("initialize: %w", err))
			}
		})
	}
	wg.Wait()

	callers := make([]caller, cfg.Workers)
	for w, s := range sessions {
		initStats[w].addTo(r)
		switch {
		case s == nil:
		case cfg.Protocol == ProtocolModern:
			callers[w] = s
		default:
			callers[w] = s
			r.Sessions++
			r.Init = append(r.Init, initTimes[w])
		}
	}
	sortedDurations(r.Init)

	drive(ctx, cfg, callers, r)

	if cfg.Delete {
		dctx := context.WithoutCancel(ctx)
		for _, s := range sessions {
			if s != nil {
				wg.Go(func() { s.delete(dctx) })
			}
		}
		wg.Wait()
	}
	return r, nil
}

// httpSession is one worker's MCP session over Streamable HTTP. Not safe for concurrent
// use.
type httpSession struct {
	client *http.Client
	// post is the template of every POST: URL, headers (Authorization included) and the
	// run's ctx; DELETE sends its headers too. Its Header is set by initialize and
	// read-only afterwards.
	post http.Request

	body    []byte        // the last answer; reused
	sse     *bufio.Reader // reads SSE answers; reused
	long    []byte        // holds SSE lines longer than sse's buffer
	pending []byte        // the body of the request in flight, for getBody
	getBody func() (io.ReadCloser, error)
}

// newHTTPSession returns a session, not yet initialized, that POSTs to u; every request
// it sends carries bearer as its Authorization, unless bearer is "".
func newHTTPSession(ctx context.Context, client *http.Client, u *url.URL, bearer string) *httpSession {
	s := &httpSession{client: client, sse: bufio.NewReaderSize(nil, 16<<10)}
	tmpl, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil) // u is valid
	tmpl.Header["Content-Type"] = []string{"application/json"}
	tmpl.Header["Accept"] = []string{"application/json, text/event-stream"} // mcp-notes §4.2
	if bearer != "" {
		// On every request, within a session too: a session id is no credential.
		tmpl.Header["Authorization"] = []string{"Bearer " + bearer}
	}
	s.post = *tmpl
	// getBody lets the transport resend a request that a stale keep-alive connection
	// refused before any of it was written.
	s.getBody = func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(s.pending)), nil
	}
	return s
}

// send POSTs body. The caller closes the response body.
func (s *httpSession) send(body []byte) (*http.Response, error) {
	req := new(http.Request)
	*req = s.post
	s.pending = body
	// net/http sees through NopCloser to the bytes.Reader and writes headers and body in
	// one go; a body of another type costs a second write per request.
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = s.getBody
	req.ContentLength = int64(len(body))
	return s.client.Do(req)
}

// initialize opens the session (mcp-notes §1.1, §4.6) and returns the initialize latency.
func (s *httpSession) initialize(ctx context.Context) (time.Duration, string, error) {
	start := time.Now()
	resp, err := s.send(initializeRequest(0))
	if err != nil {
		return 0, classify(ctx, err), err
	}
	msg, kind, err := s.answer(ctx, resp)
	elapsed := time.Since(start)
	if kind != "" {
		return 0, kind, err
	}
	r, kind, err := checkResult(msg, 0)
	if kind != "" {
		return 0, kind, err
	}
	version := member(r.result, "protocolVersion")
	if len(version) < 2 || version[0] != '"' || bytes.IndexByte(version, '\\') >= 0 {
		return 0, kindDecode, fmt.Errorf("initialize result has no protocolVersion: %.200s", msg)
	}

	// From now on every request names the session and the negotiated version
	// (mcp-notes §4.6, §4.7).
	hdr := s.post.Header.Clone()
	if id := resp.Header.Get(headerSessionID); id != "" {
		hdr[headerSessionID] = []string{id}
	}
	hdr[headerProtocolVersion] = []string{string(version[1 : len(version)-1])}
	s.post.Header = hdr

	resp, err = s.send(initializedNotification)
	if err != nil {
		return 0, classify(ctx, err), err
	}
	drain(resp)
	if resp.StatusCode/100 != 2 {
		return 0, httpKind(resp.StatusCode), fmt.Errorf("notifications/initialized: status %s", resp.Status)
	}
	return elapsed, "", nil
}

// modern makes every request of s a 2026-07-28 one, which opens no session: it names the
// version, and the method and tool it carries, in headers (mcp-2026-notes §1.5); the body's
// _meta is the workload's.
func (s *httpSession) modern(method, tool string) {
	hdr := s.post.Header.Clone()
	hdr[headerProtocolVersion] = []string{ProtocolModern}
	hdr[headerMethod] = []string{method}
	if method == MethodCall {
		hdr[headerName] = []string{headerValue(tool)}
	}
	s.post.Header = hdr
}

// headerValue returns v as an Mcp-* header value: as it is when it is plain visible ASCII
// with no leading or trailing space and does not look like the encoded form, else encoded as
// =?base64?…?= (mcp-2026-notes §1.5).
func headerValue(v string) string {
	plain := !strings.HasPrefix(v, "=?base64?") && strings.TrimSpace(v) == v
	for i := 0; plain && i < len(v); i++ {
		plain = v[i] >= ' ' && v[i] < 0x7f
	}
	if plain {
		return v
	}
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
}

// roundTrip implements caller.
func (s *httpSession) roundTrip(ctx context.Context, req []byte, _ int64, _ time.Time) ([]byte, string, error) {
	resp, err := s.send(req)
	if err != nil {
		return nil, classify(ctx, err), err
	}
	return s.answer(ctx, resp)
}

// answer reads the JSON-RPC answer of a POSTed request from resp, which is either one
// JSON object or an SSE stream carrying it (mcp-notes §4.2), and closes resp's body. The
// answer is valid until the next request.
func (s *httpSession) answer(ctx context.Context, resp *http.Response) ([]byte, string, error) {
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return nil, httpKind(resp.StatusCode), fmt.Errorf("status %s", resp.Status)
	}
	var ct string
	if v := resp.Header["Content-Type"]; len(v) > 0 {
		ct = v[0]
	}
	var err error
	switch {
	case strings.HasPrefix(ct, "application/json"):
		s.body, err = readAll(resp.Body, resp.ContentLength, s.body)
	case strings.HasPrefix(ct, "text/event-stream"):
		return s.readEvents(ctx, resp.Body)
	default:
		return nil, kindDecode, fmt.Errorf("answer has Content-Type %q", ct)
	}
	switch {
	case errors.Is(err, errTooLong):
		return nil, kindDecode, err
	case err != nil:
		return nil, classify(ctx, err), err
	}
	return s.body, "", nil
}

// readEvents reads an SSE stream until the event that carries a JSON-RPC response, and
// returns that response. Events without data (priming events, mcp-notes §4.2) and
// requests or notifications from the server are skipped. The rest of the stream is
// drained by the caller: the server should end it after the response.
func (s *httpSession) readEvents(ctx context.Context, body io.Reader) ([]byte, string, error) {
	s.sse.Reset(body)
	s.body = s.body[:0]
	hasData := false
	for {
		line, err := readLine(s.sse, &s.long)
		if len(line) == 0 && (err == nil || err == io.EOF) {
			// End of an event (or of the stream): is it the response?
			if hasData && isResponse(s.body) {
				return s.body, "", nil
			}
			s.body, hasData = s.body[:0], false
		}
		if value, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if hasData {
				s.body = append(s.body, '\n')
			}
			value, _ = bytes.CutPrefix(value, []byte(" "))
			s.body = append(s.body, value...)
			hasData = true
			if len(s.body) > maxMessage {
				return nil, kindDecode, errTooLong
			}
		}
		switch {
		case err == io.EOF:
			if hasData && isResponse(s.body) { // a final event without its blank line
				return s.body, "", nil
			}
			return nil, kindDecode, errors.New("SSE stream ended without the response")
		case errors.Is(err, errTooLong):
			return nil, kindDecode, err
		case err != nil:
			return nil, classify(ctx, err), err
		}
	}
}

// isResponse reports whether msg looks like a JSON-RPC response: an object with no method.
func isResponse(msg []byte) bool {
	s, ok := newObjectScanner(msg)
	if !ok {
		return false
	}
	for {
		k, _, ok := s.next()
		if !ok {
			return !s.bad
		}
		if keyIs(k, "method") {
			return false
		}
	}
}

// delete ends the session (mcp-notes §4.6); failures are ignored, a 405 included.
func (s *httpSession) delete(ctx context.Context) {
	if s.post.Header.Get(headerSessionID) == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, s.post.URL.String(), nil)
	if err != nil {
		return
	}
	req.Header = s.post.Header
	if resp, err := s.client.Do(req); err == nil {
		drain(resp)
	}
}

// drain reads a little of what is left of resp's body, so that its connection can be
// reused, and closes it.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	resp.Body.Close()
}

// classify returns the error kind of a failed exchange.
func classify(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return kindCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	}
	return kindTransport
}

// httpKind returns the error kind of an HTTP status.
func httpKind(status int) string {
	return "http-" + strconv.Itoa(status)
}

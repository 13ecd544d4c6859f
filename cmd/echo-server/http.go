package main

import (
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
)

// maxBody bounds one POST body.
const maxBody = 16 << 20

// Header names and values, preallocated so that setting them does not allocate.
const (
	headerSessionID       = "Mcp-Session-Id"       // canonical form of MCP-Session-Id
	headerProtocolVersion = "Mcp-Protocol-Version" // canonical form of MCP-Protocol-Version
)

var (
	contentTypeJSON = []string{"application/json"}
	allowMethods    = []string{"POST, DELETE"}
)

// httpHandler serves Streamable HTTP (mcp-notes §4) on one endpoint: POST carries one
// message, GET (no standalone stream offered) is 405, DELETE ends a session. Every answer
// is a plain application/json response; the server never sends SSE. It is safe for
// concurrent use.
type httpHandler struct {
	srv *server

	// mu guards sessions.
	mu sync.RWMutex
	// sessions holds the ids handed out by initialize and not yet deleted.
	sessions map[string]struct{}
}

// newHTTPHandler returns the endpoint handler for srv; mount it at /mcp.
func newHTTPHandler(srv *server) *httpHandler {
	return &httpHandler{srv: srv, sessions: make(map[string]struct{})}
}

// buffers are the per-request body and answer buffers, pooled.
type buffers struct{ in, out []byte }

var bufferPool = sync.Pool{New: func() any { return new(buffers) }}

// maxPooled is the largest buffer kept in bufferPool, so that one huge message does not
// pin its memory.
const maxPooled = 1 << 20

// putBuffers returns bufs to bufferPool.
func putBuffers(bufs *buffers) {
	if cap(bufs.in) > maxPooled {
		bufs.in = nil
	}
	if cap(bufs.out) > maxPooled {
		bufs.out = nil
	}
	bufferPool.Put(bufs)
}

// ServeHTTP implements http.Handler.
func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowedOrigin(r.Header.Get("Origin")) {
		// mcp-notes §4.1: an invalid Origin gets 403 (DNS rebinding protection).
		http.Error(w, "forbidden origin", http.StatusForbidden)
		return
	}
	if v := r.Header[headerProtocolVersion]; len(v) > 0 && !slices.Contains(protocolVersions, v[0]) {
		// mcp-notes §4.7: an unsupported MCP-Protocol-Version gets 400.
		http.Error(w, "unsupported MCP-Protocol-Version", http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodDelete:
		id := r.Header.Get(headerSessionID)
		if code := h.checkSession(id); code != 0 {
			http.Error(w, http.StatusText(code), code)
			return
		}
		h.mu.Lock()
		delete(h.sessions, id)
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	default:
		w.Header()["Allow"] = allowMethods
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// post handles one POSTed message.
func (h *httpHandler) post(w http.ResponseWriter, r *http.Request) {
	bufs := bufferPool.Get().(*buffers)
	defer putBuffers(bufs)

	body, err := readBody(r.Body, r.ContentLength, bufs.in[:0])
	bufs.in = body[:0]
	if err != nil {
		if errors.Is(err, errBodyTooLarge) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		}
		return // the client went away
	}
	m, err := parse(body)
	if err != nil {
		bufs.out = appendParseError(bufs.out[:0], err)
		writeJSON(w, http.StatusBadRequest, bufs.out)
		return
	}

	initialize := m.isRequest() && string(stringBytes(m.method)) == "initialize"
	if initialize {
		// Every initialize opens a new session, whatever header it carries.
		id := rand.Text()
		h.mu.Lock()
		h.sessions[id] = struct{}{}
		h.mu.Unlock()
		w.Header()[headerSessionID] = []string{id}
	} else if code := h.checkSession(r.Header.Get(headerSessionID)); code != 0 {
		http.Error(w, http.StatusText(code), code)
		return
	}

	if m.isNotification() {
		// mcp-notes §4.2: an accepted notification or response gets 202 with no body.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	bufs.out = h.srv.respond(bufs.out[:0], &m)
	writeJSON(w, http.StatusOK, bufs.out)
}

// checkSession returns 0 when id names a live session, else the HTTP status to answer:
// 400 when id is missing, 404 when it is unknown (mcp-notes §4.6).
func (h *httpHandler) checkSession(id string) int {
	if id == "" {
		return http.StatusBadRequest
	}
	h.mu.RLock()
	_, ok := h.sessions[id]
	h.mu.RUnlock()
	if !ok {
		return http.StatusNotFound
	}
	return 0
}

// writeJSON writes body as an application/json response.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeJSON
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body) // a write error means the client went away
}

// errBodyTooLarge reports a body longer than maxBody.
var errBodyTooLarge = errors.New("body too large")

// readBody reads all of r into buf, growing it as needed, and returns it. n is the
// declared length, or -1 when unknown.
func readBody(r io.Reader, n int64, buf []byte) ([]byte, error) {
	if n > maxBody {
		return buf, errBodyTooLarge
	}
	if n > 0 {
		buf = slices.Grow(buf, int(n)+1) // +1: room to see EOF without growing
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 512)
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if len(buf) > maxBody {
			return buf, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// allowedOrigin reports whether a request's Origin header is absent or names a loopback
// host, the only pages allowed to reach this local benchmark server.
func allowedOrigin(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Header names of the Streamable HTTP transport (mcp-notes §4).
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerLastEventID     = "Last-Event-Id"
)

// serverCapabilities are declared from the configuration, not from the upstreams connected at
// initialize, so that a late upstream's items still reach clients by list_changed (design
// decision 11).
var serverCapabilities = json.RawMessage(`{"completions":{},"logging":{},"prompts":{"listChanged":true},"resources":{"listChanged":true,"subscribe":true},"tools":{"listChanged":true}}`)

// serverCapabilitiesWithTasks adds tasks (2025-11-25 only): the gateway maps task ids for
// upstreams that run tools as tasks.
var serverCapabilitiesWithTasks = json.RawMessage(`{"completions":{},"logging":{},"prompts":{"listChanged":true},"resources":{"listChanged":true,"subscribe":true},"tasks":{"cancel":{},"list":{},"requests":{"tools":{"call":{}}}},"tools":{"listChanged":true}}`)

// Handler returns the gateway's HTTP handler: the MCP endpoint at /mcp behind the origin
// checks, and the probes /healthz and /readyz, which change nothing and answer any Host
// beyond loopback (on a loopback listener, only loopback names). Mount it at the root of a
// server.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	loopback := isLoopbackListen(g.cfg.Listen)
	s := g.streamable
	mcp := s.authenticate(http.HandlerFunc(s.serveMCP))
	mux.Handle("/mcp", checkOrigin(g.cfg.AllowedOrigins, loopback, mcp))
	// Each profile is a virtual endpoint of its own: its sessions live there only.
	mux.Handle("/mcp/{profile}", checkOrigin(g.cfg.AllowedOrigins, loopback, mcp))
	// Where clients learn how to get a token (RFC 9728), when authentication is on. Browser
	// clients read it cross-origin: it carries no secret.
	s.serveMetadata(mux)
	if g.userAuth != nil {
		// The pages where users connect their accounts at upstreams, and see their grants.
		g.userAuth.mount(mux)
	}
	// The probes carry no Origin check (orchestrators send none), but on a loopback listener
	// the same Host check as /mcp: a web page using DNS rebinding must not read them. Beyond
	// loopback any Host is answered (Kubernetes probes send the pod's address).
	mux.Handle("GET /healthz", checkHost(loopback, http.HandlerFunc(s.serveHealthz)))
	mux.Handle("GET /readyz", checkHost(loopback, http.HandlerFunc(s.serveReadyz)))
	return s.withClientAddr(mux)
}

// streamableServer is the gateway's HTTP face: the Streamable HTTP endpoint (2025-11-25
// transport) and what sits in front of it (client addresses, authentication, the probes). It
// turns each client request into a request value for the gateway's pipeline, and shares the
// gateway's sessions, hub and lifetime.
type streamableServer struct {
	*Gateway
	// callsInFlight counts the client requests being served, for max_calls.
	callsInFlight atomic.Int64
	// stateless serves the 2026-07-28 requests, which carry no session (stateless.go).
	stateless *statelessFace
	// requestSeq numbers the HTTP requests, for their ids in logs (nextRequestID).
	requestSeq atomic.Uint64
	// serverInfoJSON is serverInfo encoded, once: it does not change while the gateway runs.
	// Read only (serverInfoMeta).
	serverInfoJSON json.RawMessage
}

// serveMCP is the Streamable HTTP endpoint: 2025-11-25 sessions, and 2026-07-28 requests
// without one when modern_protocol is on (stateless.go).
func (g *streamableServer) serveMCP(w http.ResponseWriter, r *http.Request) {
	requestID := g.nextRequestID()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			g.logger.Error("panic serving a request", "request_id", requestID, "panic", p, "stack", string(debug.Stack()))
			writeHTTPError(w, http.StatusInternalServerError, nil, protocol.Errorf(protocol.CodeInternalError,
				"internal error (request %s); the gateway's log has the details", requestID))
		}
	}()
	if p := r.PathValue("profile"); p != "" && g.snapshot.Load().Profile(p) == nil {
		writeHTTPError(w, http.StatusNotFound, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"no MCP endpoint at %s: the gateway serves /mcp and the profiles of its config (%s)", r.URL.Path, g.profileList()))
		return
	}
	switch r.Method {
	case http.MethodPost:
		g.servePOST(w, r, requestID)
	case http.MethodGet:
		g.serveGET(w, r)
	case http.MethodDelete:
		g.serveDELETE(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeHTTPError(w, http.StatusMethodNotAllowed, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"method %s is not allowed: the MCP endpoint takes POST, GET and DELETE", r.Method))
	}
}

func (g *streamableServer) servePOST(w http.ResponseWriter, r *http.Request, requestID string) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeHTTPError(w, http.StatusUnsupportedMediaType, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"Content-Type must be application/json"))
		return
	}
	if !accepts(r, "application/json") || !accepts(r, "text/event-stream") {
		writeHTTPError(w, http.StatusNotAcceptable, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"Accept must list both application/json and text/event-stream"))
		return
	}
	// The body must arrive within body_read_timeout: a client dribbling it must not hold a
	// connection for ever. The deadline is lifted once it is read, so it never cuts an answer
	// that streams.
	rc := http.NewResponseController(w)
	if g.cfg.BodyReadTimeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyReadTimeout))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		// The body was not read to its end: the connection closes with the answer. The
		// deadline moves to now rather than away, since after the handler the server reads
		// what is left of the body, and a client that stopped sending would hold the
		// connection for ever.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		var tooLarge *http.MaxBytesError
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeHTTPError(w, http.StatusRequestTimeout, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"the request body did not arrive within %s (body_read_timeout in the gateway's config)", g.cfg.BodyReadTimeout))
			return
		}
		if errors.As(err, &tooLarge) {
			writeHTTPError(w, http.StatusRequestEntityTooLarge, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"request body exceeds %d bytes (max_body_bytes in the gateway's config)", g.cfg.MaxBodyBytes))
			return
		}
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeRequestRejected, "reading the request body failed"))
		return
	}
	_ = rc.SetReadDeadline(time.Time{})
	if protocol.IsBatch(body) {
		g.serveBatch(w, r, body, requestID)
		return
	}
	msg, err := protocol.Decode(body)
	if err != nil {
		code := protocol.CodeInvalidRequest
		if errors.Is(err, protocol.ErrParse) {
			code = protocol.CodeParseError
		}
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(int64(code), "%v", err))
		return
	}
	sid := r.Header.Get(headerSessionID)
	if g.cfg.ModernProtocol && g.servedStatelessly(w, r, msg, sid != "", requestID) {
		return
	}
	if req, ok := msg.(*protocol.Request); ok {
		if g.isDraining() {
			// Notifications and answers still come in: a request in flight may wait for one.
			g.writeShuttingDown(w, req.ID)
			return
		}
		if req.Method == protocol.MethodInitialize {
			g.initialize(w, r, req, requestID)
			return
		}
		if sid == "" && (req.Method == protocol.MethodDiscover || isModernVersion(r.Header.Get(headerProtocolVersion))) {
			writeUnsupportedModern(w, req, r.Header.Get(headerProtocolVersion))
			return
		}
	}
	rec, ok := g.sessionFor(w, r, idOf(msg))
	if !ok {
		return
	}
	ls, err := g.openLive(rec)
	if err != nil {
		writeLocalSessionError(w, idOf(msg), err)
		return
	}
	switch m := msg.(type) {
	case *protocol.Notification:
		g.handleNotification(r, rec, ls, m)
		g.touch(r.Context(), rec.ID)
		w.WriteHeader(http.StatusAccepted)
	case *protocol.Response:
		g.takeAnswer(r.Context(), ls, m)
		g.touch(r.Context(), rec.ID)
		w.WriteHeader(http.StatusAccepted)
	case *protocol.Request:
		st := ls.NewStream(1)
		st.Expect(m.ID)
		sw, ok := g.attachAnswer(w, idOf(msg), st, rec)
		if !ok {
			return
		}
		job, err := g.admitRequest(st, rec, ls, m, requestID, r)
		if errors.Is(err, hub.ErrClosing) {
			// The drain began while this request came in: 503, as for one that came after.
			sw.cursor.Detach()
			g.writeShuttingDown(w, m.ID)
			return
		}
		if job == nil {
			sw.answer(r.Context(), nil) // refused: the answer is queued
			return
		}
		sw.answerServing(r.Context(), g.switchAfter(rec), job)
	}
}

// nextRequestID returns an id for one HTTP request, for logs.
func (g *streamableServer) nextRequestID() string {
	return "r" + strconv.FormatUint(g.requestSeq.Add(1), 36)
}

// takeAnswer delivers a client's answer to a request the gateway sent it for an upstream: by
// its id, which names this process, to the session's request waiting here; the request's own
// end removes its record from the store.
func (g *streamableServer) takeAnswer(ctx context.Context, ls *hub.Session, m *protocol.Response) {
	if ls.Answer(m) {
		return
	}
	// Sent by another replica (its name begins the id): the answer goes there.
	if g.replicas != nil && g.replicas.AnswerElsewhere(ctx, ls.ID(), m) {
		return
	}
	g.logger.Debug("a client answered a request that is no longer pending", "session", fingerprint(ls.ID()), "id", m.ID.String())
}

// attachAnswer makes the POST's connection the writer of the stream of its answer; when it
// fails (the session ended meanwhile) it has written the error.
func (g *streamableServer) attachAnswer(w http.ResponseWriter, id *protocol.ID, st *hub.Stream, rec *session.Record) (*streamWriter, bool) {
	c, err := st.Attach(0)
	if err != nil {
		writeLocalSessionError(w, id, hub.ErrSessionEnded)
		return nil, false
	}
	return &streamWriter{w: w, rc: http.NewResponseController(w), stream: st, cursor: c, prime: resumable(rec.ProtocolVersion)}, true
}

// resumable reports whether sessions of a protocol version get priming events and resumable
// streams: from 2025-11-25 on (older SDK clients fail on an event without data).
func resumable(version string) bool { return !olderThan(version, protocol.Version20251125) }

// switchAfter is how long a request of the session runs before its answer becomes a
// resumable SSE stream (stream_after); 0 when it never switches on time alone.
func (g *streamableServer) switchAfter(rec *session.Record) time.Duration {
	if !resumable(rec.ProtocolVersion) || g.cfg.StreamAfter <= 0 {
		return 0
	}
	return g.cfg.StreamAfter
}

// touch marks a session used, which puts off its idle expiry.
func (g *streamableServer) touch(ctx context.Context, id string) {
	if err := g.store.Touch(ctx, id); err != nil {
		g.storeHealth.warned(ctx, "marking a session used failed", "session", fingerprint(id), "error", err.Error())
	}
}

// serveBatch serves a JSON-RPC batch, which only 2025-03-26 has (mcp-notes §2.2): its
// notifications and responses are taken like single ones, and its requests are served
// concurrently, their messages and responses all on one SSE stream. An entry that is not a
// valid message gets an error response; a batch of only notifications and responses gets 202.
func (g *streamableServer) serveBatch(w http.ResponseWriter, r *http.Request, body []byte, requestID string) {
	rec, ok := g.sessionFor(w, r, nil)
	if !ok {
		return
	}
	if rec.ProtocolVersion != protocol.Version20250326 {
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeInvalidRequest,
			"JSON-RPC batches exist only in protocol 2025-03-26; this session speaks %s: send one message per POST", rec.ProtocolVersion))
		return
	}
	// The entries are slices of the body, not copies: a batch near max_body_bytes is held once.
	entries, err := protocol.BatchEntries(body)
	if err != nil || len(entries) == 0 {
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeInvalidRequest, "a batch must be a non-empty JSON array of messages"))
		return
	}
	if limit := g.cfg.MaxBatchEntries; limit > 0 && len(entries) > limit {
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeInvalidRequest,
			"a batch of %d messages is over the gateway's limit of %d (max_batch_entries): send fewer at once", len(entries), limit))
		return
	}
	ls, err := g.openLive(rec)
	if err != nil {
		writeLocalSessionError(w, nil, err)
		return
	}
	g.touch(r.Context(), rec.ID)
	var requests []*protocol.Request
	var refused []*protocol.Response
	for _, raw := range entries {
		msg, err := protocol.Decode(raw)
		switch m := msg.(type) {
		case nil:
			refused = append(refused, &protocol.Response{Error: protocol.Errorf(protocol.CodeInvalidRequest, "%v", err)})
		case *protocol.Notification:
			g.handleNotification(r, rec, ls, m)
		case *protocol.Response:
			g.takeAnswer(r.Context(), ls, m)
		case *protocol.Request:
			if m.Method == protocol.MethodInitialize {
				refused = append(refused, &protocol.Response{ID: m.ID, Error: protocol.Errorf(protocol.CodeInvalidRequest, "initialize must not be part of a batch")})
				continue
			}
			requests = append(requests, m)
		}
	}
	if len(requests)+len(refused) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	st := ls.NewStream(len(requests) + len(refused))
	for _, req := range requests {
		st.Expect(req.ID)
	}
	sw, ok := g.attachAnswer(w, nil, st, rec)
	if !ok {
		return
	}
	st.StartStreaming()
	for _, resp := range refused {
		_ = respond(st, resp)
	}
	for _, req := range requests {
		g.startRequest(st, rec, ls, req, requestID, r)
	}
	sw.answer(r.Context(), nil)
}

func idOf(m protocol.Message) *protocol.ID {
	switch m := m.(type) {
	case *protocol.Request:
		return &m.ID
	}
	return nil
}

// sessionFor finds the session a request names and checks its protocol version header; when
// it fails it has written the error.
func (g *streamableServer) sessionFor(w http.ResponseWriter, r *http.Request, id *protocol.ID) (*session.Record, bool) {
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		writeHTTPError(w, http.StatusBadRequest, id, protocol.Errorf(protocol.CodeRequestRejected,
			"missing Mcp-Session-Id header: send initialize first, then the session id it returns"))
		return nil, false
	}
	rec, err := g.store.Get(r.Context(), sid)
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			writeHTTPError(w, http.StatusNotFound, id, protocol.Errorf(protocol.CodeSessionNotFound,
				"session not found: it ended or never existed; send initialize to start a new one"))
			return nil, false
		}
		g.storeHealth.failed(r.Context(), "session store failed", "error", err.Error())
		writeHTTPError(w, http.StatusServiceUnavailable, id, protocol.Errorf(protocol.CodeRequestRejected,
			"the session store is unavailable; retry shortly"))
		return nil, false
	}
	g.storeHealth.answered(r.Context())
	who := principalOf(r.Context())
	if !rec.Principal.Same(who) {
		g.logger.Warn("a request named another principal's session: answered as an unknown session",
			"session", fingerprint(rec.ID), "principal", who.String(), "remote", clientAddr(r))
	}
	if rec.Profile != r.PathValue("profile") || !rec.Principal.Same(who) {
		// A session lives on the endpoint that initialized it, for the principal who did;
		// elsewhere, or for anyone else, it does not exist, as an unknown id (nothing tells a
		// client that it exists on another endpoint or is someone else's).
		writeHTTPError(w, http.StatusNotFound, id, protocol.Errorf(protocol.CodeSessionNotFound,
			"session not found: it ended or never existed; send initialize to start a new one"))
		return nil, false
	}
	// An unsupported value is a 400 (mcp-notes §4.7). A supported version other than the
	// negotiated one is left unspecified by the spec; the conformance suite sends one, and the
	// session's negotiated version governs either way.
	if v := r.Header.Get(headerProtocolVersion); v != "" && !protocol.IsSupportedVersion(v) {
		writeHTTPError(w, http.StatusBadRequest, id, protocol.Errorf(protocol.CodeRequestRejected,
			"unsupported Mcp-Protocol-Version %q: this session speaks %q", v, rec.ProtocolVersion))
		return nil, false
	}
	if !who.Anonymous() {
		// Policy reads what this request's credential says of its principal (groups, scopes
		// change), not what the one that initialized the session said.
		current := *rec
		current.Principal = who
		rec = &current
	}
	// Marking the session used is left to the caller: a request marks it once served, so that
	// no more than this one store operation comes before its call is forwarded.
	return rec, true
}

// isModernVersion reports whether a protocol version names the stateless revision or later,
// which the gateway serves only per request (modern_protocol), never in a session.
func isModernVersion(v string) bool {
	return v != "" && !protocol.IsSupportedVersion(v) && v >= protocol.Version20260728
}

// writeUnsupportedModern answers a 2026-07-28 request (server/discover, or any request that
// carries a modern version header and no session), with modern_protocol off, as a server that
// speaks only 2025-11-25 and earlier: HTTP 400 with -32022 listing the versions it serves, so that dual-era clients fall
// back to initialize at once (mcp-2026-notes §1.15).
func writeUnsupportedModern(w http.ResponseWriter, req *protocol.Request, requested string) {
	data, _ := json.Marshal(map[string]any{"supported": protocol.SupportedVersions, "requested": requested})
	writeHTTPError(w, http.StatusBadRequest, &req.ID, &protocol.Error{
		Code:    protocol.CodeUnsupportedProtocolVersion,
		Message: "unsupported protocol version: this server speaks " + strings.Join(protocol.SupportedVersions, ", ") + "; send initialize",
		Data:    data,
	})
}

func (g *streamableServer) initialize(w http.ResponseWriter, r *http.Request, req *protocol.Request, requestID string) {
	if r.Header.Get(headerSessionID) != "" {
		writeHTTPError(w, http.StatusBadRequest, &req.ID, protocol.Errorf(protocol.CodeInvalidRequest,
			"initialize must not carry Mcp-Session-Id: a session is initialized once"))
		return
	}
	var p protocol.InitializeParams
	if err := json.Unmarshal(req.Params, &p); err != nil || p.ProtocolVersion == "" {
		writeJSONResponse(w, "", &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInvalidParams,
			"invalid initialize params: protocolVersion, capabilities and clientInfo are required")})
		return
	}
	version := protocol.NegotiateVersion(p.ProtocolVersion)
	var clientInfo json.RawMessage
	if p.ClientInfo != nil {
		clientInfo, _ = json.Marshal(p.ClientInfo)
	}
	// initialize is a request like any other for the audit trail: who started a session, and
	// whether it was refused.
	received := g.opts.Now()
	audited := func(sessionID string, outcome pipeline.Outcome) {
		g.requests.writeAudit(context.Background(), &pipeline.Request{ID: req.ID, Method: req.Method, LogID: requestID, Received: received,
			Client: pipeline.ClientContext{SessionID: sessionID, ProtocolVersion: version, Capabilities: p.Capabilities, Principal: principalOf(r.Context())}}, nil, outcome)
	}
	rec, err := g.store.Create(r.Context(), session.Record{
		ProtocolVersion:    version,
		ClientInfo:         clientInfo,
		ClientCapabilities: p.Capabilities,
		Profile:            r.PathValue("profile"),
		// The record binds the session to who opened it: the identity, not the claims,
		// which every request's own credential supplies.
		Principal:  identityOf(principalOf(r.Context())),
		ClientAddr: clientAddr(r),
	})
	if errors.Is(err, session.ErrOwnerLimit) {
		who := principalOf(r.Context())
		audited("", pipeline.Outcome{Result: audit.OutcomeRefused, Code: protocol.CodeSessionLimit, Reason: "session_limit"})
		limit, whose := g.cfg.Auth.MaxSessionsPerPrincipal, "max_sessions_per_principal"
		if who.Anonymous() {
			limit, whose = g.cfg.Auth.MaxSessionsPerAddress, "max_sessions_per_address"
		}
		w.Header().Set("Retry-After", "5")
		writeHTTPError(w, http.StatusTooManyRequests, &req.ID, protocol.Errorf(protocol.CodeSessionLimit,
			"you already hold %d sessions (auth.%s): end unused ones with DELETE, or let them expire", limit, whose))
		return
	}
	if errors.Is(err, session.ErrLimit) {
		w.Header().Set("Retry-After", "5")
		audited("", pipeline.Outcome{Result: audit.OutcomeRefused, Code: protocol.CodeSessionLimit, Reason: "session_limit"})
		writeHTTPError(w, http.StatusServiceUnavailable, &req.ID, protocol.Errorf(protocol.CodeSessionLimit,
			"the gateway already holds its maximum of %d sessions, none idle for %s (session_evict_idle): retry later, end unused sessions with DELETE, or raise max_sessions", g.cfg.MaxSessions, g.cfg.SessionEvictIdle))
		return
	}
	if err != nil {
		g.storeHealth.failed(r.Context(), "creating a session failed", "error", err.Error())
		writeHTTPError(w, http.StatusServiceUnavailable, &req.ID, protocol.Errorf(protocol.CodeRequestRejected, "the session store is unavailable; retry shortly"))
		return
	}
	result := map[string]any{
		"protocolVersion": version,
		"capabilities":    capabilitiesFor(version),
		"serverInfo":      protocol.Implementation{Name: "manifold", Title: "Manifold MCP gateway", Version: g.opts.Version},
	}
	// instructions exist from 2025-03-26 on (mcp-notes §13, row 6).
	if ins := g.catalogOf(r.PathValue("profile")).Instructions(); ins != "" && version != protocol.Version20241105 {
		result["instructions"] = ins
	}
	raw, _ := json.Marshal(result)
	name := ""
	if p.ClientInfo != nil {
		name = p.ClientInfo.Name
	}
	g.logger.Info("session started", "session", fingerprint(rec.ID), "protocol_version", version, "client", name, "principal", rec.Principal.String())
	audited(rec.ID, pipeline.Outcome{Result: audit.OutcomeOK})
	writeJSONResponse(w, rec.ID, &protocol.Response{ID: req.ID, Result: raw})
}

func (g *streamableServer) handleNotification(r *http.Request, rec *session.Record, ls *hub.Session, n *protocol.Notification) {
	switch n.Method {
	case protocol.NotificationInitialized:
		if !rec.Initialized {
			if _, err := g.store.Update(r.Context(), rec.ID, func(s *session.Record) { s.Initialized = true }); err != nil {
				g.logger.Warn("marking a session initialized failed", "session", fingerprint(rec.ID), "error", err.Error())
			}
		}
	case protocol.NotificationRootsChanged:
		// The session's own upstream connections ask this client for roots: tell them. A
		// shared connection's roots are the config's, which did not change.
		g.notifyOwnConnections(r.Context(), rec.ID, n)
		if g.replicas != nil {
			notifyHolders(r.Context(), g.replicas, g.upstreamList(), rec, n)
		}
	case protocol.NotificationCancelled:
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(n.Params, &p) == nil && len(p.RequestID) > 0 {
			if id, err := protocol.ParseID(p.RequestID); err == nil && !ls.CancelRequest(id) && g.replicas != nil {
				// Not served here: the replica serving it stops it.
				g.replicas.CancelElsewhere(r.Context(), rec.ID, id)
			}
		}
	}
}

// startRequest begins serving a client request on a goroutine of its own, owned by the
// session: the request lives as long as it does within its session, not as long as the HTTP
// request that brought it (design decision 10). A batch's requests start so, side by side.
func (g *streamableServer) startRequest(out *hub.Stream, rec *session.Record, ls *hub.Session, req *protocol.Request, requestID string, r *http.Request) {
	job, err := g.admitRequest(out, rec, ls, req, requestID, r)
	if errors.Is(err, hub.ErrClosing) {
		_ = respond(out, &protocol.Response{ID: req.ID, Error: g.shuttingDownError()})
	}
	if job != nil {
		go func() {
			job.answer(job.serve())
		}()
	}
}

// admitRequest admits a client request to be served, or answers it at once on out and returns
// nil: a request past the caps on requests in flight, with an id already in flight, or of a
// session that ended. A request refused because the gateway drains is not answered:
// hub.ErrClosing, for the caller to answer (a single request gets 503, to go elsewhere). h
// are the headers of the HTTP request that brought it, whose trace context its span follows
// when its params carry none.
func (g *streamableServer) admitRequest(out *hub.Stream, rec *session.Record, ls *hub.Session, req *protocol.Request, requestID string, r *http.Request) (*admittedRequest, error) {
	refuse := func(e *protocol.Error) {
		// Through the mapper, for the audit record; the error passes as it is.
		_, wireErr := g.requests.finish(context.Background(), g.requestValue(rec, req, requestID), nil, nil, e)
		_ = respond(out, &protocol.Response{ID: req.ID, Error: wireErr})
	}
	// The session's own checks first, so that a request it refuses takes no place in the
	// gateway's total, not even for a moment.
	ctx, cancel, done, err := ls.Begin(req.ID, g.cfg.MaxCallsPerSession)
	switch {
	case errors.Is(err, hub.ErrTooManyCalls):
		g.tooManyCalls(out, rec, req, requestID, "this session", g.cfg.MaxCallsPerSession)
		return nil, nil
	case errors.Is(err, hub.ErrDuplicateID):
		refuse(protocol.Errorf(protocol.CodeInvalidRequest, "request id %s is already in use by a request in flight", req.ID))
		return nil, nil
	case errors.Is(err, hub.ErrClosing):
		return nil, hub.ErrClosing
	case err != nil:
		refuse(protocol.Errorf(protocol.CodeSessionNotFound, "session not found: it ended; send initialize to start a new one"))
		return nil, nil
	}
	if !g.admitCall() {
		done()
		ls.RequestDone()
		g.tooManyCalls(out, rec, req, requestID, "the gateway", g.cfg.MaxCalls)
		return nil, nil
	}
	ctx = tracedFrom(ctx, g.tracer, r)
	return &admittedRequest{g: g, ctx: ctx, cancel: cancel, done: done, out: out, rec: rec, ls: ls, req: req, requestID: requestID}, nil
}

// admittedRequest is a client request admitted and counted in flight: serve it, then answer
// it, once, on whichever goroutine serves it.
type admittedRequest struct {
	g *streamableServer
	// ctx is the request's own context, a child of its session's; cancel cancels it alone,
	// done ends the request.
	ctx       context.Context
	cancel    context.CancelCauseFunc
	done      func()
	out       *hub.Stream
	rec       *session.Record
	ls        *hub.Session
	req       *protocol.Request
	requestID string
}

// abandon stops the request when nobody can receive its answer any more. It cancels this
// request's own context: never a later one of the session that reuses its id.
func (a *admittedRequest) abandon() { a.cancel(hub.ErrAnswerUndeliverable) }

// serve serves the request and returns its response, nil when it gets none.
func (a *admittedRequest) serve() *protocol.Response {
	return a.g.serveSafely(a.ctx, a.out, a.rec, a.ls, a.req, a.requestID)
}

// answer queues the response on the request's stream and ends the request's part in the
// counts.
func (a *admittedRequest) answer(resp *protocol.Response) {
	g := a.g
	defer a.ls.RequestDone()
	// The request leaves the counts before its answer is queued: a client that sends its
	// next request as soon as it has the answer must find its place free.
	a.done()
	g.releaseCall()
	if resp == nil {
		a.out.Unanswered()
	} else if err := respond(a.out, resp); err != nil {
		g.logger.Debug("the client's stream ended before its response", "session", fingerprint(a.rec.ID), "request_id", a.requestID)
	}
	// A request of the session's own client is what keeps it from expiring; marked once
	// served, after the call was forwarded.
	g.touch(context.WithoutCancel(a.ctx), a.rec.ID)
}

// respond queues a response on a stream.
func respond(st *hub.Stream, resp *protocol.Response) error {
	data, err := protocol.Encode(resp)
	if err != nil {
		return err
	}
	return st.Put(data, true)
}

// serveSafely is serveRequest with a panic turned into an internal error for the client and
// a log record, never a crash of the gateway.
func (g *streamableServer) serveSafely(ctx context.Context, out *hub.Stream, rec *session.Record, ls *hub.Session, req *protocol.Request, requestID string) (resp *protocol.Response) {
	defer func() {
		if p := recover(); p != nil {
			g.logger.Error("panic serving a request", "request_id", requestID, "method", req.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp = &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInternalError, "internal error (request %s); the gateway's log has the details", requestID)}
		}
	}()
	return g.serveRequest(ctx, out, rec, ls, req, requestID)
}

// tooManyCalls answers a request past a cap on requests in flight, through the pipeline's
// mapper: a tools/call gets a tool result the model can act on, any other method the gateway's
// error (design decision 7).
func (g *streamableServer) tooManyCalls(out *hub.Stream, rec *session.Record, req *protocol.Request, requestID, scope string, limit int) {
	g.logger.Warn("request refused: too many requests in flight", "session", fingerprint(rec.ID), "scope", scope, "limit", limit, "method", req.Method)
	msg := fmt.Sprintf("%s already has its maximum of %d requests in flight: wait for some to finish, then retry", scope, limit)
	if req.Method == protocol.MethodCallTool {
		msg = fmt.Sprintf("The gateway refused this call: %s already has its maximum of %d requests in flight. Wait for some to finish, then try again.", scope, limit)
	}
	preq := g.requestValue(rec, req, requestID)
	result, wireErr := g.requests.finish(context.Background(), preq, nil, nil, &pipeline.Refusal{Reason: pipeline.ReasonTooManyCalls, Message: msg, RetryAfter: time.Second})
	_ = respond(out, &protocol.Response{ID: req.ID, Result: result, Error: wireErr})
}

// requestValue is the pipeline's value of a request of a 2025 session: its client context
// comes from the session's record.
func (g *streamableServer) requestValue(rec *session.Record, req *protocol.Request, requestID string) *pipeline.Request {
	return &pipeline.Request{
		ID:     req.ID,
		Method: req.Method,
		Params: req.Params,
		Client: pipeline.ClientContext{
			SessionID:       rec.ID,
			ProtocolVersion: rec.ProtocolVersion,
			Capabilities:    rec.ClientCapabilities,
			Principal:       rec.Principal,
			LogLevel:        rec.LogLevel,
			Profile:         rec.Profile,
		},
		LogID:    requestID,
		Received: g.opts.Now(),
	}
}

// admitCall counts a client request in flight in the whole gateway; it refuses one past
// max_calls (0: no cap).
func (g *streamableServer) admitCall() bool {
	if n := g.callsInFlight.Add(1); g.cfg.MaxCalls > 0 && n > int64(g.cfg.MaxCalls) {
		g.callsInFlight.Add(-1)
		return false
	}
	return true
}

func (g *streamableServer) releaseCall() { g.callsInFlight.Add(-1) }

// serveRequest serves one client request and returns its response; messages about it go to
// its stream meanwhile. A request the client cancelled, or whose session ended, gets none (nil,
// mcp-notes §8.2).
func (g *streamableServer) serveRequest(ctx context.Context, out *hub.Stream, rec *session.Record, ls *hub.Session, req *protocol.Request, requestID string) *protocol.Response {
	rq := &request{Request: g.requestValue(rec, req, requestID), connections: rec.Connections}
	rq.owner = &callOwner{sessionID: rec.ID, streamID: out.ID(), caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: ctx, clientID: req.ID, logLevel: rec.LogLevel}
	result, wireErr := g.requests.serve(ctx, rq)
	switch {
	case ls.Context().Err() != nil:
		// The session ended while the call ran; nobody is waiting for the answer.
		return nil
	case errors.Is(context.Cause(ctx), hub.ErrClientCancelled):
		// The receiver of a cancelled request SHOULD NOT answer it (mcp-notes §8.2), whatever
		// the call came to meanwhile (a tool result saying the upstream was unavailable).
		g.logger.Debug("request cancelled by the client", "session", fingerprint(rec.ID), "request_id", requestID)
		return nil
	case errors.Is(context.Cause(ctx), hub.ErrShuttingDown):
		// The drain ended with the request still running: the client hears why, on its
		// stream, instead of a connection cut, and whether it may have run.
		g.logger.Info("request ended by the shutdown", "session", fingerprint(rec.ID), "request_id", requestID, "method", req.Method, "sent_upstream", rq.sent.Load())
		if !rq.sent.Load() {
			return &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeShuttingDown,
				"the gateway shut down before this request was sent to its upstream: it did not run; send it again (another replica serves the session)")}
		}
		return &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInterrupted,
			"the gateway shut down before this request finished; it may have run in part upstream: check before sending it again")}
	case errors.Is(context.Cause(ctx), hub.ErrAnswerUndeliverable):
		g.logger.Debug("request stopped: its client can no longer receive the answer", "session", fingerprint(rec.ID), "request_id", requestID)
		return nil
	}
	return &protocol.Response{ID: req.ID, Result: result, Error: wireErr}
}

// serveGET opens the session's standalone SSE stream (mcp-notes §4.3), which carries
// list_changed notifications and what upstreams send outside calls. One connection per
// session: a second gets 409. With Last-Event-ID (sessions of 2025-11-25 on) it resumes the
// stream that id came from, a POST's or the standalone one, after that event (§4.5).
func (g *streamableServer) serveGET(w http.ResponseWriter, r *http.Request) {
	if !accepts(r, "text/event-stream") {
		writeHTTPError(w, http.StatusNotAcceptable, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"Accept must list text/event-stream to open the stream"))
		return
	}
	rec, ok := g.sessionFor(w, r, nil)
	if !ok {
		return
	}
	ls, err := g.openLive(rec)
	if err != nil {
		writeLocalSessionError(w, nil, err)
		return
	}
	select {
	case <-g.draining:
		writeHTTPError(w, http.StatusServiceUnavailable, nil, protocol.Errorf(protocol.CodeRequestRejected, "the gateway is shutting down; retry"))
		return
	default:
	}
	prime := resumable(rec.ProtocolVersion)
	var st *hub.Stream
	var c *hub.Cursor
	lastEventID := r.Header.Get(headerLastEventID)
	resuming := lastEventID != "" && prime
	if g.replicas != nil {
		// This replica holds a stream of the session from now on: messages raised for it
		// elsewhere come here, and so do the events of a stream another replica produces.
		if err := g.replicas.Follow(r.Context(), rec.ID); err != nil {
			g.storeHealth.warned(r.Context(), "following a session's messages from other replicas failed", "session", fingerprint(rec.ID), "error", err.Error())
			writeHTTPError(w, http.StatusServiceUnavailable, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"the session store is unavailable; retry shortly"))
			return
		}
	}
	if resuming {
		st, c, err = ls.Resume(r.Context(), lastEventID)
		if err == nil && g.replicas != nil && st == ls.Standalone() && hub.Producer(st.ID()) != g.hub.Tag() {
			// Another replica's standalone stream, taken over here: it is produced here now.
			g.replicas.OpenedStandalone(rec.ID, st.ID())
		}
	} else {
		st, c, err = ls.OpenStandalone()
		if err == nil && g.replicas != nil {
			g.replicas.OpenedStandalone(rec.ID, st.ID())
		}
	}
	switch {
	case errors.Is(err, hub.ErrStreamOpen):
		writeHTTPError(w, http.StatusConflict, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"this session already has an open stream; close it before opening another"))
		return
	case errors.Is(err, hub.ErrUnknownStream):
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeInvalidRequest,
			"Last-Event-ID %q names no stream of this session (it may have finished long ago): open the stream without it", lastEventID))
		return
	case errors.Is(err, hub.ErrEventsLost):
		writeHTTPError(w, http.StatusBadRequest, nil, protocol.Errorf(protocol.CodeInvalidRequest,
			"the events after Last-Event-ID %q are no longer held: open the stream without it", lastEventID))
		return
	case errors.Is(err, hub.ErrLogUnavailable):
		g.storeHealth.warned(r.Context(), "resuming a stream from the event log failed", "session", fingerprint(rec.ID), "error", err.Error())
		writeHTTPError(w, http.StatusServiceUnavailable, nil, protocol.Errorf(protocol.CodeRequestRejected,
			"the session store is unavailable; retry shortly"))
		return
	case err != nil:
		writeLocalSessionError(w, nil, err)
		return
	}
	g.touch(r.Context(), rec.ID)
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), stream: st, cursor: c, prime: prime}
	if resuming {
		// The client has an id of this stream already: no priming event.
		startSSE(w)
		sw.started = true
		c.MarkResumable()
		if err := sw.rc.Flush(); err != nil {
			c.Detach()
			return
		}
	} else if err := sw.start(); err != nil {
		c.Detach()
		return
	}
	// A drain ends the standalone stream; a resumed POST stream carries a request in flight
	// and ends with its answer.
	var drain <-chan struct{}
	if st == ls.Standalone() || st.FromLog() {
		// A stream resumed here from another replica ends too: its client resumes it on
		// another.
		drain = g.draining
	}
	sw.follow(r.Context(), ls.Context().Done(), drain)
}

// serveDELETE ends a session (mcp-notes §4.6): its calls are cancelled, its stream closes,
// and its id answers 404 from then on.
func (g *streamableServer) serveDELETE(w http.ResponseWriter, r *http.Request) {
	rec, ok := g.sessionFor(w, r, nil)
	if !ok {
		return
	}
	if err := g.store.Delete(r.Context(), rec.ID); err != nil {
		g.storeHealth.failed(r.Context(), "deleting a session failed", "session", fingerprint(rec.ID), "error", err.Error())
		writeHTTPError(w, http.StatusServiceUnavailable, nil, protocol.Errorf(protocol.CodeRequestRejected, "the session store is unavailable; retry shortly"))
		return
	}
	g.endLocal(rec.ID)
	g.logger.Info("session ended by the client", "session", fingerprint(rec.ID))
	w.WriteHeader(http.StatusNoContent)
}

// accepts reports whether the request's Accept header admits media type mt.
func accepts(r *http.Request, mt string) bool {
	major, _, _ := strings.Cut(mt, "/")
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			t, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			t = strings.ToLower(strings.TrimSpace(t))
			if t == mt || t == "*/*" || t == major+"/*" {
				return true
			}
		}
	}
	return false
}

func writeJSONResponse(w http.ResponseWriter, sessionID string, resp *protocol.Response) {
	data, err := protocol.Encode(resp)
	if err != nil {
		http.Error(w, "encoding the response failed", http.StatusInternalServerError)
		return
	}
	if sessionID != "" {
		w.Header().Set(headerSessionID, sessionID)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// writeHTTPError answers with an HTTP error status and a JSON-RPC error body; id is the
// request's id when known (the 2025-11-25 schema omits it otherwise).
// isDraining reports whether Drain has begun.
func (g *streamableServer) isDraining() bool {
	select {
	case <-g.draining:
		return true
	default:
		return false
	}
}

// shuttingDownError is the answer to a request that arrives while the gateway drains. With
// sessions shared by replicas the session goes on elsewhere; otherwise it ends with this one.
func (g *streamableServer) shuttingDownError() *protocol.Error {
	if g.replicas != nil {
		return protocol.Errorf(protocol.CodeShuttingDown, "this gateway replica is shutting down: send the request again; another replica serves the session")
	}
	return protocol.Errorf(protocol.CodeShuttingDown, "the gateway is shutting down: start a new session (another replica serves it)")
}

// writeShuttingDown refuses a request that arrives while the gateway drains: 503, and the
// connection closes so that the client's next one goes elsewhere.
func (g *streamableServer) writeShuttingDown(w http.ResponseWriter, id protocol.ID) {
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", "1")
	writeHTTPError(w, http.StatusServiceUnavailable, &id, g.shuttingDownError())
}

func writeHTTPError(w http.ResponseWriter, status int, id *protocol.ID, e *protocol.Error) {
	resp := &protocol.Response{Error: e}
	if id != nil {
		resp.ID = *id
	}
	data, err := protocol.Encode(resp)
	if err != nil {
		data = []byte(`{"jsonrpc":"2.0","error":{"code":-32603,"message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		// Every 503 says when to try again: the store or the gateway is busy for a moment.
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func capabilitiesFor(version string) json.RawMessage {
	if olderThan(version, protocol.Version20251125) {
		return serverCapabilities
	}
	return serverCapabilitiesWithTasks
}

// writeLocalSessionError answers a request whose session cannot be served here: it ended
// meanwhile (404, as for any ended session), or the gateway is shutting down (503).
func writeLocalSessionError(w http.ResponseWriter, id *protocol.ID, err error) {
	if errors.Is(err, hub.ErrSessionEnded) {
		writeHTTPError(w, http.StatusNotFound, id, protocol.Errorf(protocol.CodeSessionNotFound,
			"session not found: it ended or never existed; send initialize to start a new one"))
		return
	}
	writeHTTPError(w, http.StatusServiceUnavailable, id, protocol.Errorf(protocol.CodeRequestRejected, "the gateway is shutting down; retry"))
}

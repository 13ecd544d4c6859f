package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// The 2026-07-28 face (mcp-2026-notes §2): a request that carries a 2026-07-28 signal is
// served on its own, by any replica, with no session: what a session's initialize gave
// (version, capabilities, log level) comes from the request's _meta, who the client is from
// its credential, and its answer, with the messages about it, goes on its own response. It
// shares the pipeline, catalog, policy, audit and upstream connections with the 2025-11-25
// sessions, and nothing of their session code. config.Config.ModernProtocol turns it on.

// statelessFace serves the requests of the 2026-07-28 era: each on its own, with no session.
// It shares the streamable server's gateway (its pipeline, catalog, auth and limits) and its
// endpoint, and nothing of its sessions: what it keeps is per request, per caller, or per
// call waiting for its client's input.
type statelessFace struct {
	*streamableServer
	// callers counts each caller's 2026-07-28 requests in flight, for max_calls_per_principal.
	callers *callersInFlight
	// listens are the subscriptions/listen streams open here (listen.go).
	listens *listenStreams
	// parked are the 2026-07-28 calls waiting here for their clients' input (parking.go).
	parked *parkedCalls
	// callsCtx ends the 2026-07-28 calls at Close (endCalls), before the upstreams close;
	// calls counts them until their pipelines return.
	callsCtx context.Context
	endCalls context.CancelFunc
	calls    callGroup
}

// directStreamBuffer is how many messages about one 2026-07-28 request may wait for its
// response's writer; past it the client is not reading, and the request ends.
const directStreamBuffer = 64

// errClientNotReading ends a 2026-07-28 request whose client stopped reading its response.
var errClientNotReading = errors.New("the client is not reading the response stream")

// directStream is the response of a 2026-07-28 request as the upstreams' messages about the
// request reach it: progress and log messages wait in events for the handler that writes the
// response (nothing writes to a client on an upstream's read loop), and fail ends the request
// with a cause. Safe for concurrent use.
type directStream struct {
	// events are the encoded messages for the response, in order. Lifecycle: never closed;
	// what is left in it when the response ends is dropped with it.
	events chan []byte
	// fail cancels the request's context with the cause given.
	fail context.CancelCauseFunc
	// asks take the upstreams' requests for the client's input to whoever follows the call
	// (parking.go); nil for a request that may not park. Lifecycle: never closed.
	asks chan *inputAsk
	// declared are the capabilities the request declared; nil when it may not park.
	declared *modern.ClientCapabilities
	// party is whom the request's upstream calls are made for (callOwner.party).
	party *directParty
	// progress is the progressToken of the request following the call now (the call, or a
	// retry of it after a round of input); nil when it gave none.
	progress atomic.Pointer[json.RawMessage]
}

// followedBy notes that the request whose params are params follows the call now: its
// progress goes under that request's progressToken.
func (d *directStream) followedBy(params json.RawMessage) {
	meta, _, _ := protocol.Member(params, "_meta")
	token, ok, _ := protocol.Member(meta, protocol.MetaProgressToken)
	if !ok || len(token) == 0 || string(token) == "null" {
		d.progress.Store(nil)
		return
	}
	kept := append(json.RawMessage(nil), token...)
	d.progress.Store(&kept)
}

// progressToken is the progressToken progress about the call goes under; nil: none.
func (d *directStream) progressToken() json.RawMessage {
	if t := d.progress.Load(); t != nil {
		return *t
	}
	return nil
}

// directParty stands for one 2026-07-28 request as the party of its upstream calls
// (upstream.WithCaller). It is not the directStream itself: a stdio upstream remembers each
// party for its attribution window after the call ends, and under load that is one party per
// request, which must not keep the stream's buffer and context alive with it. It is not
// zero-sized, so that every request's has an address of its own.
type directParty struct{ _ byte }

// put queues an encoded message for the response; it never blocks. A client that lets
// directStreamBuffer messages wait has stopped reading: its request ends.
func (d *directStream) put(data []byte) error {
	select {
	case d.events <- data:
		return nil
	default:
		d.fail(errClientNotReading)
		return hub.ErrStreamOverflow
	}
}

// keepAliveWhile puts a keep-alive on the response every interval (an empty message, which
// the response's writer sends as an SSE comment) until the returned func is called, which
// waits for it to stop. A keep-alive that finds the buffer full is dropped: the response has
// messages to send anyway.
func (d *directStream) keepAliveWhile(interval time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				select {
				case d.events <- nil:
				default:
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// missingCapability is the failure of a 2026-07-28 call during which an upstream of
// 2025-11-25 asked the client for input (sampling, elicitation, roots) with a request of its
// own: the gateway cannot turn such a request into an input-required result (that bridge is
// "Era bridging"), so the call fails with -32021 naming what was asked (mcp-2026-notes §1.2),
// whether or not the client declared it.
func missingCapability(upstreamName, method string, params json.RawMessage, refused bool) *modern.Failure {
	required, _ := json.Marshal(map[string]any{"experimental": map[string]any{method: struct{}{}}})
	if need, ok := modern.Required(method, params); ok {
		required = need.Object()
	}
	data, _ := json.Marshal(map[string]json.RawMessage{"requiredCapabilities": required})
	if refused {
		msg := fmt.Sprintf("Missing required client capability: upstream %s asked for %s during this call, and the gateway is set not to relay it to a 2026-07-28 client "+
			"(the upstream's input_bridge is refuse); the call was ended", upstreamName, method)
		err := &protocol.Error{Code: protocol.CodeMissingRequiredClientCapability, Message: msg, Data: data}
		return &modern.Failure{Status: modern.HTTPStatus(err.Code), Err: err}
	}
	err := &protocol.Error{
		Code: protocol.CodeMissingRequiredClientCapability,
		Message: fmt.Sprintf("Missing required client capability: upstream %s asked for %s during this call, which this request did not declare in its _meta; "+
			"the call was ended: declare it to be asked", upstreamName, method),
		Data: data,
	}
	return &modern.Failure{Status: modern.HTTPStatus(err.Code), Err: err}
}

// serveStateless serves one 2026-07-28 request: the transport checks are done and its body
// parsed. It is validated in the order the conformance suite expects (modern.Validate, with
// the called tool's Mcp-Param headers checked against the catalog the client sees), its
// principal is the one the authentication middleware found, and it is then dispatched: the
// gateway answers server/discover and subscriptions/listen itself, everything else passes the
// request pipeline.
func (g *statelessFace) serveStateless(w http.ResponseWriter, r *http.Request, req *protocol.Request, requestID string) {
	client := pipeline.ClientContext{Principal: principalOf(r.Context()), Profile: r.PathValue("profile")}
	headers := r.Header
	if isLocalRequest(r.Context()) {
		headers = nil // stdio has no header layer: the body says it all (mcp-2026-notes §1.14)
	}
	declared, err := modern.Validate(headers, req.Method, req.Params, g.toolHeaderParams(client))
	if err != nil {
		var refusal *modern.Failure
		if !errors.As(err, &refusal) {
			refusal = &modern.Failure{Status: http.StatusInternalServerError, Err: protocol.Errorf(protocol.CodeInternalError, "internal error (request %s)", requestID)}
			g.logger.Error("validating a 2026-07-28 request failed", "request_id", requestID, "error", err.Error())
		}
		writeHTTPError(w, refusal.Status, &req.ID, refusal.Err)
		return
	}
	client.ProtocolVersion = declared.Version
	client.Capabilities = declared.Capabilities.Raw
	client.LogLevel = declared.LogLevel
	params, err := withoutRequestMeta(req.Params)
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, &req.ID, invalidParams(err))
		return
	}
	preq := &pipeline.Request{ID: req.ID, Method: req.Method, Params: params, Client: client, LogID: requestID, Received: g.opts.Now()}
	switch req.Method {
	case protocol.MethodDiscover:
		result, wireErr := g.requests.finish(r.Context(), preq, &pipeline.Target{Kind: pipeline.Gateway}, g.discoverResult(client.Profile), nil)
		writeModernResponse(w, &protocol.Response{ID: req.ID, Result: result, Error: wireErr})
		return
	case protocol.MethodListen:
		g.serveListen(w, r, preq)
		return
	case protocol.NotificationCancelled:
		writeHTTPError(w, http.StatusNotFound, &req.ID, protocol.Errorf(protocol.CodeMethodNotFound,
			"Method not found: notifications/cancelled is a notification; over HTTP, close the response stream to cancel a request"))
		return
	}
	if _, asTask, _ := protocol.Member(req.Params, "task"); asTask && req.Method == protocol.MethodCallTool {
		// The tasks extension is not offered to 2026-07-28 clients yet (mcp-2026-notes §3.6).
		writeHTTPError(w, http.StatusBadRequest, &req.ID, protocol.Errorf(protocol.CodeInvalidParams,
			"Invalid params: this gateway does not run tools as tasks for 2026-07-28 clients: call the tool without \"task\""))
		return
	}
	if st := g.parkedStateOf(preq); st != nil {
		g.resumeParked(w, r, preq, st)
		return
	}
	if !g.admitCall() {
		held := fmt.Sprintf("the gateway already has its maximum of %d requests in flight", g.cfg.MaxCalls)
		g.refuseTooManyCalls(w, r, req, preq, "gateway", g.cfg.MaxCalls, held)
		return
	}
	defer g.releaseCall()
	caller := callerOf(r, client.Principal)
	if !g.callers.admit(caller) {
		held := fmt.Sprintf("you already have %d requests in flight on this gateway (max_calls_per_principal)", g.cfg.MaxCallsPerPrincipal)
		g.refuseTooManyCalls(w, r, req, preq, "caller", g.cfg.MaxCallsPerPrincipal, held)
		return
	}
	defer g.callers.release(caller)
	g.serveStatelessCall(w, r, preq, &declared.Capabilities)
}

// refuseTooManyCalls answers a 2026-07-28 request that a cap on requests in flight turned
// away; held says whose requests fill the cap (scope, in the log: "gateway" or "caller").
func (g *statelessFace) refuseTooManyCalls(w http.ResponseWriter, r *http.Request, req *protocol.Request, preq *pipeline.Request, scope string, limit int, held string) {
	g.logger.Warn("request refused: too many requests in flight", "scope", scope, "limit", limit, "method", req.Method)
	msg := held + ": wait for some to finish, then retry"
	if req.Method == protocol.MethodCallTool {
		msg = "The gateway refused this call: " + held + ". Wait for some to finish, then try again."
	}
	result, wireErr := g.requests.finish(r.Context(), preq, nil, nil, &pipeline.Refusal{Reason: pipeline.ReasonTooManyCalls, Message: msg, RetryAfter: time.Second})
	writeModernResponse(w, modernAnswer(req, result, wireErr, g.serverInfoMeta()))
}

// requestMetaKeys are the members of a 2026-07-28 request's _meta that stand in for a
// session's initialize: the gateway reads them, and its upstreams, which speak 2025-11-25,
// must not see them (a reserved key they may read as a 2026-07-28 request of their own).
var requestMetaKeys = []string{protocol.MetaProtocolVersion, protocol.MetaClientCapabilities, protocol.MetaClientInfo, protocol.MetaLogLevel}

// withoutRequestMeta returns params without the requestMetaKeys of its _meta; the rest
// (progressToken, trace context, anything else) keeps its bytes and order. _meta is walked
// once and nothing is decoded: this runs on every 2026-07-28 request.
func withoutRequestMeta(params json.RawMessage) (json.RawMessage, error) {
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok {
		return params, err
	}
	kept, err := protocol.DeleteMembers(meta, requestMetaKeys...)
	if err != nil {
		return nil, fmt.Errorf("read _meta: %w", err)
	}
	return protocol.SetMember(params, "_meta", kept)
}

// toolHeaderParams returns what modern.Validate asks of a called tool: its x-mcp-header
// annotations, from the catalog the client sees (nil for a tool it does not see, or one whose
// annotations are invalid).
func (g *statelessFace) toolHeaderParams(client pipeline.ClientContext) func(string) []modern.Param {
	return func(name string) []modern.Param {
		e := g.viewOf(client).Tool(name)
		if e == nil {
			return nil
		}
		schema, ok, err := protocol.Member(e.Raw(), "inputSchema")
		if err != nil || !ok {
			return nil
		}
		params, err := modern.HeaderParams(schema)
		if err != nil {
			return nil
		}
		return params
	}
}

// serveStatelessCall serves a request through the pipeline on a goroutine it owns and waits
// for, while it writes the response: plain JSON, or an SSE stream from the first message about
// the request (progress, log messages at the level it asked for). The client closing the
// response cancels the request, and with it the upstream call (mcp-2026-notes §1.5); so does
// the gateway's Close.
//
// declared are the capabilities the request declared: what its upstreams may ask of the
// client through input-required results (mrtr.go).
func (g *statelessFace) serveStatelessCall(w http.ResponseWriter, r *http.Request, preq *pipeline.Request, declared *modern.ClientCapabilities) {
	// The call outlives this HTTP request when it parks: its context is the gateway's.
	ctx, cancel := context.WithCancelCause(tracedFrom(context.WithoutCancel(r.Context()), g.tracer, r))
	stop := context.AfterFunc(g.callsCtx, func() { cancel(hub.ErrShuttingDown) })
	direct := &directStream{events: make(chan []byte, directStreamBuffer), fail: cancel, party: new(directParty)}
	direct.followedBy(preq.Params)
	if mayAskForInput(preq.Method) {
		direct.asks, direct.declared = make(chan *inputAsk), declared
		preq.Inputs = new(audit.InputLog)
	}
	rq := &request{Request: preq, declared: declared}
	rq.owner = &callOwner{caps: preq.Client.Capabilities, version: preq.Client.ProtocolVersion, ctx: ctx, clientID: preq.ID, logLevel: preq.Client.LogLevel, direct: direct}
	c := &statelessCall{rq: rq, direct: direct, answered: make(chan *protocol.Response, 1), cancel: cancel}
	started := g.calls.begin()
	if started && !g.goWorker(func() {
		defer g.calls.end()
		defer stop()
		defer cancel(nil)
		c.answered <- g.serveStatelessSafely(ctx, rq)
	}) {
		g.calls.end()
		started = false
	}
	if !started {
		stop()
		cancel(nil)
		g.writeShuttingDown(w, preq.ID)
		return
	}
	g.attend(w, r, c, preq.ID)
}

// mayAskForInput reports whether an upstream may ask the client for input during a request
// of method: the three that may answer input_required (mcp-2026-notes §1.7).
func mayAskForInput(method string) bool {
	switch method {
	case protocol.MethodCallTool, protocol.MethodGetPrompt, protocol.MethodReadResource:
		return true
	}
	return false
}

// serveStatelessSafely takes a 2026-07-28 request through the pipeline and returns its
// response; a panic becomes an internal error for the client and a log record.
func (g *statelessFace) serveStatelessSafely(ctx context.Context, rq *request) (resp *protocol.Response) {
	req := rq.Request
	defer func() {
		if p := recover(); p != nil {
			g.logger.Error("panic serving a request", "request_id", req.LogID, "method", req.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			resp = &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInternalError, "internal error (request %s); the gateway's log has the details", req.LogID)}
		}
	}()
	result, wireErr := g.requests.serve(ctx, rq)
	if cause := context.Cause(ctx); cause != nil {
		if resp := endedEarly(req, cause); resp != nil {
			return resp
		}
	}
	return modernAnswer(&protocol.Request{ID: req.ID, Method: req.Method}, result, wireErr, g.serverInfoMeta())
}

// endedEarly is the response of a 2026-07-28 request whose context ended with cause before
// its answer, when the cause has one of its own; nil when it has not.
func endedEarly(req *pipeline.Request, cause error) *protocol.Response {
	var refusal *modern.Failure
	switch {
	case errors.As(cause, &refusal):
		// An upstream asked the client for input: the call ended for it (missingCapability).
		return &protocol.Response{ID: req.ID, Error: refusal.Err}
	case errors.Is(cause, hub.ErrShuttingDown):
		return &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeShuttingDown,
			"the gateway shut down before this request finished; it may have run in part upstream: check before sending it again")}
	}
	return nil
}

// modernAnswer is the response a 2026-07-28 client gets for a request's result or error: every
// result carries resultType (an upstream's input_required kept), and complete lists and reads
// their cache hints (mcp-2026-notes §1.11). The
// hints are ttlMs 0 (the merged view changes with any upstream's list_changed, which a cache
// could not hear of yet) and cacheScope private (policy, profiles and credentials shape what
// each caller sees). The resource-not-found error of 2025-11-25, -32002, becomes -32602 with
// the URI in data, as 2026-07-28 has it. A result's _meta gets the gateway's serverInfo
// (mcp-2026-notes §1.3), the encoded Implementation given; an error gets none.
func modernAnswer(req *protocol.Request, result json.RawMessage, wireErr *protocol.Error, serverInfo json.RawMessage) *protocol.Response {
	if wireErr != nil {
		if wireErr.Code == protocol.CodeResourceNotFound {
			e := *wireErr
			e.Code = protocol.CodeInvalidParams
			wireErr = &e
		}
		return &protocol.Response{ID: req.ID, Error: wireErr}
	}
	if len(result) == 0 {
		result = json.RawMessage(`{}`)
	}
	out, err := modern.WithResultType(result, protocol.ResultTypeComplete)
	if err == nil && !asksForInput(result) {
		// An input_required result is never cacheable: it carries no hints (mcp-2026-notes
		// §1.11).
		switch req.Method {
		case protocol.MethodListTools, protocol.MethodListPrompts, protocol.MethodListResources, protocol.MethodListResourceTemplates:
			out, err = modern.WithCacheHints(out, 0, modern.CachePrivate)
		case protocol.MethodReadResource:
			// The upstream's own hint, when it gave one, bounds it; private whatever it said.
			out, err = modern.WithCacheHints(out, modern.TTL(result), modern.CachePrivate)
		}
	}
	if err != nil {
		return &protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeInternalError, "the upstream's result is not a JSON object")}
	}
	return &protocol.Response{ID: req.ID, Result: withServerInfo(out, serverInfo)}
}

// withServerInfo returns result with serverInfo as its _meta's
// io.modelcontextprotocol/serverInfo, the other members of _meta kept. The member is a SHOULD
// (mcp-2026-notes §1.3): a result whose _meta is not an object is returned as it is.
func withServerInfo(result, serverInfo json.RawMessage) json.RawMessage {
	meta, ok, err := protocol.Member(result, "_meta")
	if err != nil {
		return result
	}
	if !ok || string(meta) == "null" {
		meta = []byte(`{}`)
	}
	meta, err = protocol.SetMember(meta, protocol.MetaServerInfo, serverInfo)
	if err != nil {
		return result
	}
	out, err := protocol.SetMember(result, "_meta", meta)
	if err != nil {
		return result
	}
	return out
}

// serverInfoMeta is serverInfo encoded, for the _meta of 2026-07-28 results: encoded once,
// as it does not change while the gateway runs. The caller must not modify it.
func (g *streamableServer) serverInfoMeta() json.RawMessage {
	return g.serverInfoJSON
}

// serverInfo is how the gateway names itself to clients.
func (g *streamableServer) serverInfo() protocol.Implementation {
	return protocol.Implementation{Name: "manifold", Title: "Manifold MCP gateway", Version: g.opts.Version}
}

// discoverResult is the gateway's answer to server/discover on the endpoint of profile ("":
// /mcp), from the merged view (mcp-2026-notes §2.5): every version it serves on the endpoint
// (the modern ones per request, the session-based ones through initialize), the capabilities
// of the 2025-11-25 sessions without tasks (the tasks extension is not offered to 2026-07-28
// clients yet), resources.subscribe when an upstream the endpoint serves offers
// subscriptions, and the instructions initialize gives. Its cache hints are those of the
// lists (modernAnswer): what an endpoint serves changes as upstreams come and go.
func (g *statelessFace) discoverResult(profile string) json.RawMessage {
	snap := g.catalogOf(profile)
	subscribe := false
	for _, u := range g.upstreamList() {
		if info := u.Server(); info != nil && info.Capabilities.Resources != nil && info.Capabilities.Resources.Subscribe && snap.Serves(u.ns) {
			subscribe = true
			break
		}
	}
	result := map[string]any{
		"resultType":        protocol.ResultTypeComplete,
		"supportedVersions": modern.SupportedVersions(),
		"capabilities": map[string]any{
			"completions": struct{}{},
			"logging":     struct{}{},
			"prompts":     map[string]any{"listChanged": true},
			"resources":   map[string]any{"listChanged": true, "subscribe": subscribe},
			"tools":       map[string]any{"listChanged": true},
		},
		"ttlMs":      0,
		"cacheScope": modern.CachePrivate,
		"_meta":      map[string]any{protocol.MetaServerInfo: g.serverInfo()},
	}
	if ins := snap.Instructions(); ins != "" {
		result["instructions"] = ins
	}
	raw, _ := json.Marshal(result)
	return raw
}

// modernWriter writes the response of one 2026-07-28 request: plain JSON when nothing came
// before its answer, else an SSE stream that the answer ends. Write errors are dropped: a
// client that left has cancelled the request (its context), which is what stops the work.
// Not safe for concurrent use: the request's handler alone writes.
type modernWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// streaming is set once the SSE stream has begun.
	streaming bool
	// broken is set once a write failed: nothing more is written.
	broken bool
}

// event writes a message about the request on its SSE stream, beginning the stream first;
// an empty one is a keep-alive comment.
func (m *modernWriter) event(data []byte) {
	if m.broken {
		return
	}
	if !m.streaming {
		startSSE(m.w)
		m.streaming = true
	}
	frame := sseEvent("", data)
	if len(data) == 0 {
		frame = []byte(": keep-alive\n\n") // directStream.keepAliveWhile's
	}
	if err := writeWithDeadline(m.w, m.rc, frame); err != nil {
		m.broken = true
	}
}

// final writes the request's answer: the last event of its stream, or the whole response.
func (m *modernWriter) final(resp *protocol.Response) {
	if m.streaming {
		data, err := protocol.Encode(resp)
		if err != nil {
			data, _ = protocol.Encode(&protocol.Response{ID: resp.ID, Error: protocol.Errorf(protocol.CodeInternalError, "encoding the response failed")})
		}
		m.event(data)
		return
	}
	writeModernResponse(m.w, resp)
}

// writeModernResponse answers a 2026-07-28 request with one JSON body, an error with the HTTP
// status modern.HTTPStatus gives its code (the Go SDK's mapping: 404 for -32601, 400 for
// -32602 and the three new codes, 200 otherwise).
func writeModernResponse(w http.ResponseWriter, resp *protocol.Response) {
	if resp.Error != nil {
		writeHTTPError(w, modern.HTTPStatus(resp.Error.Code), &resp.ID, resp.Error)
		return
	}
	writeJSONResponse(w, "", resp)
}

// servedStatelessly serves a message of the 2026-07-28 era and reports whether it did: a
// request or notification that modern.Classify finds modern (its session id, if any, is
// ignored), and a server/discover without a session, which only the modern face answers (its
// validation says what signal it lacks). A modern notification is accepted with 202 and
// nothing more: on HTTP a client cancels by closing the response stream.
func (g *streamableServer) servedStatelessly(w http.ResponseWriter, r *http.Request, msg protocol.Message, hasSession bool, requestID string) bool {
	versionHeader := r.Header.Get(modern.HeaderProtocolVersion)
	switch m := msg.(type) {
	case *protocol.Request:
		if modern.Classify(versionHeader, hasSession, m.Method, m.Params) != modern.Modern && (hasSession || m.Method != protocol.MethodDiscover) {
			return false
		}
		if g.isDraining() {
			g.writeShuttingDown(w, m.ID)
			return true
		}
		g.stateless.serveStateless(w, r, m, requestID)
		return true
	case *protocol.Notification:
		if modern.Classify(versionHeader, hasSession, m.Method, m.Params) != modern.Modern {
			return false
		}
		w.WriteHeader(http.StatusAccepted)
		return true
	}
	return false
}

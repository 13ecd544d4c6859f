package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
)

// Parked calls: a 2026-07-28 client calling an upstream of 2025-11-25 that asks the client for
// input in the middle of the call (mcp-2026-notes §3.1, "cell A"), with the upstream's
// input_bridge at "park". The upstream sends a real request (elicitation/create,
// sampling/createMessage, roots/list) and waits for its answer; a 2026-07-28 client takes no
// requests. So the upstream's request waits, the call with it, and the client is answered
// input_required with that request as an input request and a requestState the gateway sealed.
// The client's retry, carrying the answer, continues the same call: the answer goes to the
// upstream's waiting request, and the retry's response follows the call from there (its
// progress, its end, or the next round of input).
//
// The call runs on the replica that took it, which holds the upstream's request; a retry that
// reaches another replica is refused with an error that says the call may have run in part.
// A parked call that no retry continues within parkTTL is cancelled. Policy, rate limits and
// approval ran once, for the call; the retry is authenticated, and its principal, endpoint,
// method, name and arguments must be the call's. Each round is in the call's audit record.

// parkTTL is how long a parked call waits for its client's retry: long enough for a person
// to answer an elicitation. A variable for tests.
var parkTTL = requestStateTTL

// statelessCall is a 2026-07-28 request in flight: its pipeline runs on a goroutine of the
// gateway's, while at most one HTTP response at a time follows it (attend). Parked, it waits
// in the parked table for its client's retry.
type statelessCall struct {
	rq       *request
	direct   *directStream
	answered chan *protocol.Response
	// cancel ends the call with a cause.
	cancel context.CancelCauseFunc
	// upstream is the upstream whose request parked the call, for its sealed state.
	upstream string

	// mu guards the parking below.
	mu sync.Mutex
	// id names the call in the parked table, once parked.
	id string
	// round counts the times the call was parked; nonce is the current round's, which one
	// retry alone may use.
	round int
	nonce string
	// asks are the upstream's requests waiting for the client's answers, by input key.
	asks map[string]*inputAsk
	// expiry cancels the call at deadline, when no retry continued it; nil until parked.
	expiry   expiryTimer
	deadline time.Time
	// drained ends the goroutine that drops the call's messages while no response follows it.
	drained chan struct{}
	// refuseLater are the upstream's requests for what the call's request did not declare,
	// made beside those the client was asked: they are refused once the client answered
	// those, so that the client is asked what it declared first.
	refuseLater []*inputAsk
}

// inputAsk is a request of an upstream for the client's input, waiting for its answer.
type inputAsk struct {
	// upstream is the upstream asking.
	upstream string
	method   string
	params   json.RawMessage
	// undeclared marks a request for what the call's request did not declare: the upstream
	// is refused it (as by a client without the capability), once the requests it made beside
	// it have reached the client.
	undeclared bool
	// reply gets the client's answer, once; closed without one when there will be none.
	reply chan json.RawMessage
}

// callGroup counts the 2026-07-28 calls whose pipelines run, for Close to wait for them: once
// it is closed, no call begins. Safe for concurrent use.
type callGroup struct {
	mu      sync.Mutex
	running int           // guarded by mu
	closed  bool          // guarded by mu
	idle    chan struct{} // closed once closed and no call runs; guarded by mu
}

// begin counts a call in; false once the group is closed.
func (cg *callGroup) begin() bool {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.closed {
		return false
	}
	cg.running++
	return true
}

// end counts a call out.
func (cg *callGroup) end() {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.running--; cg.closed && cg.running == 0 {
		close(cg.idle)
	}
}

// close stops calls from beginning and returns a channel closed once none runs.
func (cg *callGroup) close() <-chan struct{} {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if !cg.closed {
		cg.closed, cg.idle = true, make(chan struct{})
		if cg.running == 0 {
			close(cg.idle)
		}
	}
	return cg.idle
}

// parkedCalls are the calls waiting for their clients' retries on this replica. Safe for
// concurrent use.
type parkedCalls struct {
	mu    sync.Mutex
	calls map[string]*statelessCall // guarded by mu
	max   int
	// startTimer runs a func after a while, as time.AfterFunc does; tests replace it.
	startTimer func(time.Duration, func()) expiryTimer
}

// expiryTimer is what a parked call needs of its expiry timer.
type expiryTimer interface{ Stop() bool }

func newParkedCalls(max int) *parkedCalls {
	return &parkedCalls{calls: map[string]*statelessCall{}, max: max,
		startTimer: func(d time.Duration, f func()) expiryTimer { return time.AfterFunc(d, f) }}
}

// put records c as parked; false when the table is full.
func (p *parkedCalls) put(c *statelessCall) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.max > 0 && len(p.calls) >= p.max {
		return false
	}
	p.calls[c.id] = c
	return true
}

// take removes and returns the parked call id, if it is still parked.
func (p *parkedCalls) take(id string) *statelessCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.calls[id]
	delete(p.calls, id)
	return c
}

// count is the number of parked calls.
func (p *parkedCalls) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// errTooManyParked ends a call that would wait for input when the parked table is full.
var errTooManyParked = errors.New("too many calls wait for their clients' input")

// errParkExpired ends a parked call that no retry continued within parkTTL.
var errParkExpired = errors.New("no retry continued the call in time")

// ask hands an upstream's request for the client's input to the response following the call,
// and waits for the answer a retry brings, for ctx (the upstream's request), or for the end of
// the call. It is how a parked call's upstream waits.
func (d *directStream) ask(ctx, callCtx context.Context, upstreamName, method string, params json.RawMessage, undeclared bool) (json.RawMessage, error) {
	a := &inputAsk{upstream: upstreamName, method: method, params: params, undeclared: undeclared, reply: make(chan json.RawMessage, 1)}
	select {
	case d.asks <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-callCtx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's call ended before it was asked")
	}
	select {
	case answer, ok := <-a.reply:
		switch {
		case !ok && undeclared:
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the capability %s needs for this request", method)
		case !ok:
			return nil, protocol.Errorf(protocol.CodeInternalError, "the client's call ended before it answered")
		}
		return answer, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-callCtx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's call ended before it answered: %v", context.Cause(callCtx))
	}
}

// parks reports whether a 2026-07-28 call may wait for its client's input when upstream u asks
// for it with method: the upstream's input_bridge is park, and the request declared what the
// input request needs.
func parks(u *upstreamEntry, d *directStream, method string, params json.RawMessage) bool {
	if !mayPark(u, d) {
		return false
	}
	need, ok := modern.Required(method, params)
	return ok && d.declared.Covers(need)
}

// mayPark reports whether a 2026-07-28 call may wait for its client's input at all: the
// upstream's input_bridge is park, and the request is one of the three that may.
func mayPark(u *upstreamEntry, d *directStream) bool {
	return u.inputBridge == inputBridgePark && d.asks != nil && d.declared != nil
}

// asInputRequest turns the params of an upstream's request into those of an input request of
// 2026-07-28: no _meta and no task, no elicitationId (a URL elicitation of 2026-07-28 has
// none), and sampling's includeContext narrowed to "none", as for any client.
func asInputRequest(method string, params json.RawMessage) json.RawMessage {
	if len(params) == 0 || string(params) == "null" {
		return json.RawMessage(`{}`)
	}
	for _, key := range []string{"_meta", "task", "elicitationId"} {
		if key == "elicitationId" && method != protocol.MethodElicit {
			continue
		}
		if out, err := protocol.DeleteMember(params, key); err == nil {
			params = out
		}
	}
	if method == protocol.MethodCreateMessage {
		params = narrowIncludeContext(params)
	}
	return params
}

// inputBridgePark is config.InputBridgePark, as upstreamEntry keeps it.
const inputBridgePark = "park"

// attend follows call c on the response w of HTTP request r, the call or a retry of it whose
// JSON-RPC id is id, until the call ends or asks for input (follow).
func (g *statelessFace) attend(w http.ResponseWriter, r *http.Request, c *statelessCall, id protocol.ID) {
	out := &modernWriter{w: w, rc: http.NewResponseController(w)}
	out.final(g.follow(r.Context(), c, id, out.event))
}

// follow hands emit the messages about call c until the call ends, and returns its response
// with id: its answer, or, when the upstream asks for input, the input_required result of the
// round that parks it. The end of ctx (the client left) cancels the call, unless it was parked
// first.
func (g *statelessFace) follow(ctx context.Context, c *statelessCall, id protocol.ID, emit func([]byte)) *protocol.Response {
	closed := context.AfterFunc(ctx, func() { c.cancel(context.Canceled) })
	defer closed()
	for {
		select {
		case data := <-c.direct.events:
			emit(data)
		case a := <-c.direct.asks:
			if !closed() {
				// The client left: the call is being cancelled; its end comes on answered.
				close(a.reply)
				continue
			}
			declared, undeclared := splitAsks(gatherAsks(c, a, emit))
			if len(declared) == 0 {
				refuse(undeclared) // nothing to ask the client: the call goes on
				continue
			}
			c.mu.Lock()
			c.refuseLater = append(c.refuseLater, undeclared...)
			c.mu.Unlock()
			return g.park(c, declared, id)
		case resp := <-c.answered:
			for pending := true; pending; {
				select {
				case data := <-c.direct.events:
					emit(data)
				default:
					pending = false
				}
			}
			answer := *resp
			answer.ID = id
			return &answer
		}
	}
}

// splitAsks separates the requests for what the call's request declared from the others.
func splitAsks(asks []*inputAsk) (declared, undeclared []*inputAsk) {
	for _, a := range asks {
		if a.undeclared {
			undeclared = append(undeclared, a)
		} else {
			declared = append(declared, a)
		}
	}
	return declared, undeclared
}

// refuse answers the upstream's undeclared requests asks with a refusal.
func refuse(asks []*inputAsk) {
	for _, a := range asks {
		close(a.reply)
	}
}

// inputGatherQuiet and inputGatherMax bound how long a call's first request for input waits
// for others of the same step: until none came for inputGatherQuiet, and inputGatherMax at
// most. Variables for tests.
var (
	inputGatherQuiet = 50 * time.Millisecond
	inputGatherMax   = 500 * time.Millisecond
)

// gatherAsks returns first with the upstream's requests for input that follow it closely: an
// upstream of 2025-11-25 may send the requests of one step side by side (the Go SDK sends all
// the input requests of a handler's input_required at once, each waiting for its answer), and
// the client should get them in one input_required, not one per round (mcp-2026-notes §3.1,
// "collect"). Messages about the call meanwhile go to emit.
func gatherAsks(c *statelessCall, first *inputAsk, emit func([]byte)) []*inputAsk {
	asks := []*inputAsk{first}
	quiet := time.NewTimer(inputGatherQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(inputGatherMax)
	defer limit.Stop()
	for {
		select {
		case a := <-c.direct.asks:
			asks = append(asks, a)
			quiet.Reset(inputGatherQuiet)
		case data := <-c.direct.events:
			emit(data)
		case <-quiet.C:
			return asks
		case <-limit.C:
			return asks
		}
	}
}

// park records c as waiting for its client's answers to asks (a new round), and returns the
// input_required response the client gets. Should the table be full, the asks are answered
// with an error instead, which the upstream reads, and the call goes on unparked.
func (g *statelessFace) park(c *statelessCall, asks []*inputAsk, id protocol.ID) *protocol.Response {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.round++
	c.nonce = randomToken(12)
	if c.id == "" {
		c.id = randomToken(16)
	}
	if c.asks == nil {
		c.asks = map[string]*inputAsk{}
	}
	for i, a := range asks {
		c.asks["r"+strconv.Itoa(c.round)+"-"+strconv.Itoa(i+1)] = a
	}
	if !g.parked.put(c) {
		for _, a := range c.asks {
			close(a.reply)
		}
		c.asks = nil
		c.cancel(errTooManyParked)
		g.logger.Warn("a call could not wait for its client's input: too many calls wait already", "request_id", c.rq.LogID, "parked", g.parked.count())
		return &protocol.Response{ID: id, Error: protocol.Errorf(protocol.CodeInternalError,
			"the gateway has too many calls waiting for their clients' input: try again later (the call may have run in part)")}
	}
	c.upstream = asks[0].upstream
	c.deadline = time.Now().Add(parkTTL)
	c.expiry = g.parked.startTimer(parkTTL, func() { g.expire(c) })
	c.drained = make(chan struct{})
	drained := c.drained
	g.goWorker(func() { c.dropMessages(drained) })
	return &protocol.Response{ID: id, Result: g.inputRequired(c)}
}

// dropMessages drops the messages about c (progress, logs) while no response follows it, so
// that they do not fill its buffer and end it; it ends with drained or the call.
func (c *statelessCall) dropMessages(drained chan struct{}) {
	for {
		select {
		case <-c.direct.events:
		case <-drained:
			return
		case <-c.rq.owner.ctx.Done():
			return
		}
	}
}

// inputRequired is the result a parked call's client gets: the waiting asks as input
// requests, and the sealed state of this round. Called with c.mu held.
func (g *statelessFace) inputRequired(c *statelessCall) json.RawMessage {
	requests := map[string]inputRequest{}
	for key, a := range c.asks {
		requests[key] = inputRequest{Method: a.method, Params: a.params}
	}
	state := g.states.sealParked(c.rq.Request, parkedState{Call: c.id, Replica: g.hub.Tag(), Round: c.round, Nonce: c.nonce,
		Upstream: c.upstream, Arguments: argumentsDigest(c.rq.Params)})
	out, _ := json.Marshal(map[string]any{"resultType": protocol.ResultTypeInputRequired, "inputRequests": requests, "requestState": state})
	return out
}

// expire cancels c if it is still parked: no retry came in time.
func (g *statelessFace) expire(c *statelessCall) {
	c.mu.Lock()
	id := c.id
	c.mu.Unlock()
	if g.parked.take(id) == nil {
		return // a retry took it first
	}
	g.logger.Info("a call waiting for its client's input expired", "request_id", c.rq.LogID, "waited", parkTTL.String())
	c.mu.Lock()
	c.rq.Inputs.Add(audit.InputRound{Round: c.round, Asked: askedMethods(c.asks), Outcome: "expired"})
	c.mu.Unlock()
	c.cancel(errParkExpired)
}

// askedMethods are the methods of asks in the order of their keys.
func askedMethods(asks map[string]*inputAsk) []string {
	var methods []string
	for _, key := range slices.Sorted(maps.Keys(asks)) {
		methods = append(methods, asks[key].method)
	}
	return methods
}

// parkedStateOf returns the parked call a retry's requestState names: nil for a request
// without one, or whose state is not a parked call's that opens for this caller. The pipeline
// takes those, and refuses a state that does not open there, with the request's audit record.
func (g *statelessFace) parkedStateOf(preq *pipeline.Request) *parkedState {
	if !mayAskForInput(preq.Method) {
		return nil
	}
	raw, has, err := protocol.Member(preq.Params, "requestState")
	var sealed string
	if err != nil || !has || json.Unmarshal(raw, &sealed) != nil {
		return nil // the pipeline says what is wrong with it
	}
	st, err := g.states.openParked(preq, sealed)
	if err != nil {
		return nil
	}
	return st
}

// resumeParked continues the parked call a retry's requestState names: the retry's answers go
// to the upstream's waiting requests, and the retry's response follows the call from there. A
// call waiting on another replica is continued there, through the bus. A retry the call does
// not accept gets an error, and the call waits on.
func (g *statelessFace) resumeParked(w http.ResponseWriter, r *http.Request, preq *pipeline.Request, st *parkedState) {
	if st.Replica != g.hub.Tag() {
		out := &modernWriter{w: w, rc: http.NewResponseController(w)}
		out.final(g.resumeElsewhere(r.Context(), preq, st, out.event))
		return
	}
	c, resp := g.continueParked(preq.ID, preq.Params, preq.LogID, st)
	if c == nil {
		writeModernResponse(w, resp)
		return
	}
	g.attend(w, r, c, preq.ID)
}

// parkedRetry is a retry of a parked call passed to the replica it waits on.
type parkedRetry struct {
	State  parkedState     `json:"s"`
	ID     json.RawMessage `json:"id"`
	Params json.RawMessage `json:"p"`
	LogID  string          `json:"l"`
}

// resumeElsewhere passes a retry to the replica its call waits on, hands emit the messages
// about the call meanwhile (progress, log messages), and returns the response it got there.
// This replica checked the state's seal, principal, endpoint and expiry; that one checks the
// round.
func (g *statelessFace) resumeElsewhere(ctx context.Context, preq *pipeline.Request, st *parkedState, emit func([]byte)) *protocol.Response {
	gone := func(why string) *protocol.Response {
		g.logger.Info("a retry's call could not be continued on its replica", "request_id", preq.LogID, "replica", st.Replica, "why", why)
		return &protocol.Response{ID: preq.ID, Error: protocol.Errorf(protocol.CodeInvalidParams,
			"Invalid params: this call waited for its input on another replica of the gateway, which %s: start the call again (it may have run in part)", why)}
	}
	if g.replicas == nil {
		return gone("this one cannot reach")
	}
	retry, err := json.Marshal(parkedRetry{State: *st, ID: preq.ID.Raw(), Params: preq.Params, LogID: preq.LogID})
	if err != nil {
		return &protocol.Response{ID: preq.ID, Error: protocol.Errorf(protocol.CodeInternalError, "encode the retry: %v", err)}
	}
	res, forwarded, err := g.replicas.ForwardResume(ctx, st.Replica, retry, parkTTL, emit)
	switch {
	case err != nil:
		return &protocol.Response{ID: preq.ID, Error: protocol.Errorf(protocol.CodeInternalError, "the retry ended before its call did: %v", err)}
	case !forwarded:
		return gone("has stopped")
	case res.Unavailable != "":
		return gone("did not answer: " + res.Unavailable)
	}
	msg, err := protocol.Decode(res.Result)
	resp, ok := msg.(*protocol.Response)
	if err != nil || !ok {
		return &protocol.Response{ID: preq.ID, Error: protocol.Errorf(protocol.CodeInternalError, "the replica the call waited on sent an unreadable answer")}
	}
	return resp
}

// ServeResume implements replica.Host: it serves a retry another replica passed here, of a
// call waiting here, and returns the encoded response.
func (h replicaHost) ServeResume(ctx context.Context, data json.RawMessage, emit func([]byte)) replica.Result {
	var retry parkedRetry
	if err := json.Unmarshal(data, &retry); err != nil {
		return replica.Result{Unavailable: "unreadable retry"}
	}
	id, err := protocol.ParseID(retry.ID)
	if err != nil {
		return replica.Result{Unavailable: "unreadable retry id"}
	}
	g := h.g.streamable.stateless
	c, resp := g.continueParked(id, retry.Params, retry.LogID, &retry.State)
	if c != nil {
		resp = g.follow(ctx, c, id, emit)
	}
	encoded, err := protocol.Encode(resp)
	if err != nil {
		return replica.Result{Unavailable: "encode the response: " + err.Error()}
	}
	return replica.Result{Result: encoded}
}

// continueParked gives the parked call st names the answers of a retry (id, params), and
// returns the call, for the retry to follow; or, without a call, the retry's response: an
// error when the call is not waiting for this retry, or a new input_required asking again
// for answers the retry lacks.
func (g *statelessFace) continueParked(id protocol.ID, params json.RawMessage, logID string, st *parkedState) (*statelessCall, *protocol.Response) {
	fail := func(msg string) (*statelessCall, *protocol.Response) {
		return nil, &protocol.Response{ID: id, Error: protocol.Errorf(protocol.CodeInvalidParams, "Invalid params: %s", msg)}
	}
	c := g.parked.take(st.Call)
	if c == nil {
		return fail("the call is no longer waiting for input (answered already, expired, or the gateway restarted): start it again (it may have run in part)")
	}
	c.mu.Lock()
	if !c.expiry.Stop() {
		// It expires this instant: expire found it taken, so it is ended here.
		c.mu.Unlock()
		c.cancel(errParkExpired)
		return fail("the call is no longer waiting for input (it expired): start it again (it may have run in part)")
	}
	if st.Round != c.round || st.Nonce != c.nonce || st.Arguments != argumentsDigest(params) {
		// Not this round's retry: the call waits on, until its own deadline.
		c.expiry = g.parked.startTimer(time.Until(c.deadline), func() { g.expire(c) })
		c.mu.Unlock()
		g.parked.put(c)
		return fail("requestState is not the latest of this call, or the arguments differ from the call's: send the retry with the last requestState and the call's arguments")
	}
	close(c.drained)
	responses, _, _ := protocol.Member(params, "inputResponses")
	var answers map[string]json.RawMessage
	_ = json.Unmarshal(responses, &answers)
	keys := slices.Sorted(maps.Keys(c.asks))
	if slices.ContainsFunc(keys, func(k string) bool { return len(answers[k]) == 0 || string(answers[k]) == "null" }) {
		// Missing answers: every request is asked again, in a new round (mcp-2026-notes
		// §1.7: a new input_required, not an error).
		waiting := make([]*inputAsk, 0, len(keys))
		for _, key := range keys {
			waiting = append(waiting, c.asks[key])
		}
		c.asks = nil
		c.mu.Unlock()
		g.logger.Debug("a retry lacked answers; asking again", "request_id", logID)
		return nil, g.park(c, waiting, id)
	}
	c.rq.Inputs.Add(audit.InputRound{Round: c.round, Asked: askedMethods(c.asks), Outcome: "answered"})
	c.direct.followedBy(params)
	for _, key := range keys {
		c.asks[key].reply <- answers[key]
	}
	refuse(c.refuseLater)
	c.refuseLater = nil
	c.asks = nil
	c.mu.Unlock()
	return c, nil
}

// parkedState is what a parked call's requestState holds, beside the caller's principal,
// endpoint and expiry (sealedState).
type parkedState struct {
	// Call names the call in the parked table; Replica the replica holding it (the hub's tag).
	Call    string `json:"c"`
	Replica string `json:"r"`
	// Round and Nonce are the round the state was issued for, and its single-use token.
	Round int    `json:"n"`
	Nonce string `json:"o"`
	// Upstream is the upstream whose request parked the call.
	Upstream string `json:"u"`
	// Arguments is a digest of the call's params but _meta, requestState and
	// inputResponses: the retry must carry the same.
	Arguments string `json:"a"`
}

// sealParked returns the requestState of a parked call's round, sealed like a relayed one
// and bound to the call's method and name.
func (s *requestStates) sealParked(req *pipeline.Request, st parkedState) string {
	return s.sealState(req, calledName(req.Params), sealedState{Upstream: st.Upstream, Parked: &st}, parkTTL)
}

// openParked returns the parked call a retry's requestState names, nil when the state is not a
// parked call's (a relayed one, for the pipeline), or why it is refused.
func (s *requestStates) openParked(req *pipeline.Request, sealed string) (*parkedState, error) {
	st, err := s.openState(req, calledName(req.Params), sealed)
	if err != nil {
		return nil, err
	}
	return st.Parked, nil
}

// calledName is the tool or prompt name, or the resource URI, params call: what a
// requestState is bound to.
func calledName(params json.RawMessage) string {
	if name, ok, _ := protocol.StringMember(params, "name"); ok {
		return name
	}
	uri, _, _ := protocol.StringMember(params, "uri")
	return uri
}

// argumentsDigest is a digest of what a call asks, whatever round: its params without the
// members a retry adds or renews.
func argumentsDigest(params json.RawMessage) string {
	for _, key := range []string{"_meta", "requestState", "inputResponses"} {
		if out, err := protocol.DeleteMember(params, key); err == nil {
			params = out
		}
	}
	var v any
	if json.Unmarshal(params, &v) == nil {
		params, _ = json.Marshal(v) // members in one order
	}
	sum := sha256.Sum256(params)
	return hex.EncodeToString(sum[:16])
}

// randomToken is n random bytes, hex-encoded.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

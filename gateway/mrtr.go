package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Multi-round-trip requests between a 2026-07-28 client and a 2026-07-28 upstream
// (mcp-2026-notes §1.7 and §2.9, the "AEAD wrap" arm). A tools/call, prompts/get or
// resources/read of a 2026-07-28 client declares to its upstream the part of the client's
// capabilities an upstream may ask for (modern.ClientCapabilities.Relayable). When the upstream
// answers input_required, every input request is checked against what the client declared
// for this request (an upstream that asks for more fails the call: nothing reaches the
// client), the input requests pass as they are, and the upstream's requestState is replaced
// by one the gateway sealed: which upstream, method and name it is for, whose it is, until
// when, and the upstream's own state inside. The client's retry is a new request that takes
// the whole pipeline again (policy, approval, audit; a call approved in the round that got
// the state is not asked again, once: approval_mrtr.go); its requestState must open, and match
// the retry's caller, method, name and upstream, or the retry fails with -32602 and goes
// nowhere. The upstream then gets its own requestState back, or none, and the
// inputResponses as the client sent them.
//
// The state is sealed with the gateway's keys (config `keys`), so that any replica with the
// same keys opens it; without keys, with a key made at start for this process alone.

// requestStateTTL is how long a sealed requestState opens after it was made: long enough for
// a person to answer an elicitation, short enough to bound its replay.
const requestStateTTL = 10 * time.Minute

// requestStateInvalid is what a client gets for a requestState that does not open, or is not
// for its retry (conformance: input-required-result-tampered-state): never a result.
var requestStateInvalid = &protocol.Error{Code: protocol.CodeInvalidParams,
	Message: "Invalid params: requestState is invalid or expired: start the call again without it"}

// Why a sealed requestState is refused, for the log (the client is told requestStateInvalid).
var (
	errStateExpired       = errors.New("requestState expired")
	errStateOtherCaller   = errors.New("requestState belongs to another principal")
	errStateOtherUpstream = errors.New("requestState was issued for another upstream")
	errStateOtherEndpoint = errors.New("requestState was issued on another endpoint")
	// errStateParked: a parked call's state reached the pipeline, which does not continue
	// parked calls (the face does, before the pipeline: parking.go).
	errStateParked = errors.New("requestState is a parked call's, which the call's replica did not take")
)

// requestStates seals and opens the requestState of the input-required results relayed to
// 2026-07-28 clients. Safe for concurrent use.
type requestStates struct {
	sealer *seal.Sealer
	now    func() time.Time
}

// newRequestStates returns the requestStates that seal with keys, or, when keys is nil (a
// gateway without config `keys`), with a random key of this process: its states then open
// on no other replica, and not after a restart.
func newRequestStates(keys *seal.Keys, now func() time.Time) (*requestStates, error) {
	if keys == nil {
		secret := make([]byte, seal.MinSecretLen)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails on supported platforms
		var err error
		if keys, err = seal.NewKeys([]seal.Key{{ID: "process", Secret: secret}}); err != nil {
			return nil, fmt.Errorf("make a key for request states: %w", err)
		}
	}
	return &requestStates{sealer: keys.Sealer(seal.PurposeRequestState), now: now}, nil
}

// sealedState is what every requestState the gateway seals holds: whose call it is, on
// which endpoint, until when, and which kind of round it continues: one relayed from a
// 2026-07-28 upstream (Inner, Approved, Round), an approval asked of the client (Approval,
// approval_mrtr.go), or a call parked for its client's input (Parked, parking.go). The
// method and the exposed name are not in it: they are the associated data it is sealed with
// (stateBinding).
type sealedState struct {
	// Upstream is the upstream that answered input_required, or whose call it is.
	Upstream string `json:"u"`
	// Profile is the endpoint the call came on ("" for /mcp).
	Profile string `json:"p,omitempty"`
	// Principal is whose call it is: principalMark.
	Principal string `json:"w"`
	// Expires is when it stops opening, in Unix milliseconds.
	Expires int64 `json:"e"`
	// Inner is the upstream's own requestState; nil when it sent none.
	Inner *string `json:"s,omitempty"`
	// Approved is set when the call was approved (a person's approval the policy asked
	// for) in the round that got this state: the retry that continues it with the same
	// arguments, once, is not asked again (approval_mrtr.go).
	Approved *approvedRound `json:"ap,omitempty"`
	// Round is the state's single-use round token: the first retry that brings it, with the
	// same arguments (Arguments, argumentsDigest), continues a call the rate limits counted
	// already (countedBefore); a replay, or a retry with other arguments, is counted anew.
	Round     string `json:"r,omitempty"`
	Arguments string `json:"a,omitempty"`
	// Approval is set on the state of an approval asked of the client.
	Approval *approvalState `json:"q,omitempty"`
	// Parked is set on the state of a round of a parked call.
	Parked *parkedState `json:"k,omitempty"`
	// Connect is set on the state of a connect asked of the client (useroauth.go): its
	// retry waits for the user's grant, then runs.
	Connect *connectState `json:"c,omitempty"`
}

// stateBinding is the associated data of a requestState: the method and the tool or prompt
// name or resource URI the client called, so that a state opens for that call alone.
func stateBinding(method, exposed string) []byte {
	return []byte(method + "\x00" + exposed)
}

// principalMark names a principal in a sealed state: its key, or "anonymous", which no key
// can be (a key always holds a NUL).
func principalMark(p session.Principal) string {
	if p.Anonymous() {
		return "anonymous"
	}
	return p.Key()
}

// sealState returns the requestState that holds st, bound to req's caller, endpoint and
// method and to the name (or URI) called, for ttl from now.
func (s *requestStates) sealState(req *pipeline.Request, name string, st sealedState, ttl time.Duration) string {
	st.Profile, st.Principal, st.Expires = req.Client.Profile, principalMark(req.Client.Principal), s.now().Add(ttl).UnixMilli()
	payload, _ := json.Marshal(st)
	return base64.RawURLEncoding.EncodeToString(s.sealer.Seal(payload, stateBinding(req.Method, name)))
}

// openState returns what the requestState a retry of req (calling name) sent holds, once it
// opened and is the retry's: not expired, of its caller and endpoint. What each kind binds
// besides is for its reader to check.
func (s *requestStates) openState(req *pipeline.Request, name, sealed string) (*sealedState, error) {
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("decode requestState: %w", seal.ErrMalformed)
	}
	payload, err := s.sealer.Open(raw, stateBinding(req.Method, name))
	if err != nil {
		return nil, fmt.Errorf("open requestState: %w", err)
	}
	var st sealedState
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("read requestState: %w", err)
	}
	switch {
	case s.now().UnixMilli() >= st.Expires:
		return nil, errStateExpired
	case st.Principal != principalMark(req.Client.Principal):
		return nil, errStateOtherCaller
	case st.Profile != req.Client.Profile:
		return nil, errStateOtherEndpoint
	}
	return &st, nil
}

// seal returns the requestState the client gets for a call to t that its upstream answered
// with input_required and the state inner (nil: none).
func (s *requestStates) seal(req *pipeline.Request, t *pipeline.Target, inner *string) string {
	return s.sealState(req, t.Exposed, sealedState{Upstream: t.Upstream, Inner: inner, Approved: approvedRoundOf(req),
		Round: randomToken(12), Arguments: argumentsDigest(req.Params)}, requestStateTTL)
}

// relaysInput reports whether an input_required result of an upstream to method may be
// relayed to the client of rq: a 2026-07-28 client, on one of the three methods that may
// answer so (mcp-2026-notes §1.7).
func relaysInput(rq *request, method string) bool {
	if rq.declared == nil {
		return false
	}
	switch method {
	case protocol.MethodCallTool, protocol.MethodGetPrompt, protocol.MethodReadResource:
		return true
	}
	return false
}

// withRelayedCapabilities returns ctx with the client capabilities a call made for rq
// declares to a 2026-07-28 upstream: the relayable part of what a 2026-07-28 client declared
// on this request; for a client of a session, what it declared at initialize that the input
// bridge can ask it (sessionDeclared), when the upstream speaks 2026-07-28 (modern); nothing
// (the upstream gets {}) otherwise.
func withRelayedCapabilities(ctx context.Context, rq *request, modern bool) context.Context {
	switch {
	case rq.declared != nil:
		return upstream.WithClientCapabilities(ctx, rq.declared.Relayable())
	case modern && rq.owner != nil && rq.owner.direct == nil:
		return upstream.WithClientCapabilities(ctx, sessionDeclared(rq.owner).Raw)
	}
	return ctx
}

// unwrapRequestState replaces the requestState of a retry (res.params, the params in the
// upstream's terms) by the upstream's own, or removes it when the upstream sent none. A
// requestState that the gateway did not seal for this caller, call and upstream, or that has
// expired, fails the retry with requestStateInvalid; one from a client of a session, or for an
// upstream that speaks 2025-11-25, with -32602 too. Params without requestState pass as they
// are; inputResponses always do.
func (g *requestPipeline) unwrapRequestState(ctx context.Context, rq *request, res *resolved) error {
	raw, has, err := protocol.Member(res.params, "requestState")
	if err != nil {
		return invalidParams(err)
	}
	if !has {
		return nil
	}
	if rq.declared == nil {
		return protocol.Errorf(protocol.CodeInvalidParams,
			"Invalid params: requestState continues a 2026-07-28 multi-round-trip request; a 2025-11-25 session has none: send the request without it")
	}
	var sealed string
	if err := json.Unmarshal(raw, &sealed); err != nil {
		g.logger.Info("a retry's requestState was refused", "request_id", rq.LogID, "method", rq.Method, "error", "requestState is not a string")
		return requestStateInvalid
	}
	st, err := g.states.openState(rq.Request, res.target.Exposed, sealed)
	if err == nil && st.Upstream != res.target.Upstream {
		err = errStateOtherUpstream
	}
	if err == nil && st.Parked != nil {
		err = errStateParked
	}
	if err != nil {
		g.logger.Info("a retry's requestState was refused", "request_id", rq.LogID, "method", rq.Method, "upstream", res.target.Upstream, "error", err.Error())
		return requestStateInvalid
	}
	if st.Approval != nil {
		return g.takeApprovalAnswer(ctx, rq, res, st)
	}
	if st.Connect != nil {
		return g.takeConnectAnswer(ctx, rq, res, st)
	}
	if info := res.upstream.Server(); info != nil && !isModernVersion(info.ProtocolVersion) {
		return protocol.Errorf(protocol.CodeInvalidParams,
			"Invalid params: upstream %s now speaks %s, which has no multi-round-trip requests: start the call again without requestState", res.target.Upstream, info.ProtocolVersion)
	}
	if st.Approved != nil && st.Approved.Arguments == argumentsDigest(rq.Params) {
		rq.continued = &approvalContinued{nonce: st.Approved.Nonce, expires: time.UnixMilli(st.Expires)}
	}
	if st.Arguments == argumentsDigest(rq.Params) {
		rq.Continues = g.countedBefore(ctx, rq, st.Round, time.UnixMilli(st.Expires))
	}
	if st.Inner == nil {
		res.params, err = protocol.DeleteMember(res.params, "requestState")
	} else {
		res.params, err = protocol.SetMember(res.params, "requestState", protocol.AppendString(nil, *st.Inner))
	}
	if err != nil {
		return invalidParams(err)
	}
	return nil
}

// countedBefore reports whether a retry continues a call whose first round the rate limits
// counted, by spending its state's round token (token, valid until until) in the store the
// replicas share: once, so that a replayed state is counted as a new call. Without rate
// limits nothing is spent; a store that fails counts the retry.
func (g *requestPipeline) countedBefore(ctx context.Context, rq *request, token string, until time.Time) bool {
	if g.gate == nil || g.gate.rulesOf(rq.rules).limiter == nil || token == "" {
		return false
	}
	fresh, err := g.gate.approvals.nonces.Spend(ctx, "round:"+token, until)
	if err != nil {
		g.logger.Warn("a retry's round could not be checked against the rate limits' count; it is counted as a new call", "request_id", rq.LogID, "error", err.Error())
		return false
	}
	return fresh
}

// relayInputRequired turns an upstream's input_required result to a call of rq into the one
// its client gets: every input request allowed by what the client declared on this request
// (else the call fails with -32021 naming what was asked, and nothing is relayed), the input
// requests as the upstream wrote them, and the requestState sealed by the gateway.
func (g *requestPipeline) relayInputRequired(rq *request, res *resolved, result json.RawMessage) (json.RawMessage, error) {
	ir, err := modern.ReadInputRequired(result, *rq.declared)
	var undeclared *modern.UndeclaredInputError
	switch {
	case errors.As(err, &undeclared):
		g.logger.Warn("an upstream asked a client for input it did not declare; the call was ended", "request_id", rq.LogID,
			"upstream", res.target.Upstream, "method", rq.Method, "input_method", undeclared.Method)
		data, _ := json.Marshal(map[string]json.RawMessage{"requiredCapabilities": undeclared.Required.Object()})
		return nil, &protocol.Error{Code: protocol.CodeMissingRequiredClientCapability, Data: data,
			Message: fmt.Sprintf("Missing required client capability: upstream %s asked for %s (input request %q), which this request did not declare; "+
				"declare it in _meta to be asked, or call without it", res.target.Upstream, undeclared.Method, undeclared.Key)}
	case err != nil:
		return nil, fmt.Errorf("upstream %s answered an input_required result the gateway cannot relay: %w", res.target.Upstream, err)
	}
	var inner *string
	if ir.HasState {
		inner = &ir.RequestState
	}
	// The rest of the result keeps its bytes; cache hints have no place on it (§1.11).
	out, err := protocol.SetMember(result, "requestState", protocol.AppendString(nil, g.states.seal(rq.Request, &res.target, inner)))
	for _, key := range []string{"ttlMs", "cacheScope"} {
		if err == nil {
			out, err = protocol.DeleteMember(out, key)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("relay the input_required result of upstream %s: %w", res.target.Upstream, err)
	}
	return out, nil
}

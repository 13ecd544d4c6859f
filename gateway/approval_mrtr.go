package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Approval by multi-round-trip request (mcp-2026-notes §1.7). A 2026-07-28 client takes no
// requests, so the approval a 2025-11-25 session's user is asked with an elicitation request
// is asked of a 2026-07-28 client's user with an input_required result: one input request,
// the same elicitation/create, and a requestState the gateway sealed with its keys, bound to
// the caller (principal, endpoint), the call (method, name, upstream, a digest of its
// arguments), an expiry (approval.timeout) and a nonce. The client's retry is a new request
// that takes the whole pipeline again (policy, rate limits, audit); its state must open and
// match the retry, and its nonce must not have been spent: spending it is one SET NX in the
// store the replicas share (in memory for a single gateway), so an answer lets its call run
// once, whichever replica the retry reaches. A state replayed, tampered with or expired
// fails the retry with -32602, and nothing runs.

// approvalInputKey is the key of the approval's one input request, and of its answer among
// the retry's inputResponses.
const approvalInputKey = "approval"

// approvalState is what an approval's requestState holds beside the caller and expiry
// (sealedState).
type approvalState struct {
	// Nonce is the state's single-use token.
	Nonce string `json:"o"`
	// Arguments is argumentsDigest of the call's params: the retry must carry the same.
	Arguments string `json:"a"`
}

// approvalAnswer is a retry's answer to the approval it was asked: its opened state, when
// the state stops opening, and the retry's inputResponses, raw.
type approvalAnswer struct {
	state     approvalState
	expires   time.Time
	responses json.RawMessage
}

// approvalAnswerKey carries a retry's approvalAnswer to the approval check.
type approvalAnswerKey struct{}

// approvalAnswerOf returns the approval answer ctx carries, or nil.
func approvalAnswerOf(ctx context.Context) *approvalAnswer {
	a, _ := ctx.Value(approvalAnswerKey{}).(*approvalAnswer)
	return a
}

// approvalAsked is how the approval check answers a 2026-07-28 request that needs its user's
// approval: not an error, but the input_required result the client gets instead of the
// call's (requestPipeline.serve).
type approvalAsked struct{ result json.RawMessage }

func (*approvalAsked) Error() string { return "the call waits for its client's approval" }

// sealApproval returns the requestState of an approval asked of the client of req for a call
// to t, valid for ttl.
func (s *requestStates) sealApproval(req *pipeline.Request, t *pipeline.Target, st approvalState, ttl time.Duration) string {
	return s.sealState(req, t.Exposed, sealedState{Upstream: t.Upstream, Approval: &st}, ttl)
}

// errStateOtherArguments refuses an approval's state sent with arguments other than the
// call's it was asked for.
var errStateOtherArguments = errors.New("requestState was issued for other arguments")

// takeApprovalAnswer reads the approval's answer a retry of rq carries, whose requestState
// (st, opened) is an approval's: the answer goes to the approval check (approvalAnswerKey), and
// the upstream gets neither the state nor the answers, which are the gateway's. A state sent
// with other arguments than the call's it was asked for fails the retry with
// requestStateInvalid.
func (g *requestPipeline) takeApprovalAnswer(ctx context.Context, rq *request, res *resolved, st *sealedState) error {
	if err := g.takeOwnRound(rq, res, st.Approval.Arguments); err != nil {
		return err
	}
	responses, _, _ := protocol.Member(rq.Params, "inputResponses")
	rq.approval = &approvalAnswer{state: *st.Approval, expires: time.UnixMilli(st.Expires), responses: responses}
	// The call's first round, which asked, was counted by the rate limits.
	rq.Continues = g.countedBefore(ctx, rq, st.Approval.Nonce, rq.approval.expires)
	return nil
}

// takeOwnRound reads the retry of a round the gateway asked itself (an approval, a connect),
// whose state was sealed for arguments (argumentsDigest): a retry with other arguments fails
// with requestStateInvalid; else its requestState and inputResponses, which are the
// gateway's, are taken out of the params its upstream gets.
func (g *requestPipeline) takeOwnRound(rq *request, res *resolved, arguments string) error {
	if arguments != argumentsDigest(rq.Params) {
		g.logger.Info("a retry's requestState was refused", "request_id", rq.LogID, "method", rq.Method, "upstream", res.target.Upstream, "error", errStateOtherArguments.Error())
		return requestStateInvalid
	}
	var err error
	for _, key := range []string{"requestState", "inputResponses"} {
		if res.params, err = protocol.DeleteMember(res.params, key); err != nil {
			return invalidParams(err)
		}
	}
	return nil
}

// askByInputRequired asks the user of a 2026-07-28 client to approve a call to t (rule asked
// for it): the call does not run; its client gets an input_required result with the question
// as its one input request, and a state that lets the answer's retry run it once.
func (a *approvals) askByInputRequired(req *pipeline.Request, t *pipeline.Target, rule string) error {
	state := a.states.sealApproval(req, t, approvalState{Nonce: randomToken(16), Arguments: argumentsDigest(req.Params)}, a.current().timeout)
	result, _ := json.Marshal(map[string]any{
		"resultType":    protocol.ResultTypeInputRequired,
		"inputRequests": map[string]inputRequest{approvalInputKey: {Method: protocol.MethodElicit, Params: approvalQuestion(t, rule)}},
		"requestState":  state,
	})
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "ask", Rule: "elicitation"})
	return &approvalAsked{result: result}
}

// answeredByInput decides a call to t by the answer its retry brought (the approval was asked
// with askByInputRequired): the state's nonce is spent first, so that one answer decides one
// call; a state spent already is refused. An accept that checks "approve" lets the call run
// (and is remembered, by key); a retry without the answer is asked again; any other answer
// refuses the call, as a declined elicitation does.
func (a *approvals) answeredByInput(ctx context.Context, req *pipeline.Request, t *pipeline.Target, rule, key string, ans *approvalAnswer) error {
	fresh, err := a.nonces.Spend(ctx, ans.state.Nonce, ans.expires)
	switch {
	case err != nil:
		return fmt.Errorf("spend the nonce of an approval's requestState (the retry may be sent again): %w", err)
	case !fresh:
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "elicitation:replayed"})
		return requestStateInvalid
	}
	var responses map[string]json.RawMessage
	_ = json.Unmarshal(ans.responses, &responses)
	raw := responses[approvalInputKey]
	if len(raw) == 0 || string(raw) == "null" {
		// Not answered: asked again, with a new state (mcp-2026-notes §1.7: a new
		// input_required, not an error).
		return a.askByInputRequired(req, t, rule)
	}
	return a.decide(ctx, req, t, key, raw)
}

// decide lets a call to t run, or refuses it, by its user's answer to the approval
// question (an elicitation result, raw).
func (a *approvals) decide(ctx context.Context, req *pipeline.Request, t *pipeline.Target, key string, result json.RawMessage) error {
	var answer struct {
		Action  string `json:"action"`
		Content struct {
			Approve bool `json:"approve"`
		} `json:"content"`
	}
	_ = json.Unmarshal(result, &answer)
	if answer.Action == "accept" && answer.Content.Approve {
		a.Grant(ctx, key)
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "elicitation"})
		return nil
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "elicitation:" + orDefault(answer.Action, "none")})
	return &pipeline.Refusal{Reason: reasonApprovalDeclined, Upstream: t.Upstream, Message: declinedMessage(t.Exposed, answer.Action)}
}

// approvalQuestion is the elicitation's params that ask a person to approve a call to t,
// which rule asked for: the server, the tool, the arguments and the tool's annotations.
func approvalQuestion(t *pipeline.Target, rule string) json.RawMessage {
	args := "(none)"
	if len(t.Arguments) > 0 {
		args = string(approval.CanonicalJSON(t.Arguments))
	}
	annotations := "(none declared)"
	if len(t.Annotations) > 0 {
		annotations = string(approval.CanonicalJSON(t.Annotations))
	}
	message := fmt.Sprintf("Approve this call?\n\nserver: %s\ntool: %s (%s there)\narguments: %s\nannotations: %s\n\nThe gateway's policy (rule %q) asks a person to approve it.", t.Upstream, t.Exposed, t.Original, args, annotations, rule)
	params, _ := json.Marshal(map[string]any{
		"message": message,
		"requestedSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Run this call", "description": "Check to let the call run."},
			},
			"required": []string{"approve"},
		},
	})
	return params
}

// approvedRound is what a relayed requestState (sealedState) keeps of the approval of the
// call whose round got it: the retry that continues the call with the same arguments is not
// asked to approve it again, once (a nonce), so that a replayed state runs nothing more
// without a person's approval.
type approvedRound struct {
	// Arguments is argumentsDigest of the approved call's params.
	Arguments string `json:"a"`
	// Nonce is the single-use token of the continuation.
	Nonce string `json:"o"`
}

// approvedRoundOf returns what a relayed state keeps of req's approval: nil when no approval
// let req run (none was needed, or it is not a call a person approved).
func approvedRoundOf(req *pipeline.Request) *approvedRound {
	for _, d := range req.Decisions {
		if d.Check == "approval" && d.Effect == "allow" {
			return &approvedRound{Arguments: argumentsDigest(req.Params), Nonce: randomToken(16)}
		}
	}
	return nil
}

// approvalContinued is a retry's claim that it continues, with the same arguments, a call
// approved in an earlier round: its relayed state's nonce, and when that state stops opening.
type approvalContinued struct {
	nonce   string
	expires time.Time
}

// approvalContinuedKey carries a retry's approvalContinued to the approval check.
type approvalContinuedKey struct{}

// continues lets the retry that continues an approved call go on without asking again,
// spending its state's nonce: a state replayed (spent already) fails with -32602.
func (a *approvals) continues(ctx context.Context, req *pipeline.Request, cont *approvalContinued) error {
	fresh, err := a.nonces.Spend(ctx, cont.nonce, cont.expires)
	switch {
	case err != nil:
		return fmt.Errorf("spend the nonce of an approved call's requestState (the retry may be sent again): %w", err)
	case !fresh:
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "continued:replayed"})
		return requestStateInvalid
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "continued"})
	return nil
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Reasons of refusals by approval.
const (
	reasonApprovalDeclined = "approval_declined"
	reasonApprovalTimeout  = "approval_timeout"
	reasonApprovalNeeded   = "approval_unavailable"
)

// ownerKey carries a request's owner (its client's stream) to the policy chain, which asks
// the client for approval on it.
type ownerKey struct{}

// approvals is how the approval step asks: within timeout, the calling client's user or (by
// operator) an operator; what people approved is remembered (approval.remember).
type approvals struct {
	*approval.Remembered
	// settings are approval.timeout and approval.by, replaced whole by a reload.
	settings atomic.Pointer[approvalSettings]
	now      func() time.Time

	// Set once the gateway has them: ask asks a client (messageRouter.askOn); held keeps the
	// calls held for an operator (nil without the admin API); replicated is set when
	// replicas share the sessions.
	ask        func(ctx context.Context, owner *callOwner, method string, params json.RawMessage, who string, record func(context.Context, protocol.ID) (func(), error)) (json.RawMessage, error)
	held       *heldCalls
	replicated bool
	// states seal the requestState of an approval asked of a 2026-07-28 client, and nonces
	// spend it once (approval_mrtr.go).
	states *requestStates
	nonces *approval.Nonces
	// keepAlive is how often a 2026-07-28 request waiting for an operator's decision gets a
	// keep-alive comment on its response. If zero, keepAliveInterval; tests shorten it.
	keepAlive time.Duration
}

// approvalSettings are the settings of approvals a reload may change. Immutable.
type approvalSettings struct {
	timeout    time.Duration
	byOperator bool
}

// current returns the approval settings in force.
func (a *approvals) current() *approvalSettings { return a.settings.Load() }

// approvalCheck is the chain's last link: a call that a rule or a plugin said needs a
// person's approval is held until one decides.
func (g *Gateway) approvalCheck(ctx context.Context, req *pipeline.Request, t *pipeline.Target) error {
	if taken, ok := ctx.Value(takenOverKey{}).(approval.HeldCall); ok && t != nil && t.Kind == pipeline.Tool {
		// A call taken over from a stopped replica was held there: it waits for its decision
		// here whatever this replica's policy or remembered approvals would say.
		return g.gate.approvals.byOperatorOf(ctx, req, t, orDefault(req.Approval, taken.Rule), "")
	}
	if req.Approval == "" || t == nil {
		return nil
	}
	return g.gate.approvals.approve(ctx, req, t, req.Approval)
}

// approve holds a call an approve rule matched until a person decides it: the calling
// client's user, asked with a form elicitation that shows the server, the tool, the
// arguments and the tool's annotations (a 2026-07-28 client's user with an input_required
// result, approval_mrtr.go), or an operator. It returns nil to let the call go on, or the
// refusal.
func (a *approvals) approve(ctx context.Context, req *pipeline.Request, t *pipeline.Target, rule string) error {
	key := a.Key(req.Client, t)
	owner, _ := ctx.Value(ownerKey{}).(*callOwner)
	direct := owner != nil && owner.direct != nil
	settings := a.current() // once: a reload's settings reach the next call, never half of this one
	if cont, _ := ctx.Value(approvalContinuedKey{}).(*approvalContinued); cont != nil && direct {
		// A later round of a call approved in an earlier one.
		return a.continues(ctx, req, cont)
	}
	if ans := approvalAnswerOf(ctx); ans != nil && direct && !settings.byOperator {
		// The retry of a call its user was asked to approve: its answer decides, once.
		return a.answeredByInput(ctx, req, t, rule, key, ans)
	}
	if a.Holds(ctx, key) {
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "remembered"})
		return nil
	}
	if settings.byOperator || owner == nil || !owner.clientCaps().elicitForm {
		return a.byOperatorOf(ctx, req, t, rule, key)
	}
	if direct {
		return a.askByInputRequired(req, t, rule)
	}
	askCtx, cancel := context.WithTimeout(ctx, settings.timeout)
	defer cancel()
	result, err := a.ask(askCtx, owner, protocol.MethodElicit, approvalQuestion(t, rule), "the gateway", nil)
	if err != nil {
		if askCtx.Err() != nil && ctx.Err() == nil {
			req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "timeout"})
			return &pipeline.Refusal{Reason: reasonApprovalTimeout, Upstream: t.Upstream,
				Message: fmt.Sprintf("%s was not approved within %s: call it again to be asked again", t.Exposed, settings.timeout)}
		}
		return fmt.Errorf("asking the client for approval: %w", err)
	}
	return a.decide(ctx, req, t, key, result)
}

// declinedMessage says what the user did with the approval question for tool, given the
// elicitation's action, when it did not let the call run (MCP 2025-11-25, Elicitation:
// accept, decline or cancel).
func declinedMessage(tool, action string) string {
	switch action {
	case "accept":
		return fmt.Sprintf("the user answered the approval question for %s without checking \"Run this call\": it did not run", tool)
	case "decline":
		return fmt.Sprintf("the user declined to run %s: it did not run", tool)
	case "cancel":
		return fmt.Sprintf("the user dismissed the approval question for %s without answering: it did not run; call it again to be asked again", tool)
	case "":
		return fmt.Sprintf("the client answered the approval question for %s without an action: it did not run; call it again to be asked again", tool)
	}
	return fmt.Sprintf("the client answered the approval question for %s with the unknown action %q: it did not run", tool, action)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

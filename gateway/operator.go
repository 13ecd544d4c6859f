package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/manifold-mcp/manifold/internal/admin/backend"
	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
)

// webhookTimeout bounds one POST of a held call to the configured webhook.
const webhookTimeout = 10 * time.Second

// heldCalls keeps the tool calls waiting for an operator's decision on the admin API
// (approval.Holder), and what the gateway does around them: the webhook told of each, and
// the calls and streams of replicas that stopped (takeover.go).
type heldCalls struct {
	*approval.Holder
	g       *Gateway
	webhook string
	client  *http.Client
	// redact is how the webhook's payload redacts arguments: as the audit trail in force does.
	redact func() audit.Redaction

	// followed keeps the streams of calls held on stopped replicas that clients read here.
	followed followedHeld
}

// selfApprovalWarning is logged when the gateway starts, or a reload begins, to let operators
// approve their own held calls.
const selfApprovalWarning = "operators may approve their own held calls (policy.approval.allow_self_approval): one person can both make a risky call and let it run; leave it off unless every operator is trusted to act alone"

func newHeldCalls(g *Gateway) *heldCalls {
	h := &heldCalls{g: g, webhook: g.cfg.Admin.Webhook, client: &http.Client{Timeout: webhookTimeout}, redact: g.audit.redaction,
		Holder: &approval.Holder{AllowSelf: g.cfg.Policy.Approval.AllowSelfApproval, Now: g.opts.Now, Logger: g.logger}}
	h.OnHold = h.notify
	if h.AllowSelf {
		g.logger.Warn(selfApprovalWarning)
	}
	h.Store = g.backends.Holds
	if g.replicas != nil {
		h.Replica = g.replicas.Replica()
		h.WakeElsewhere = g.replicas.Decided
	}
	return h
}

// notify posts a held call to the configured webhook, off the call's path.
func (h *heldCalls) notify(c approval.HeldCall) {
	if h.webhook == "" {
		return
	}
	c.Arguments = audit.RedactArguments(c.Arguments, h.redact())
	body, _ := json.Marshal(map[string]any{"event": "approval.held", "approval": backend.ApprovalOf(c)})
	h.g.goWorker(func() {
		ctx, cancel := context.WithTimeout(h.g.ctx, webhookTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.webhook, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.client.Do(req)
		if err != nil {
			h.g.logger.Warn("posting a held call to the approval webhook failed", "approval", c.ID, "error", err.Error())
			return
		}
		_ = resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			h.g.logger.Warn("the approval webhook refused a held call", "approval", c.ID, "status", resp.StatusCode)
		}
	})
}

// byOperatorOf holds a call for an operator's decision on the admin API.
func (a *approvals) byOperatorOf(ctx context.Context, req *pipeline.Request, t *pipeline.Target, rule, key string) error {
	owner, _ := ctx.Value(ownerKey{}).(*callOwner)
	if a.held == nil {
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: rule})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s needs a person's approval (rule %q): this client cannot ask its user (it declared no form elicitation, on its session or, for a 2026-07-28 client, in this request's _meta), and the gateway has no admin API for an operator to decide; use a client that can, or ask the gateway's operator to set admin.listen", t.Exposed, rule)}
	}
	now := a.now()
	c := approval.HeldCall{ID: approval.NewID(), Replica: a.held.Replica, Session: sessionFingerprint(req.Client.SessionID), Principal: req.Client.Principal.String(), CallerID: req.Client.Principal.Key(),
		Upstream: t.Upstream, Tool: t.Exposed, Original: t.Original, Arguments: t.Arguments, Annotations: t.Annotations, Rule: rule,
		Held: now, Deadline: now.Add(a.current().timeout)}
	if a.replicated && owner != nil && owner.streamID != "" {
		// What another replica needs to finish the call if this one stops.
		c.SessionID, c.StreamID, c.Method, c.Params = req.Client.SessionID, owner.streamID, req.Method, req.Params
		c.ClientID, _ = json.Marshal(req.ID)
		c.Caller, _ = json.Marshal(req.Client.Principal)
	}
	taken, takenOver := ctx.Value(takenOverKey{}).(approval.HeldCall)
	if takenOver {
		c = taken
	}
	if owner != nil && owner.direct != nil {
		// A 2026-07-28 client waits on its request's response: proxies must not end it idle.
		defer owner.direct.keepAliveWhile(a.keepAliveEvery())()
	}
	got, err := a.held.Await(ctx, c, takenOver)
	switch {
	case errors.Is(err, approval.ErrNotDecided):
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator:timeout"})
		return &pipeline.Refusal{Reason: reasonApprovalTimeout, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s was held for an operator's approval and no decision came within %s: it did not run; call it again to be held again", t.Exposed, c.Deadline.Sub(c.Held))}
	case err != nil && ctx.Err() != nil:
		return err
	case errors.Is(err, approval.ErrTakenOver):
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator:taken-over"})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s was held for an operator's approval on a gateway replica that lost its store for a while; another replica took the call over and answers it on this stream if the client resumes it", t.Exposed)}
	case err != nil:
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: rule})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s needs an operator's approval, and the gateway could not hold it (%v): it did not run; try again later", t.Exposed, err)}
	case got.Decision == approval.Approve:
		a.Grant(ctx, key)
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "operator", By: got.Approver})
		return nil
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator", By: got.Approver})
	return &pipeline.Refusal{Reason: reasonApprovalDeclined, Upstream: t.Upstream,
		Message: fmt.Sprintf("an operator (%s) denied %s: it did not run", got.Approver, t.Exposed)}
}

// keepAliveEvery is how often a 2026-07-28 request waiting for an operator gets a keep-alive.
func (a *approvals) keepAliveEvery() time.Duration {
	if a.keepAlive > 0 {
		return a.keepAlive
	}
	return keepAliveInterval
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/hold"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
)

// webhookTimeout bounds one POST of a held call to the configured webhook.
const webhookTimeout = 10 * time.Second

// heldCalls keeps the tool calls waiting for an operator's decision on the admin API. Each is
// a record in a store shared by the replicas when it is Redis, so that the decision may land
// on any replica: the one deciding tells the one holding the call over the bus.
type heldCalls struct {
	g       *Gateway
	store   hold.Store
	replica string // this replica's name; "" without replicas
	webhook string
	client  *http.Client
	// allowSelf lets an operator approve a call of their own (approval.allow_self_approval).
	allowSelf bool
	// redact is how the webhook's payload redacts arguments: as the audit trail does.
	redact audit.Redaction

	mu sync.Mutex
	// waiting holds a channel per call held here, closed when the call is decided. Guarded
	// by mu.
	waiting map[string]chan struct{}

	// followed keeps the streams of calls held on stopped replicas that clients read here.
	followed followedHeld
}

func newHeldCalls(g *Gateway) *heldCalls {
	h := &heldCalls{g: g, webhook: g.cfg.Admin.Webhook, client: &http.Client{Timeout: webhookTimeout}, waiting: map[string]chan struct{}{},
		allowSelf: g.cfg.Policy.Approval.AllowSelfApproval, redact: redaction(&g.cfg.Audit)}
	if h.allowSelf {
		g.logger.Warn("operators may approve their own held calls (policy.approval.allow_self_approval): one person can both make a risky call and let it run; leave it off unless every operator is trusted to act alone")
	}
	h.store = g.backends.Holds
	if g.replicas != nil {
		h.replica = g.replicas.bus.Replica()
	}
	return h
}

// errNotDecided: the held call's time ran out with no decision.
var errNotDecided = errors.New("no decision in time")

// await holds c until an operator decides it, its deadline, or ctx's end, and returns it as
// decided. A call taken over (takenOver) is held already: it is only waited for.
func (h *heldCalls) await(ctx context.Context, c hold.Call, takenOver bool) (hold.Call, error) {
	decided := make(chan struct{})
	h.mu.Lock()
	h.waiting[c.ID] = decided
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, c.ID)
		h.mu.Unlock()
		// The record goes whatever happened; a decision after this finds no call.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pinStoreTimeout)
		defer cancel()
		_ = h.store.Release(releaseCtx, c.ID)
	}()
	if !takenOver {
		if err := h.store.Hold(ctx, c); err != nil {
			return c, fmt.Errorf("recording the held call: %w", err)
		}
		h.g.logger.Info("a tool call is held for an operator's approval: decide it on the admin API", "approval", c.ID,
			"upstream", c.Upstream, "tool", c.Original, "principal", c.Principal, "session", c.Session, "rule", c.Rule, "deadline", c.Deadline.Format(time.RFC3339))
		h.notify(c)
	} else if now, err := h.store.Get(ctx, c.ID); err == nil && now.Decision != "" {
		h.wake(c.ID) // decided while no replica held it
	}
	timer := time.NewTimer(c.Deadline.Sub(h.g.opts.Now()))
	defer timer.Stop()
	select {
	case <-decided:
	case <-timer.C:
	case <-ctx.Done():
		return c, ctx.Err()
	}
	// A decision that raced the deadline still counts: the record says. A read that fails
	// is tried again, so that a decision an operator was told was taken is not lost to one.
	getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pinStoreTimeout)
	defer cancel()
	var got hold.Call
	var err error
	for try := 0; try < 3; try++ {
		if got, err = h.store.Get(getCtx, c.ID); err == nil || errors.Is(err, hold.ErrNotFound) || getCtx.Err() != nil {
			break
		}
	}
	switch {
	case err != nil:
		return c, fmt.Errorf("reading the held call's decision: %w", err)
	case got.Replica != c.Replica:
		// Another replica took the call over, taking this one for stopped (it lost Redis
		// for a lease): that one runs it, this one must not.
		return got, errTakenOver
	case got.Decision == "":
		return got, errNotDecided
	}
	return got, nil
}

// errTakenOver: another replica took a held call over from this one.
var errTakenOver = errors.New("the held call was taken over by another replica")

// wake tells the waiter of a call held here that it was decided.
func (h *heldCalls) wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch, ok := h.waiting[id]; ok {
		close(ch)
		delete(h.waiting, id)
	}
}

// decide records an operator's decision on a held call and wakes the replica holding it.
// An operator may not approve a call of their own (separation of duties), unless
// approval.allow_self_approval; denying one is always allowed, it only stops the call.
func (h *heldCalls) decide(ctx context.Context, id, decision string, by admin.Operator) (hold.Call, error) {
	if decision == hold.Approve && !h.allowSelf && by.Principal != "" {
		// Who made a call never changes: reading it before the decision races nothing.
		c, err := h.store.Get(ctx, id)
		if err == nil && c.CallerID == by.Principal {
			return c, fmt.Errorf("%w: %s made this call, and may not approve a call of their own: another operator must decide it (or deny it yourself)", admin.ErrForbidden, by.Name)
		}
		if err != nil && !errors.Is(err, hold.ErrNotFound) {
			return c, err
		}
	}
	c, err := h.store.Decide(ctx, id, decision, by.Name, h.g.opts.Now())
	switch {
	case errors.Is(err, hold.ErrNotFound):
		return c, fmt.Errorf("%w: no call %q is held (it ran, was refused, or its client went away)", admin.ErrNotFound, id)
	case errors.Is(err, hold.ErrDecided):
		return c, fmt.Errorf("%w: %s decided this call already (%s)", admin.ErrConflict, c.Approver, c.Decision)
	case errors.Is(err, hold.ErrExpired):
		return c, fmt.Errorf("%w: the call waited its time out before this decision; it was refused", admin.ErrConflict)
	case err != nil:
		return c, err
	}
	if c.Replica == "" || c.Replica == h.replica {
		h.wake(id)
		return c, nil
	}
	if sent, err := h.g.replicas.bus.Send(ctx, c.Replica, &session.BusMessage{Kind: busDecided, Text: id}); err != nil || !sent {
		h.g.logger.Warn("the replica holding a decided call could not be told; it reads the decision at the call's deadline", "approval", id, "replica", c.Replica)
	}
	return c, nil
}

// pending returns the calls waiting for a decision, on every replica.
func (h *heldCalls) pending(ctx context.Context) ([]hold.Call, error) {
	return h.store.Pending(ctx, h.g.opts.Now())
}

// notify posts a held call to the configured webhook, off the call's path.
func (h *heldCalls) notify(c hold.Call) {
	if h.webhook == "" {
		return
	}
	c.Arguments = audit.RedactArguments(c.Arguments, h.redact)
	body, _ := json.Marshal(map[string]any{"event": "approval.held", "approval": approvalOf(c)})
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

// approveByOperator holds a call for an operator's decision on the admin API.
func (g *Gateway) approveByOperator(ctx context.Context, req *pipeline.Request, t *pipeline.Target, rule, key string) error {
	a := g.gate.approvals
	if g.held == nil {
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: rule})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s needs a person's approval (rule %q): this client cannot ask its user (it declared no form elicitation), and the gateway has no admin API for an operator to decide; use a client that can, or ask the gateway's operator to set admin.listen", t.Exposed, rule)}
	}
	now := g.opts.Now()
	c := hold.Call{ID: hold.NewID(), Replica: g.held.replica, Session: fingerprint(req.Client.SessionID), Principal: req.Client.Principal.String(), CallerID: req.Client.Principal.Key(),
		Upstream: t.Upstream, Tool: t.Exposed, Original: t.Original, Arguments: t.Arguments, Annotations: t.Annotations, Rule: rule,
		Held: now, Deadline: now.Add(a.timeout)}
	owner, _ := ctx.Value(ownerKey{}).(*callOwner)
	if g.replicas != nil && owner != nil && owner.streamID != "" {
		// What another replica needs to finish the call if this one stops.
		c.SessionID, c.StreamID, c.Method, c.Params = req.Client.SessionID, owner.streamID, req.Method, req.Params
		c.ClientID, _ = json.Marshal(req.ID)
		c.Caller, _ = json.Marshal(req.Client.Principal)
	}
	taken, takenOver := ctx.Value(takenOverKey{}).(hold.Call)
	if takenOver {
		c = taken
	}
	got, err := g.held.await(ctx, c, takenOver)
	switch {
	case errors.Is(err, errNotDecided):
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator:timeout"})
		return &pipeline.Refusal{Reason: reasonApprovalTimeout, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s was held for an operator's approval and no decision came within %s: it did not run; call it again to be held again", t.Exposed, a.timeout)}
	case err != nil && ctx.Err() != nil:
		return err
	case errors.Is(err, errTakenOver):
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator:taken-over"})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s was held for an operator's approval on a gateway replica that lost its store for a while; another replica took the call over and answers it on this stream if the client resumes it", t.Exposed)}
	case err != nil:
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: rule})
		return &pipeline.Refusal{Reason: reasonApprovalNeeded, Upstream: t.Upstream,
			Message: fmt.Sprintf("%s needs an operator's approval, and the gateway could not hold it (%v): it did not run; try again later", t.Exposed, err)}
	case got.Decision == hold.Approve:
		a.grant(ctx, key)
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "operator", By: got.Approver})
		return nil
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "operator", By: got.Approver})
	return &pipeline.Refusal{Reason: reasonApprovalDeclined, Upstream: t.Upstream,
		Message: fmt.Sprintf("an operator (%s) denied %s: it did not run", got.Approver, t.Exposed)}
}

// approvalOf returns a held call as the admin API shows it.
func approvalOf(c hold.Call) admin.Approval {
	a := admin.Approval{ID: c.ID, Session: c.Session, Principal: c.Principal, Upstream: c.Upstream, Tool: c.Tool, Original: c.Original,
		Arguments: c.Arguments, Annotations: c.Annotations, Rule: c.Rule, Held: c.Held, Deadline: c.Deadline, Decision: c.Decision, Approver: c.Approver}
	var text bytes.Buffer
	if len(c.Arguments) > 0 && json.Indent(&text, c.Arguments, "", "  ") == nil {
		a.ArgumentsText = text.String()
	}
	return a
}

package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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

// approvals holds the calls a person approved, for approval.remember: each bound to the
// principal, the upstream, the tool and the exact arguments.
type approvals struct {
	remember time.Duration
	timeout  time.Duration
	// anyArguments lets an approval hold for any arguments of the tool (configured
	// explicitly); byOperator sends every approval to an operator.
	anyArguments, byOperator bool
	now                      func() time.Time

	mu      sync.Mutex
	granted map[string]time.Time // approvalKey → until

	// shared, when set, keeps the approvals for every replica (Redis) instead of granted.
	shared sharedApprovals
	logger *slog.Logger
}

// sharedApprovals remembers approvals for all replicas (approval.RedisApprovals).
type sharedApprovals interface {
	Grant(ctx context.Context, key string, ttl time.Duration) error
	Granted(ctx context.Context, key string) (bool, error)
}

// sharedApprovalTimeout bounds a look-up or a write of a shared approval; one that fails
// asks the person again (or forgets the approval), never lets a call through.
const sharedApprovalTimeout = 2 * time.Second

// approvalKey binds an approval to who asked for what, with which arguments (hashed), or
// with any when so configured. Who is the caller's principal; an anonymous caller (auth
// off) is no one in particular, so its approval is bound to its session instead: one
// anonymous client's approval never lets another's call through. An anonymous caller
// without a session has no key (""): its approvals are not remembered.
func approvalKey(who pipeline.ClientContext, t *pipeline.Target, anyArguments bool) string {
	caller := "principal\x00" + who.Principal.Key()
	if who.Principal.Anonymous() {
		if who.SessionID == "" {
			return ""
		}
		caller = "session\x00" + who.SessionID
	}
	h := sha256.New()
	for _, s := range []string{caller, t.Upstream, t.Original} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if !anyArguments {
		h.Write(canonicalJSON(t.Arguments))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalJSON returns raw with its objects' members sorted and no insignificant space, so
// that the same arguments hash alike however the client wrote them.
func canonicalJSON(raw json.RawMessage) []byte {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if len(raw) == 0 || dec.Decode(&v) != nil {
		return raw
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return raw
	}
	return out
}

// remembered reports whether an approval of key still holds.
func (a *approvals) remembered(ctx context.Context, key string) bool {
	if a.remember <= 0 || key == "" {
		return false
	}
	if a.shared != nil {
		ctx, cancel := context.WithTimeout(ctx, sharedApprovalTimeout)
		defer cancel()
		ok, err := a.shared.Granted(ctx, key)
		if err != nil {
			a.logger.Warn("looking up a remembered approval failed: the person is asked again", "error", err.Error())
		}
		return ok
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.granted[key]
	if ok && !a.now().Before(until) {
		delete(a.granted, key)
		return false
	}
	return ok
}

// grant remembers an approval of key.
func (a *approvals) grant(ctx context.Context, key string) {
	if a.remember <= 0 || key == "" {
		return
	}
	if a.shared != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedApprovalTimeout)
		defer cancel()
		if err := a.shared.Grant(ctx, key, a.remember); err != nil {
			a.logger.Warn("remembering an approval failed: the next such call asks again", "error", err.Error())
		}
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for k, until := range a.granted {
		if !now.Before(until) {
			delete(a.granted, k)
		}
	}
	a.granted[key] = now.Add(a.remember)
}

// approvalCheck is the chain's last link: a call that a rule or a plugin said needs a
// person's approval is held until one decides.
func (g *Gateway) approvalCheck(ctx context.Context, req *pipeline.Request, t *pipeline.Target) error {
	if taken, ok := ctx.Value(takenOverKey{}).(approval.HeldCall); ok && t != nil && t.Kind == pipeline.Tool {
		// A call taken over from a stopped replica was held there: it waits for its decision
		// here whatever this replica's policy or remembered approvals would say.
		return g.approveByOperator(ctx, req, t, orDefault(req.Approval, taken.Rule), "")
	}
	if req.Approval == "" || t == nil {
		return nil
	}
	return g.approve(ctx, req, t, req.Approval)
}

// approve holds a call an approve rule matched until a person decides it: the calling
// client's user, asked with a form elicitation that shows the server, the tool, the
// arguments and the tool's annotations. It returns nil to let the call go on, or the refusal.
func (g *Gateway) approve(ctx context.Context, req *pipeline.Request, t *pipeline.Target, rule string) error {
	a := g.gate.approvals
	key := approvalKey(req.Client, t, a.anyArguments)
	if a.remembered(ctx, key) {
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "remembered"})
		return nil
	}
	owner, _ := ctx.Value(ownerKey{}).(*callOwner)
	if a.byOperator || owner == nil || !owner.clientCaps().elicitForm {
		return g.approveByOperator(ctx, req, t, rule, key)
	}
	args := "(none)"
	if len(t.Arguments) > 0 {
		args = string(canonicalJSON(t.Arguments))
	}
	annotations := "(none declared)"
	if len(t.Annotations) > 0 {
		annotations = string(canonicalJSON(t.Annotations))
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
	askCtx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	result, err := g.router.askOn(askCtx, owner, protocol.MethodElicit, params, "the gateway", nil)
	if err != nil {
		if askCtx.Err() != nil && ctx.Err() == nil {
			req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "timeout"})
			return &pipeline.Refusal{Reason: reasonApprovalTimeout, Upstream: t.Upstream,
				Message: fmt.Sprintf("%s was not approved within %s: call it again to be asked again", t.Exposed, a.timeout)}
		}
		return fmt.Errorf("asking the client for approval: %w", err)
	}
	var answer struct {
		Action  string `json:"action"`
		Content struct {
			Approve bool `json:"approve"`
		} `json:"content"`
	}
	_ = json.Unmarshal(result, &answer)
	if answer.Action == "accept" && answer.Content.Approve {
		a.grant(ctx, key)
		req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "allow", Rule: "elicitation"})
		return nil
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "approval", Effect: "deny", Rule: "elicitation:" + orDefault(answer.Action, "none")})
	return &pipeline.Refusal{Reason: reasonApprovalDeclined, Upstream: t.Upstream, Message: declinedMessage(t.Exposed, answer.Action)}
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

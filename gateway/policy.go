package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/limit"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/policy"
	"github.com/manifold-mcp/manifold/upstream"
)

// gate is the policy of the gateway (design decision 7, after authentication): the rules
// that decide what each principal sees and may call, and the rate limits. Nil parts are
// off.
type gate struct {
	// rules holds the rules, rate limits and dry run in force: one value, replaced whole by a
	// reload (reload.go), which a request loads once.
	rules     atomic.Pointer[gateRules]
	approvals *approvals

	// views caches the catalog as each distinct rule outcome sees it (policy.ViewKey), per
	// profile, for the snapshot and rules it was cut from; a new snapshot or new rules empty
	// it.
	mu    sync.Mutex
	base  map[string]viewBase          // profile → what the views of it were cut from
	views map[string]*catalog.Snapshot // profile + "\x00" + view key → the view
	// seen remembers the view of each session here, so that a catalog change reaches a
	// session as list_changed only when its own view changed.
	seen sync.Map // session id → sessionView
}

// gateRules are the parts of the policy a reload replaces at once. Immutable.
type gateRules struct {
	rules   *policy.Rules
	limiter *limit.Limiter
	// dryRun is the policy's dry run: decisions are recorded, not enforced.
	dryRun bool
	// limits and failClosed are what limiter was made of.
	limits     []config.RateLimit
	failClosed bool
}

// viewBase is what the cached views of a profile were cut from.
type viewBase struct {
	snap  *catalog.Snapshot
	rules *gateRules
}

// current returns the rules in force.
func (gt *gate) current() *gateRules { return gt.rules.Load() }

// rulesOf returns taken, the rules a request took when it began, or without them (a
// request that did not pass the pipeline's start) the rules in force.
func (gt *gate) rulesOf(taken *gateRules) *gateRules {
	if taken != nil {
		return taken
	}
	return gt.current()
}

// gateRulesKey is the context key of the rules a request took (withGateRules).
type gateRulesKey struct{}

// withGateRules carries rules, those the request took, to the checks of its chain.
func withGateRules(ctx context.Context, rules *gateRules) context.Context {
	if rules == nil {
		return ctx
	}
	return context.WithValue(ctx, gateRulesKey{}, rules)
}

// takenRules returns the rules withGateRules put in ctx, or nil.
func takenRules(ctx context.Context) *gateRules {
	gr, _ := ctx.Value(gateRulesKey{}).(*gateRules)
	return gr
}

// sessionView is the view a session was last served, and a principal it was served for.
type sessionView struct {
	key       string
	principal session.Principal
}

// newGate compiles the config's policy; nil when there is none.
func newGate(cfg *config.Config, shared *limit.Shared, now func() time.Time, logger *slog.Logger) (*gate, error) {
	p := &cfg.Policy
	// Plugins may ask for approval, which the gate holds.
	if len(p.Rules) == 0 && len(p.RateLimits) == 0 && p.Default == config.EffectAllow && len(cfg.Plugins) == 0 {
		return nil, nil
	}
	trusted := map[string]bool{}
	for _, u := range cfg.Upstreams {
		trusted[u.Name] = u.TrustAnnotations
	}
	if now == nil {
		now = time.Now
	}
	g := &gate{base: map[string]viewBase{}, views: map[string]*catalog.Snapshot{},
		approvals: &approvals{now: now,
			Remembered: &approval.Remembered{TTL: p.Approval.Remember, AnyArguments: p.Approval.RememberAnyArguments, Now: now, Logger: logger}}}
	g.approvals.settings.Store(approvalSettingsOf(p.Approval))
	r, err := compileGateRules(cfg, nil, shared, now, logger)
	if err != nil {
		return nil, err
	}
	g.rules.Store(r)
	return g, nil
}

// approvalSettingsOf are the approval settings of a.
func approvalSettingsOf(a config.Approval) *approvalSettings {
	return &approvalSettings{timeout: a.Timeout, byOperator: a.By == config.ApprovalByOperator}
}

// compileGateRules compiles cfg's rules and rate limits. The rate limiter of prev is kept,
// with what it counted, when the rate limits are the same; prev may be nil.
func compileGateRules(cfg *config.Config, prev *gateRules, shared *limit.Shared, now func() time.Time, logger *slog.Logger) (*gateRules, error) {
	p := &cfg.Policy
	trusted := map[string]bool{}
	for _, u := range cfg.Upstreams {
		trusted[u.Name] = u.TrustAnnotations
	}
	r := &gateRules{dryRun: p.DryRun}
	var err error
	if r.rules, err = policy.Compile(p, func(up string) bool { return trusted[up] }); err != nil {
		return nil, fmt.Errorf("policy (%s:%d): %w", p.File, p.Line, err)
	}
	if len(p.RateLimits) > 0 {
		if prev != nil && prev.limiter != nil && config.SameSettings(prev.limits, p.RateLimits) && prev.failClosed == (p.SharedLimitFailure == config.FailClosed) {
			r.limiter, r.limits, r.failClosed = prev.limiter, prev.limits, prev.failClosed
			return r, nil
		}
		opts := limit.Options{Limits: p.RateLimits, Shared: shared, FailClosed: p.SharedLimitFailure == config.FailClosed, Now: now, Logger: logger}
		if r.limiter, err = limit.New(opts); err != nil {
			return nil, fmt.Errorf("policy rate limits (%s:%d): %w", p.File, p.Line, err)
		}
		r.limits, r.failClosed = p.RateLimits, opts.FailClosed
	}
	return r, nil
}

// check is the policy's link of the chain: the rules' decision on the request's target, then
// the rate limits. A hidden item is refused as a missing one; a denied one with the rule's
// reason; dry run records the decision and lets the request go on.
func (g *Gateway) policyCheck(ctx context.Context, req *pipeline.Request, t *pipeline.Target) error {
	gt := g.gate.rulesOf(takenRules(ctx)) // those the request took with its plugins
	if t.Kind == pipeline.Gateway {
		if req.Method == protocol.MethodInitialize {
			return nil // a session's start is bounded by the session caps, not the rate limits
		}
		// The gateway's own methods (lists, ping, logging/setLevel, tasks/list) are work
		// done for the principal too: its principal-wide limits count them.
		return gt.limit(ctx, req, t, gt.dryRun)
	}
	if t.Kind == pipeline.Task {
		// A task's call was decided when it was created, in its session; what follows (its
		// status, its result, its cancel) belongs to it. The rate limits still count.
		return gt.limit(ctx, req, t, false)
	}
	in := policyInput(req.Client.Principal, t)
	d := gt.rules.Decide(in)
	for _, rule := range d.Rewrites {
		req.Decisions = append(req.Decisions, audit.Decision{Check: "policy", Effect: effectRewrite, Rule: rule, DryRun: d.DryRun})
	}
	if d.Arguments != nil && !d.DryRun {
		// What the rules checked is what the upstream gets; the checks after (plugins,
		// approval, and its remembered approvals) and the audit trail see it too.
		t.Arguments, t.Rewritten = d.Arguments, true
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "policy", Effect: d.Effect, Rule: d.Rule, DryRun: d.DryRun})
	if !d.DryRun {
		switch d.Effect {
		case config.EffectHide:
			t.Hidden = true
			return hiddenRefusal(t)
		case config.EffectApprove:
			if t.Kind == pipeline.Tool {
				req.Approval = d.Rule // asked last in the chain, after the limits and plugins
				break
			}
			fallthrough // only tool calls are held for approval; anything else is refused
		case config.EffectDeny:
			msg := d.Reason
			if msg == "" {
				msg = "denied by the gateway's policy"
			}
			return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: t.Upstream,
				Message: fmt.Sprintf("%s (rule %q); ask the gateway's operator if you need it", msg, d.Rule)}
		}
	}
	if req.Continues {
		return nil // counted in the call's first round (mrtr.go, countedBefore)
	}
	return gt.limit(ctx, req, t, d.DryRun)
}

// effectRewrite is the effect, in audit records, of a rule whose path matchers cleaned the
// arguments the upstream gets (as a plugin's rewrite is recorded).
const effectRewrite = "rewrite"

// limit applies the rate limits to the request; dryRun records a refusal without enforcing it.
func (gt *gateRules) limit(ctx context.Context, req *pipeline.Request, t *pipeline.Target, dryRun bool) error {
	if gt.limiter == nil {
		return nil
	}
	tool := ""
	if t.Kind == pipeline.Tool {
		tool = t.Original
	}
	v := gt.limiter.Allow(ctx, limit.Request{Principal: req.Client.Principal, Upstream: t.Upstream, Tool: tool})
	if v.Allowed {
		return nil
	}
	req.Decisions = append(req.Decisions, audit.Decision{Check: "rate_limit", Effect: config.EffectDeny, Rule: v.Limit, DryRun: dryRun})
	if dryRun {
		return nil
	}
	return &pipeline.Refusal{Reason: pipeline.ReasonRateLimited, Upstream: t.Upstream, RetryAfter: v.RetryAfter,
		Message: fmt.Sprintf("rate limited (%s): try again in %s", v.Limit, v.RetryAfter.Round(100e6))}
}

// hiddenRefusal is the refusal of a hidden target: that of a missing one (refusal table).
func hiddenRefusal(t *pipeline.Target) error {
	switch t.Kind {
	case pipeline.Tool:
		return &pipeline.Refusal{Reason: pipeline.ReasonUnknownTool, Message: "unknown tool: " + t.Exposed}
	case pipeline.Prompt:
		return &pipeline.Refusal{Reason: pipeline.ReasonUnknownPrompt, Message: "unknown prompt: " + t.Exposed}
	case pipeline.Resource:
		return &pipeline.Refusal{Reason: pipeline.ReasonResourceNotFound, Message: "resource not found: " + t.Exposed}
	case pipeline.Completion:
		// As the resolver answers a completion of a prompt or template it does not know.
		if t.Completes == pipeline.Prompt {
			return protocol.Errorf(protocol.CodeInvalidParams, "unknown prompt: %s", t.Exposed)
		}
		return protocol.Errorf(protocol.CodeInvalidParams, "unknown resource template: %s", t.Exposed)
	}
	return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Message: "not found: " + t.Exposed}
}

// policyInput is what the rules decide on for target t of principal who: the entry the
// resolver found, as it was listed.
func policyInput(who session.Principal, t *pipeline.Target) policy.Input {
	in := policy.Input{Principal: who, Upstream: t.Upstream, Kind: t.Kind, Name: t.Original, Arguments: t.Arguments}
	switch t.Kind {
	case pipeline.Tool:
		in.Annotations = annotationsOf(t.Annotations)
	case pipeline.Completion:
		// A completion is about a prompt's argument or a resource template's.
		in.Kind = t.Completes
	}
	return in
}

// annotationsOf reads a tool's annotation hints from its raw annotations; nil when it has
// none, or ones that cannot be read (the rules then take the spec's defaults).
func annotationsOf(raw json.RawMessage) *policy.Annotations {
	a, _ := policy.ParseAnnotations(raw)
	return a
}

// viewOf returns the catalog client sees: its profile's, less what the policy hides from its
// principal. Views are shared by the principals whose rule outcomes are the same.
func (g *Gateway) viewOf(client pipeline.ClientContext) *catalog.Snapshot {
	snap := g.catalogOf(client.Profile)
	gt := g.gate
	if gt == nil {
		return snap
	}
	key := gt.current().rules.ViewKey(client.Principal)
	if client.SessionID != "" {
		// Only for a session live here: one that ended meanwhile must leave nothing behind.
		if prev, ok := gt.seen.Load(client.SessionID); (!ok || prev.(sessionView).key != key) && g.hub.Lookup(client.SessionID) != nil {
			gt.seen.Store(client.SessionID, sessionView{key: key, principal: client.Principal})
		}
	}
	return gt.view(snap, client.Profile, key, client.Principal)
}

// view returns snap as the principals of view key see it, cached until snap is replaced.
func (gt *gate) view(snap *catalog.Snapshot, profile, key string, who session.Principal) *catalog.Snapshot {
	cacheKey := profile + "\x00" + key
	base := viewBase{snap: snap, rules: gt.current()}
	gt.mu.Lock()
	if gt.base[profile] != base {
		for k := range gt.views {
			if len(k) > len(profile) && k[:len(profile)+1] == profile+"\x00" {
				delete(gt.views, k)
			}
		}
		gt.base[profile] = base
	}
	v := gt.views[cacheKey]
	gt.mu.Unlock()
	if v != nil {
		return v
	}
	v = filterView(base.rules.rules, snap, who)
	gt.mu.Lock()
	if gt.base[profile] == base {
		gt.views[cacheKey] = v
	}
	gt.mu.Unlock()
	return v
}

// filterView cuts snap to what rules let who see.
func filterView(rules *policy.Rules, snap *catalog.Snapshot, who session.Principal) *catalog.Snapshot {
	return snap.Filter(func(e *catalog.Entry, k upstream.Kind) bool {
		in := policy.Input{Principal: who, Upstream: e.Namespace.Name, Kind: kindOf(k), Name: e.Original}
		if k == upstream.Tools {
			in.Annotations = annotationsOf(e.Annotations())
		}
		return rules.Visible(in)
	})
}

// kindOf is the pipeline kind of a catalog list's items.
func kindOf(k upstream.Kind) pipeline.Kind {
	switch k {
	case upstream.Tools:
		return pipeline.Tool
	case upstream.Prompts:
		return pipeline.Prompt
	}
	return pipeline.Resource
}

// forgetView drops what the gate remembers of an ended session.
func (gt *gate) forgetView(sessionID string) {
	if gt != nil {
		gt.seen.Delete(sessionID)
	}
}

// changedFor returns, for a session here, the list_changed notifications its own view needs
// after the catalog went from prev to next; ok is false when the gate knows no view of the
// session (it has not listed yet: it gets the catalog's own changes).
func (gt *gate) changedFor(sessionID string, prev, next *catalog.Snapshot, memo map[string][]string) (changed []string, ok bool) {
	if gt == nil {
		return nil, false
	}
	sv, found := gt.seen.Load(sessionID)
	if !found {
		return nil, false
	}
	v := sv.(sessionView)
	memoKey := fmt.Sprintf("%p\x00%s", next, v.key)
	if c, done := memo[memoKey]; done {
		return c, true
	}
	rules := gt.current().rules
	c := listsChanged(filterView(rules, prev, v.principal), filterView(rules, next, v.principal))
	memo[memoKey] = c
	return c, true
}

// auditHidden records, for the audit trail only, the decision that hid a tool or prompt the
// client named: to the client it is unknown, as a missing one.
func (g *requestPipeline) auditHidden(rq *request, kind pipeline.Kind, name string) {
	if g.gate == nil {
		return
	}
	full := g.catalogOf(rq.Client.Profile)
	e := full.Tool(name)
	if kind == pipeline.Prompt {
		e = full.Prompt(name)
	}
	if e == nil {
		return
	}
	t := &pipeline.Target{Kind: kind, Upstream: e.Namespace.Name, Exposed: name, Original: e.Original}
	if kind == pipeline.Tool {
		t.Annotations = e.Annotations()
	}
	d := g.gate.rulesOf(rq.rules).rules.Decide(policyInput(rq.Client.Principal, t))
	rq.Decisions = append(rq.Decisions, audit.Decision{Check: "policy", Effect: d.Effect, Rule: d.Rule, DryRun: d.DryRun})
}

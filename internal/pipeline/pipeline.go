// Package pipeline is the vocabulary of the gateway's request pipeline (design.md, "Request
// pipeline and state"): every client request, whatever face brought it, becomes a Request
// value; one resolver turns it into a Target; a Chain of Checks decides; the gateway forwards
// it; the Chain's after steps (Inspectors) see the result; Map turns every failure into the
// wire form of the refusal table (design decision 7). Auth, policy, rate limits, plugins and
// approval are links of the Chain: they import this package, and the gateway imports them,
// never the other way round.
//
//	chain := pipeline.Chain{authCheck, policyCheck, pipeline.Link{Before: decide, After: redact}, approval}
//	if err := chain.Check(ctx, req, t); err != nil { ... }  // before steps, in order
//	result, err = chain.Inspect(ctx, req, t, result)        // after steps, in reverse order
package pipeline

import (
	"context"
	"encoding/json"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// ClientContext is what the pipeline knows of the client behind one request (design decision
// 12): a 2025 session supplies it from its record, a 2026-07-28 request will carry it itself.
// It is a value: nothing below the face holds a live session.
type ClientContext struct {
	// SessionID is the client's session, "" for a request without one.
	SessionID       string
	ProtocolVersion string
	// Capabilities are what the client declared, raw.
	Capabilities json.RawMessage
	// Principal is who the client is; zero (anonymous) until authentication.
	Principal session.Principal
	// LogLevel is the level the client asked for, "" for none.
	LogLevel string
	// Profile is the virtual endpoint (/mcp/<profile>) the client uses, "" for /mcp: the
	// catalog it sees and addresses.
	Profile string
}

// Request is one client request.
type Request struct {
	// ID is the client's JSON-RPC id.
	ID     protocol.ID
	Method string
	Params json.RawMessage
	Client ClientContext
	// LogID names the request in the gateway's logs and audit records.
	LogID string
	// Received is when the face took the request.
	Received time.Time
	// Decisions are what the policy chain decided on the way, in order, for the request's
	// audit record; checks append to it.
	Decisions []audit.Decision
	// Inputs are the rounds of input the upstream asked the client for, for the audit
	// record: set, before the request is served, for a request whose upstream may ask; nil
	// otherwise.
	Inputs *audit.InputLog
	// Approval names who asked that a person approve the call before it runs: a policy
	// rule's name, or "plugin NAME"; "" when none did. The approval check, the chain's last
	// link, asks.
	Approval string
	// Continues is set for a 2026-07-28 retry that continues a call the rate limits counted
	// in an earlier round: its requestState, sealed by the gateway, carried a round token
	// not spent before. The rate limits do not count it again; the rules still decide it.
	Continues bool
}

// Kind is what a request addresses.
type Kind int

const (
	// Gateway: the gateway answers itself (ping, lists, logging level, tasks/list).
	Gateway Kind = iota
	Tool
	Prompt
	Resource
	// Completion: completion/complete of a prompt's or a resource template's argument.
	Completion
	// Task: tasks/get, tasks/result, tasks/cancel of one task.
	Task
)

var kindNames = [...]string{Gateway: "gateway", Tool: "tool", Prompt: "prompt", Resource: "resource", Completion: "completion", Task: "task"}

func (k Kind) String() string { return kindNames[k] }

// Target is what the resolver found a request to address: the upstream that serves it, and the
// item by the name the client used and by the upstream's own. Checks decide on it; policy
// matches the upstream's own names (renames are presentation).
type Target struct {
	Kind Kind
	// Upstream is the name of the upstream that serves the request; "" for Gateway.
	Upstream string
	// Exposed is the tool or prompt name, or the resource URI, as the client sent it.
	Exposed string
	// Original is the same in the upstream's own terms.
	Original string
	// Arguments are a tools/call's or prompts/get's arguments, raw; nil when none.
	Arguments json.RawMessage
	// Annotations are a tool's annotations as its catalog entry lists them, raw; nil for
	// other targets and tools without any.
	Annotations json.RawMessage
	// Completes is, for a Completion, what is completed: Prompt or Resource (a template).
	Completes Kind
	// Rewritten: a check replaced Arguments, and the upstream gets them instead of the
	// client's.
	Rewritten bool
	// Hidden: the item is hidden from the client, or not in its catalog at all, and the
	// request is refused as for a missing one. Its audit record names it as the client asked
	// (Exposed), never the upstream or the upstream's own name of what is hidden.
	Hidden bool
}

// Check is the before step of a link of the policy chain: it runs after the request is
// resolved and before it is forwarded. It returns nil to let the request go on, or an error
// that refuses it: a *Refusal says why in the terms of the refusal table; any other error is
// an internal failure. It may rewrite t.Arguments (setting t.Rewritten) and append to
// req.Decisions.
type Check interface {
	Check(ctx context.Context, req *Request, t *Target) error
}

// CheckFunc adapts a function to Check.
type CheckFunc func(ctx context.Context, req *Request, t *Target) error

// Check implements Check.
func (f CheckFunc) Check(ctx context.Context, req *Request, t *Target) error { return f(ctx, req, t) }

// Inspector is the optional after step of a link: a Check that also implements Inspector sees
// the result of a request it let go on before the client does (found by type assertion, as
// an optional ability). Inspect returns the result to pass on: result itself when it passes
// unchanged, or another JSON object (a redaction, a rewrite). An error withholds the result:
// the client gets the error's wire form (pipeline.Map) instead, and later after steps do not
// run. t names what the result is of (see Chain.Inspect).
type Inspector interface {
	Inspect(ctx context.Context, req *Request, t *Target, result json.RawMessage) (json.RawMessage, error)
}

// InspectFunc adapts a function to Inspector.
type InspectFunc func(ctx context.Context, req *Request, t *Target, result json.RawMessage) (json.RawMessage, error)

// Inspect implements Inspector.
func (f InspectFunc) Inspect(ctx context.Context, req *Request, t *Target, result json.RawMessage) (json.RawMessage, error) {
	return f(ctx, req, t, result)
}

// Link is a link of the chain made of a before step and an after step, either of which may
// be nil (a nil Before allows, a nil After passes the result on).
type Link struct {
	Before CheckFunc
	After  InspectFunc
}

// Check implements Check with l.Before.
func (l Link) Check(ctx context.Context, req *Request, t *Target) error {
	if l.Before == nil {
		return nil
	}
	return l.Before(ctx, req, t)
}

// Inspect implements Inspector with l.After.
func (l Link) Inspect(ctx context.Context, req *Request, t *Target, result json.RawMessage) (json.RawMessage, error) {
	if l.After == nil {
		return result, nil
	}
	return l.After(ctx, req, t, result)
}

// Chain is the two-sided policy chain: its links' before steps run in order before the
// request is forwarded, and the first refusal ends it; the after steps of the links that
// have one run in reverse order on the result, each seeing what the one after it returned,
// as middleware nests (the first link's after step has the last word). The empty Chain
// allows everything and passes results unchanged. A Chain is a Check and an Inspector
// itself, so chains nest.
type Chain []Check

// Check implements Check: the before steps, in order.
func (c Chain) Check(ctx context.Context, req *Request, t *Target) error {
	for _, check := range c {
		if err := check.Check(ctx, req, t); err != nil {
			return err
		}
	}
	return nil
}

// Inspect implements Inspector: the after steps, in reverse order; an error ends it. The
// gateway calls it on the result of every request that addresses an upstream's item and got
// one: tools/call (not one run as a task: its result comes with tasks/result),
// tasks/result, resources/read, prompts/get and completion/complete. t is what the result
// is of: the request's target, except for tasks/result, where it is the tool call the task
// ran (Kind Tool, Exposed and Original the tool's names), req.Method staying tasks/result.
func (c Chain) Inspect(ctx context.Context, req *Request, t *Target, result json.RawMessage) (json.RawMessage, error) {
	for i := len(c) - 1; i >= 0; i-- {
		in, ok := c[i].(Inspector)
		if !ok {
			continue
		}
		var err error
		if result, err = in.Inspect(ctx, req, t, result); err != nil {
			return nil, err
		}
	}
	return result, nil
}

// Interface guards.
var (
	_ Check     = Chain(nil)
	_ Inspector = Chain(nil)
	_ Check     = Link{}
	_ Inspector = Link{}
)

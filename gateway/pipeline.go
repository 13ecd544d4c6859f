package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/tracing"
	"github.com/manifold-mcp/manifold/policy"
	"github.com/manifold-mcp/manifold/upstream"
)

// The request pipeline (design.md, "Request pipeline and state"): a face hands over a
// request; resolve finds its target, the policy chain's before steps decide, execute forwards
// it, the chain's after steps see its result, and pipeline.Map turns every failure into its
// wire form; one audit record follows.

// request is one client request on its way through the pipeline: the request value, and
// where what upstreams send about it goes.
type request struct {
	*pipeline.Request
	// plugins are the policy plugins the request took when it began, with the chain it
	// passes: the same to its end, whatever a reload puts in force meanwhile.
	plugins *pluginsInForce
	// rules are the policy's rules, rate limits and dry run the request took with its
	// plugins (nil without a gate): a reload swaps both at once, so a request is decided by
	// the old rules and plugins or the new, never one of each.
	rules *gateRules
	// owner routes the upstreams' messages about the request to its client's stream; nil
	// when the face gives the request no stream.
	owner *callOwner
	// declared are the client capabilities a 2026-07-28 request declared, which its
	// upstreams may ask of the client through input-required results (mrtr.go); nil for a
	// request of the 2025-11-25 era, to which no such result is relayed.
	declared *modern.ClientCapabilities
	// connections name the replicas holding the session's own upstream connections
	// (session.Record.Connections).
	connections map[string]string
	// approval is the answer a retry brought to the approval its user was asked
	// (approval_mrtr.go); nil for any other request.
	approval *approvalAnswer
	// continued is set for the retry that continues, with its upstream, a call approved in
	// an earlier round (approval_mrtr.go); nil otherwise.
	continued *approvalContinued
	// connecting is set for the retry of a 2026-07-28 client that was asked to connect its
	// account at the upstream (useroauth.go): it waits for the grant before it is asked again.
	connecting bool
	// sent is set once the request is handed to its upstream's connection, or to the replica
	// holding it (call): from then on it may have run. Until then (resolving, the checks, an
	// approval wait) it has not.
	sent atomic.Bool
}

// requestPipeline is the path of every client request, whatever face brought it (design.md,
// "Request pipeline and state"): resolve the target in the catalog the principal sees, pass
// the chain's before steps, forward, pass its after steps, map failures to the wire, write
// the audit record. It is the gateway seen from one request: it reads the gateway's state and
// keeps none of its own.
type requestPipeline struct{ *Gateway }

// resolved is a request's target as the resolver found it, with what forwarding needs.
type resolved struct {
	target pipeline.Target
	// upstream serves the request; nil when the gateway answers itself.
	upstream *upstreamEntry
	// scheme is the upstream's URI scheme, for rewriting URIs in the result.
	scheme string
	// params are the request's params in the upstream's terms.
	params json.RawMessage
	// task is the record of the task a tasks/get, tasks/result or tasks/cancel addresses.
	task session.TaskRecord
	// asTask: a tools/call to be run as a task.
	asTask bool
}

// serve takes a request through the pipeline and returns the result or the JSON-RPC error
// its client gets.
func (g *requestPipeline) serve(ctx context.Context, rq *request) (json.RawMessage, *protocol.Error) {
	ctx, span := g.startRequestSpan(ctx, rq)
	defer span.End()
	var leave func()
	rq.plugins, rq.rules, leave = g.plugins.take(g.gate)
	defer leave()
	ctx = withGateRules(ctx, rq.rules)
	res, err := g.resolve(ctx, rq)
	var t *pipeline.Target
	if res != nil {
		t = &res.target // a refusal of the resolver may name what was addressed
		targetSpan(span, rq.Method, res)
	}
	var result json.RawMessage
	if err == nil {
		// A check that asks the client (approval) does so on the request's own stream; a
		// 2026-07-28 client is asked with an input_required result instead of the call's.
		checkCtx := context.WithValue(ctx, ownerKey{}, rq.owner)
		if rq.approval != nil {
			checkCtx = context.WithValue(checkCtx, approvalAnswerKey{}, rq.approval)
		}
		if rq.continued != nil {
			checkCtx = context.WithValue(checkCtx, approvalContinuedKey{}, rq.continued)
		}
		err = rq.plugins.checks.Check(checkCtx, rq.Request, t)
		var asked *approvalAsked
		if errors.As(err, &asked) {
			return g.finish(ctx, rq.Request, t, asked.result, nil)
		}
	}
	if err == nil {
		result, err = g.execute(ctx, rq, res)
		var asked *inputAsked
		if errors.As(err, &asked) {
			// The gateway asks the client for input of its own (a connect): that round's
			// answer is not the call's, and no after step sees it.
			return g.finish(ctx, rq.Request, t, asked.result, nil)
		}
	}
	if err == nil {
		// The chain's after steps, in one place for every kind of result a client gets.
		// An input_required result is not the item's: they see the result of the round
		// that completes the call.
		if of := inspectedTarget(rq.Method, res); of != nil && !asksForInput(result) {
			result, err = rq.plugins.checks.Inspect(ctx, rq.Request, of, result)
		}
	}
	return g.finish(ctx, rq.Request, t, result, err)
}

// finish maps how a request ended to the wire and writes its audit record.
func (g *requestPipeline) finish(ctx context.Context, req *pipeline.Request, t *pipeline.Target, result json.RawMessage, err error) (json.RawMessage, *protocol.Error) {
	logger := g.logger
	if err != nil {
		// Only a failure is logged: a success does not pay for naming the session.
		logger = logger.With("session", fingerprint(req.Client.SessionID))
		if g.tracer != nil {
			logger = logger.With("trace_id", tracing.TraceID(ctx))
		}
	}
	result, wireErr, outcome := pipeline.Map(req, t, result, err, logger)
	failSpan(ctx, req.Method, result, outcome)
	g.writeAudit(ctx, req, t, outcome)
	return result, wireErr
}

// resolve turns method and params into a target: the one place where names and URIs are
// looked up. A name that is not in the catalog is refused here, before any check; a refused
// resource still comes with its target, so that the refusal names the URI.
func (g *requestPipeline) resolve(ctx context.Context, rq *request) (*resolved, error) {
	snap := g.viewOf(rq.Client)
	params := rq.Params
	// The gateway reads some members and forwards the bytes: a member given twice would be
	// read as one value here and as another upstream (by a parser that takes the last).
	if dup, err := protocol.DuplicateMember(params); err != nil {
		return nil, invalidParams(err)
	} else if dup != "" {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: the member %s appears twice: send each member once", dup)
	}
	switch rq.Method {
	case protocol.MethodCallTool, protocol.MethodGetPrompt:
		return g.resolveNamed(ctx, rq, snap, params)
	case protocol.MethodReadResource, protocol.MethodSubscribe, protocol.MethodUnsubscribe:
		return g.resolveResource(ctx, rq, snap, params)
	case protocol.MethodComplete:
		return g.resolveCompletion(snap, params)
	case methodTasksGet, methodTasksResult, methodTasksCancel:
		if !hasTasks(rq.Client.ProtocolVersion) {
			break
		}
		rec, u, err := g.tasks.find(ctx, rq, params)
		if err != nil {
			return nil, err
		}
		forward, err := withMember(params, "taskId", rec.UpstreamID)
		if err != nil {
			return nil, err
		}
		return &resolved{upstream: u, scheme: u.ns.Scheme, params: forward, task: rec,
			target: pipeline.Target{Kind: pipeline.Task, Upstream: u.ns.Name, Exposed: rec.ID, Original: rec.UpstreamID}}, nil
	case methodTasksList:
		if !hasTasks(rq.Client.ProtocolVersion) {
			break
		}
		return &resolved{target: pipeline.Target{Kind: pipeline.Gateway}}, nil
	case protocol.MethodPing, protocol.MethodInitialize, protocol.MethodSetLogLevel,
		protocol.MethodListTools, protocol.MethodListResources, protocol.MethodListResourceTemplates, protocol.MethodListPrompts:
		return &resolved{target: pipeline.Target{Kind: pipeline.Gateway}}, nil
	}
	return nil, protocol.Errorf(protocol.CodeMethodNotFound, "method not found: %s", rq.Method)
}

// resolveNamed resolves a tools/call or prompts/get: the tool or prompt it names, in the
// client's view snap, and the params to forward.
func (g *requestPipeline) resolveNamed(ctx context.Context, rq *request, snap *catalog.Snapshot, params json.RawMessage) (*resolved, error) {
	name, err := nameParams(params)
	if err != nil {
		return nil, err
	}
	kind, what, entry := pipeline.Tool, "tool", snap.Tool(name)
	if rq.Method == protocol.MethodGetPrompt {
		kind, what, entry = pipeline.Prompt, "prompt", snap.Prompt(name)
	}
	if entry == nil {
		// Right after the gateway started, the name may be of an upstream still making
		// its first attempt to start: the request waits for it as a list does
		// (first_list_wait), then looks again (awaitMerge reads the catalog anew).
		g.awaitFirstStart(ctx)
		// A name its upstream listed before it went down (it is restarting) is
		// unavailable, for a client that saw it, until the catalog has merged the
		// upstream's return; any other is unknown.
		var former *catalog.Entry
		var why error
		if entry, former, why = g.awaitMerge(ctx, rq, kind, name); entry == nil && former == nil {
			g.auditHidden(rq, kind, name)
			// The record names what was asked for, as it was asked: nothing of what exists.
			asked := &resolved{target: pipeline.Target{Kind: kind, Exposed: name, Hidden: true}}
			if g.audit.arguments() {
				asked.target.Arguments, _, _ = protocol.Member(params, "arguments")
			}
			return asked, unknownName(kind, what, name)
		}
		if entry == nil {
			// Refused before the checks, so that no one is asked to approve a call that
			// cannot run, nor decides on the former entry's annotations.
			return &resolved{target: pipeline.Target{Kind: kind, Upstream: former.Namespace.Name, Exposed: name, Original: former.Original}},
				unavailable(rq, former.Namespace.Name, name, why)
		}
	}
	forward, err := withMember(params, "name", entry.Original)
	if err != nil {
		return nil, err
	}
	res := &resolved{upstream: g.upstreamOf(entry.Namespace), scheme: entry.Namespace.Scheme, params: forward,
		target: pipeline.Target{Kind: kind, Upstream: entry.Namespace.Name, Exposed: name, Original: entry.Original}}
	if kind == pipeline.Tool && (g.gate != nil || rq.plugins.host != nil) {
		res.target.Annotations = entry.Annotations()
	}
	if len(rq.plugins.checks) > 0 || g.audit.arguments() {
		// Only checks and the audit trail read the arguments: without them, the request
		// does not pay for it.
		res.target.Arguments, _, _ = protocol.Member(params, "arguments")
	}
	if err := g.unwrapRequestState(ctx, rq, res); err != nil {
		return res, err
	}
	if kind == pipeline.Tool {
		_, res.asTask, _ = protocol.Member(params, "task")
		if res.asTask && !upstreamTaskCaps(res.upstream).callsAsTasks() {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream of %s does not run tools as tasks: call it without \"task\"", name)
		}
	}
	return res, nil
}

// resolveResource resolves a resources/read, subscribe or unsubscribe: the resource its URI
// names, in the client's view snap, and the params to forward.
func (g *requestPipeline) resolveResource(ctx context.Context, rq *request, snap *catalog.Snapshot, params json.RawMessage) (*resolved, error) {
	uri, ok, err := protocol.StringMember(params, "uri")
	if err != nil || !ok || uri == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"uri\" must be a non-empty string")
	}
	target := pipeline.Target{Kind: pipeline.Resource, Exposed: uri}
	ns, original, ok := snap.ResolveURI(uri)
	if rq.Method == protocol.MethodUnsubscribe && !ok {
		// Undoing a subscription needs only its owner: the URI may have stopped being
		// readable since (a template no longer listed), and its updates must stop.
		ns, original, ok = g.snapshot.Load().Owner(uri)
	}
	if !ok {
		return &resolved{target: target}, &pipeline.Refusal{Reason: pipeline.ReasonResourceNotFound, Message: "resource not found: " + uri}
	}
	forward, err := withMember(params, "uri", original)
	if err != nil {
		return nil, err
	}
	target.Upstream, target.Original = ns.Name, original
	res := &resolved{upstream: g.upstreamOf(ns), scheme: ns.Scheme, params: forward, target: target}
	if rq.Method == protocol.MethodReadResource {
		if err := g.unwrapRequestState(ctx, rq, res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// formerEntry returns the tool or prompt of that name as its upstream listed it before it went
// down, from the last known catalog of each upstream that is down (catalog.Builder.Former),
// when the client would see it there: its profile admits it and the policy does not hide it
// from the client's principal. Otherwise nil: to that client the name is unknown, as a hidden
// item is indistinguishable from a missing one.
func (g *requestPipeline) formerEntry(rq *request, snap *catalog.Snapshot, kind pipeline.Kind, name string) *catalog.Entry {
	k := upstream.Tools
	if kind == pipeline.Prompt {
		k = upstream.Prompts
	}
	e := g.builder.Former(k, name)
	if e == nil || !snap.Admits(e.Namespace, k, name) {
		return nil
	}
	if g.gate != nil {
		// As the client's view of the catalog is cut (filterView).
		in := policy.Input{Principal: rq.Client.Principal, Upstream: e.Namespace.Name, Kind: kind, Name: e.Original}
		if k == upstream.Tools {
			in.Annotations = annotationsOf(e.Annotations())
		}
		if !g.gate.rulesOf(rq.rules).rules.Visible(in) {
			return nil
		}
	}
	return e
}

// mergeWait bounds how long a call to a tool or prompt of an upstream that is back waits
// for the catalog to merge its return. A rebuild follows every return at once and takes
// milliseconds, unless it reads pins from a store that is slow to answer (at most 5 s), and
// one rebuild may be running before it.
const mergeWait = 10 * time.Second

// awaitMerge finds the tool or prompt (kind) of that name, which the client's view of the
// catalog did not hold when its request was resolved. It returns entry when the client's
// view of the current catalog has it. Otherwise former is its entry from the last catalog of
// an upstream that is down (catalog.Builder.Former), visible to the client, with why it
// cannot be called: the upstream is down, or it is back and the catalog did not merge its
// lists within mergeWait or before ctx ended. Both nil: the name is unknown to the client.
//
// An upstream that is back has lists the former entry may not match: a changed definition
// that pinning has not checked yet (it would be withheld), annotations that policy rules read.
// So a call is never decided on the former entry: it waits for the rebuild that follows
// every return and is resolved against that.
func (g *requestPipeline) awaitMerge(ctx context.Context, rq *request, kind pipeline.Kind, name string) (entry, former *catalog.Entry, why error) {
	var bound *time.Timer
	for {
		rebuilt := g.rebuiltSignal() // before the snapshot is read, so that no rebuild is missed
		snap := g.viewOf(rq.Client)
		if entry = snap.Tool(name); kind == pipeline.Prompt {
			entry = snap.Prompt(name)
		}
		if entry != nil {
			return entry, nil, nil
		}
		if former = g.formerEntry(rq, snap, kind, name); former == nil {
			return nil, nil, nil
		}
		if g.upstreamOf(former.Namespace).Catalog() == nil {
			return nil, former, upstream.ErrUnavailable
		}
		if bound == nil {
			if g.beforeMergeWait != nil {
				g.beforeMergeWait()
			}
			bound = time.NewTimer(mergeWait)
			defer bound.Stop()
		}
		select {
		case <-rebuilt:
		case <-bound.C:
			return nil, former, fmt.Errorf("upstream %s is back, and the catalog did not merge its lists within %s: %w", former.Namespace.Name, mergeWait, upstream.ErrUnavailable)
		case <-ctx.Done():
			return nil, former, fmt.Errorf("waiting for the catalog to merge the lists of upstream %s: %w (%w)", former.Namespace.Name, upstream.ErrUnavailable, ctx.Err())
		}
	}
}

// unknownName refuses a tool or prompt name not in the catalog.
func unknownName(kind pipeline.Kind, what, name string) error {
	reason := pipeline.ReasonUnknownTool
	if kind == pipeline.Prompt {
		reason = pipeline.ReasonUnknownPrompt
	}
	return &pipeline.Refusal{Reason: reason, Message: fmt.Sprintf("unknown %s: %s", what, name)}
}

// resolveCompletion finds the prompt or resource template a completion/complete refers to.
func (g *requestPipeline) resolveCompletion(snap *catalog.Snapshot, params json.RawMessage) (*resolved, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil {
		return nil, invalidParams(err)
	}
	var ref map[string]json.RawMessage
	if err := json.Unmarshal(m["ref"], &ref); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"ref\" must be an object")
	}
	var refType string
	_ = json.Unmarshal(ref["type"], &refType)
	var ns *catalog.Namespace
	var exposed, original string
	completes := pipeline.Prompt
	switch refType {
	case "ref/prompt":
		_ = json.Unmarshal(ref["name"], &exposed)
		e := snap.Prompt(exposed)
		if e == nil {
			return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown prompt: %s", exposed)
		}
		ns, original = e.Namespace, e.Original
		ref["name"], _ = json.Marshal(original)
	case "ref/resource":
		completes = pipeline.Resource
		_ = json.Unmarshal(ref["uri"], &exposed)
		// A listed template, or a resource URI the client may read; a template the catalog
		// does not list (dropped, or outside the profile) is unknown.
		if e := snap.Template(exposed); e != nil {
			ns, original = e.Namespace, e.Original
		} else {
			var ok bool
			if ns, original, ok = snap.ResolveURI(exposed); !ok || strings.Contains(exposed, "{") {
				return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown resource template: %s", exposed)
			}
		}
		ref["uri"], _ = json.Marshal(original)
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: ref.type must be \"ref/prompt\" or \"ref/resource\"")
	}
	m["ref"], _ = json.Marshal(ref)
	forward, err := json.Marshal(m)
	if err != nil {
		return nil, invalidParams(err)
	}
	return &resolved{upstream: g.upstreamOf(ns), scheme: ns.Scheme, params: forward,
		target: pipeline.Target{Kind: pipeline.Completion, Upstream: ns.Name, Exposed: exposed, Original: original, Completes: completes}}, nil
}

// execute forwards a resolved request, or answers it when the gateway serves it itself.
func (g *requestPipeline) execute(ctx context.Context, rq *request, res *resolved) (json.RawMessage, error) {
	switch rq.Method {
	case protocol.MethodPing:
		return json.RawMessage(`{}`), nil
	case protocol.MethodInitialize:
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "this session is already initialized; to start over, send initialize without MCP-Session-Id")
	case protocol.MethodSetLogLevel:
		return g.setLogLevel(ctx, rq, rq.Params)
	case protocol.MethodListTools:
		g.awaitFirstStart(ctx)
		page, err := listPage(g.viewOf(rq.Client), upstream.Tools, rq.Params, g.cfg.PageSize)
		if err != nil {
			return nil, err
		}
		if slices.Contains(protocol.ModernVersions, rq.Client.ProtocolVersion) {
			page = withoutTaskRequiredTools(page)
		}
		if !clientDeclaresTasks(rq.Client) {
			page = hideTaskSupport(page, upstream.Tools)
		}
		return bridgeListPage(page, upstream.Tools, rq.Client.ProtocolVersion), nil
	case protocol.MethodListResources:
		g.awaitFirstStart(ctx)
		return listPage(g.viewOf(rq.Client), upstream.Resources, rq.Params, g.cfg.PageSize)
	case protocol.MethodListResourceTemplates:
		g.awaitFirstStart(ctx)
		return listPage(g.viewOf(rq.Client), upstream.ResourceTemplates, rq.Params, g.cfg.PageSize)
	case protocol.MethodListPrompts:
		g.awaitFirstStart(ctx)
		return listPage(g.viewOf(rq.Client), upstream.Prompts, rq.Params, g.cfg.PageSize)
	case protocol.MethodCallTool:
		if res.target.Rewritten {
			params, err := withRawMember(res.params, "arguments", res.target.Arguments)
			if err != nil {
				return nil, err
			}
			res.params = params
		}
		began := time.Now()
		result, err := g.forward(ctx, rq, res, rq.Method, res.params)
		g.metrics.set.ObserveToolCall(res.target.Upstream, time.Since(began))
		switch {
		case err != nil:
			return nil, err
		case asksForInput(result):
			return g.relayInputRequired(rq, res, result)
		case res.asTask:
			return g.tasks.start(ctx, rq, res.upstream, &res.target, result)
		}
		return bridgeToolResult(catalog.ExposeContentURIs(result, res.scheme), rq.Client.ProtocolVersion), nil
	case protocol.MethodGetPrompt:
		if res.target.Rewritten {
			params, err := withRawMember(res.params, "arguments", res.target.Arguments)
			if err != nil {
				return nil, err
			}
			res.params = params
		}
		result, err := g.forward(ctx, rq, res, rq.Method, res.params)
		if err != nil {
			return nil, err
		}
		if asksForInput(result) {
			return g.relayInputRequired(rq, res, result)
		}
		return bridgePromptResult(catalog.ExposeContentURIs(result, res.scheme), rq.Client.ProtocolVersion), nil
	case protocol.MethodReadResource:
		result, err := g.forward(ctx, rq, res, rq.Method, res.params)
		if err != nil {
			return nil, err
		}
		if asksForInput(result) {
			return g.relayInputRequired(rq, res, result)
		}
		return catalog.ExposeReadURIs(result, res.scheme)
	case protocol.MethodComplete:
		if info := res.upstream.Server(); info != nil && info.Capabilities.Completions == nil {
			// The upstream offers no completions: an empty answer, not an error (mcp-notes §1.3).
			return json.RawMessage(`{"completion":{"values":[]}}`), nil
		}
		return g.forward(ctx, rq, res, rq.Method, res.params)
	case protocol.MethodSubscribe, protocol.MethodUnsubscribe:
		if ua := g.userAuthOf(res.upstream); ua != nil && rq.Method == protocol.MethodSubscribe {
			// A subscription runs on the user's own connection, which needs the user's grant.
			if err := ua.ready(ctx, rq, res); err != nil {
				return nil, err
			}
		}
		return g.subs.subscribe(ctx, rq, res, rq.Method == protocol.MethodSubscribe)
	case methodTasksList:
		return g.tasks.list(ctx, rq)
	case methodTasksGet, methodTasksResult, methodTasksCancel:
		return g.tasks.request(ctx, rq, res)
	}
	return nil, protocol.Errorf(protocol.CodeMethodNotFound, "method not found: %s", rq.Method)
}

func listPage(snap *catalog.Snapshot, k upstream.Kind, params json.RawMessage, pageSize int) (json.RawMessage, error) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, invalidParams(err)
		}
	}
	return snap.Page(k, p.Cursor, pageSize)
}

func invalidParams(err error) *protocol.Error {
	return protocol.Errorf(protocol.CodeInvalidParams, "invalid params: %v", err)
}

func (g *requestPipeline) setLogLevel(ctx context.Context, rq *request, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Level string `json:"level"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams(err)
	}
	if !slices.Contains(protocol.LogLevels, p.Level) {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid log level %q: use one of %v", p.Level, protocol.LogLevels)
	}
	if rq.Client.SessionID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "logging/setLevel needs a session: its level applies to the session's later messages")
	}
	if _, err := g.store.Update(ctx, rq.Client.SessionID, func(r *session.Record) { r.LogLevel = p.Level }); err != nil {
		return nil, fmt.Errorf("store log level: %w", err)
	}
	g.logs.setLevel(ctx, rq.Client.SessionID, p.Level)
	return json.RawMessage(`{}`), nil
}

// nameParams reads the name a tools/call or prompts/get addresses.
func nameParams(params json.RawMessage) (string, error) {
	name, ok, err := protocol.StringMember(params, "name")
	if err != nil {
		return "", invalidParams(err)
	}
	if !ok || name == "" {
		return "", protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"name\" must be a non-empty string")
	}
	return name, nil
}

// withMember returns params with the string member key set to value; the rest keeps its bytes.
func withMember(params json.RawMessage, key, value string) (json.RawMessage, error) {
	return withRawMember(params, key, protocol.AppendString(nil, value))
}

// withRawMember returns params with member key set to the JSON value raw.
func withRawMember(params json.RawMessage, key string, raw json.RawMessage) (json.RawMessage, error) {
	out, err := protocol.SetMember(params, key, raw)
	if err != nil {
		return nil, invalidParams(err)
	}
	return out, nil
}

// forward sends a request to the upstream res names, on the request's behalf, and types its
// failures for pipeline.Map: the upstream's JSON-RPC errors as such, an upstream that is down,
// too slow or out of connections as a refusal.
func (g *requestPipeline) forward(ctx context.Context, rq *request, res *resolved, method string, params json.RawMessage) (json.RawMessage, error) {
	defer res.upstream.calls.enter()() // a reload that removes the upstream lets it finish
	if res.upstream.retired.Load() {
		// Resolved before a reload removed or replaced the upstream, and not begun since:
		// what it addressed may mean something else now.
		return nil, &pipeline.Refusal{Reason: pipeline.ReasonUpstreamUnavailable, Upstream: res.upstream.ns.Name,
			Message: fmt.Sprintf("upstream %s was removed or reconfigured by a configuration reload while this request waited: send it again", res.upstream.ns.Name)}
	}
	ua := g.userAuthOf(res.upstream)
	var began time.Time
	if ua != nil {
		if err := ua.ready(ctx, rq, res); err != nil {
			return nil, err
		}
		began = time.Now() // a verdict on the user's token after it is this call's
	}
	result, err := g.call(ctx, rq, res.upstream, method, params)
	if err != nil && ua != nil {
		if asked := ua.afterFailure(ctx, rq, res, began, err); asked != err {
			return nil, asked
		}
	}
	if err == nil && asksForInput(result) && bridgesInput(rq, method) {
		result, err = g.bridgeInput(ctx, rq, res.upstream.ns.Name, method, params, result, func(ctx context.Context, params json.RawMessage) (json.RawMessage, error) {
			return g.call(ctx, rq, res.upstream, method, params)
		})
	}
	if err == nil {
		return result, nil
	}
	var rpcErr *upstreamRPCError
	if errors.As(err, &rpcErr) {
		if method == protocol.MethodReadResource && !isModernVersion(rq.Client.ProtocolVersion) && isNotFoundOf2026(rpcErr.Err) {
			// Clients of 2025-11-25 and before expect -32002 for a resource not found.
			translated := *rpcErr.Err
			translated.Code = protocol.CodeResourceNotFound
			rpcErr = &upstreamRPCError{Err: &translated}
		}
		if rpcErr.Err.Code == protocol.CodeURLElicitationRequired && rq.owner != nil {
			g.router.rememberRequiredElicitations(res.upstream.connKey(rq.Client.SessionID), rq.owner.sessionID, rpcErr.Err.Data)
		}
		return nil, &pipeline.UpstreamError{Upstream: res.upstream.ns.Name, Err: rpcErr.Err}
	}
	if errors.Is(err, upstream.ErrHeaderMismatch) {
		// Not the client's -32020: its own headers reached the gateway fine. The upstream
		// refused the gateway's, recomputed from its freshly fetched tool list as well.
		g.logger.WarnContext(ctx, "a 2026-07-28 upstream refused a call's Mcp-* headers twice, the second time after its tool list was fetched again", "request_id", rq.LogID, "upstream", res.upstream.ns.Name, "error", err.Error())
		return nil, protocol.Errorf(protocol.CodeInternalError, "upstream %s refused the gateway's Mcp-Param headers for %s even after its tool list was fetched again: the upstream's headers disagree with its own tool schema; report it to the upstream's operator", res.upstream.ns.Name, res.target.Exposed)
	}
	if errors.Is(err, upstream.ErrResponseTooLarge) {
		// The gateway's own limit: the client may know it, to ask for less.
		g.logger.WarnContext(ctx, "an upstream's answer was over max_response_bytes and was dropped", "request_id", rq.LogID, "upstream", res.upstream.ns.Name, "error", err.Error())
		return nil, protocol.Errorf(protocol.CodeInternalError, "the answer of upstream %s exceeds the gateway's max_response_bytes: ask for less", res.upstream.ns.Name)
	}
	return nil, unavailable(rq, res.upstream.ns.Name, res.target.Exposed, err)
}

// isNotFoundOf2026 reports whether an upstream's error to resources/read is "resource not
// found" as 2026-07-28 writes it, and as some servers already answer at 2025-11-25: -32602
// (Invalid params) with the URI in data, where 2025-11-25 has -32002.
func isNotFoundOf2026(e *protocol.Error) bool {
	if e.Code != protocol.CodeInvalidParams || len(e.Data) == 0 {
		return false
	}
	var data struct {
		URI *string `json:"uri"`
	}
	return json.Unmarshal(e.Data, &data) == nil && data.URI != nil
}

// upstreamRPCError is a JSON-RPC error the upstream answered, told apart from the gateway's own.
type upstreamRPCError struct{ Err *protocol.Error }

func (e *upstreamRPCError) Error() string { return e.Err.Error() }

// unavailable types the failure to reach an upstream as a refusal of the table (design
// decision 7): down, too slow, out of connections, or gone while the request ran there.
// Other errors pass.
func unavailable(rq *request, upstreamName, item string, err error) error {
	toolCall := rq.Method == protocol.MethodCallTool
	switch {
	case errors.Is(err, upstream.ErrInterrupted):
		// It went out and may have run: not a request to send again as it is.
		msg := fmt.Sprintf("upstream %s became unavailable before it answered; the request may have run in part upstream: check before sending it again", upstreamName)
		if toolCall {
			msg = fmt.Sprintf("The tool %s may have run in part: its upstream server %q became unavailable before it answered. Check whether it took effect before calling it again.", item, upstreamName)
		}
		return &pipeline.Refusal{Reason: pipeline.ReasonUpstreamInterrupted, Message: msg, Upstream: upstreamName, Cause: err}
	case errors.Is(err, upstream.ErrUnavailable):
		msg := fmt.Sprintf("upstream %s is unavailable; try again later", upstreamName)
		if toolCall {
			msg = fmt.Sprintf("The tool %s is unavailable because its upstream server %q is not connected. Try again later.", item, upstreamName)
		}
		return &pipeline.Refusal{Reason: pipeline.ReasonUpstreamUnavailable, Message: msg, Upstream: upstreamName, Cause: err}
	case errors.Is(err, errConnectionLimit):
		msg := "the upstream has its maximum of connections open for other sessions; try again later"
		if toolCall {
			msg = fmt.Sprintf("The tool %s is unavailable: its upstream server %q already has its maximum of connections open for other sessions. Try again later.", item, upstreamName)
		}
		return &pipeline.Refusal{Reason: pipeline.ReasonConnectionLimit, Message: msg, Upstream: upstreamName, Cause: err}
	case errors.Is(err, upstream.ErrTimeout):
		msg := "the upstream did not answer in time; try again later"
		if toolCall {
			msg = fmt.Sprintf("The tool %s did not finish within the gateway's time limit for upstream %q. Try again, or with a smaller request.", item, upstreamName)
		}
		return &pipeline.Refusal{Reason: pipeline.ReasonUpstreamTimeout, Message: msg, Upstream: upstreamName, Cause: err}
	}
	return err
}

// call sends a client's request to an upstream on that client's behalf, on the shared
// connection or, for an isolated upstream, the session's own: it carries its owner and
// session to the connection (so that what the upstream sends about it can be routed), and its
// progress token is replaced by one of the gateway's own. A JSON-RPC error the upstream
// answered comes back as an *upstreamRPCError.
func (g *requestPipeline) call(ctx context.Context, rq *request, u *upstreamEntry, method string, params json.RawMessage) (json.RawMessage, error) {
	rq.sent.Store(true)
	if u.pool != nil && g.replicas != nil {
		// The session's own connection lives on one replica: the call runs there.
		if holder := holderOf(g.replicas, rq, u); holder != "" {
			if result, err, forwarded := forwardCall(ctx, g.replicas, rq, u, holder, method, params); forwarded {
				return result, err
			}
		}
	}
	return g.callHere(ctx, rq, u, method, params)
}

// callHere is call on a connection of this replica.
func (g *requestPipeline) callHere(ctx context.Context, rq *request, u *upstreamEntry, method string, params json.RawMessage) (json.RawMessage, error) {
	c := u.shared
	if u.pool != nil {
		var pc *pooledConn
		var err error
		switch {
		case rq.Client.SessionID != "":
			pc, err = u.pool.get(ctx, rq.Client.SessionID, rq.Client.Principal)
		case rq.owner != nil && rq.owner.direct != nil:
			// A 2026-07-28 request: its principal's connection, or one for this call alone.
			pc, err = u.pool.getForCall(ctx, rq.Client.Principal)
		default:
			return nil, &pipeline.Refusal{Reason: pipeline.ReasonUpstreamUnavailable, Upstream: u.ns.Name,
				Message: fmt.Sprintf("upstream %s has a connection per session (isolation), and this request has no session", u.ns.Name)}
		}
		if err != nil {
			return nil, err
		}
		defer u.pool.release(pc)
		c = pc.conn
		if rq.Client.LogLevel != "" {
			// The level may have been set through another replica: this connection follows
			// the session's record (a no-op when it is at that level already).
			g.logs.setUpstreamLevel(ctx, c, rq.Client.LogLevel)
		}
	}
	if rq.owner != nil && rq.owner.direct != nil && rq.Client.LogLevel != "" {
		// A 2026-07-28 request asks for log messages itself: the connection must send them.
		g.logs.admitLevel(ctx, c, rq.Client.LogLevel)
	}
	if rq.owner != nil {
		var forget func()
		var err error
		params, forget, err = g.router.remapProgress(c, rq.owner, params)
		if err != nil {
			return nil, invalidParams(err)
		}
		defer forget()
		ctx = upstream.WithCaller(ctx, rq.owner, rq.owner.party())
	}
	info := c.client.Server()
	ctx, span, params := g.startUpstreamSpan(ctx, u, method, params)
	result, err := c.client.Call(withRelayedCapabilities(ctx, rq, info != nil && isModernVersion(info.ProtocolVersion)), method, params)
	endUpstreamSpan(span, err)
	var rpcErr *protocol.Error
	if errors.As(err, &rpcErr) {
		return nil, &upstreamRPCError{Err: rpcErr}
	}
	if err == nil && asksForInput(result) && !relaysInput(rq, method) && !bridgesInput(rq, method) {
		// No method but three may answer so, and a call the gateway makes for itself has no
		// client to ask: asking anyway is the upstream's fault, and its interim result must
		// not reach a client as if it were the answer.
		return nil, protocol.Errorf(protocol.CodeInternalError,
			"upstream %s answered input_required, asking the client for input the gateway did not offer it: the gateway cannot relay such requests to this client", u.ns.Name)
	}
	return result, err
}

// asksForInput reports whether an upstream's result is a 2026-07-28 input_required result.
// It is asked of every result, several times on its way: a result without the word, every
// 2025-11-25 one, costs a byte search rather than a walk of its members.
func asksForInput(result json.RawMessage) bool {
	if !bytes.Contains(result, []byte(protocol.ResultTypeInputRequired)) {
		return false
	}
	rt, ok, err := protocol.StringMember(result, "resultType")
	return err == nil && ok && rt == protocol.ResultTypeInputRequired
}

// hasTasks reports whether a protocol version has tasks (2025-11-25 on).
func hasTasks(version string) bool { return !olderThan(version, protocol.Version20251125) }

// clientDeclaresTasks reports whether the client declared the tasks capability (and speaks a
// version that has tasks).
func clientDeclaresTasks(cc pipeline.ClientContext) bool {
	if !hasTasks(cc.ProtocolVersion) {
		return false
	}
	_, ok, _ := protocol.Member(cc.Capabilities, "tasks")
	return ok
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/manifold-mcp/manifold/catalog"
	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// clientContext is what the router knows of the client behind one request (design decision
// 12): a 2025 session supplies it from its record; nothing below the face assumes a session.
type clientContext struct {
	SessionID       string
	ProtocolVersion string
	Capabilities    json.RawMessage
	LogLevel        string
	// owner is the client request being served, for routing what upstreams send about it.
	owner *callOwner
}

// dispatch serves one client request after the session checks, and returns its result or an
// error for toWireError.
func (g *Gateway) dispatch(ctx context.Context, cc *clientContext, req *protocol.Request) (json.RawMessage, error) {
	snap := g.snapshot.Load()
	switch req.Method {
	case protocol.MethodPing:
		return json.RawMessage(`{}`), nil
	case protocol.MethodInitialize:
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "this session is already initialized; to start over, send initialize without MCP-Session-Id")
	case protocol.MethodSetLogLevel:
		return g.setLogLevel(ctx, cc, req.Params)
	case protocol.MethodListTools:
		page, err := listPage(snap, upstream.Tools, req.Params, g.cfg.PageSize)
		if err != nil {
			return nil, err
		}
		if !clientDeclaresTasks(cc) {
			page = hideTaskSupport(page, upstream.Tools)
		}
		return bridgeListPage(page, upstream.Tools, cc.ProtocolVersion), nil
	case protocol.MethodListResources:
		return listPage(snap, upstream.Resources, req.Params, g.cfg.PageSize)
	case protocol.MethodListResourceTemplates:
		return listPage(snap, upstream.ResourceTemplates, req.Params, g.cfg.PageSize)
	case protocol.MethodListPrompts:
		return listPage(snap, upstream.Prompts, req.Params, g.cfg.PageSize)
	case protocol.MethodCallTool:
		return g.callTool(ctx, cc, snap, req.Params)
	case protocol.MethodGetPrompt:
		return g.getPrompt(ctx, cc, snap, req.Params)
	case protocol.MethodReadResource:
		return g.readResource(ctx, cc, snap, req.Params)
	case protocol.MethodComplete:
		return g.complete(ctx, cc, snap, req.Params)
	case methodTasksGet, methodTasksResult, methodTasksCancel, methodTasksList:
		if olderThan(cc.ProtocolVersion, protocol.Version20251125) {
			break // tasks exist from 2025-11-25 on
		}
		if req.Method == methodTasksList {
			return g.listTasks(ctx, cc)
		}
		return g.taskRequest(ctx, cc, req.Method, req.Params)
	case protocol.MethodSubscribe:
		return g.subscribe(ctx, cc, snap, req.Params, true)
	case protocol.MethodUnsubscribe:
		return g.subscribe(ctx, cc, snap, req.Params, false)
	}
	return nil, protocol.Errorf(protocol.CodeMethodNotFound, "method not found: %s", req.Method)
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

func (g *Gateway) setLogLevel(ctx context.Context, cc *clientContext, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Level string `json:"level"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams(err)
	}
	if !slices.Contains(protocol.LogLevels, p.Level) {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid log level %q: use one of %v", p.Level, protocol.LogLevels)
	}
	if _, err := g.store.Update(ctx, cc.SessionID, func(r *session.Record) { r.LogLevel = p.Level }); err != nil {
		return nil, fmt.Errorf("store log level: %w", err)
	}
	g.syncLogLevels(ctx)
	g.syncSessionLogLevel(ctx, cc.SessionID, p.Level)
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
	out, err := protocol.SetMember(params, key, protocol.AppendString(nil, value))
	if err != nil {
		return nil, invalidParams(err)
	}
	return out, nil
}

// unavailableError is a call to an item whose upstream is not connected.
type unavailableError struct {
	upstream string
	cause    error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("upstream %s is unavailable: %v", e.upstream, e.cause)
}
func (e *unavailableError) Unwrap() error { return e.cause }

func (g *Gateway) callTool(ctx context.Context, cc *clientContext, snap *catalog.Snapshot, params json.RawMessage) (json.RawMessage, error) {
	name, err := nameParams(params)
	if err != nil {
		return nil, err
	}
	e := snap.Tool(name)
	if e == nil {
		if ns := g.builder.FormerOwner(upstream.Tools, name); ns != nil && g.upstreamOf(ns).Catalog() == nil {
			return unavailableResult(ns.Name, "upstream_unavailable",
				fmt.Sprintf("The tool %s is unavailable because its upstream server %q is not connected. Try again later.", name, ns.Name)), nil
		}
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown tool: %s", name)
	}
	u := g.upstreamOf(e.Namespace)
	forward, err := withMember(params, "name", e.Original)
	if err != nil {
		return nil, err
	}
	_, asTask, _ := protocol.Member(params, "task")
	if asTask && !upstreamTaskCaps(u).callsAsTasks() {
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream of %s does not run tools as tasks: call it without \"task\"", name)
	}
	result, err := g.call(ctx, cc, u, protocol.MethodCallTool, forward)
	switch {
	case err == nil && asTask:
		return g.startTask(ctx, cc, u, result)
	case err == nil:
		return bridgeToolResult(catalog.ExposeContentURIs(result, e.Namespace.Scheme), cc.ProtocolVersion), nil
	case errors.Is(err, upstream.ErrUnavailable):
		g.logger.Warn("tools/call to an unavailable upstream", "upstream", u.ns.Name, "tool", name, "error", err.Error())
		return unavailableResult(u.ns.Name, "upstream_unavailable",
			fmt.Sprintf("The tool %s is unavailable because its upstream server %q is not connected. Try again later.", name, u.ns.Name)), nil
	case errors.Is(err, errConnectionLimit):
		g.logger.Warn("tools/call refused: the upstream's isolated connections are all in use", "upstream", u.ns.Name, "tool", name)
		return unavailableResult(u.ns.Name, "connection_limit",
			fmt.Sprintf("The tool %s is unavailable: its upstream server %q already has its maximum of connections open for other sessions. Try again later.", name, u.ns.Name)), nil
	case errors.Is(err, upstream.ErrTimeout):
		g.logger.Warn("tools/call timed out", "upstream", u.ns.Name, "tool", name, "error", err.Error())
		return unavailableResult(u.ns.Name, "upstream_timeout",
			fmt.Sprintf("The tool %s did not finish within the gateway's time limit for upstream %q. Try again, or with a smaller request.", name, u.ns.Name)), nil
	}
	return nil, err
}

// unavailableResult is the tool result for a call the gateway could not complete (design
// decision 7): the model sees a message it can act on; programs read _meta.
func unavailableResult(upstreamName, reason, message string) json.RawMessage {
	res, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": message}},
		"isError": true,
		"_meta":   map[string]string{metaReason: reason, metaUpstream: upstreamName},
	})
	return res
}

// Keys of the gateway's own _meta entries.
const (
	metaReason   = "dev.manifold/reason"
	metaUpstream = "dev.manifold/upstream"
	// metaRetryAfter says, in seconds, when a refused call may be tried again.
	metaRetryAfter = "dev.manifold/retryAfterSeconds"
)

func (g *Gateway) getPrompt(ctx context.Context, cc *clientContext, snap *catalog.Snapshot, params json.RawMessage) (json.RawMessage, error) {
	name, err := nameParams(params)
	if err != nil {
		return nil, err
	}
	e := snap.Prompt(name)
	if e == nil {
		if ns := g.builder.FormerOwner(upstream.Prompts, name); ns != nil && g.upstreamOf(ns).Catalog() == nil {
			return nil, &unavailableError{upstream: ns.Name, cause: upstream.ErrUnavailable}
		}
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown prompt: %s", name)
	}
	forward, err := withMember(params, "name", e.Original)
	if err != nil {
		return nil, err
	}
	result, err := g.forward(ctx, cc, g.upstreamOf(e.Namespace), protocol.MethodGetPrompt, forward)
	if err != nil {
		return nil, err
	}
	return bridgePromptResult(catalog.ExposeContentURIs(result, e.Namespace.Scheme), cc.ProtocolVersion), nil
}

// forward calls an upstream for a method other than tools/call, typing its failures.
func (g *Gateway) forward(ctx context.Context, cc *clientContext, u *upstreamEntry, method string, params json.RawMessage) (json.RawMessage, error) {
	result, err := g.call(ctx, cc, u, method, params)
	if errors.Is(err, upstream.ErrUnavailable) {
		return nil, &unavailableError{upstream: u.ns.Name, cause: err}
	}
	return result, err
}

func (g *Gateway) readResource(ctx context.Context, cc *clientContext, snap *catalog.Snapshot, params json.RawMessage) (json.RawMessage, error) {
	uri, ok, err := protocol.StringMember(params, "uri")
	if err != nil {
		return nil, invalidParams(err)
	}
	if !ok || uri == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"uri\" must be a non-empty string")
	}
	ns, original, ok := snap.ResolveURI(uri)
	if !ok {
		return nil, resourceNotFound(uri)
	}
	forward, err := withMember(params, "uri", original)
	if err != nil {
		return nil, err
	}
	result, err := g.forward(ctx, cc, g.upstreamOf(ns), protocol.MethodReadResource, forward)
	if err != nil {
		var rpcErr *protocol.Error
		if errors.As(err, &rpcErr) && rpcErr.Code == protocol.CodeResourceNotFound {
			return nil, resourceNotFound(uri)
		}
		return nil, err
	}
	return catalog.ExposeReadURIs(result, ns.Scheme)
}

func resourceNotFound(uri string) *protocol.Error {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &protocol.Error{Code: protocol.CodeResourceNotFound, Message: "resource not found: " + uri, Data: data}
}

func (g *Gateway) complete(ctx context.Context, cc *clientContext, snap *catalog.Snapshot, params json.RawMessage) (json.RawMessage, error) {
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
	switch refType {
	case "ref/prompt":
		var name string
		_ = json.Unmarshal(ref["name"], &name)
		e := snap.Prompt(name)
		if e == nil {
			return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown prompt: %s", name)
		}
		ns = e.Namespace
		ref["name"], _ = json.Marshal(e.Original)
	case "ref/resource":
		var uri string
		_ = json.Unmarshal(ref["uri"], &uri)
		var original string
		var ok bool
		if ns, original, ok = snap.ResolveURI(uri); !ok {
			return nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown resource template: %s", uri)
		}
		ref["uri"], _ = json.Marshal(original)
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: ref.type must be \"ref/prompt\" or \"ref/resource\"")
	}
	u := g.upstreamOf(ns)
	if info := u.Server(); info != nil && info.Capabilities.Completions == nil {
		// The upstream offers no completions: an empty answer, not an error (mcp-notes §1.3).
		return json.RawMessage(`{"completion":{"values":[]}}`), nil
	}
	m["ref"], _ = json.Marshal(ref)
	forward, err := json.Marshal(m)
	if err != nil {
		return nil, invalidParams(err)
	}
	return g.forward(ctx, cc, u, protocol.MethodComplete, forward)
}

// call sends a client's request to an upstream on that client's behalf, on the shared
// connection or, for an isolated upstream, the session's own: it carries its owner and
// session to the connection (so that what the upstream sends about it can be routed), and its
// progress token is replaced by one of the gateway's own.
func (g *Gateway) call(ctx context.Context, cc *clientContext, u *upstreamEntry, method string, params json.RawMessage) (json.RawMessage, error) {
	c := u.shared
	if cc.owner == nil {
		return c.client.Call(ctx, method, params)
	}
	if u.pool != nil {
		pc, err := u.pool.get(ctx, cc.SessionID)
		if err != nil {
			return nil, err
		}
		defer u.pool.release(pc)
		c = pc.conn
	}
	params, forget, err := g.remapProgress(c, cc.owner, params)
	if err != nil {
		return nil, invalidParams(err)
	}
	defer forget()
	return c.client.Call(upstream.WithCaller(ctx, cc.owner, cc.SessionID), method, params)
}

// clientDeclaresTasks reports whether the client declared the tasks capability (and speaks a
// version that has tasks).
func clientDeclaresTasks(cc *clientContext) bool {
	if olderThan(cc.ProtocolVersion, protocol.Version20251125) {
		return false
	}
	_, ok, _ := protocol.Member(cc.Capabilities, "tasks")
	return ok
}

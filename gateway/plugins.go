package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/plugin"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// reasonPluginUnavailable: a plugin that fails closed could not decide (crashed, timed out).
const reasonPluginUnavailable = "plugin_unavailable"

// startPlugins starts cfg's policy plugins; nil when there are none. Each sees the calls its
// methods, upstreams and tools select.
func startPlugins(ctx context.Context, cfg *config.Config, logger *slog.Logger) (*plugin.Host, error) {
	if len(cfg.Plugins) == 0 {
		return nil, nil
	}
	specs := make([]plugin.Spec, len(cfg.Plugins))
	for i, p := range cfg.Plugins {
		upstreams, err := glob.CompileSet(p.Upstreams)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d].upstreams: %w", i, err)
		}
		targets, err := glob.CompileSet(p.Tools)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d].tools: %w", i, err)
		}
		methods := p.Methods
		env := make([]string, 0, len(p.Env))
		for _, k := range slices.Sorted(maps.Keys(p.Env)) {
			env = append(env, k+"="+p.Env[k])
		}
		specs[i] = plugin.Spec{Name: p.Name, Path: p.Path, SHA256: p.SHA256, Config: p.Config, Timeout: p.Timeout,
			FailOpen: p.Failure == config.FailOpenPlugin, Env: env,
			Sees: func(c plugin.Call) bool {
				return pluginSees(methods, c.Method) && (len(p.Upstreams) == 0 || upstreams.Match(c.Upstream)) &&
					(len(p.Tools) == 0 || targets.Match(c.Target))
			}}
	}
	host, err := plugin.Start(ctx, specs, &plugin.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("plugins (%s): %w", cfg.File, err)
	}
	return host, nil
}

// pluginSees reports whether a plugin whose config names methods is asked about a request of
// method: a tasks/result is its tool call's result, seen by the plugins that see tools/call.
func pluginSees(methods []string, method string) bool {
	if method == methodTasksResult {
		method = protocol.MethodCallTool
	}
	return slices.Contains(methods, method)
}

// pluginCall is what the plugins are told of a request.
func pluginCall(req *pipeline.Request, t *pipeline.Target) plugin.Call {
	p := req.Client.Principal
	return plugin.Call{
		Principal:          plugin.Principal{Issuer: p.Issuer, Subject: p.Subject, Email: p.Email, Groups: p.Groups, Roles: p.Roles, Scopes: p.Scopes},
		SessionFingerprint: sessionFingerprint(req.Client.SessionID),
		Upstream:           t.Upstream, Method: req.Method, Target: t.Original, Exposed: t.Exposed,
		Arguments: t.Arguments, Annotations: t.Annotations,
	}
}

// pluginLink is the plugins' link of the policy chain: host's plugins, which a request asks
// before it is forwarded and which inspect its result.
type pluginLink struct {
	g    *Gateway
	host *plugin.Host
}

// check is the plugins' before step: it asks them about a call, after the policy's rules
// and rate limits and before approval (design decision 7): the first deny refuses it, a
// rewrite replaces its arguments, and a plugin may ask that a person approve it. As the rules
// do, it decides a completion/complete on the prompt or resource template it completes (the
// call's Target); only a tool call's arguments can be rewritten, and only a tool call held.
func (l pluginLink) check(ctx context.Context, req *pipeline.Request, t *pipeline.Target) error {
	if t == nil || t.Kind != pipeline.Tool && t.Kind != pipeline.Prompt && t.Kind != pipeline.Resource && t.Kind != pipeline.Completion {
		return nil
	}
	began := time.Now()
	out, err := l.host.Decide(ctx, pluginCall(req, t))
	l.g.metrics.set.ObservePlugins("decide", time.Since(began))
	l.noteResults(req, "plugin", out.Results)
	if err != nil {
		return err // the request ended
	}
	unavailable := len(out.Results) > 0 && out.Results[len(out.Results)-1].Err != nil
	switch {
	case out.Effect == plugin.Deny && unavailable:
		return &pipeline.Refusal{Reason: reasonPluginUnavailable, Upstream: t.Upstream, Message: out.Reason}
	case out.Effect == plugin.Deny:
		return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: t.Upstream, Message: out.Reason + " (a policy plugin refused the call)"}
	case out.Effect == plugin.RequireApproval && t.Kind != pipeline.Tool:
		return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: t.Upstream,
			Message: "a policy plugin asks that a person approve this request, and only tool calls can be held for approval"}
	case out.Effect == plugin.RequireApproval && req.Approval == "":
		var asked []string
		for _, r := range out.Results {
			if r.Effect == plugin.RequireApproval {
				asked = append(asked, r.Plugin)
			}
		}
		req.Approval = "plugin " + strings.Join(asked, ", ")
	}
	if out.Arguments != nil {
		if t.Kind != pipeline.Tool {
			return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: t.Upstream,
				Message: "a policy plugin rewrote the arguments of a request whose arguments cannot be rewritten (only a tool call's can)"}
		}
		t.Arguments, t.Rewritten = out.Arguments, true
	}
	return nil
}

// inspect is the plugins' after step: it passes the result of a request through the
// plugins that inspect results (redaction, say) and whose methods name the request's (a
// task's result counts as its tool call's: pluginSees). Each is told the real method. A
// plugin that fails closed withholds the result.
func (l pluginLink) inspect(ctx context.Context, req *pipeline.Request, t *pipeline.Target, result json.RawMessage) (json.RawMessage, error) {
	began := time.Now()
	out, results, err := l.host.Inspect(ctx, pluginCall(req, t), result)
	l.g.metrics.set.ObservePlugins("inspect", time.Since(began))
	l.noteResults(req, "inspect", results)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		reason := "a policy plugin could not inspect the result"
		if n := len(results); n > 0 && results[n-1].Reason != "" {
			reason = results[n-1].Reason
		}
		return nil, &pipeline.Refusal{Reason: reasonPluginUnavailable, Upstream: t.Upstream,
			Message: reason + ": the result is withheld (the request ran upstream)"}
	}
	return out, nil
}

// noteResults records what each plugin decided in the request's audit record, and
// logs a plugin's failure (its details are for operators, never for the client).
func (l pluginLink) noteResults(req *pipeline.Request, check string, results []plugin.Result) {
	for _, r := range results {
		req.Decisions = append(req.Decisions, audit.Decision{Check: check, Effect: r.Effect.String(), Rule: r.Plugin})
		if r.Err != nil {
			l.g.metrics.set.PluginFailed(r.Plugin)
			l.g.logger.Warn("a policy plugin failed", "plugin", r.Plugin, "request_id", req.LogID, "error", r.Err.Error())
		}
	}
}

package gateway

import (
	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/plugin"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// buildChain returns the policy chain every request passes, in the order of design decision
// 7, read top to bottom: who the caller is, what the policy says of the target and how often,
// the plugins, the checks given in Options.Checks, then approval. Before steps run in this
// order before the request is forwarded; after steps (the plugins' inspection of results)
// run in reverse order on its result (pipeline.Chain). plugins run the plugins (nil: none).
// It reads g.auth, g.gate and g.opts.Checks: call it once they are set.
func (g *Gateway) buildChain(plugins *plugin.Host) pipeline.Chain {
	var chain pipeline.Chain
	var names []string // each link's span name, when tracing is on (tracing.go)
	if g.auth != nil {
		chain, names = append(chain, auth.RequirePrincipal()), append(names, "auth")
	}
	if g.gate != nil {
		chain, names = append(chain, pipeline.CheckFunc(g.policyCheck)), append(names, "policy")
	}
	if plugins != nil {
		link := pluginLink{g: g, host: plugins}
		chain, names = append(chain, pipeline.Link{Before: link.check, After: link.inspect}), append(names, "plugins")
	}
	for _, c := range g.opts.Checks {
		chain, names = append(chain, c), append(names, "check")
	}
	if g.gate != nil {
		chain, names = append(chain, pipeline.CheckFunc(g.approvalCheck)), append(names, "approval")
	}
	return tracedChain(g.opts.Tracer, chain, names)
}

// inspectedTarget returns what the result of a request is of, for the chain's after steps,
// or nil when its result is not an upstream's item's and the after steps do not see it: the
// gateway's own answers (lists, ping), a task's status or cancel, and the creation of a task
// (its tool's result comes with tasks/result). A task's result is its tool call's.
func inspectedTarget(method string, res *resolved) *pipeline.Target {
	switch method {
	case methodTasksResult:
		return &pipeline.Target{Kind: pipeline.Tool, Upstream: res.upstream.ns.Name, Exposed: res.task.Exposed, Original: res.task.Tool}
	case protocol.MethodCallTool:
		if res.asTask {
			return nil
		}
	case protocol.MethodReadResource, protocol.MethodGetPrompt, protocol.MethodComplete:
	default:
		return nil
	}
	return &res.target
}

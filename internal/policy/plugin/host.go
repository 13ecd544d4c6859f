package plugin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// Spec describes one plugin to run.
type Spec struct {
	// Name identifies the plugin in logs, the audit trail, and the reason a client is given
	// when the plugin is unavailable. Required, and unique among the Specs given to Start.
	Name string
	// Path is the plugin's executable. Required.
	Path string
	// SHA256 is the executable's SHA-256 checksum in hex (as sha256sum prints it). Required:
	// the Host refuses to start an executable whose checksum differs, at Start and at every
	// restart.
	SHA256 string
	// Config is handed to the plugin's Configure as is: JSON, or empty for none.
	Config json.RawMessage
	// Timeout bounds each call to the plugin; a call that takes longer fails. If zero,
	// defaults to 1 s.
	Timeout time.Duration
	// FailOpen makes a plugin that fails (not running, timed out, returned an error or an
	// invalid answer) be skipped, with a warning logged, instead of denying the call. Safe
	// only for plugins whose checks may be missed, such as advisory ones; the Host logs a
	// warning at Start for each plugin that has it.
	FailOpen bool
	// Env is the plugin's environment, as KEY=VALUE strings, besides the handshake variables
	// go-plugin sets: a plugin does not inherit the gateway's, which holds its secrets.
	Env []string
	// Sees reports whether the plugin is asked about a call (Decide and Inspect alike, by
	// the call's real Method); nil sees every call.
	Sees func(Call) bool
}

// Options configure a Host. The nil *Options means all defaults.
type Options struct {
	// Logger receives the Host's records and the plugins' own (with their "plugin"
	// attribute). If nil, records are discarded.
	Logger *slog.Logger
	// StartTimeout bounds a plugin's start: the process's handshake, then its Configure. It
	// also bounds a health check. If zero, defaults to 10 s.
	StartTimeout time.Duration
	// HealthInterval is how often each running plugin's process is checked; a failed call
	// also checks it at once. If zero, defaults to 5 s.
	HealthInterval time.Duration
	// Backoff returns how long to wait before restart attempt n (1 for the first after a
	// crash; n grows while restarts fail). If nil, 100 ms doubling on each attempt up to 10 s.
	Backoff func(attempt int) time.Duration
}

// Host runs a fixed, ordered set of plugins and asks them about calls. It is safe for
// concurrent use.
type Host struct {
	// procs are the plugins in configuration order; fixed after Start.
	procs []*process

	// stopSupervisors ends the supervisors' context; supervisors counts them. Lifecycle:
	// Close cancels, waits for them, then stops the processes, once (closeOnce).
	stopSupervisors context.CancelFunc
	supervisors     sync.WaitGroup
	closeOnce       sync.Once
}

// Start validates specs, starts every plugin, and configures each with its Spec.Config. It
// fails, having stopped whatever it started, when a Spec is invalid or a plugin cannot start:
// its executable is missing, its checksum differs from the Spec's (a *ChecksumError), it does
// not speak the protocol, or its Configure fails. The error reports every plugin's problem and
// names each plugin. ctx bounds the start only; the Host lives until Close.
func Start(ctx context.Context, specs []Spec, opts *Options) (*Host, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 5 * time.Second
	}
	if o.Backoff == nil {
		o.Backoff = defaultBackoff
	}

	procs, err := validate(specs, &o)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if p.spec.FailOpen {
			p.logger.Warn("policy plugin fails open: while it is unavailable, calls skip it instead of being denied")
		}
	}

	// The plugins start side by side; Start fails if any fails, after all were tried, so
	// that every problem is reported at once.
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range procs {
			p.close()
		}
		return nil, err
	}

	h := &Host{procs: procs}
	supCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.stopSupervisors = cancel
	for _, p := range procs {
		h.supervisors.Go(func() { p.supervise(supCtx) })
	}
	return h, nil
}

// validate checks every Spec, reporting all problems at once, and returns their processes
// (not started), with defaults applied.
func validate(specs []Spec, opts *Options) ([]*process, error) {
	var errs []error
	seen := map[string]bool{}
	procs := make([]*process, 0, len(specs))
	for i, s := range specs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("policy plugin %d (%q): %s", i+1, s.Name, fmt.Sprintf(format, args...)))
		}
		switch {
		case s.Name == "":
			bad("name is required")
		case seen[s.Name]:
			bad("name is used by an earlier plugin")
		}
		seen[s.Name] = true
		if s.Path == "" {
			bad("path is required")
		}
		sum, err := hex.DecodeString(s.SHA256)
		if err != nil || len(sum) != 32 {
			bad("sha256 must be the executable's SHA-256 checksum, 64 hex digits (as sha256sum prints it)")
		}
		if len(s.Config) > 0 && !json.Valid(s.Config) {
			bad("config is not valid JSON")
		}
		if s.Timeout < 0 {
			bad("timeout must not be negative")
		}
		if s.Timeout == 0 {
			s.Timeout = defaultTimeout
		}
		s.Config = append(json.RawMessage(nil), s.Config...)
		s.Env = append([]string(nil), s.Env...)
		procs = append(procs, newProcess(s, sum, opts))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return procs, nil
}

// Close stops the supervisors, then every plugin's process, and waits for them to end; in
// flight calls fail. Calls after Close fail like calls to a crashed plugin (denied, or the
// plugin skipped when it fails open). Close may be called more than once; it always returns
// nil.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.stopSupervisors()
		h.supervisors.Wait()
		var wg sync.WaitGroup
		for _, p := range h.procs {
			wg.Go(p.close)
		}
		wg.Wait()
	})
	return nil
}

// Decide asks the plugins about call, in configuration order:
//   - the first Deny wins: no later plugin is asked;
//   - RequireApproval is remembered and the next plugin asked: the Outcome then requires
//     approval unless a later plugin denies;
//   - Rewrite replaces the arguments that the later plugins see, and that Outcome.Arguments
//     returns for forwarding;
//   - a plugin that fails (it is not running, gives no answer within its Timeout, returns an
//     error, or answers an unknown effect or a rewrite that is not a JSON object) denies the
//     call with a reason that names it and says it is unavailable, or is skipped with a
//     warning logged when its Spec says FailOpen; its Result.Err says what happened.
//
// Plugin failures are never errors: err is non-nil only when ctx ended first, and then the
// Outcome denies. With no plugins, the Outcome allows.
func (h *Host) Decide(ctx context.Context, call Call) (Outcome, error) {
	out := Outcome{Effect: Allow}
	wire := call.toWire()
	var approvals []string
	for _, p := range h.procs {
		if p.spec.Sees != nil && !p.spec.Sees(call) {
			continue
		}
		d, err := invoke(ctx, p, wire, pluginpb.PolicyPluginClient.Decide)
		if err != nil && ctx.Err() != nil {
			return Outcome{Effect: Deny, Results: out.Results}, err
		}
		r := Result{Plugin: p.spec.Name}
		if err == nil {
			err = decisionError(p.spec.Name, d)
		}
		if err != nil {
			if p.failed(&r, err) {
				out.Results = append(out.Results, r)
				continue
			}
			out.Results = append(out.Results, r)
			out.Effect, out.Reason = Deny, r.Reason
			return out, nil
		}
		r.Reason = d.GetReason()
		switch d.GetEffect() {
		case pluginpb.Effect_EFFECT_ALLOW:
			r.Effect = Allow
		case pluginpb.Effect_EFFECT_DENY:
			r.Effect = Deny
			if r.Reason == "" {
				r.Reason = fmt.Sprintf("the policy plugin %q refused the call", p.spec.Name)
			}
			out.Results = append(out.Results, r)
			out.Effect, out.Reason = Deny, r.Reason
			return out, nil
		case pluginpb.Effect_EFFECT_REQUIRE_APPROVAL:
			r.Effect = RequireApproval
			out.Effect = RequireApproval
			if r.Reason != "" {
				approvals = append(approvals, r.Reason)
			}
		case pluginpb.Effect_EFFECT_REWRITE:
			r.Effect = Rewrite
			wire.ArgumentsJson = d.GetArgumentsJson()
			out.Arguments = wire.ArgumentsJson
		}
		out.Results = append(out.Results, r)
	}
	out.Reason = strings.Join(approvals, "; ")
	return out, nil
}

// decisionError returns why d is not a usable decision, or nil.
func decisionError(plugin string, d *pluginpb.Decision) error {
	switch d.GetEffect() {
	case pluginpb.Effect_EFFECT_ALLOW, pluginpb.Effect_EFFECT_DENY, pluginpb.Effect_EFFECT_REQUIRE_APPROVAL:
		return nil
	case pluginpb.Effect_EFFECT_REWRITE:
		if isJSONObject(d.GetArgumentsJson()) {
			return nil
		}
		return &PluginError{Plugin: plugin, Err: fmt.Errorf("rewrite: %w", errNotJSONObject)}
	}
	return &PluginError{Plugin: plugin, Err: fmt.Errorf("invalid effect %v", d.GetEffect())}
}

// failed fills r for p's failure err, and reports whether the caller goes on without p (it
// fails open, and a warning is logged) or must fail closed.
func (p *process) failed(r *Result, err error) (skip bool) {
	r.Err = err
	if p.spec.FailOpen {
		r.Effect = Allow
		p.logger.Warn("policy plugin failed; skipped, as it fails open", "error", err.Error())
		return true
	}
	r.Effect, r.Reason = Deny, unavailableReason(p.spec.Name)
	return false
}

// Inspect passes result, the upstream's result of call.Method for call (a CallToolResult for
// tools/call and tasks/result, a ReadResourceResult, a GetPromptResult, a CompleteResult),
// through the plugins that declared they inspect results and whose Spec.Sees admits call, in
// configuration order, each seeing what the one before returned, and returns what the last
// returned, with each plugin's part (Allow when it passed the result on unchanged, Rewrite
// when it changed it). call is the call as forwarded.
//
// A plugin that fails (as in Decide; a result that is not a JSON object is a failure too) is
// skipped with a warning logged when its Spec says FailOpen; otherwise Inspect returns a nil
// result and that plugin's *PluginError: the result must then not reach the client, who is
// told the plugin's Result.Reason instead. err is also non-nil (ctx's error) when ctx ended
// first.
func (h *Host) Inspect(ctx context.Context, call Call, result json.RawMessage) (json.RawMessage, []Result, error) {
	var results []Result
	var wire *pluginpb.Call
	for _, p := range h.procs {
		if !p.declaresInspect() || p.spec.Sees != nil && !p.spec.Sees(call) {
			continue
		}
		if wire == nil {
			wire = call.toWire()
		}
		resp, err := invoke(ctx, p, &pluginpb.Result{Call: wire, ResultJson: result}, pluginpb.PolicyPluginClient.Inspect)
		if err != nil && ctx.Err() != nil {
			return nil, results, err
		}
		r := Result{Plugin: p.spec.Name, Effect: Allow}
		if out := resp.GetResultJson(); err == nil && len(out) > 0 {
			if !isJSONObject(out) {
				err = &PluginError{Plugin: p.spec.Name, Err: fmt.Errorf("inspect: %w", errNotJSONObject)}
			} else {
				r.Effect, result = Rewrite, out
			}
		}
		if err != nil {
			skip := p.failed(&r, err)
			results = append(results, r)
			if skip {
				continue
			}
			return nil, results, r.Err
		}
		results = append(results, r)
	}
	return result, results, nil
}

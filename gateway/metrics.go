package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/metrics"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/upstream"
)

// NewMetrics returns the metrics of a gateway running cfg (config key `metrics`), labelled
// with its upstreams, plugins and config version; nil when metrics are off. Give it to New
// (Options.Metrics), and to the state backends so that they time their Redis round trips.
func NewMetrics(cfg *config.Config, logger *slog.Logger) *metrics.Set {
	if !cfg.Metrics.On() {
		return nil
	}
	var upstreams, plugins []string
	for _, u := range cfg.EnabledUpstreams() {
		upstreams = append(upstreams, u.Name)
	}
	for _, p := range cfg.Plugins {
		plugins = append(plugins, p.Name)
	}
	return metrics.New(&metrics.Options{Upstreams: upstreams, Plugins: plugins, ConfigVersion: cfg.Version(), Logger: logger})
}

// RedisObserver is what the state backends tell of their round trips to Redis
// (backend.OpenObserved), recorded in m; nil when m is.
func RedisObserver(m *metrics.Set) func(d time.Duration, failed bool) {
	if m == nil {
		return nil
	}
	return m.ObserveRedis
}

// MetricsHandler serves GET /metrics (config key `metrics`) on a listener of its own
// (metrics.listen); nil when metrics are off. On the admin listener, AdminHandler serves it.
func (g *Gateway) MetricsHandler() http.Handler {
	if g.metrics.set == nil {
		return nil
	}
	return g.metrics.set.Handler()
}

// gatewayMetrics is what the gateway records in its metrics; its methods do nothing when
// metrics are off (set nil).
type gatewayMetrics struct {
	set *metrics.Set

	// mu guards ready.
	mu sync.Mutex
	// ready holds the shared upstream clients that were ready once: becoming ready again
	// is a restart or a reconnect.
	ready map[*upstream.Client]bool
}

// pendingScrapeWait bounds how long a scrape waits for the store of held calls.
const pendingScrapeWait = 2 * time.Second

// watchMetrics has the metrics read the gateway's state at each scrape.
func (g *Gateway) watchMetrics() {
	g.metrics.set.Watch(func() metrics.State {
		st := metrics.State{Upstreams: map[string]string{}, StreamBudget: g.cfg.StreamBudgetBytes}
		for name, s := range g.UpstreamStatuses() {
			st.Upstreams[name] = string(s.State)
		}
		for _, s := range g.hub.Sessions() {
			st.Sessions++
			st.Streams += s.StreamsOpen()
		}
		if l, ok := g.hub.(*hub.Local); ok {
			st.StreamBytes = l.HeldBytes()
		}
		if g.held != nil {
			ctx, cancel := context.WithTimeout(g.ctx, pendingScrapeWait)
			defer cancel()
			if pending, err := g.held.Pending(ctx); err == nil {
				st.ApprovalsPending = len(pending)
			}
		}
		return st
	})
}

// observeRequest records a request that ended: its count by method, era and outcome, its
// duration, and the decisions the policy chain took on it. It runs beside its audit record.
func (g *Gateway) observeRequest(ctx context.Context, req *pipeline.Request, outcome pipeline.Outcome) {
	m := g.metrics.set
	if m == nil {
		return
	}
	result := outcome.Result
	switch {
	case ctx.Err() != nil:
		result = audit.OutcomeCancelled // as its audit record says
	case result == audit.OutcomeRefused:
		result = outcome.Reason
	}
	m.ObserveRequest(req.Method, req.Client.ProtocolVersion, result, g.opts.Now().Sub(req.Received))
	for _, d := range req.Decisions {
		m.Decision(d.Check, d.Effect, d.DryRun)
		if d.Check == "approval" && !d.DryRun {
			if o := approvalOutcome(d, outcome.Reason); o != "" {
				m.Approval(o)
			}
		}
	}
}

// approvalOutcome is the outcome, for manifold_approvals_total, of an approval decision on
// a request refused for reason ("" when it was not refused); "" for a decision that is not
// an outcome: the client was asked (the answer comes in a later round), a later round
// continues a call approved before, or a round replayed a spent state.
func approvalOutcome(d audit.Decision, reason string) string {
	switch {
	case d.Rule == "continued" || strings.HasSuffix(d.Rule, ":replayed"):
		return ""
	case d.Effect == "allow" && d.Rule == "remembered":
		return "remembered"
	case d.Effect == "allow":
		return "approved"
	case d.Effect != "deny":
		return ""
	}
	switch reason {
	case reasonApprovalDeclined:
		return "declined"
	case reasonApprovalTimeout:
		return "timed_out"
	case reasonApprovalNeeded:
		return "unavailable"
	}
	return metrics.Other
}

// upstreamChanged counts a shared upstream connection that is ready again, after it was
// ready before: a restart of a stdio upstream, a reconnect of another.
func (g *Gateway) upstreamChanged(c *upstream.Client) {
	gm := &g.metrics
	if gm.set == nil || c.State() != upstream.StateReady {
		return
	}
	shared := false
	for _, u := range g.ups.Load().all {
		shared = shared || u.shared.client == c
	}
	if !shared {
		return // an isolated connection of one session: its first start is the session's
	}
	gm.mu.Lock()
	again := gm.ready[c]
	if gm.ready == nil {
		gm.ready = map[*upstream.Client]bool{}
	}
	gm.ready[c] = true
	gm.mu.Unlock()
	if again {
		gm.set.UpstreamRestarted(c.Name(), c.Spec().Transport == upstream.TransportStdio)
	}
}

// reverseOutcome is the outcome, for manifold_reverse_requests_total, of a request an
// upstream sent toward a client: decided, when the router said so; refused for a capability
// the client lacks when it was not asked; else read from how the asking ended.
func reverseOutcome(ctx context.Context, decided string, asked bool, err error) string {
	switch {
	case decided != "":
		return decided
	case !asked:
		return "refused_capability"
	case err == nil:
		return "answered"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "timed_out"
	case ctx.Err() != nil:
		return "cancelled"
	}
	return "client_error"
}

// outcome is the outcome, for manifold_reverse_requests_total, of a request refused for
// having no owner.
func (why noOwner) outcome() string {
	switch why {
	case onSharedStandalone:
		return "refused_standalone"
	case ambiguous:
		return "refused_ambiguous"
	}
	return "refused_outside_calls"
}

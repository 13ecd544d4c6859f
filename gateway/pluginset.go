package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/plugin"
)

// pluginSet is the policy plugins in force, which a reload replaces whole: each request takes
// the set in force when it begins, with the policy chain built on it, and keeps both to its
// end (its decision and the inspection of its result are the same plugins'); a set a reload
// replaced is stopped once the requests that took it have ended, or drain_timeout has
// passed. Safe for concurrent use.
type pluginSet struct {
	// mu orders takes before swaps: a request takes the set in force, and is counted in it,
	// while mu is held for reading; a swap holds it for writing, so that once a set is
	// swapped out no request takes it any more and its count only falls.
	mu sync.RWMutex
	// cur is the set in force. Invariant: never nil. Guarded by mu.
	cur *pluginsInForce

	// chain builds the policy chain with a set's plugins (nil host: none); the rest start
	// and stop sets: set once, at New.
	chain        func(*plugin.Host) pipeline.Chain
	logger       *slog.Logger
	goWorker     func(func()) bool
	ctx          context.Context // the gateway's lifetime
	drainTimeout time.Duration
}

// pluginsInForce is one set of plugins, and the chain every request that takes it passes.
type pluginsInForce struct {
	// host runs the plugins; nil when there are none.
	host *plugin.Host
	// plugins are their settings.
	plugins []config.Plugin
	// checks is the policy chain with these plugins (buildChain).
	checks pipeline.Chain
	// calls counts the requests that took the set, for its stop to wait for.
	calls inFlight
}

// take returns the set in force, counted until leave is called (once the request ends), and
// the rules of gt in force with it (nil when gt is): a reload swaps both under mu
// (replace).
func (s *pluginSet) take(gt *gate) (in *pluginsInForce, rules *gateRules, leave func()) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if gt != nil {
		rules = gt.current()
	}
	return s.cur, rules, s.cur.calls.enter()
}

// swap puts in in force, unless nil, and returns the set it replaced (nil when none); with,
// unless nil, runs while no request takes a set.
func (s *pluginSet) swap(in *pluginsInForce, with func()) (old *pluginsInForce) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if with != nil {
		with()
	}
	if in == nil {
		return nil
	}
	old, s.cur = s.cur, in
	return old
}

// stop stops in's plugins once the requests that took it have ended, for ctx at most; it
// reports whether they had.
func (in *pluginsInForce) stop(ctx context.Context) (drained bool) {
	drained = in.calls.wait(ctx)
	if in.host != nil {
		_ = in.host.Close() // always nil
	}
	return drained
}

// unreloadable is why the gateway cannot go to next's plugins while it runs; "" when it can.
// gated tells whether the gateway has a gate, whose approval step a plugin may ask for.
func (s *pluginSet) unreloadable(next *config.Config, gated bool) string {
	if !gated && len(next.Plugins) > 0 {
		// A chain without the approval step would let a call a plugin wants approved run
		// unapproved.
		return "plugins: this gateway started without a policy or plugins, so it has no approval step that a plugin may ask for: restart it to add plugins"
	}
	return ""
}

// prepare starts next's plugins, not yet in force; a plugin that cannot start refuses the
// reload, with those started stopped (plugin.Start).
func (s *pluginSet) prepare(ctx context.Context, next *config.Config) (*pluginsInForce, error) {
	host, err := startPlugins(ctx, next, s.logger)
	if err != nil {
		return nil, err
	}
	return &pluginsInForce{host: host, plugins: next.Plugins, checks: s.chain(host)}, nil
}

// discard stops a set prepare started for a reload that was refused.
func (s *pluginSet) discard(in *pluginsInForce) {
	if in != nil && in.host != nil {
		_ = in.host.Close()
	}
}

// replace puts in, unless nil, in force for the requests that begin from now on, with what
// with puts in force (the rules: take gives a request both, old or new), and stops the set it
// replaced once the requests that took it have ended (drain_timeout at most), off the
// reload's path.
func (s *pluginSet) replace(in *pluginsInForce, with func()) {
	old := s.swap(in, with)
	if old == nil {
		return
	}
	s.logger.Info("policy plugins replaced by a reload: the previous ones stop once their requests have ended", "plugins", len(in.plugins))
	retire := func() {
		ctx, cancel := context.WithTimeout(s.ctx, s.drainTimeout)
		defer cancel()
		if !old.stop(ctx) {
			s.logger.Warn("policy plugins replaced by a reload stopped with requests still running past drain_timeout: those get the answer of a plugin that is unavailable", "drain_timeout", s.drainTimeout.String())
		}
	}
	if !s.goWorker(retire) {
		// The gateway is closing, and its requests are ending: stop them now.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = old.stop(ctx)
	}
}

// close stops the plugins in force (at the gateway's Close, once no request is left).
func (s *pluginSet) close() {
	if s == nil {
		return
	}
	in := s.swap(&pluginsInForce{checks: s.chain(nil)}, nil)
	if in.host != nil {
		if err := in.host.Close(); err != nil {
			s.logger.Warn("stopping the policy plugins failed", "error", err.Error())
		}
	}
}

// Package limit enforces the rate limits of the policy chain (config key policy.rate_limits).
// A limit counts requests per principal, per principal and upstream, per principal and tool,
// or per upstream, optionally only for some upstreams, tools and principals (the principal
// matchers of the policy's rules, package principal); it counts them in this
// process (a token bucket of golang.org/x/time/rate per key) or, when shared, in Redis for
// all replicas together (GCRA, one Lua script per check, github.com/go-redis/redis_rate).
//
//	l, err := limit.New(limit.Options{
//		Limits:     cfg.Policy.RateLimits,
//		Shared:     limit.NewShared(client, "manifold"), // needed only for shared limits
//		FailClosed: cfg.Policy.SharedLimitFailure == config.FailClosed,
//		Logger:     logger,
//	})
//	v := l.Allow(ctx, limit.Request{Principal: p, Upstream: "github", Tool: "create_issue"})
//	if !v.Allowed {
//		// refuse, naming v.Limit, and tell the client to retry after v.RetryAfter
//	}
//	// and every minute or so, from a goroutine the caller owns:
//	l.Sweep()
//
// Local limiters live in a map keyed by the limit and the request's values for its key
// class; a limiter unused for Options.IdleAfter, whose bucket has refilled, is freed (by
// Sweep, and by Allow when a sweep is due), so that a principal or tool seen once costs
// nothing for long. Shared limits keep their state in Redis under keys that expire by
// themselves, named by a hash of the key values: no principal, upstream or tool name is
// written into a key's name.
package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Defaults of Options.
const (
	defaultIdleAfter = 10 * time.Minute
	defaultKeyPrefix = "manifold"
)

// Options configure a Limiter. New copies what it needs: changing them afterwards changes
// nothing.
type Options struct {
	// Limits are the rate limits, in config order: Allow reports the first that refuses.
	Limits []config.RateLimit

	// Shared is where shared limits keep their state. If nil, a shared limit is an error
	// from New.
	Shared *Shared
	// FailClosed is what a shared limit does while Redis cannot be reached: refuse (true) or
	// allow (false, the default). Either way a warning is logged, at most once per 10 s.
	FailClosed bool

	// Now is the clock of local limiters and of the warning interval. If nil, defaults to
	// time.Now. Shared limits run on Redis's clock.
	Now func() time.Time
	// IdleAfter is how long a local limiter may go unused before it is freed (once its bucket
	// has refilled too, so that freeing it forgives nothing). If zero, defaults to 10 minutes.
	IdleAfter time.Duration

	// Logger receives the warning about an unreachable Redis. If nil, nothing is logged.
	Logger *slog.Logger
}

// Request is what a limit counts: one request of a principal to an upstream.
type Request struct {
	// Principal makes the request; the zero Principal (anonymous) counts as one principal,
	// "anonymous", for principal-keyed limits.
	Principal session.Principal
	// Upstream is the upstream's name; "" for a method the gateway answers itself (a list,
	// ping, logging/setLevel), which only principal limits without upstreams or tools count.
	Upstream string
	// Tool is the upstream's own name of the tool called, or "" for a request that calls no
	// tool. Only tool calls count against principal_tool limits and limits with Tools set.
	Tool string
}

// Verdict is the outcome of Allow: allowed, or refused by one limit, after which the client
// may retry.
type Verdict struct {
	Allowed bool
	// Limit describes the refusing limit for the client and the log, like
	// "principal_tool 5/s burst 10 (config line 12)"; "" when allowed.
	Limit string
	// RetryAfter is when, from now, the limit will admit a request again (at least 1 ms, in
	// whole milliseconds); 0 when allowed.
	RetryAfter time.Duration
}

// failedRetryAfter is the RetryAfter of a shared limit that refuses, fail closed, because
// Redis cannot be reached.
const failedRetryAfter = time.Second

// warnEvery is the least interval between two warnings about an unreachable Redis.
const warnEvery = 10 * time.Second

// Limiter checks requests against the rate limits. It is safe for concurrent use.
type Limiter struct {
	rules      []rule // in config order; read-only after New
	hasLocal   bool
	hasShared  bool
	gcra       *redis_rate.Limiter // nil without shared limits
	failClosed bool
	now        func() time.Time
	idleAfter  time.Duration
	logger     *slog.Logger

	// warnedAt is when (UnixNano of now) the last warning about Redis was logged, 0 before
	// the first; failures counts the Redis errors since. Atomics: the Limiter must not be
	// copied.
	warnedAt atomic.Int64
	failures atomic.Int64

	// mu guards the local limiters: it is held across the check and the take of every local
	// limit of one request, so that they are taken all or none.
	mu sync.Mutex
	// buckets holds a local limiter per limit and key values. Guarded by mu.
	// Invariant: only rules that are not shared have buckets.
	buckets map[bucketKey]*bucket
	// sweptAt is when buckets were last swept. Guarded by mu.
	sweptAt time.Time
}

// New compiles opts.Limits. It reports every invalid limit at once: an unknown key, a rate
// that is not positive and finite, a burst below 1, a pattern that does not compile, or a
// shared limit without opts.Shared.
func New(opts Options) (*Limiter, error) {
	l := &Limiter{
		failClosed: opts.FailClosed,
		now:        opts.Now,
		idleAfter:  opts.IdleAfter,
		logger:     opts.Logger,
		buckets:    map[bucketKey]*bucket{},
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.idleAfter <= 0 {
		l.idleAfter = defaultIdleAfter
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	l.logger = l.logger.With("component", "ratelimit")
	prefix := defaultKeyPrefix
	if opts.Shared != nil {
		prefix = opts.Shared.prefix
	}

	var problems []error
	for i, c := range opts.Limits {
		r, err := compile(i, c, prefix)
		if err == nil && c.Shared && opts.Shared == nil {
			err = errors.New("shared needs Redis (session_store type redis)")
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("rate limit %s: %w", where(i, c.Line), err))
			continue
		}
		l.rules = append(l.rules, r)
		if r.shared {
			l.hasShared = true
		} else {
			l.hasLocal = true
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	if l.hasShared {
		l.gcra = opts.Shared.gcra
	}
	l.sweptAt = l.now()
	return l, nil
}

// Allow checks req against every limit that applies to it, in config order, and returns the
// first refusal. The local limits are checked first, and a token is taken from each of them
// only if all allow; then the shared ones are checked one by one, each taking its token in
// Redis when it allows, so that a request refused by a later shared limit has still counted
// against the earlier ones (and against the local ones). A refusal by a local limit is
// reported before any shared limit is asked, whatever their order.
//
// When Redis cannot be reached (or ctx ends first), the remaining shared limits are not
// asked: the request is refused by the shared limit at hand, with a RetryAfter of 1 s, if
// Options.FailClosed, else allowed. Each shared limit asked is one round trip to Redis, bounded
// by ctx and the client's own timeouts.
func (l *Limiter) Allow(ctx context.Context, req Request) Verdict {
	if l.hasLocal {
		if v := l.allowLocal(req); !v.Allowed {
			return v
		}
	}
	if l.hasShared {
		return l.allowShared(ctx, req)
	}
	return Verdict{Allowed: true}
}

// Sweep frees the local limiters unused for Options.IdleAfter whose buckets have refilled,
// and returns how many remain. Call it periodically; Allow also sweeps, at most once per
// IdleAfter, when a sweep is due.
func (l *Limiter) Sweep() int {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	return len(l.buckets)
}

// where names limit i for messages: its config line when known.
func where(i, line int) string {
	if line > 0 {
		return fmt.Sprintf("at config line %d", line)
	}
	return fmt.Sprintf("%d", i+1)
}

package limit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"golang.org/x/time/rate"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/policy/principal"
)

// class is what a limit counts separately (config.RateLimit.Key).
type class uint8

const (
	byPrincipal class = iota
	byPrincipalUpstream
	byPrincipalTool
	byUpstream
)

// rule is one compiled rate limit.
type rule struct {
	class class
	// upstreams and tools restrict the rule; nil: no restriction. A rule with tools applies
	// to tool calls only.
	upstreams, tools glob.Set
	// who restricts the rule to some principals; nil: all.
	who    *principal.Matcher
	shared bool
	// name describes the rule in verdicts: "principal_tool 5/s burst 10 (config line 12)".
	name string

	// perSecond and burst configure the local limiters (and the wait of a refusal).
	perSecond float64
	burst     int

	// gcra is the rule's limit in Redis, and keyBase the start of its keys
	// (KeyPrefix:rl:index:); shared rules only.
	gcra    redis_rate.Limit
	keyBase string
}

// compile checks and compiles limit c, the index-th of the config.
func compile(index int, c config.RateLimit, prefix string) (rule, error) {
	var problems []error
	r := rule{shared: c.Shared, perSecond: c.Rate, burst: c.Burst}
	switch c.Key {
	case config.LimitPrincipal:
		r.class = byPrincipal
	case config.LimitPrincipalUpstream:
		r.class = byPrincipalUpstream
	case config.LimitPrincipalTool:
		r.class = byPrincipalTool
	case config.LimitUpstream:
		r.class = byUpstream
	default:
		problems = append(problems, fmt.Errorf("key %q is none of %s, %s, %s, %s", c.Key,
			config.LimitPrincipal, config.LimitPrincipalUpstream, config.LimitPrincipalTool, config.LimitUpstream))
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		problems = append(problems, fmt.Errorf("rate %v is not a positive, finite number of requests per second", c.Rate))
	}
	if c.Burst < 1 {
		problems = append(problems, fmt.Errorf("burst %d is below 1", c.Burst))
	}
	var err error
	if r.upstreams, err = glob.CompileSet(c.Upstreams); err != nil {
		problems = append(problems, fmt.Errorf("upstreams: %w", err))
	}
	if r.tools, err = glob.CompileSet(c.Tools); err != nil {
		problems = append(problems, fmt.Errorf("tools: %w", err))
	}
	if r.who, err = principal.Compile(&c.Principal); err != nil {
		problems = append(problems, fmt.Errorf("principal: %w", err))
	}
	if len(problems) > 0 {
		return rule{}, errors.Join(problems...)
	}
	r.name = c.Key + " " + rateText(c.Rate, c.Per) + " burst " + strconv.Itoa(c.Burst) + " (" + lineText(index, c.Line) + ")"
	if r.shared {
		r.gcra = gcraLimit(c.Rate, c.Per, c.Burst)
		r.keyBase = prefix + ":rl:" + strconv.Itoa(index) + ":"
	}
	return r, nil
}

// applies reports whether r counts req.
func (r *rule) applies(req *Request) bool {
	if req.Upstream == "" && (r.class != byPrincipal || r.upstreams != nil) {
		// The gateway's own methods load no upstream: only principal-wide limits count them.
		return false
	}
	if r.upstreams != nil && !r.upstreams.Match(req.Upstream) {
		return false
	}
	if (r.tools != nil || r.class == byPrincipalTool) && req.Tool == "" {
		return false
	}
	if r.tools != nil && !r.tools.Match(req.Tool) {
		return false
	}
	return r.who.Match(&req.Principal)
}

// wait is how long a local limiter of r holding tokens takes to hold one.
func (r *rule) wait(tokens float64) time.Duration {
	return retryAfter((1 - tokens) / r.perSecond)
}

// retryAfter turns a wait in seconds into a RetryAfter: rounded up to whole milliseconds,
// and a millisecond more when it falls on one (float rounding could leave a client that waits
// exactly that long a hair short), so at least 1 ms.
func retryAfter(seconds float64) time.Duration {
	if !(seconds > 0) {
		return time.Millisecond
	}
	ms := math.Floor(seconds*1000) + 1
	if ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// localLimit is r's rate for x/time/rate.
func (r *rule) localLimit() rate.Limit { return rate.Limit(r.perSecond) }

// gcraLimit expresses perSecond requests a second with burst as a redis_rate limit. GCRA
// spaces requests by Period/Rate, so any Period and whole Rate with that ratio is the same
// limit: the config's own period when the rate is a whole number over it, else a second, else
// the spacing itself.
func gcraLimit(perSecond float64, per time.Duration, burst int) redis_rate.Limit {
	if per > 0 {
		if n := perSecond * per.Seconds(); n >= 1 && isWhole(n) && n <= math.MaxInt32 {
			return redis_rate.Limit{Rate: int(math.Round(n)), Burst: burst, Period: per}
		}
	}
	if perSecond >= 1 && isWhole(perSecond) && perSecond <= math.MaxInt32 {
		return redis_rate.Limit{Rate: int(math.Round(perSecond)), Burst: burst, Period: time.Second}
	}
	spacing := time.Duration(float64(time.Second) / perSecond)
	if spacing < 1 {
		spacing = 1
	}
	return redis_rate.Limit{Rate: 1, Burst: burst, Period: spacing}
}

// isWhole reports whether f is a whole number, give or take float rounding.
func isWhole(f float64) bool { return math.Abs(f-math.Round(f)) <= 1e-9*math.Max(1, math.Abs(f)) }

// rateText writes a rate over the period it was written with: "5/s", "600/m", "2/h".
func rateText(perSecond float64, per time.Duration) string {
	unit := "s"
	switch per {
	case 0, time.Second:
		per = time.Second
	case time.Minute:
		unit = "m"
	case time.Hour:
		unit = "h"
	default:
		unit = per.String()
	}
	n := perSecond * per.Seconds()
	if isWhole(n) {
		return strconv.FormatFloat(math.Round(n), 'f', 0, 64) + "/" + unit
	}
	return strconv.FormatFloat(n, 'g', 6, 64) + "/" + unit
}

// lineText names limit i in a verdict: its config line when known.
func lineText(i, line int) string {
	if line > 0 {
		return "config line " + strconv.Itoa(line)
	}
	return "rate limit " + strconv.Itoa(i+1)
}

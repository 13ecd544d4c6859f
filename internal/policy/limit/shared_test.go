package limit_test

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/policy/limit"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// The shared limits run against a real Redis (package testredis); redis_rate runs on Redis's
// clock, so these tests use short real rates and wait by polling, within bounds.

func TestMain(m *testing.M) {
	// go-redis logs each failed dial; the tests that point at a closed port check the log.
	redis.SetLogger(quietRedisLog{})
	code := m.Run()
	testredis.Stop()
	os.Exit(code)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// replica returns a Limiter with its own client of the test's Redis, as one replica of the
// gateway has.
func replica(t *testing.T, addr, prefix string, limits ...config.RateLimit) *limit.Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	l, err := limit.New(limit.Options{Limits: limits, Shared: limit.NewShared(client, prefix)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSharedLimitHoldsAcrossReplicas: two Limiters on one Redis admit, together, no more than
// the rate allows over the time they ran, plus the burst.
func TestSharedLimitHoldsAcrossReplicas(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	const rate, burst = 20, 5
	lim := config.RateLimit{Key: config.LimitPrincipal, Rate: rate, Burst: burst, Per: time.Second, Shared: true, Line: 9}
	a, b := replica(t, addr, prefix, lim), replica(t, addr, prefix, lim)

	ctx := context.Background()
	req := limit.Request{Principal: alice, Upstream: "github", Tool: "search"}
	var mu sync.Mutex
	accepted, refused := 0, 0
	var refusal limit.Verdict
	var wg sync.WaitGroup
	begin := time.Now()
	for _, l := range []*limit.Limiter{a, b} {
		wg.Go(func() {
			for time.Since(begin) < 300*time.Millisecond {
				v := l.Allow(ctx, req)
				mu.Lock()
				if v.Allowed {
					accepted++
				} else {
					refused++
					refusal = v
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)

	most := int(rate*elapsed.Seconds()) + burst + 1
	if accepted == 0 || accepted > most {
		t.Errorf("accepted %d in %v across two replicas, want 1..%d", accepted, elapsed, most)
	}
	if refused == 0 {
		t.Fatalf("none of %d requests refused", accepted)
	}
	if refusal.Limit != "principal 20/s burst 5 (config line 9)" || refusal.RetryAfter <= 0 || refusal.RetryAfter > 100*time.Millisecond {
		t.Errorf("refusal = %+v, want the limit named and RetryAfter in (0, 100ms]", refusal)
	}

	// Another principal has its own count.
	if v := b.Allow(ctx, limit.Request{Principal: bob, Upstream: "github"}); !v.Allowed {
		t.Errorf("bob refused by alice's shared count: %+v", v)
	}
}

// TestSharedRefusalRecovers: what one replica takes, the other cannot; after RetryAfter (on
// Redis's clock) it can. The rate is one a second, so that a loaded machine's pause between
// the two replicas' requests cannot refill the bucket (at 10/s, 100 ms did, once).
func TestSharedRefusalRecovers(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	lim := config.RateLimit{Key: config.LimitPrincipalTool, Rate: 1, Burst: 3, Per: time.Second, Shared: true}
	a, b := replica(t, addr, prefix, lim), replica(t, addr, prefix, lim)
	ctx := context.Background()
	req := limit.Request{Principal: alice, Upstream: "github", Tool: "search"}

	// Redis's clock runs meanwhile, so the burst may have gained a token: take until refused.
	taken := 0
	for a.Allow(ctx, req).Allowed {
		taken++
		if taken > 10 {
			t.Fatal("replica a was never refused")
		}
	}
	if taken < 3 {
		t.Errorf("replica a got %d of a burst of 3", taken)
	}
	v := b.Allow(ctx, req)
	if v.Allowed {
		t.Fatal("replica b allowed what replica a exhausted")
	}
	if v.RetryAfter <= 0 || v.RetryAfter > 1001*time.Millisecond {
		t.Errorf("RetryAfter = %v, want in (0, 1001ms]", v.RetryAfter)
	}
	testwait.Until(t, 3*time.Second, "replica b allowed again", func() bool { return b.Allow(ctx, req).Allowed })
	// Other tools and principals count apart.
	if v := b.Allow(ctx, limit.Request{Principal: alice, Upstream: "github", Tool: "other"}); !v.Allowed {
		t.Errorf("another tool refused: %+v", v)
	}
}

// TestSharedKeysHoldNoNames: keys begin with the prefix and carry a hash, never a principal,
// upstream or tool name.
func TestSharedKeysHoldNoNames(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	l := replica(t, addr, prefix,
		config.RateLimit{Key: config.LimitPrincipal, Rate: 1, Burst: 5, Shared: true},
		config.RateLimit{Key: config.LimitPrincipalTool, Rate: 1, Burst: 5, Shared: true},
	)
	l.Allow(context.Background(), limit.Request{Principal: alice, Upstream: "github", Tool: "search"})
	l.Allow(context.Background(), limit.Request{Upstream: "github", Tool: "search"})
	keys, err := testredis.Keys(addr, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Errorf("keys = %q, want 4: two limits, two principals", keys)
	}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, prefix+":rl:")
		index, digest, _ := strings.Cut(rest, ":")
		if _, err := hex.DecodeString(digest); !ok || (index != "0" && index != "1") || len(digest) != 64 || err != nil {
			t.Errorf("key %q is not %s:rl:<index>:<hex sha256>", k, prefix)
		}
	}
}

// warnings is a slog.Handler that keeps the warnings it is given.
type warnings struct {
	mu      sync.Mutex
	records []slog.Record
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.mu.Lock()
		w.records = append(w.records, r)
		w.mu.Unlock()
	}
	return nil
}

// attr returns the value of attribute key of the i-th warning.
func (w *warnings) attr(i int, key string) slog.Value {
	w.mu.Lock()
	defer w.mu.Unlock()
	var v slog.Value
	w.records[i].Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

func (w *warnings) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.records)
}

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestRedisUnreachable(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		name := map[bool]string{false: "fail open", true: "fail closed"}[failClosed]
		t.Run(name, func(t *testing.T) {
			client := redis.NewClient(&redis.Options{
				Addr: closedPort(t), DialTimeout: 100 * time.Millisecond,
				ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond, MaxRetries: -1,
				DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
			})
			t.Cleanup(func() { client.Close() })
			clock := testclock.New(start)
			logs := &warnings{}
			l, err := limit.New(limit.Options{
				Limits: []config.RateLimit{
					{Key: config.LimitPrincipal, Rate: 1, Burst: 1, Shared: true, Line: 4},
					{Key: config.LimitUpstream, Rate: 1, Burst: 1, Shared: true, Line: 5},
				},
				Shared:     limit.NewShared(client, ""),
				FailClosed: failClosed,
				Now:        clock.Now,
				Logger:     slog.New(logs),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 5 {
				v := l.Allow(ctx, limit.Request{Principal: alice, Upstream: "github"})
				if v.Allowed == failClosed {
					t.Fatalf("request %d: %+v, want allowed %v", i+1, v, !failClosed)
				}
				if failClosed && (v.Limit != "principal 1/s burst 1 (config line 4)" || v.RetryAfter <= 0) {
					t.Errorf("request %d refused with %+v, want the first limit and RetryAfter > 0", i+1, v)
				}
			}
			if n := logs.count(); n != 1 {
				t.Errorf("%d warnings for 5 failures within 10s, want 1", n)
			}
			clock.Advance(11 * time.Second)
			l.Allow(ctx, limit.Request{Principal: alice, Upstream: "github"})
			if n := logs.count(); n != 2 {
				t.Fatalf("%d warnings after 10s more, want 2", n)
			}
			if n := logs.attr(1, "failures"); n.Int64() != 5 {
				t.Errorf("second warning counts %v failures, want 5 (4 held back, 1 new)", n)
			}
		})
	}
}

// TestLocalRefusalAsksNoRedis: a request a local limit refuses is refused before any shared
// limit is asked, so Redis being down changes nothing for it.
func TestLocalRefusalAsksNoRedis(t *testing.T) {
	client := redis.NewClient(&redis.Options{
		Addr: closedPort(t), DialTimeout: 100 * time.Millisecond, MaxRetries: -1,
		DialerRetries: 1, DialerRetryTimeout: time.Millisecond,
	})
	t.Cleanup(func() { client.Close() })
	logs := &warnings{}
	l, err := limit.New(limit.Options{
		Limits: []config.RateLimit{
			{Key: config.LimitUpstream, Rate: 1, Burst: 1, Shared: true},
			{Key: config.LimitPrincipal, Rate: 1, Burst: 1},
		},
		Shared: limit.NewShared(client, ""),
		Now:    testclock.New(start).Now,
		Logger: slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v := l.Allow(ctx, limit.Request{Principal: alice, Upstream: "github"}); !v.Allowed {
		t.Fatalf("first request (fail open) refused: %+v", v)
	}
	if v := l.Allow(ctx, limit.Request{Principal: alice, Upstream: "github"}); v.Allowed || v.Limit != "principal 1/s burst 1 (rate limit 2)" {
		t.Errorf("second request: %+v, want refused by the local limit", v)
	}
	if v := l.Allow(ctx, limit.Request{Principal: session.Principal{Issuer: "x", Subject: "y"}, Upstream: "github"}); !v.Allowed {
		t.Errorf("another principal (fail open): %+v", v)
	}
}

// TestSharedLimitTargetsPrincipals: a shared limit with principal matchers counts, in Redis
// and across replicas, the principals they match only.
func TestSharedLimitTargetsPrincipals(t *testing.T) {
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	lim := config.RateLimit{Key: config.LimitPrincipal, Rate: 1.0 / 3600, Per: time.Hour, Burst: 2, Shared: true, Principal: config.PrincipalMatch{Subjects: []string{"bob"}}}
	a, b := replica(t, addr, prefix, lim), replica(t, addr, prefix, lim)
	ctx := context.Background()
	served := func(p session.Principal) int {
		n := 0
		for i := range 6 {
			if []*limit.Limiter{a, b}[i%2].Allow(ctx, limit.Request{Principal: p, Upstream: "github"}).Allowed {
				n++
			}
		}
		return n
	}
	if n := served(bob); n != 2 {
		t.Errorf("bob, whom the limit names: %d of 6 served across two replicas, want the shared burst: 2", n)
	}
	if n := served(alice); n != 6 {
		t.Errorf("alice: %d of 6 served, want all: the limit is bob's", n)
	}
}

package limit_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/policy/limit"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

var (
	alice = session.Principal{Issuer: "https://idp.example", Subject: "alice"}
	bob   = session.Principal{Issuer: "https://idp.example", Subject: "bob"}
	start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// onePerHour is the Rate (per second) of "1/h".
const onePerHour = 1.0 / 3600

// newLocal returns a Limiter over limits on a fake clock.
func newLocal(t testing.TB, limits ...config.RateLimit) (*limit.Limiter, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(start)
	l, err := limit.New(limit.Options{Limits: limits, Now: clock.Now, IdleAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func TestBurstIsRefusedAndRecovers(t *testing.T) {
	l, clock := newLocal(t, config.RateLimit{Key: config.LimitPrincipal, Rate: 5, Burst: 3, Per: time.Second, Line: 7})
	ctx := context.Background()
	req := limit.Request{Principal: alice, Upstream: "github", Tool: "search"}
	for i := range 3 {
		if v := l.Allow(ctx, req); !v.Allowed {
			t.Fatalf("request %d of the burst refused: %+v", i+1, v)
		}
	}
	v := l.Allow(ctx, req)
	if v.Allowed {
		t.Fatal("request past the burst allowed")
	}
	if want := "principal 5/s burst 3 (config line 7)"; v.Limit != want {
		t.Errorf("Limit = %q, want %q", v.Limit, want)
	}
	// One token comes every 200 ms.
	if v.RetryAfter <= 0 || v.RetryAfter > 250*time.Millisecond {
		t.Errorf("RetryAfter = %v, want about 200ms", v.RetryAfter)
	}

	clock.Advance(v.RetryAfter / 2)
	if v2 := l.Allow(ctx, req); v2.Allowed || v2.RetryAfter <= 0 || v2.RetryAfter >= v.RetryAfter {
		t.Errorf("halfway: %+v, want refused with RetryAfter in (0, %v)", v2, v.RetryAfter)
	}
	clock.Advance(v.RetryAfter)
	if v := l.Allow(ctx, req); !v.Allowed {
		t.Errorf("after RetryAfter: refused: %+v", v)
	}
	if v := l.Allow(ctx, req); v.Allowed {
		t.Error("second request after one token came back: allowed")
	}
	clock.Advance(time.Hour)
	for i := range 3 {
		if v := l.Allow(ctx, req); !v.Allowed {
			t.Fatalf("after an hour, request %d of the burst refused: %+v", i+1, v)
		}
	}
}

// TestKeyClassesCountSeparately: each key class counts its own values apart (a request with
// other values is allowed once the first is exhausted) and pools what it does not key on.
func TestKeyClassesCountSeparately(t *testing.T) {
	tests := []struct {
		key         string
		first       limit.Request
		same, other []limit.Request // counted with first; counted apart from it
	}{
		{
			key:   config.LimitPrincipal,
			first: limit.Request{Principal: alice, Upstream: "github", Tool: "search"},
			same: []limit.Request{
				{Principal: alice, Upstream: "jira", Tool: "search"},
				{Principal: alice, Upstream: "github", Tool: "other"},
				{Principal: alice, Upstream: "github"},
			},
			other: []limit.Request{
				{Principal: bob, Upstream: "github", Tool: "search"},
				{Principal: session.Principal{Issuer: "https://other.example", Subject: "alice"}, Upstream: "github", Tool: "search"},
			},
		},
		{
			key:   config.LimitPrincipalUpstream,
			first: limit.Request{Principal: alice, Upstream: "github", Tool: "search"},
			same: []limit.Request{
				{Principal: alice, Upstream: "github", Tool: "other"},
				{Principal: alice, Upstream: "github"},
			},
			other: []limit.Request{
				{Principal: bob, Upstream: "github", Tool: "search"},
				{Principal: alice, Upstream: "jira", Tool: "search"},
			},
		},
		{
			key:   config.LimitPrincipalTool,
			first: limit.Request{Principal: alice, Upstream: "github", Tool: "search"},
			same:  []limit.Request{{Principal: alice, Upstream: "github", Tool: "search"}},
			other: []limit.Request{
				{Principal: bob, Upstream: "github", Tool: "search"},
				{Principal: alice, Upstream: "github", Tool: "other"},
				{Principal: alice, Upstream: "jira", Tool: "search"}, // the same name elsewhere
			},
		},
		{
			key:   config.LimitUpstream,
			first: limit.Request{Principal: alice, Upstream: "github", Tool: "search"},
			same: []limit.Request{
				{Principal: bob, Upstream: "github", Tool: "other"},
				{Upstream: "github"},
			},
			other: []limit.Request{{Principal: alice, Upstream: "jira", Tool: "search"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			l, _ := newLocal(t, config.RateLimit{Key: tt.key, Rate: onePerHour, Burst: 1, Per: time.Hour})
			ctx := context.Background()
			if v := l.Allow(ctx, tt.first); !v.Allowed {
				t.Fatalf("first request refused: %+v", v)
			}
			for _, req := range tt.same {
				if v := l.Allow(ctx, req); v.Allowed {
					t.Errorf("%+v allowed; want it counted with the first", req)
				}
			}
			for _, req := range tt.other {
				if v := l.Allow(ctx, req); !v.Allowed {
					t.Errorf("%+v refused; want it counted apart: %+v", req, v)
				}
			}
		})
	}
}

func TestUpstreamsAndToolsScopeALimit(t *testing.T) {
	l, _ := newLocal(t,
		config.RateLimit{Key: config.LimitPrincipal, Rate: onePerHour, Burst: 1, Per: time.Hour, Upstreams: []string{"git*"}, Tools: []string{"write_*", "delete"}},
	)
	ctx := context.Background()
	outside := []limit.Request{
		{Principal: alice, Upstream: "jira", Tool: "write_issue"}, // upstream not listed
		{Principal: alice, Upstream: "github", Tool: "read_file"}, // tool not listed
		{Principal: alice, Upstream: "github"},                    // not a tool call
		{Principal: alice, Upstream: "gitlab", Tool: "deleted"},   // globs match whole names
	}
	for range 3 {
		for _, req := range outside {
			if v := l.Allow(ctx, req); !v.Allowed {
				t.Errorf("%+v refused by a limit scoped elsewhere: %+v", req, v)
			}
		}
	}
	if v := l.Allow(ctx, limit.Request{Principal: alice, Upstream: "github", Tool: "write_file"}); !v.Allowed {
		t.Fatalf("first request in scope refused: %+v", v)
	}
	if v := l.Allow(ctx, limit.Request{Principal: alice, Upstream: "gitlab", Tool: "delete"}); v.Allowed {
		t.Error("second request in scope (another upstream and tool, same principal) allowed")
	}
}

// TestPrincipalToolCountsToolCallsOnly: a request that calls no tool has no tool to count.
func TestPrincipalToolCountsToolCallsOnly(t *testing.T) {
	l, _ := newLocal(t, config.RateLimit{Key: config.LimitPrincipalTool, Rate: onePerHour, Burst: 1, Per: time.Hour})
	for range 3 {
		if v := l.Allow(context.Background(), limit.Request{Principal: alice, Upstream: "github"}); !v.Allowed {
			t.Errorf("a request without a tool refused: %+v", v)
		}
	}
}

func TestAnonymousRequestsShareOneKey(t *testing.T) {
	for _, key := range []string{config.LimitPrincipal, config.LimitPrincipalUpstream, config.LimitPrincipalTool} {
		t.Run(key, func(t *testing.T) {
			l, _ := newLocal(t, config.RateLimit{Key: key, Rate: onePerHour, Burst: 2, Per: time.Hour})
			ctx := context.Background()
			anon := limit.Request{Upstream: "github", Tool: "search"}
			for i := range 2 {
				if v := l.Allow(ctx, anon); !v.Allowed {
					t.Fatalf("anonymous request %d refused: %+v", i+1, v)
				}
			}
			if v := l.Allow(ctx, anon); v.Allowed {
				t.Error("anonymous request past the burst allowed")
			}
			// Neither an empty subject of some issuer nor one named "anonymous" is anonymous.
			for _, p := range []session.Principal{{Issuer: "https://idp.example"}, {Subject: "anonymous"}, alice} {
				if v := l.Allow(ctx, limit.Request{Principal: p, Upstream: "github", Tool: "search"}); !v.Allowed {
					t.Errorf("%v refused with the anonymous requests: %+v", p, v)
				}
			}
		})
	}
}

// TestLocalLimitsTakeAllOrNothing: a request refused by one limit takes no token from the
// others, and the first limit in config order that refuses is reported.
func TestLocalLimitsTakeAllOrNothing(t *testing.T) {
	l, _ := newLocal(t,
		config.RateLimit{Key: config.LimitPrincipal, Rate: onePerHour, Burst: 2, Per: time.Hour, Line: 1},
		config.RateLimit{Key: config.LimitUpstream, Rate: onePerHour, Burst: 1, Per: time.Hour, Upstreams: []string{"github"}, Line: 2},
	)
	ctx := context.Background()
	github := limit.Request{Principal: alice, Upstream: "github"}
	jira := limit.Request{Principal: alice, Upstream: "jira"}
	if v := l.Allow(ctx, github); !v.Allowed {
		t.Fatalf("first request refused: %+v", v)
	}
	v := l.Allow(ctx, github)
	if v.Allowed || v.Limit != "upstream 1/h burst 1 (config line 2)" {
		t.Fatalf("second request to github: %+v, want refused by the upstream limit", v)
	}
	if v := l.Allow(ctx, jira); !v.Allowed {
		t.Fatalf("the principal's second token was taken by a refused request: %+v", v)
	}
	v = l.Allow(ctx, github) // both refuse now
	if v.Allowed || v.Limit != "principal 1/h burst 2 (config line 1)" {
		t.Errorf("with both limits exhausted: %+v, want the first refusing", v)
	}
}

func TestSweepFreesIdleLimiters(t *testing.T) {
	l, clock := newLocal(t, config.RateLimit{Key: config.LimitPrincipal, Rate: 10, Burst: 5, Per: time.Second})
	slow, slowClock := newLocal(t, config.RateLimit{Key: config.LimitPrincipal, Rate: onePerHour, Burst: 1, Per: time.Hour})
	ctx := context.Background()
	use := func(l *limit.Limiter, p session.Principal) {
		t.Helper()
		if v := l.Allow(ctx, limit.Request{Principal: p, Upstream: "github"}); !v.Allowed {
			t.Fatalf("%v refused: %+v", p, v)
		}
	}

	use(l, alice)
	use(l, bob)
	if n := l.Sweep(); n != 2 {
		t.Fatalf("Sweep with both in use = %d, want 2", n)
	}
	clock.Advance(40 * time.Second)
	use(l, bob) // busy
	clock.Advance(40 * time.Second)
	if n := l.Sweep(); n != 1 {
		t.Errorf("Sweep with alice idle 80s and bob 40s (IdleAfter 1m) = %d, want 1", n)
	}
	clock.Advance(time.Minute)
	if n := l.Sweep(); n != 0 {
		t.Errorf("Sweep with both idle = %d, want 0", n)
	}

	// A limiter whose bucket has not refilled is kept: freeing it would forgive its use.
	use(slow, alice)
	slowClock.Advance(10 * time.Minute)
	if n := slow.Sweep(); n != 1 {
		t.Errorf("Sweep of an idle limiter still refilling = %d, want 1", n)
	}
	if v := slow.Allow(ctx, limit.Request{Principal: alice, Upstream: "github"}); v.Allowed {
		t.Error("after the sweep, alice's exhausted limit allows again")
	}
	slowClock.Advance(2 * time.Hour)
	if n := slow.Sweep(); n != 0 {
		t.Errorf("Sweep once refilled and idle = %d, want 0", n)
	}
}

// TestConcurrentRequestsTakeTheBurstExactly: under concurrent use, exactly the burst is allowed
// while the clock stands still.
func TestConcurrentRequestsTakeTheBurstExactly(t *testing.T) {
	l, _ := newLocal(t,
		config.RateLimit{Key: config.LimitPrincipal, Rate: 1, Burst: 50, Per: time.Second},
		config.RateLimit{Key: config.LimitUpstream, Rate: 1, Burst: 1000, Per: time.Second},
	)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if l.Allow(context.Background(), limit.Request{Principal: alice, Upstream: "github"}).Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 50 {
		t.Errorf("allowed %d of 800 concurrent requests, want the burst, 50", n)
	}
}

func TestNewReportsEveryInvalidLimit(t *testing.T) {
	_, err := limit.New(limit.Options{Limits: []config.RateLimit{
		{Key: "session", Rate: 1, Burst: 1, Line: 3},
		{Key: config.LimitPrincipal, Rate: 0, Burst: 0, Line: 4},
		{Key: config.LimitUpstream, Rate: 1, Burst: 1, Line: 5}, // valid
		{Key: config.LimitUpstream, Rate: 1, Burst: 1, Tools: []string{"[x"}, Line: 6},
		{Key: config.LimitUpstream, Rate: 1, Burst: 1, Shared: true, Line: 7}, // no Redis
	}})
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("New = %v, want the problems joined", err)
	}
	if n := len(joined.Unwrap()); n != 4 {
		t.Errorf("New reported %d invalid limits, want 4: %v", n, err)
	}
}

func TestVerdictNamesTheLimit(t *testing.T) {
	tests := []struct {
		limit config.RateLimit
		want  string
	}{
		{config.RateLimit{Key: config.LimitPrincipalTool, Rate: 5, Burst: 10, Per: time.Second, Line: 12}, "principal_tool 5/s burst 10 (config line 12)"},
		{config.RateLimit{Key: config.LimitUpstream, Rate: 10, Burst: 1, Per: time.Minute, Line: 3}, "upstream 600/m burst 1 (config line 3)"},
		{config.RateLimit{Key: config.LimitPrincipal, Rate: 2.0 / 3600, Burst: 1, Per: time.Hour, Line: 4}, "principal 2/h burst 1 (config line 4)"},
		{config.RateLimit{Key: config.LimitPrincipal, Rate: 0.5, Burst: 1}, "principal 0.5/s burst 1 (rate limit 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			l, _ := newLocal(t, tt.limit)
			req := limit.Request{Principal: alice, Upstream: "github", Tool: "search"}
			for range tt.limit.Burst {
				l.Allow(context.Background(), req)
			}
			if v := l.Allow(context.Background(), req); v.Limit != tt.want {
				t.Errorf("Limit = %q, want %q", v.Limit, tt.want)
			}
		})
	}
}

func TestNoLimitsAllowsEverything(t *testing.T) {
	l, err := limit.New(limit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := l.Allow(context.Background(), limit.Request{}); !v.Allowed {
		t.Errorf("Allow without limits = %+v", v)
	}
}

// benchLimits are a typical policy: per principal, per principal and tool, per upstream.
var benchLimits = []config.RateLimit{
	{Key: config.LimitPrincipal, Rate: 1e6, Burst: 1e6, Per: time.Second},
	{Key: config.LimitPrincipalTool, Rate: 1e6, Burst: 1e6, Per: time.Second, Tools: []string{"write_*"}},
	{Key: config.LimitUpstream, Rate: 1e6, Burst: 1e6, Per: time.Second, Upstreams: []string{"github"}},
}

var benchRequests = []limit.Request{
	{Principal: alice, Upstream: "github", Tool: "write_file"},
	{Principal: bob, Upstream: "github", Tool: "read_file"},
	{Principal: alice, Upstream: "jira", Tool: "write_issue"},
	{Upstream: "github", Tool: "write_file"},
}

func TestAllowLocalDoesNotAllocate(t *testing.T) {
	l, _ := newLocal(t, benchLimits...)
	ctx := context.Background()
	for _, req := range benchRequests {
		l.Allow(ctx, req) // make the limiters
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		l.Allow(ctx, benchRequests[i%len(benchRequests)])
		i++
	})
	if allocs != 0 {
		t.Errorf("Allow with local limits allocates %v times per call, want 0", allocs)
	}
}

func BenchmarkAllowLocal(b *testing.B) {
	l, err := limit.New(limit.Options{Limits: benchLimits})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if v := l.Allow(ctx, benchRequests[i%len(benchRequests)]); !v.Allowed {
			b.Fatal(v)
		}
		i++
	}
}

func BenchmarkAllowLocalParallel(b *testing.B) {
	l, err := limit.New(limit.Options{Limits: benchLimits})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(ctx, benchRequests[i%len(benchRequests)])
			i++
		}
	})
}

// TestLimitTargetsPrincipals: a limit with principal matchers counts only the principals
// they match, with the rules' meaning: groups held, API key names, anonymous; the others pass
// it as if it were not there, and a limit without them counts everyone.
func TestLimitTargetsPrincipals(t *testing.T) {
	contractor := session.Principal{Issuer: "https://idp.example", Subject: "carol", Groups: []string{"contractors"}}
	ciKey := session.Principal{Issuer: session.APIKeyIssuer, Subject: "ci-deploy"}
	anonymous := session.Principal{}
	yes := true
	l, _ := newLocal(t,
		config.RateLimit{Key: config.LimitPrincipal, Rate: onePerHour, Burst: 1, Per: time.Hour, Line: 3, Principal: config.PrincipalMatch{Groups: []string{"contractors"}}},
		config.RateLimit{Key: config.LimitPrincipal, Rate: onePerHour, Burst: 2, Per: time.Hour, Line: 4, Principal: config.PrincipalMatch{APIKeys: []string{"ci-*"}}},
		config.RateLimit{Key: config.LimitUpstream, Rate: onePerHour, Burst: 3, Per: time.Hour, Line: 5, Principal: config.PrincipalMatch{Anonymous: &yes}},
	)
	ctx := context.Background()
	served := func(p session.Principal) int {
		n := 0
		for range 5 {
			if l.Allow(ctx, limit.Request{Principal: p, Upstream: "github", Tool: "search"}).Allowed {
				n++
			}
		}
		return n
	}
	for _, tt := range []struct {
		name string
		who  session.Principal
		want int
	}{
		{"a contractor, by group", contractor, 1},
		{"an API key, by name", ciKey, 2},
		{"anonymous", anonymous, 3},
		{"anyone else", alice, 5},
	} {
		if got := served(tt.who); got != tt.want {
			t.Errorf("%s: %d of 5 served, want %d", tt.name, got, tt.want)
		}
	}
	v := l.Allow(ctx, limit.Request{Principal: contractor, Upstream: "github"})
	if v.Allowed || v.Limit != "principal 1/h burst 1 (config line 3)" {
		t.Errorf("the contractor's next request: %+v, want refused by the group's limit", v)
	}
	if _, err := limit.New(limit.Options{Limits: []config.RateLimit{{Key: config.LimitPrincipal, Rate: 1, Burst: 1, Line: 8, Principal: config.PrincipalMatch{Subjects: []string{"a[b"}}}}}); err == nil || !strings.Contains(err.Error(), "principal: subjects") {
		t.Errorf("a principal glob that does not compile: %v, want an error naming it", err)
	}
}

// TestGatewayMethodsCountAgainstPrincipalLimitsOnly: a request to no upstream (a list, ping,
// logging/setLevel the gateway answers) counts against a principal limit like a call, and
// against nothing that counts per upstream or tool, nor against a limit scoped to some
// upstreams.
func TestGatewayMethodsCountAgainstPrincipalLimitsOnly(t *testing.T) {
	own := limit.Request{Principal: alice}
	for _, tc := range []struct {
		name    string
		limit   config.RateLimit
		counted bool
	}{
		{"principal", config.RateLimit{Key: config.LimitPrincipal}, true},
		{"principal for these principals", config.RateLimit{Key: config.LimitPrincipal, Principal: config.PrincipalMatch{Subjects: []string{"alice"}}}, true},
		{"principal of some upstreams", config.RateLimit{Key: config.LimitPrincipal, Upstreams: []string{"*"}}, false},
		{"principal of some tools", config.RateLimit{Key: config.LimitPrincipal, Tools: []string{"*"}}, false},
		{"principal_upstream", config.RateLimit{Key: config.LimitPrincipalUpstream}, false},
		{"principal_tool", config.RateLimit{Key: config.LimitPrincipalTool}, false},
		{"upstream", config.RateLimit{Key: config.LimitUpstream}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.limit.Rate, tc.limit.Burst, tc.limit.Per = onePerHour, 1, time.Hour
			l, _ := newLocal(t, tc.limit)
			ctx := context.Background()
			if v := l.Allow(ctx, own); !v.Allowed {
				t.Fatalf("first request refused: %+v", v)
			}
			if v := l.Allow(ctx, own); v.Allowed == tc.counted {
				t.Errorf("second request to the gateway itself allowed %v, want %v", v.Allowed, !tc.counted)
			}
		})
	}
}

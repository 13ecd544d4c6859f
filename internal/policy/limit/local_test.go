package limit

import (
	"context"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// TestAllowSweepsWhenDue: without calls to Sweep, Allow frees idle limiters once per
// IdleAfter.
func TestAllowSweepsWhenDue(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := New(Options{
		Limits:    []config.RateLimit{{Key: config.LimitPrincipal, Rate: 10, Burst: 1}},
		Now:       clock.Now,
		IdleAfter: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 100 {
		l.Allow(ctx, Request{Principal: session.Principal{Issuer: "iss", Subject: string(rune('a' + i%26))}, Upstream: "u"})
	}
	buckets := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.buckets)
	}
	if n := buckets(); n != 26 {
		t.Fatalf("limiters = %d, want 26", n)
	}
	clock.Advance(59 * time.Second)
	l.Allow(ctx, Request{Principal: session.Principal{Issuer: "iss", Subject: "busy"}, Upstream: "u"})
	if n := buckets(); n != 27 {
		t.Errorf("limiters before IdleAfter = %d, want 27", n)
	}
	clock.Advance(2 * time.Second)
	l.Allow(ctx, Request{Principal: session.Principal{Issuer: "iss", Subject: "busy"}, Upstream: "u"})
	if n := buckets(); n != 1 {
		t.Errorf("limiters after IdleAfter = %d, want the busy one", n)
	}
}

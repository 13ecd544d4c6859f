package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/grants"
)

// TestGrantWaitersAndVerdictsAreBounded: a retry that stops waiting for a grant leaves no
// entry behind, one that lands wakes every waiter, and the verdicts of failed token requests
// do not pile up past maxVerdicts once they are old.
func TestGrantWaitersAndVerdictsAreBounded(t *testing.T) {
	ua := &userAuth{settings: map[string]*config.UserOAuth{"gh": {ConnectWait: time.Hour}},
		landed: map[string]*grantWaiters{}, verdicts: map[string]tokenVerdict{}}
	p := grants.Principal{Issuer: "https://idp.test", Subject: "alice"}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ua.await(ctx, p, "gh"); err == nil {
		t.Fatal("await with its context ended returned no error")
	}
	if len(ua.landed) != 0 {
		t.Errorf("%d waiter entries after the only waiter left, want 0", len(ua.landed))
	}

	key := grantKey(p, "gh")
	first, doneFirst := ua.waitFor(key)
	second, doneSecond := ua.waitFor(key)
	ua.wake(key)
	for _, ch := range []<-chan struct{}{first, second} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not woken when its grant landed")
		}
	}
	doneFirst()
	doneSecond()
	if len(ua.landed) != 0 {
		t.Errorf("%d waiter entries after the grant landed, want 0", len(ua.landed))
	}

	old := time.Now().Add(-2 * verdictLifetime)
	for i := range maxVerdicts {
		ua.verdicts[fmt.Sprint(i)] = tokenVerdict{at: old}
	}
	ua.judge(key, []string{"write"})
	if len(ua.verdicts) != 1 || ua.verdicts[key].scopes[0] != "write" {
		t.Errorf("%d verdicts after old ones were due to go, want only the new one", len(ua.verdicts))
	}
}

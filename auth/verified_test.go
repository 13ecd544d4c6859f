package auth

import (
	"fmt"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
)

func TestVerifiedTokens(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ks := &keySet{}
	result := &Authenticated{Principal: session.Principal{Issuer: "https://idp", Subject: "alice"}, Token: "t", Expiry: now.Add(time.Hour)}
	tests := []struct {
		name   string
		expiry time.Time
		after  time.Duration
		bump   bool
		want   bool
	}{
		{"right after", now.Add(time.Hour), time.Second, false, true},
		{"within the longest age", now.Add(time.Hour), maxVerifiedAge - time.Second, false, true},
		{"past the longest age: verified again", now.Add(time.Hour), maxVerifiedAge, false, false},
		{"past the token's expiry and leeway", now.Add(time.Minute), time.Minute + 30*time.Second, false, false},
		{"within the leeway", now.Add(time.Minute), time.Minute + 29*time.Second, false, true},
		{"the issuer's keys were refreshed", now.Add(time.Hour), time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c verifiedTokens
			r := *result
			r.Expiry = tt.expiry
			c.remember("tok", &r, ks, ks.generation.Load(), 30*time.Second, now)
			if tt.bump {
				ks.generation.Add(1)
			}
			if _, ok := c.lookup("tok", now.Add(tt.after)); ok != tt.want {
				t.Errorf("lookup after %v: %v, want %v", tt.after, ok, tt.want)
			}
			if _, ok := c.lookup("other", now); ok {
				t.Error("a token never verified was found")
			}
		})
	}
}

func TestVerifiedTokensBounded(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ks := &keySet{}
	var c verifiedTokens
	for i := range 3 * maxVerified {
		at := now.Add(time.Duration(i) * time.Millisecond)
		c.remember(fmt.Sprint("tok", i), &Authenticated{Expiry: now.Add(time.Hour)}, ks, 0, 0, at)
		if n := len(c.entries); n > maxVerified {
			t.Fatalf("%d entries after %d tokens, want at most %d", n, i+1, maxVerified)
		}
	}
	last := fmt.Sprint("tok", 3*maxVerified-1)
	if _, ok := c.lookup(last, now.Add(time.Minute)); !ok {
		t.Error("the newest token was evicted")
	}
}

package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/approval"
)

// TestDecideRefusesWithTheAdminAPIsErrors: what the held calls refuse reaches the admin API as
// its own errors (so as its status codes), and a self-approval is refused, not let through.
func TestDecideRefusesWithTheAdminAPIsErrors(t *testing.T) {
	now := time.Now() // the memory store forgets calls by the wall clock
	alice := admin.Operator{Name: "apikey:alice", Principal: "apikey\x00alice"}
	tests := []struct {
		name     string
		held     func(s approval.HeldCalls) string // holds what the case needs; returns the id
		decision string
		allow    bool
		want     error
	}{
		{"unknown call", func(approval.HeldCalls) string { return "nosuch" }, approval.Approve, false, admin.ErrNotFound},
		{"own call approved", holdBy("apikey\x00alice", now), approval.Approve, false, admin.ErrForbidden},
		{"own call denied", holdBy("apikey\x00alice", now), approval.Deny, false, nil},
		{"own call approved where allowed", holdBy("apikey\x00alice", now), approval.Approve, true, nil},
		{"another's call approved", holdBy("apikey\x00bob", now), approval.Approve, false, nil},
		{"decided twice", func(s approval.HeldCalls) string {
			id := holdBy("apikey\x00bob", now)(s)
			_, _ = s.Decide(context.Background(), id, approval.Deny, "carol", now)
			return id
		}, approval.Approve, false, admin.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := approval.NewMemoryHeldCalls()
			id := tt.held(store)
			b := New(Sources{Held: &approval.Holder{Store: store, AllowSelf: tt.allow, Now: func() time.Time { return now }}})
			_, err := b.Decide(context.Background(), id, tt.decision, alice)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Decide = %v, want %v", err, tt.want)
			}
		})
	}
}

func holdBy(caller string, now time.Time) func(approval.HeldCalls) string {
	return func(s approval.HeldCalls) string {
		c := approval.HeldCall{ID: approval.NewID(), CallerID: caller, Upstream: "crm", Tool: "crm__wipe", Original: "wipe", Held: now, Deadline: now.Add(time.Minute)}
		if err := s.Hold(context.Background(), c); err != nil {
			panic(fmt.Sprintf("holding a call: %v", err))
		}
		return c.ID
	}
}

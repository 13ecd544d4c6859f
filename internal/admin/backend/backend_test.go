package backend

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/grants"
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

// fakeGrants is a GrantKeeper over a fixed list: it records the cursors and limits it is
// asked for, and revokes what it lists.
type fakeGrants struct {
	infos   []grants.GrantInfo
	next    string
	listed  []string
	limits  []int
	revoked []grants.Principal
}

func (f *fakeGrants) ListGrants(_ context.Context, cursor string, limit int) ([]grants.GrantInfo, string, error) {
	f.listed, f.limits = append(f.listed, cursor), append(f.limits, limit)
	return f.infos, f.next, nil
}

func (f *fakeGrants) Revoke(_ context.Context, p grants.Principal, upstream string) error {
	for _, g := range f.infos {
		if g.Principal == p && g.Upstream == upstream {
			f.revoked = append(f.revoked, p)
			return nil
		}
	}
	return fmt.Errorf("revoke %s at %s: %w", p, upstream, grants.ErrNotFound)
}

// TestGrants: the grants are listed as the keeper lists them, a page of GrantsShown at a time
// from the admin API's cursor; a revocation of a grant nobody has is the admin API's not
// found; a gateway without users' grants lists none and revokes none.
func TestGrants(t *testing.T) {
	alice := grants.Principal{Issuer: "https://login.example.com", Subject: "alice"}
	infos := []grants.GrantInfo{
		{Principal: alice, Upstream: "github", Scopes: []string{"repo"}, Refreshable: true},
		{Upstream: "jira", Unreadable: true},
	}
	keeper := &fakeGrants{infos: infos, next: "c2"}
	b := New(Sources{Grants: keeper})
	got, next, err := b.Grants(t.Context(), "c1")
	if err != nil || next != "c2" {
		t.Fatalf("Grants = %v, %q, %v; want the keeper's page and its next cursor c2", got, next, err)
	}
	if diff := cmp.Diff(infos, got); diff != "" {
		t.Errorf("Grants (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c1"}, keeper.listed); diff != "" || len(keeper.limits) != 1 || keeper.limits[0] != GrantsShown {
		t.Errorf("the keeper was asked for cursors %v (-want +got: %s) with limits %v, want GrantsShown", keeper.listed, diff, keeper.limits)
	}

	if err := b.RevokeGrant(t.Context(), alice, "github"); err != nil {
		t.Errorf("RevokeGrant of alice's grant at github: %v", err)
	}
	if err := b.RevokeGrant(t.Context(), alice, "linear"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("RevokeGrant of a grant nobody has = %v, want admin.ErrNotFound", err)
	}
	if diff := cmp.Diff([]grants.Principal{alice}, keeper.revoked); diff != "" {
		t.Errorf("revoked (-want +got):\n%s", diff)
	}

	none := New(Sources{})
	if got, next, err := none.Grants(t.Context(), ""); len(got) != 0 || next != "" || err != nil {
		t.Errorf("Grants without a keeper = %v, %q, %v; want none", got, next, err)
	}
	if err := none.RevokeGrant(t.Context(), alice, "github"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("RevokeGrant without a keeper = %v, want admin.ErrNotFound", err)
	}
}

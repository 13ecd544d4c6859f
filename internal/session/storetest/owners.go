package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/manifold-mcp/manifold/internal/session"
)

// The caps of sessions per owner: MaxPerPrincipal and MaxPerAnonymousAddr.

var (
	alice = session.Principal{Issuer: "https://issuer.example", Subject: "alice"}
	bob   = session.Principal{Issuer: "https://issuer.example", Subject: "bob"}
	carol = session.Principal{Issuer: "https://issuer.example", Subject: "carol"}
)

// ownerLimited fails t unless err is ErrOwnerLimit, and not ErrLimit.
func ownerLimited(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, session.ErrOwnerLimit) || errors.Is(err, session.ErrLimit) {
		t.Errorf("%s: %v, want ErrOwnerLimit (and not ErrLimit)", what, err)
	}
}

func storeLimited(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, session.ErrLimit) || errors.Is(err, session.ErrOwnerLimit) {
		t.Errorf("%s: %v, want ErrLimit (and not ErrOwnerLimit)", what, err)
	}
}

// principalLimit: MaxPerPrincipal caps the live sessions of each principal, as its issuer
// and subject name it (whatever its claims and address): the next is refused with
// ErrOwnerLimit; other principals and anonymous sessions are not held back; deleting a
// session makes room.
func (s suite) principalLimit(t *testing.T) {
	h, _, ctx := s.open(t, Options{MaxPerPrincipal: 2, MaxSessions: 100})
	a := mustCreate(t, h.Store, session.Record{Principal: alice, ClientAddr: "192.0.2.1"})
	withClaims := alice
	withClaims.Email, withClaims.Groups = "alice@example.com", []string{"ops"}
	mustCreate(t, h.Store, session.Record{Principal: withClaims, ClientAddr: "192.0.2.2"})
	for _, rec := range []session.Record{{Principal: alice}, {Principal: withClaims, ClientAddr: "192.0.2.3"}} {
		_, err := h.Store.Create(ctx, rec)
		ownerLimited(t, "alice's third session", err)
	}

	for _, p := range []session.Principal{
		bob,
		{Issuer: "https://other.example", Subject: "alice"},
		{Issuer: session.APIKeyIssuer, Subject: "alice"},
	} {
		for range 2 {
			mustCreate(t, h.Store, session.Record{Principal: p})
		}
	}
	for range 3 {
		mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.1"}) // anonymous: MaxPerAnonymousAddr is 0
	}

	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Create(ctx, session.Record{Principal: alice}); err != nil {
		t.Errorf("alice's session after one of hers was deleted: %v", err)
	}
	_, err := h.Store.Create(ctx, session.Record{Principal: alice})
	ownerLimited(t, "alice full again", err)
}

// anonymousAddrLimit: MaxPerAnonymousAddr caps the live anonymous sessions of each client
// address; anonymous sessions without an address, and those of principals, are not
// counted.
func (s suite) anonymousAddrLimit(t *testing.T) {
	h, _, ctx := s.open(t, Options{MaxPerAnonymousAddr: 2})
	const addr = "192.0.2.1"
	a := mustCreate(t, h.Store, session.Record{ClientAddr: addr})
	mustCreate(t, h.Store, session.Record{ClientAddr: addr})
	_, err := h.Store.Create(ctx, session.Record{ClientAddr: addr})
	ownerLimited(t, "the third anonymous session of an address", err)

	for _, other := range []string{"192.0.2.2", "2001:db8::1"} {
		for range 2 {
			mustCreate(t, h.Store, session.Record{ClientAddr: other})
		}
	}
	for range 5 {
		mustCreate(t, h.Store, session.Record{}) // no address: not counted
	}
	for range 3 {
		mustCreate(t, h.Store, session.Record{Principal: alice, ClientAddr: addr}) // a principal: MaxPerPrincipal is 0
	}

	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Create(ctx, session.Record{ClientAddr: addr}); err != nil {
		t.Errorf("a session of the address after one was deleted: %v", err)
	}
	_, err = h.Store.Create(ctx, session.Record{ClientAddr: addr})
	ownerLimited(t, "the address full again", err)
}

// noOwnerLimits: with both caps zero, no principal and no address is held back.
func (s suite) noOwnerLimits(t *testing.T) {
	h, _, _ := s.open(t, Options{})
	for range 20 {
		mustCreate(t, h.Store, session.Record{Principal: alice, ClientAddr: "192.0.2.1"})
		mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.1"})
	}
}

// ownerAndStoreLimits: the store-wide cap is checked first; a session that either cap
// refuses takes no room under the other.
func (s suite) ownerAndStoreLimits(t *testing.T) {
	h, _, ctx := s.open(t, Options{MaxSessions: 2, MaxPerPrincipal: 1})
	a := mustCreate(t, h.Store, session.Record{Principal: alice})
	_, err := h.Store.Create(ctx, session.Record{Principal: alice})
	ownerLimited(t, "alice's second session", err)
	b := mustCreate(t, h.Store, session.Record{Principal: bob}) // alice's refused session took no room
	_, err = h.Store.Create(ctx, session.Record{Principal: carol})
	storeLimited(t, "a session of a third principal in a full store", err)
	_, err = h.Store.Create(ctx, session.Record{Principal: alice})
	storeLimited(t, "alice's second session in a full store", err)

	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// carol's session, refused by the store, took no room under her own cap.
	mustCreate(t, h.Store, session.Record{Principal: carol})
	if err := h.Store.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, h.Store, session.Record{Principal: alice})
	_, err = h.Store.Create(ctx, session.Record{Principal: carol})
	storeLimited(t, "carol's second session in a full store", err)
}

// ownerLimitExpiry: an expired session no longer counts against its owner; one in use
// still does.
func (s suite) ownerLimitExpiry(t *testing.T) {
	h, clock, ctx := s.open(t, Options{MaxPerPrincipal: 1, MaxPerAnonymousAddr: 1, ShortIdle: true})
	const addr = "192.0.2.1"
	a := mustCreate(t, h.Store, session.Record{Principal: alice})
	b := mustCreate(t, h.Store, session.Record{Principal: bob})
	c := mustCreate(t, h.Store, session.Record{ClientAddr: addr})
	for _, rec := range []session.Record{{Principal: alice}, {Principal: bob}, {ClientAddr: addr}} {
		_, err := h.Store.Create(ctx, rec)
		ownerLimited(t, "a second session of "+rec.Principal.String()+" "+rec.ClientAddr, err)
	}

	// alice uses hers; bob's and the address's expire.
	h.PassIdle(t, func() {
		if err := h.Store.Touch(ctx, a.ID); err != nil {
			t.Errorf("Touch: %v", err)
		}
	}, b.ID, c.ID)
	if _, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout)); err != nil {
		t.Fatal(err)
	}
	_, err := h.Store.Create(ctx, session.Record{Principal: alice})
	ownerLimited(t, "alice's second session while her first is in use", err)
	if _, err := h.Store.Create(ctx, session.Record{Principal: bob}); err != nil {
		t.Errorf("bob's session after his first expired: %v", err)
	}
	if _, err := h.Store.Create(ctx, session.Record{ClientAddr: addr}); err != nil {
		t.Errorf("the address's session after its first expired: %v", err)
	}
}

// ownerLimitConcurrent: of Creates of one principal that race each other, exactly the cap
// pass.
func (s suite) ownerLimitConcurrent(t *testing.T) {
	const limit, tries = 3, 20
	h, _, ctx := s.open(t, Options{MaxPerPrincipal: limit})
	var created, refused atomic.Int32
	var wg sync.WaitGroup
	for range tries {
		wg.Go(func() {
			_, err := h.Store.Create(ctx, session.Record{Principal: alice})
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, session.ErrOwnerLimit):
				refused.Add(1)
			default:
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if created.Load() != limit || refused.Load() != tries-limit {
		t.Errorf("%d racing Creates: %d created, %d refused; want %d and %d", tries, created.Load(), refused.Load(), limit, tries-limit)
	}
}

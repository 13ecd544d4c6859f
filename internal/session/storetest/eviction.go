package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
)

// The suite's tests of eviction (the EvictIdle of a store's options): a full store makes
// room for a new session by evicting the one whose client has been idle longest.

// evictIdle is the eviction threshold of these tests. A store may evict a session up to a
// quarter of it later than that (RedisOptions.EvictIdle): the tests leave that margin.
const evictIdle = 4 * time.Minute

// eviction: a full store with an eviction threshold makes room by evicting the session whose
// client made no request for longest, once that was at least the threshold ago. A session only
// kept (Keep: its client listens without requests) is idle; one whose client made a request
// (Touch) is not; a new session its owner's cap refuses evicts none. The evicted session is
// gone, and reported once by Expire (to a store's caller that does not watch it end).
func (s suite) eviction(t *testing.T) {
	h, clock, ctx := s.open(t, Options{MaxSessions: 3, MaxPerAnonymousAddr: 2, EvictIdle: evictIdle})
	a := mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.1"})
	clock.Advance(30 * time.Second)
	b := mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.2"})
	c := mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.2"})
	_, err := h.Store.Create(ctx, session.Record{ClientAddr: "192.0.2.3"})
	storeLimited(t, "a session in a full store whose sessions all made requests just now", err)

	// a's client listens (Keep) and b's makes a request (Touch), 6½ and 6 minutes on: a is
	// idle since its start, b is not, c is idle for 6 minutes.
	clock.Advance(6 * time.Minute)
	if err := h.Store.Keep(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Touch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	_, err = h.Store.Create(ctx, session.Record{ClientAddr: "192.0.2.2"})
	ownerLimited(t, "a third session of an address at its cap, in a full store", err)
	for _, rec := range []*session.Record{a, b, c} {
		if _, err := h.Store.Get(ctx, rec.ID); err != nil {
			t.Fatalf("a session after a Create its owner's cap refused: %v (nothing may be evicted for it)", err)
		}
	}

	d := mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.3"})
	_, err = h.Store.Get(ctx, a.ID)
	notFound(t, "the session idle longest (only kept), after a Create in a full store", err)
	for what, rec := range map[string]*session.Record{"the session used just now": b, "the session idle for less long": c, "the new session": d} {
		if _, err := h.Store.Get(ctx, rec.ID); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	e := mustCreate(t, h.Store, session.Record{ClientAddr: "192.0.2.4"})
	_, err = h.Store.Get(ctx, c.ID)
	notFound(t, "the session idle longest then, after a second Create in a full store", err)
	_, err = h.Store.Create(ctx, session.Record{ClientAddr: "192.0.2.5"})
	storeLimited(t, "a session in a full store of sessions used within the threshold", err)
	for _, rec := range []*session.Record{b, d, e} {
		if _, err := h.Store.Get(ctx, rec.ID); err != nil {
			t.Errorf("a session used within the threshold: %v", err)
		}
	}

	// The evicted sessions' room under their owner's cap is free again: 192.0.2.2 holds b.
	mustCreateOrLimited(t, h, session.Record{ClientAddr: "192.0.2.2"})

	gone, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(gone)
	want := []string{a.ID, c.ID}
	slices.Sort(want)
	if !slices.Equal(gone, want) {
		t.Errorf("Expire reported %d sessions %v, want the 2 evicted", len(gone), gone)
	}
	if again, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout)); err != nil || len(again) != 0 {
		t.Errorf("a second Expire reported %v (%v), want nothing", again, err)
	}
}

// mustCreateOrLimited creates rec in a full store, which refuses it with ErrLimit, not with
// ErrOwnerLimit: its owner has room.
func mustCreateOrLimited(t *testing.T, h Harness, rec session.Record) {
	t.Helper()
	_, err := h.Store.Create(t.Context(), rec)
	storeLimited(t, "a session of an owner with room, in a full store", err)
}

// evictionConcurrent: of Creates racing for the room of the one idle session of a full store,
// exactly one gets it.
func (s suite) evictionConcurrent(t *testing.T) {
	const tries = 12
	h, clock, ctx := s.open(t, Options{MaxSessions: 4, EvictIdle: evictIdle})
	idle := mustCreate(t, h.Store, session.Record{})
	clock.Advance(10 * time.Minute)
	var busy []*session.Record
	for range 3 {
		busy = append(busy, mustCreate(t, h.Store, session.Record{}))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for range tries {
		wg.Go(func() {
			_, err := h.Store.Create(ctx, session.Record{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, session.ErrLimit):
				refused++
			default:
				t.Errorf("Create: %v", err)
			}
		})
	}
	wg.Wait()
	if created != 1 || refused != tries-1 {
		t.Errorf("%d Creates racing for one idle session's room: %d created, %d refused; want 1 and %d", tries, created, refused, tries-1)
	}
	_, err := h.Store.Get(ctx, idle.ID)
	notFound(t, "the idle session", err)
	for _, rec := range busy {
		if _, err := h.Store.Get(ctx, rec.ID); err != nil {
			t.Errorf("a session created within the threshold: %v", err)
		}
	}
}

package approval

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/testclock"
)

func TestMemoryStore(t *testing.T) {
	testStore(t, func(*testing.T) HeldCalls { return NewMemoryHeldCalls() })
}

// newClockedMemoryStore returns a MemoryHeldCalls whose clock is clock.
func newClockedMemoryStore(clock *testclock.Clock) *MemoryHeldCalls {
	s := NewMemoryHeldCalls()
	s.now = clock.Now
	return s
}

// memoryHeld returns how many calls s keeps, gone or not.
func memoryHeld(s *MemoryHeldCalls) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.calls)
}

// TestMemoryStoreBound: a MemoryHeldCalls holds MaxMemoryHeld calls; the next is refused with
// ErrFull and takes no room, until one is released or gone.
func TestMemoryStoreBound(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := testclock.New(start)
	s := newClockedMemoryStore(clock)
	first := call(start, start.Add(time.Minute))
	mustHold(t, s, first)
	for i := 1; i < MaxMemoryHeld; i++ {
		mustHold(t, s, call(start, start.Add(time.Hour)))
	}
	over := call(start, start.Add(time.Hour))
	err := s.Hold(t.Context(), over)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("Hold past the bound: %v, want ErrFull", err)
	}
	if _, err := s.Get(t.Context(), over.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the refused call: %v, want ErrNotFound", err)
	}
	if n := memoryHeld(s); n != MaxMemoryHeld {
		t.Errorf("%d calls held, want %d", n, MaxMemoryHeld)
	}

	// A call decided or past its deadline, within its Grace, still takes room.
	clock.Set(first.Deadline.Add(Grace - time.Nanosecond))
	if err := s.Hold(t.Context(), over); !errors.Is(err, ErrFull) {
		t.Fatalf("Hold, the first call past its deadline: %v, want ErrFull", err)
	}
	// Gone, it does not.
	clock.Set(first.Deadline.Add(Grace))
	mustHold(t, s, over)
	if _, err := s.Get(t.Context(), first.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the call gone: %v, want ErrNotFound", err)
	}
	if err := s.Hold(t.Context(), call(start, start.Add(time.Hour))); !errors.Is(err, ErrFull) {
		t.Fatalf("Hold, full again: %v, want ErrFull", err)
	}
	// Released, neither.
	if err := s.Release(t.Context(), over.ID); err != nil {
		t.Fatal(err)
	}
	mustHold(t, s, call(start, start.Add(time.Hour)))
}

// TestMemoryStorePrunes: a call is gone Grace after its deadline: no longer read, decided or
// listed, and a Hold takes back its room, without the store being full, within a Grace of
// the last time it did.
func TestMemoryStorePrunes(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := testclock.New(start)
	s := newClockedMemoryStore(clock)
	var calls []HeldCall
	for i, d := range []time.Duration{time.Minute, 2 * time.Minute, 2*time.Minute + 10*time.Second, 2*time.Minute + 50*time.Second, 10 * time.Minute} {
		c := call(start.Add(time.Duration(i)*time.Second), start.Add(d))
		c.Replica = "a"
		calls = append(calls, mustHold(t, s, c))
	}
	if _, err := s.Decide(t.Context(), calls[1].ID, Approve, "alice", start); err != nil {
		t.Fatal(err)
	}

	// At 2m + Grace, the first two are gone; the others are past their deadline or not.
	pruned := start.Add(2*time.Minute + Grace)
	clock.Set(pruned)
	for i, c := range calls {
		_, err := s.Get(t.Context(), c.ID)
		if gone := i < 2; gone != errors.Is(err, ErrNotFound) {
			t.Errorf("Get(calls[%d]): %v, gone: %v", i, err, gone)
		}
	}
	if _, err := s.Decide(t.Context(), calls[0].ID, Deny, "alice", start); !errors.Is(err, ErrNotFound) {
		t.Errorf("Decide of a call gone: %v, want ErrNotFound", err)
	}
	got, err := s.HeldBy(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids(calls[2:]), ids(got)); diff != "" {
		t.Errorf("HeldBy (-want +got):\n%s", diff)
	}
	got, err = s.Pending(t.Context(), start) // as if it were still the start
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids(calls[2:]), ids(got)); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}

	// The first Hold prunes: the store was never pruned.
	mustHold(t, s, call(clock.Now(), clock.Now().Add(time.Hour)))
	if n := memoryHeld(s); n != 4 {
		t.Errorf("%d calls kept after a Hold, want 4 (3 + 1)", n)
	}
	// Within a Grace of that, a Hold does not (the store is far from full), though calls[2]
	// is gone…
	clock.Set(pruned.Add(Grace / 2))
	if _, err := s.Get(t.Context(), calls[2].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(calls[2]): %v, want ErrNotFound", err)
	}
	mustHold(t, s, call(clock.Now(), clock.Now().Add(time.Hour)))
	if n := memoryHeld(s); n != 5 {
		t.Errorf("%d calls kept after a second Hold, want 5", n)
	}
	// …but a Grace after it, one does: calls[2] and calls[3] go.
	clock.Set(pruned.Add(Grace))
	mustHold(t, s, call(clock.Now(), clock.Now().Add(time.Hour)))
	if n := memoryHeld(s); n != 4 {
		t.Errorf("%d calls kept after a Hold a Grace later, want 4 (6 - calls[2], calls[3])", n)
	}
}

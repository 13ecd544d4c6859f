package session

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"
)

// The behaviour of the Store contract is tested by the suite (store_test.go, package
// storetest) against both stores; these tests pin what only the MemoryStore does: its exact
// clock, Len, and the memory its task records hold.

// TestMemoryExpireClock: a MemoryStore expires by its clock and the cutoff it is given: a
// session used at the cutoff or later stays, one used before goes; Create and Update mark
// a session used, Get does not.
func TestMemoryExpireClock(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := NewMemoryStore(&MemoryOptions{Now: func() time.Time { return now }})
	a, _ := s.Create(ctx, Record{})
	b, _ := s.Create(ctx, Record{})
	c, _ := s.Create(ctx, Record{})

	now = now.Add(time.Minute)
	_, _ = s.Update(ctx, b.ID, func(r *Record) { r.LogLevel = "debug" })
	_ = s.Touch(ctx, c.ID)
	_, _ = s.Get(ctx, a.ID)
	if expired, _ := s.Expire(ctx, now.Add(-time.Minute)); len(expired) != 0 {
		t.Errorf("Expire at the creation time = %v, want none: used at the cutoff is kept", expired)
	}
	expired, err := s.Expire(ctx, now.Add(-time.Minute+time.Nanosecond))
	if err != nil || len(expired) != 1 || expired[0] != a.ID {
		t.Errorf("Expire = %v, %v; want a only (b updated, c touched)", expired, err)
	}
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2", s.Len())
	}
	_ = s.Delete(ctx, b.ID)
	_ = s.Delete(ctx, c.ID)
	if s.Len() != 0 {
		t.Errorf("Len = %d after deleting all, want 0", s.Len())
	}
}

// TestMemoryTaskRecordsHeld: the MemoryStore's task tables hold exactly the live records:
// a long-lived session whose tasks end runs any number of them in bounded memory, and
// nothing is left once the sessions end.
func TestMemoryTaskRecordsHeld(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(nil)
	a, _ := s.Create(ctx, Record{})
	b, _ := s.Create(ctx, Record{})
	for i := range MaxTasksPerSession - 1 {
		if err := s.PutTask(ctx, TaskRecord{ID: fmt.Sprintf("a%d", i), SessionID: a.ID, Upstream: "u", UpstreamID: fmt.Sprintf("up-a%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 * MaxTasksPerSession {
		id := fmt.Sprintf("loop%d", i)
		if err := s.PutTask(ctx, TaskRecord{ID: id, SessionID: b.ID, Upstream: "u", UpstreamID: "up-" + id}); err != nil {
			t.Fatalf("task %d of a session whose tasks end: %v", i, err)
		}
		_ = s.EndTask(ctx, id)
	}
	r := s.routes
	r.mu.Lock()
	held, indexed := len(r.tasks), len(r.tasksByUp)
	r.mu.Unlock()
	if want := 2*MaxTasksPerSession - 1; held != want || indexed != want {
		t.Errorf("the store holds %d task records (%d indexed), want %d", held, indexed, want)
	}

	_ = s.PutReverse(ctx, ReverseRecord{SessionID: a.ID, ID: "1", Upstream: "u", UpstreamID: "1"})
	_ = s.Delete(ctx, a.ID)
	_ = s.Delete(ctx, b.ID)
	r.mu.Lock()
	left := len(r.tasks) + len(r.tasksByUp) + len(r.tasksOf) + len(r.reverse) + len(r.byUpRev)
	r.mu.Unlock()
	if left != 0 {
		t.Errorf("after the sessions ended: %d entries left in the routing tables", left)
	}
}

// TestMemoryOwnerCountsHeld: the MemoryStore counts only the owners whose kind has a cap,
// and holds nothing of an owner once its sessions are deleted or expired.
func TestMemoryOwnerCountsHeld(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := NewMemoryStore(&MemoryOptions{MaxPerPrincipal: 5, Now: func() time.Time { return now }})
	alice := Principal{Issuer: "i", Subject: "alice"}
	a, _ := s.Create(ctx, Record{Principal: alice})
	b, _ := s.Create(ctx, Record{Principal: alice})
	_, _ = s.Create(ctx, Record{ClientAddr: "192.0.2.1"}) // MaxPerAnonymousAddr is 0: not counted
	held := func() map[string]int {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return maps.Clone(s.owners)
	}
	if got := held(); len(got) != 1 || got["principal\x00i\x00alice"] != 2 {
		t.Errorf("owner counts %v, want alice's 2 only", got)
	}
	_ = s.Delete(ctx, a.ID)
	_ = s.Delete(ctx, a.ID)
	now = now.Add(time.Hour)
	_ = s.Touch(ctx, b.ID)
	if got := held(); len(got) != 1 || got["principal\x00i\x00alice"] != 1 {
		t.Errorf("owner counts %v after one Delete (twice), want alice's 1", got)
	}
	if expired, _ := s.Expire(ctx, now.Add(time.Nanosecond)); len(expired) != 2 {
		t.Fatalf("Expire = %v, want both sessions left", expired)
	}
	if got := held(); len(got) != 0 {
		t.Errorf("owner counts %v after every session ended, want none", got)
	}
}

package approval

import (
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The contract of a HeldCalls, run against each (TestMemoryStore, TestRedisStore). Its times are
// near time.Now(): a Redis store's keys expire by Redis's clock.

// opener returns a new, empty store for t.
type opener func(t *testing.T) HeldCalls

func testStore(t *testing.T, open opener) {
	tests := []struct {
		name string
		run  func(*testing.T, opener)
	}{
		{"RoundTrip", testRoundTrip},
		{"HoldRefuses", testHoldRefuses},
		{"Decide", testDecide},
		{"DecideUnknown", testDecideUnknown},
		{"DecideAfterDeadline", testDecideAfterDeadline},
		{"DecideInvalid", testDecideInvalid},
		{"Pending", testPending},
		{"Release", testRelease},
		{"HeldBy", testHeldBy},
		{"MoveAndAll", testMoveAndAll},
		{"DecideConcurrently", testDecideConcurrently},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, open) })
	}
}

// now is the tests' time: now, to the ms (as Redis's clock goes).
func now() time.Time { return time.Now().Truncate(time.Millisecond) }

// call returns a pending call held at held, until deadline.
func call(held, deadline time.Time) HeldCall {
	return HeldCall{
		ID:        NewID(),
		Session:   "fp-1",
		Principal: "alice@https://issuer.example",
		Upstream:  "github",
		Tool:      "github_delete_repo",
		Original:  "delete_repo",
		Arguments: json.RawMessage(`{"repo":"manifold"}`),
		Rule:      "approve-deletes",
		Held:      held,
		Deadline:  deadline,
	}
}

func mustHold(t *testing.T, s HeldCalls, c HeldCall) HeldCall {
	t.Helper()
	if err := s.Hold(t.Context(), c); err != nil {
		t.Fatalf("Hold(%s): %v", c.Tool, err)
	}
	return c
}

func mustGet(t *testing.T, s HeldCalls, id string) HeldCall {
	t.Helper()
	c, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return c
}

// ids returns the IDs of calls, in order.
func ids(calls []HeldCall) []string {
	out := []string{}
	for _, c := range calls {
		out = append(out, c.ID)
	}
	return out
}

// testRoundTrip: Get returns the call as held, every field, its JSON compacted.
func testRoundTrip(t *testing.T, open opener) {
	s := open(t)
	base := now()
	c := HeldCall{
		ID:          NewID(),
		Replica:     "replica-a",
		Session:     "fp-1",
		Principal:   "alice@https://issuer.example",
		Upstream:    "github",
		Tool:        "github_delete_repo",
		Original:    "delete_repo",
		Arguments:   json.RawMessage(`{"repo": "manifold", "force": true, "n": 12345678901234567890, "tags": []}`),
		Annotations: json.RawMessage(`{"destructiveHint":true}`),
		Rule:        "approve-deletes",
		Held:        base.Add(123456 * time.Nanosecond),
		Deadline:    base.Add(5 * time.Minute),
	}
	mustHold(t, s, c)
	want := c
	want.Arguments = json.RawMessage(`{"repo":"manifold","force":true,"n":12345678901234567890,"tags":[]}`)
	want.Annotations = json.RawMessage(`{"destructiveHint":true}`)
	got := mustGet(t, s, c.ID)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}

	// The store keeps a copy: changing the held call, or one returned, changes nothing.
	c.Annotations[2] = 'X'
	got.Arguments[2] = 'X'
	if diff := cmp.Diff(want, mustGet(t, s, c.ID)); diff != "" {
		t.Errorf("Get after changing copies (-want +got):\n%s", diff)
	}

	// Decided, every field too.
	at := base.Add(time.Minute + 789*time.Nanosecond)
	if _, err := s.Decide(t.Context(), c.ID, Approve, "bob", at); err != nil {
		t.Fatal(err)
	}
	want.Decision, want.Approver, want.Decided = Approve, "bob", at
	if diff := cmp.Diff(want, mustGet(t, s, c.ID)); diff != "" {
		t.Errorf("Get after Decide (-want +got):\n%s", diff)
	}
}

// testHoldRefuses: a call without ID or deadline, one decided, invalid JSON, or an ID held
// already is refused, and the held call stays as it was.
func testHoldRefuses(t *testing.T, open opener) {
	s := open(t)
	base := now()
	held := mustHold(t, s, call(base, base.Add(time.Minute)))
	tests := []struct {
		name   string
		change func(*HeldCall)
	}{
		{"no ID", func(c *HeldCall) { c.ID = "" }},
		{"no deadline", func(c *HeldCall) { c.Deadline = time.Time{} }},
		{"decided", func(c *HeldCall) { c.Decision = Approve }},
		{"approver", func(c *HeldCall) { c.Approver = "bob" }},
		{"decided at", func(c *HeldCall) { c.Decided = base }},
		{"arguments not JSON", func(c *HeldCall) { c.Arguments = json.RawMessage(`{"a":`) }},
		{"annotations not JSON", func(c *HeldCall) { c.Annotations = json.RawMessage(`nope`) }},
		{"ID held already", func(c *HeldCall) { c.ID, c.Tool = held.ID, "other" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := call(base, base.Add(time.Minute))
			tt.change(&c)
			if err := s.Hold(t.Context(), c); err == nil {
				t.Errorf("Hold succeeded")
			}
			if c.ID != "" && c.ID != held.ID {
				if _, err := s.Get(t.Context(), c.ID); !errors.Is(err, ErrNotFound) {
					t.Errorf("Get of the refused call: %v, want ErrNotFound", err)
				}
			}
		})
	}
	if diff := cmp.Diff(held, mustGet(t, s, held.ID)); diff != "" {
		t.Errorf("the held call changed (-want +got):\n%s", diff)
	}
}

// testDecide: the first decision wins; a second, either way, gets ErrDecided and the call as
// the first decided it.
func testDecide(t *testing.T, open opener) {
	for _, first := range []string{Approve, Deny} {
		t.Run(first, func(t *testing.T) {
			s := open(t)
			base := now()
			c := mustHold(t, s, call(base, base.Add(time.Minute)))
			at := base.Add(time.Second)
			got, err := s.Decide(t.Context(), c.ID, first, "alice", at)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			want := c
			want.Decision, want.Approver, want.Decided = first, "alice", at
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want, mustGet(t, s, c.ID)); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
			for _, second := range []string{Approve, Deny} {
				got, err := s.Decide(t.Context(), c.ID, second, "bob", at.Add(time.Second))
				if !errors.Is(err, ErrDecided) {
					t.Errorf("second Decide(%s): %v, want ErrDecided", second, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("second Decide(%s) returned (-want +got):\n%s", second, diff)
				}
			}
			// A decided call is decided, past its deadline too.
			if _, err := s.Decide(t.Context(), c.ID, Approve, "bob", c.Deadline.Add(time.Second)); !errors.Is(err, ErrDecided) {
				t.Errorf("Decide past the deadline of a decided call: %v, want ErrDecided", err)
			}
			if diff := cmp.Diff(want, mustGet(t, s, c.ID)); diff != "" {
				t.Errorf("Get after the second decisions (-want +got):\n%s", diff)
			}
		})
	}
}

func testDecideUnknown(t *testing.T, open opener) {
	s := open(t)
	got, err := s.Decide(t.Context(), NewID(), Approve, "alice", now())
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Decide: %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff(HeldCall{}, got); diff != "" {
		t.Errorf("Decide returned a call: %s", diff)
	}
	if _, err := s.Get(t.Context(), NewID()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
}

// testDecideAfterDeadline: a decision at or after the deadline of a pending call gets
// ErrExpired and the call as it stands, which stays pending.
func testDecideAfterDeadline(t *testing.T, open opener) {
	s := open(t)
	base := now()
	c := mustHold(t, s, call(base, base.Add(time.Minute)))
	past := mustHold(t, s, call(base.Add(-time.Minute), base.Add(-10*time.Second))) // kept for its Grace
	for _, tc := range []struct {
		c  HeldCall
		at time.Time
	}{
		{c, c.Deadline},
		{c, c.Deadline.Add(time.Nanosecond)},
		{c, c.Deadline.Add(time.Hour)},
		{past, base},
	} {
		got, err := s.Decide(t.Context(), tc.c.ID, Approve, "alice", tc.at)
		if !errors.Is(err, ErrExpired) {
			t.Errorf("Decide at deadline%+v: %v, want ErrExpired", tc.at.Sub(tc.c.Deadline), err)
		}
		if diff := cmp.Diff(tc.c, got); diff != "" {
			t.Errorf("Decide at deadline%+v returned (-want +got):\n%s", tc.at.Sub(tc.c.Deadline), diff)
		}
		if diff := cmp.Diff(tc.c, mustGet(t, s, tc.c.ID)); diff != "" {
			t.Errorf("Get after a late Decide (-want +got):\n%s", diff)
		}
	}
	// Just before its deadline, it is decided.
	if _, err := s.Decide(t.Context(), c.ID, Deny, "alice", c.Deadline.Add(-time.Nanosecond)); err != nil {
		t.Errorf("Decide just before the deadline: %v", err)
	}
}

func testDecideInvalid(t *testing.T, open opener) {
	s := open(t)
	base := now()
	c := mustHold(t, s, call(base, base.Add(time.Minute)))
	for _, d := range []string{"", "APPROVE", "Deny", "maybe", "approved"} {
		if _, err := s.Decide(t.Context(), c.ID, d, "alice", base); !errors.Is(err, ErrInvalidDecision) {
			t.Errorf("Decide(%q): %v, want ErrInvalidDecision", d, err)
		}
	}
	if _, err := s.Decide(t.Context(), NewID(), "maybe", "alice", base); !errors.Is(err, ErrInvalidDecision) {
		t.Errorf("Decide(maybe) of an unknown call: %v, want ErrInvalidDecision", err)
	}
	if diff := cmp.Diff(c, mustGet(t, s, c.ID)); diff != "" {
		t.Errorf("the call changed (-want +got):\n%s", diff)
	}
}

// testPending: the calls not decided and not past their deadline, oldest held first (not by
// deadline).
func testPending(t *testing.T, open opener) {
	s := open(t)
	base := now()
	if got, err := s.Pending(t.Context(), base); err != nil || len(got) != 0 {
		t.Errorf("Pending of an empty store = %v, %v; want none", ids(got), err)
	}
	a := mustHold(t, s, call(base.Add(-3*time.Minute), base.Add(10*time.Minute)))
	b := mustHold(t, s, call(base.Add(-1*time.Minute), base.Add(5*time.Minute)))
	c := mustHold(t, s, call(base.Add(-2*time.Minute), base.Add(20*time.Minute)))
	c.Replica = "other" // the replica does not matter
	decided := mustHold(t, s, call(base.Add(-4*time.Minute), base.Add(30*time.Minute)))
	expired := mustHold(t, s, call(base.Add(-5*time.Minute), base.Add(-10*time.Second)))
	atNow := mustHold(t, s, call(base.Add(-6*time.Minute), base)) // deadline not after now
	if _, err := s.Decide(t.Context(), decided.ID, Deny, "alice", base); err != nil {
		t.Fatal(err)
	}

	got, err := s.Pending(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids([]HeldCall{a, c, b}), ids(got)); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	if len(got) == 3 {
		if diff := cmp.Diff(b, got[2]); diff != "" {
			t.Errorf("Pending returned b as (-want +got):\n%s", diff)
		}
	}

	// Later, fewer; before, the one whose deadline was now too.
	got, err = s.Pending(t.Context(), base.Add(7*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids([]HeldCall{a, c}), ids(got)); diff != "" {
		t.Errorf("Pending 7m later (-want +got):\n%s", diff)
	}
	got, err = s.Pending(t.Context(), base.Add(-time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids([]HeldCall{atNow, a, c, b}), ids(got)); diff != "" {
		t.Errorf("Pending 1ns before (-want +got):\n%s", diff)
	}
	// Past its deadline, within its Grace, the store still has it.
	if diff := cmp.Diff(expired, mustGet(t, s, expired.ID)); diff != "" {
		t.Errorf("Get of a call past its deadline (-want +got):\n%s", diff)
	}
}

// testRelease: a released call is gone for all; releasing twice, or an unknown call, is no
// error; the other calls stay.
func testRelease(t *testing.T, open opener) {
	s := open(t)
	base := now()
	c := mustHold(t, s, call(base, base.Add(time.Minute)))
	other := mustHold(t, s, call(base, base.Add(time.Minute)))
	for range 2 {
		if err := s.Release(t.Context(), c.ID); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if err := s.Release(t.Context(), NewID()); err != nil {
		t.Errorf("Release of an unknown call: %v", err)
	}
	if _, err := s.Get(t.Context(), c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
	if _, err := s.Decide(t.Context(), c.ID, Approve, "alice", base); !errors.Is(err, ErrNotFound) {
		t.Errorf("Decide: %v, want ErrNotFound", err)
	}
	got, err := s.Pending(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{other.ID}, ids(got)); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
	got, err = s.HeldBy(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{other.ID}, ids(got)); diff != "" {
		t.Errorf("HeldBy (-want +got):\n%s", diff)
	}
	// Decided, then released.
	if _, err := s.Decide(t.Context(), other.ID, Approve, "alice", base); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), other.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a decided call released: %v, want ErrNotFound", err)
	}
}

// testHeldBy: the calls a replica holds, pending, decided or past their deadline (within its
// Grace), not released, oldest first; "" is the single gateway.
func testHeldBy(t *testing.T, open opener) {
	s := open(t)
	base := now()
	onReplica := func(r string, held, deadline time.Time) HeldCall {
		c := call(held, deadline)
		c.Replica = r
		return mustHold(t, s, c)
	}
	a1 := onReplica("a", base.Add(-time.Minute), base.Add(time.Hour))
	a2 := onReplica("a", base.Add(-3*time.Minute), base.Add(2*time.Hour))
	a3 := onReplica("a", base.Add(-2*time.Minute), base.Add(-5*time.Second))
	aReleased := onReplica("a", base.Add(-4*time.Minute), base.Add(time.Hour))
	b1 := onReplica("b", base, base.Add(time.Hour))
	single := onReplica("", base, base.Add(time.Hour))
	decided, err := s.Decide(t.Context(), a1.ID, Approve, "alice", base)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), aReleased.ID); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		replica string
		want    []HeldCall
	}{
		{"a", []HeldCall{a2, a3, decided}},
		{"b", []HeldCall{b1}},
		{"", []HeldCall{single}},
		{"c", nil},
	} {
		got, err := s.HeldBy(t.Context(), tt.replica)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("HeldBy(%q) (-want +got):\n%s", tt.replica, diff)
		}
	}
}

// testDecideConcurrently: of 16 decisions at once, exactly one wins; the others get ErrDecided
// and the call as the winner decided it.
func testDecideConcurrently(t *testing.T, open opener) {
	s := open(t)
	base := now()
	c := mustHold(t, s, call(base, base.Add(time.Minute)))
	type result struct {
		c   HeldCall
		err error
	}
	results := make([]result, 16)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			decision := Approve
			if i%2 == 1 {
				decision = Deny
			}
			<-start
			c, err := s.Decide(t.Context(), c.ID, decision, "operator-"+string(rune('a'+i)), base)
			results[i] = result{c, err}
		})
	}
	close(start)
	wg.Wait()

	var winner *HeldCall
	for i, r := range results {
		if r.err == nil {
			if winner != nil {
				t.Fatalf("two decisions won: %s and %s", winner.Approver, r.c.Approver)
			}
			winner = &results[i].c
		}
	}
	if winner == nil {
		t.Fatalf("no decision won: %v", results)
	}
	for _, r := range results {
		if r.err == nil {
			continue
		}
		if !errors.Is(r.err, ErrDecided) {
			t.Errorf("a losing Decide: %v, want ErrDecided", r.err)
		} else if diff := cmp.Diff(*winner, r.c); diff != "" {
			t.Errorf("a losing Decide returned (-winner +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff(*winner, mustGet(t, s, c.ID)); diff != "" {
		t.Errorf("Get (-winner +got):\n%s", diff)
	}
}

// testMoveAndAll: Move hands a call, pending or decided, to another replica, keeping
// everything else, including what a replica taking over needs; All lists every call held.
func testMoveAndAll(t *testing.T, open opener) {
	s := open(t)
	ctx := t.Context()
	n := now()
	a := call(n, n.Add(time.Minute))
	a.Replica, a.SessionID, a.StreamID, a.ClientID, a.Method, a.Params = "r1", "sid", "st-1", json.RawMessage(`7`), "tools/call", json.RawMessage(`{"name":"x"}`)
	b := call(n.Add(time.Millisecond), n.Add(time.Minute))
	b.Replica = "r2"
	mustHold(t, s, a)
	mustHold(t, s, b)
	if _, err := s.Decide(ctx, b.ID, Approve, "ops", n); err != nil {
		t.Fatal(err)
	}
	moved, err := s.Move(ctx, a.ID, "r3")
	if err != nil || moved.Replica != "r3" {
		t.Fatalf("Move: %+v %v", moved, err)
	}
	got := mustGet(t, s, a.ID)
	if got.Replica != "r3" || got.SessionID != "sid" || got.StreamID != "st-1" || string(got.ClientID) != "7" || got.Method != "tools/call" || string(got.Params) != `{"name":"x"}` {
		t.Errorf("moved call: %+v", got)
	}
	if moved, err := s.Move(ctx, b.ID, "r3"); err != nil || moved.Decision != Approve || moved.Replica != "r3" {
		t.Errorf("moving a decided call: %+v %v", moved, err)
	}
	if _, err := s.Move(ctx, NewID(), "r3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("moving an unknown call: %v", err)
	}
	all, err := s.All(ctx)
	if err != nil || !slices.Equal(ids(all), []string{a.ID, b.ID}) {
		t.Errorf("All: %v %v, want %s %s", ids(all), err, a.ID, b.ID)
	}
	if held, _ := s.HeldBy(ctx, "r1"); len(held) != 0 {
		t.Errorf("r1 still holds %v", ids(held))
	}
}

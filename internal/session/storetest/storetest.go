// Package storetest is the behaviour suite of session.Store: the contract that the doc
// comments of session.Store, Routes and Tasks state, run against any implementation, so
// that the in-memory and the Redis store are held to one set of tests.
//
//	func TestMemoryStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
//			s := session.NewMemoryStore(&session.MemoryOptions{MaxSessions: opts.MaxSessions, MaxPerPrincipal: opts.MaxPerPrincipal, MaxPerAnonymousAddr: opts.MaxPerAnonymousAddr, Now: opts.Clock.Now})
//			return storetest.Harness{Store: s, IdleTimeout: time.Hour, PassIdle: storetest.ClockPassIdle(opts.Clock, time.Hour)}
//		})
//	}
package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// Options describe the store a test of the suite asks for.
type Options struct {
	// MaxSessions is the cap of live sessions; zero means none.
	MaxSessions int
	// MaxPerPrincipal and MaxPerAnonymousAddr are the caps of live sessions of each
	// principal and of each anonymous client address; zero means none.
	MaxPerPrincipal     int
	MaxPerAnonymousAddr int
	// EvictIdle is the eviction threshold of a full store (the EvictIdle of its options,
	// on Clock); zero means none.
	EvictIdle time.Duration
	// Clock is the store's clock (its Now) for what is not idle expiry: CreatedAt, task
	// records' Created and Ended. Tests move it by hand.
	Clock *testclock.Clock
	// ShortIdle is set for tests that let sessions expire (with Harness.PassIdle). A store
	// whose sessions expire in real time then uses a short idle timeout; for the other
	// tests it must use one long enough that no session expires while they run.
	ShortIdle bool
}

// Harness is a store under test and how to let its sessions go idle.
type Harness struct {
	Store session.Store
	// IdleTimeout is how long a session lives unused: the suite expires sessions with
	// Store.Expire(ctx, Clock.Now().Add(-IdleTimeout)).
	IdleTimeout time.Duration
	// PassIdle lets time pass until every session of gone has been unused for longer than
	// IdleTimeout (with no session named, at least IdleTimeout passes), calling keep, if not
	// nil, often enough that the sessions it marks used (Touch) stay, and once more at the
	// end. Reads of gone sessions (Get) must not keep them.
	PassIdle func(t *testing.T, keep func(), gone ...string)
}

// ClockPassIdle is the PassIdle of a store whose idle expiry follows clock (its Now), as
// Store.Expire applies it: it moves clock past idle, then calls keep.
func ClockPassIdle(clock *testclock.Clock, idle time.Duration) func(t *testing.T, keep func(), gone ...string) {
	return func(t *testing.T, keep func(), _ ...string) {
		clock.Advance(idle + time.Millisecond)
		if keep != nil {
			keep()
		}
	}
}

// PollPassIdle is the PassIdle of a store whose sessions expire by themselves in real time,
// on a clock no test controls (Redis's): it calls keep every idle/10, as a client using its
// session would, until Get reports each session of gone unknown and at least idle has
// passed. It fails the test if that takes longer than limit: a session that does not expire
// is a failure, not a longer wait.
func PollPassIdle(store session.Store, idle, limit time.Duration) func(t *testing.T, keep func(), gone ...string) {
	return func(t *testing.T, keep func(), gone ...string) {
		t.Helper()
		ctx := context.Background()
		start := time.Now()
		tick := time.NewTicker(idle / 10)
		defer tick.Stop()
		for {
			if keep != nil {
				keep()
			}
			live := 0
			for _, id := range gone {
				if _, err := store.Get(ctx, id); !errors.Is(err, session.ErrNotFound) {
					live++
				}
			}
			if live == 0 && time.Since(start) > idle {
				return
			}
			if time.Since(start) > limit {
				t.Fatalf("%d of %d sessions still live %v after they were last used; the idle timeout is %v", live, len(gone), limit, idle)
			}
			<-tick.C
		}
	}
}

// Run runs the suite: each test asks newStore for a new, empty store.
func Run(t *testing.T, newStore func(t *testing.T, opts Options) Harness) {
	s := suite{newStore: newStore}
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"CreateAndGet", s.createAndGet},
		{"IDs", s.ids},
		{"Limit", s.limit},
		{"Update", s.update},
		{"ConcurrentUpdates", s.concurrentUpdates},
		{"TouchAndDelete", s.touchAndDelete},
		{"Expiry", s.expiry},
		{"ExpiryFreesRoom", s.expiryFreesRoom},
		{"ExpiryDropsRoutesAndTasks", s.expiryDropsRoutesAndTasks},
		{"Reverse", s.reverse},
		{"DeleteDropsRoutesAndTasks", s.deleteDropsRoutesAndTasks},
		{"Tasks", s.tasks},
		{"TaskRecordsAreBounded", s.taskRecordsAreBounded},
		{"GoneTasksMakeRoom", s.goneTasksMakeRoom},
		{"Concurrent", s.concurrent},
		{"PrincipalLimit", s.principalLimit},
		{"AnonymousAddrLimit", s.anonymousAddrLimit},
		{"NoOwnerLimits", s.noOwnerLimits},
		{"OwnerAndStoreLimits", s.ownerAndStoreLimits},
		{"OwnerLimitExpiry", s.ownerLimitExpiry},
		{"OwnerLimitConcurrent", s.ownerLimitConcurrent},
		{"Eviction", s.eviction},
		{"EvictionConcurrent", s.evictionConcurrent},
	} {
		t.Run(tc.name, tc.run)
	}
}

type suite struct {
	newStore func(t *testing.T, opts Options) Harness
}

// start is where each test's clock stands: a time with nanoseconds, so that a store that
// loses precision is caught.
var start = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func (s suite) open(t *testing.T, opts Options) (Harness, *testclock.Clock, context.Context) {
	t.Helper()
	opts.Clock = testclock.New(start)
	return s.newStore(t, opts), opts.Clock, context.Background()
}

// recordDiff compares records, times by instant and empty slices as nil.
func recordDiff(want, got any) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

func mustCreate(t *testing.T, st session.Store, rec session.Record) *session.Record {
	t.Helper()
	r, err := st.Create(context.Background(), rec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return r
}

func notFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, session.ErrNotFound) {
		t.Errorf("%s: %v, want ErrNotFound", what, err)
	}
}

func (s suite) createAndGet(t *testing.T) {
	h, clock, ctx := s.open(t, Options{})
	in := session.Record{
		ID:                 "chosen by the caller",
		ProtocolVersion:    "2025-11-25",
		ClientInfo:         json.RawMessage(`{"name": "client <&>", "version":"1.0"}`), // kept byte for byte
		ClientCapabilities: json.RawMessage(`{"sampling":{},"roots":{"listChanged":true}}`),
		Initialized:        true,
		LogLevel:           "info",
		Principal:          session.Principal{Issuer: "https://issuer.example", Subject: "alice"},
		ClientAddr:         "2001:db8::7",
		Profile:            "ops",
		Subscriptions:      []string{"file:///a", "ui://b?c=<d>"},
	}
	rec, err := h.Store.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == in.ID {
		t.Fatal("Create kept the caller's id")
	}
	want := in
	want.ID, want.CreatedAt = rec.ID, clock.Now()
	if d := recordDiff(want, *rec); d != "" {
		t.Errorf("Create returned (-want +got):\n%s", d)
	}
	got, err := h.Store.Get(ctx, rec.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if d := recordDiff(want, *got); d != "" {
		t.Errorf("Get returned (-want +got):\n%s", d)
	}

	// A CreatedAt the caller sets is kept.
	created := start.Add(-time.Hour)
	rec2 := mustCreate(t, h.Store, session.Record{CreatedAt: created})
	if got, err := h.Store.Get(ctx, rec2.ID); err != nil || !got.CreatedAt.Equal(created) {
		t.Errorf("Get = %+v, %v; want CreatedAt %v", got, err, created)
	}

	for _, id := range []string{"", "nope", session.NewID(), rec.ID + "x"} {
		_, err := h.Store.Get(ctx, id)
		notFound(t, fmt.Sprintf("Get(%q)", id), err)
	}
}

func (s suite) ids(t *testing.T) {
	h, _, _ := s.open(t, Options{})
	seen := map[string]bool{}
	for range 50 {
		rec := mustCreate(t, h.Store, session.Record{})
		b, err := base64.RawURLEncoding.DecodeString(rec.ID)
		if len(rec.ID) != 43 || err != nil || len(b) != 32 {
			t.Fatalf("id %q: want 32 bytes in base64url, 43 characters", rec.ID)
		}
		if seen[rec.ID] {
			t.Fatalf("id %q given twice", rec.ID)
		}
		seen[rec.ID] = true
	}
}

func (s suite) limit(t *testing.T) {
	h, _, ctx := s.open(t, Options{MaxSessions: 2})
	a := mustCreate(t, h.Store, session.Record{})
	mustCreate(t, h.Store, session.Record{})
	if _, err := h.Store.Create(ctx, session.Record{}); !errors.Is(err, session.ErrLimit) {
		t.Fatalf("third session: %v, want ErrLimit", err)
	}
	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Create(ctx, session.Record{}); err != nil {
		t.Errorf("a session after one was deleted: %v", err)
	}
	if _, err := h.Store.Create(ctx, session.Record{}); !errors.Is(err, session.ErrLimit) {
		t.Errorf("full again: %v, want ErrLimit", err)
	}
}

func (s suite) update(t *testing.T) {
	h, _, ctx := s.open(t, Options{})
	a := mustCreate(t, h.Store, session.Record{ProtocolVersion: "2025-11-25", Subscriptions: []string{"x"}})
	held, err := h.Store.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	up, err := h.Store.Update(ctx, a.ID, func(r *session.Record) {
		r.LogLevel = "debug"
		r.Initialized = true
		r.Subscriptions = append(slices.Clip(r.Subscriptions), "y")
		r.ID = "forged"
	})
	if err != nil {
		t.Fatal(err)
	}
	want := *a
	want.LogLevel, want.Initialized, want.Subscriptions = "debug", true, []string{"x", "y"}
	if d := recordDiff(want, *up); d != "" {
		t.Errorf("Update returned (-want +got), the id must be kept:\n%s", d)
	}
	if got, err := h.Store.Get(ctx, a.ID); err != nil || recordDiff(want, *got) != "" {
		t.Errorf("Get after Update = %+v, %v; want %+v", got, err, want)
	}
	// Records returned before are not changed.
	if a.LogLevel != "" || held.LogLevel != "" || len(a.Subscriptions) != 1 || len(held.Subscriptions) != 1 {
		t.Errorf("Update changed a record a reader held: Create's %+v, Get's %+v", a, held)
	}

	_, err = h.Store.Update(ctx, "nope", func(*session.Record) { t.Error("change called for an unknown session") })
	notFound(t, "Update of an unknown id", err)
	_ = h.Store.Delete(ctx, a.ID)
	_, err = h.Store.Update(ctx, a.ID, func(*session.Record) {})
	notFound(t, "Update of a deleted session", err)
}

// concurrentUpdates: Updates of one session that race each other all take effect.
func (s suite) concurrentUpdates(t *testing.T) {
	h, _, ctx := s.open(t, Options{})
	a := mustCreate(t, h.Store, session.Record{})
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := h.Store.Update(ctx, a.ID, func(r *session.Record) {
				r.Subscriptions = append(slices.Clip(r.Subscriptions), fmt.Sprint(i))
			})
			if err != nil {
				t.Errorf("Update %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	got, err := h.Store.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Subscriptions) != n {
		t.Errorf("after %d concurrent Updates: %v", n, got.Subscriptions)
	}
}

func (s suite) touchAndDelete(t *testing.T) {
	h, _, ctx := s.open(t, Options{})
	if err := h.Store.Touch(ctx, "nope"); err != nil {
		t.Errorf("Touch of an unknown id: %v", err)
	}
	if err := h.Store.Delete(ctx, "nope"); err != nil {
		t.Errorf("Delete of an unknown id: %v", err)
	}
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})
	if err := h.Store.Touch(ctx, a.ID); err != nil {
		t.Errorf("Touch: %v", err)
	}
	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := h.Store.Get(ctx, a.ID)
	notFound(t, "Get of a deleted session", err)
	if err := h.Store.Touch(ctx, a.ID); err != nil {
		t.Errorf("Touch of a deleted session: %v", err)
	}
	if _, err := h.Store.Get(ctx, a.ID); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("Touch brought a deleted session back: %v", err)
	}
	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := h.Store.Get(ctx, b.ID); err != nil {
		t.Errorf("Delete of a took b: %v", err)
	}
}

// expiry: a session unused for longer than the idle timeout expires; reading it does not
// use it; marking it used keeps it; Expire reports each expired session once, and not a
// deleted one.
func (s suite) expiry(t *testing.T) {
	h, clock, ctx := s.open(t, Options{ShortIdle: true})
	expire := func() []string {
		t.Helper()
		ids, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout))
		if err != nil {
			t.Fatalf("Expire: %v", err)
		}
		slices.Sort(ids)
		return ids
	}
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})
	c := mustCreate(t, h.Store, session.Record{})
	if got := expire(); len(got) != 0 {
		t.Fatalf("Expire before any idle time = %v", got)
	}

	// b is used; a is only read; c is left alone.
	h.PassIdle(t, func() {
		if err := h.Store.Touch(ctx, b.ID); err != nil {
			t.Errorf("Touch: %v", err)
		}
		_, _ = h.Store.Get(ctx, a.ID)
	}, a.ID, c.ID)
	want := []string{a.ID, c.ID}
	slices.Sort(want)
	if got := expire(); !slices.Equal(got, want) {
		t.Errorf("Expire = %v, want a and c %v", got, want)
	}
	for _, id := range want {
		_, err := h.Store.Get(ctx, id)
		notFound(t, "Get of an expired session", err)
	}
	if _, err := h.Store.Get(ctx, b.ID); err != nil {
		t.Errorf("the session in use expired: %v", err)
	}
	if got := expire(); len(got) != 0 {
		t.Errorf("second Expire = %v, want none: each session is reported once", got)
	}

	// A session in use is kept by marking it used before each sweep.
	h.PassIdle(t, func() { _ = h.Store.Touch(ctx, b.ID) })
	if got := expire(); len(got) != 0 {
		t.Errorf("Expire = %v, want none: b was used just now", got)
	}
	if _, err := h.Store.Get(ctx, b.ID); err != nil {
		t.Errorf("the session in use expired: %v", err)
	}
	// A deleted session has not expired.
	_ = h.Store.Delete(ctx, b.ID)
	if got := expire(); len(got) != 0 {
		t.Errorf("Expire after Delete = %v, want none", got)
	}
}

// expiryFreesRoom: an expired session no longer counts against the cap.
func (s suite) expiryFreesRoom(t *testing.T) {
	h, clock, ctx := s.open(t, Options{MaxSessions: 1, ShortIdle: true})
	a := mustCreate(t, h.Store, session.Record{})
	if _, err := h.Store.Create(ctx, session.Record{}); !errors.Is(err, session.ErrLimit) {
		t.Fatalf("second session: %v, want ErrLimit", err)
	}
	h.PassIdle(t, nil, a.ID)
	if _, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Create(ctx, session.Record{}); err != nil {
		t.Errorf("a session after the first expired: %v", err)
	}
}

// routes puts a reverse record and a task for a session, named after tag.
func putRoutes(t *testing.T, st session.Store, sessionID, tag string) {
	t.Helper()
	ctx := context.Background()
	if err := st.PutReverse(ctx, session.ReverseRecord{SessionID: sessionID, ID: `"r-` + tag + `"`, Method: "roots/list", Upstream: "u", UpstreamID: "rev-" + tag}); err != nil {
		t.Fatalf("PutReverse: %v", err)
	}
	if err := st.PutTask(ctx, session.TaskRecord{ID: "t-" + tag, SessionID: sessionID, Upstream: "u", UpstreamID: "task-" + tag}); err != nil {
		t.Fatalf("PutTask: %v", err)
	}
}

// routesFound reports which of the records putRoutes made for tag can be found.
func routesFound(t *testing.T, st session.Store, sessionID, tag string) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	check := func(what string, err error) {
		t.Helper()
		switch {
		case err == nil:
			found = append(found, what)
		case !errors.Is(err, session.ErrNotFound):
			t.Errorf("%s of %s: %v", what, tag, err)
		}
	}
	_, err := st.ReverseByUpstream(ctx, "u", "rev-"+tag)
	check("ReverseByUpstream", err)
	_, err = st.Task(ctx, "t-"+tag)
	check("Task", err)
	_, err = st.TaskByUpstream(ctx, "u", "task-"+tag)
	check("TaskByUpstream", err)
	if mine, err := st.TasksOf(ctx, sessionID); err != nil {
		t.Errorf("TasksOf: %v", err)
	} else if len(mine) > 0 {
		found = append(found, "TasksOf")
	}
	return found
}

// expiryDropsRoutesAndTasks: the records of a session go when it expires, and only its.
func (s suite) expiryDropsRoutesAndTasks(t *testing.T) {
	h, clock, ctx := s.open(t, Options{ShortIdle: true})
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})
	putRoutes(t, h.Store, a.ID, "a")
	putRoutes(t, h.Store, b.ID, "b")
	h.PassIdle(t, func() { _ = h.Store.Touch(ctx, b.ID) }, a.ID)
	if _, err := h.Store.Expire(ctx, clock.Now().Add(-h.IdleTimeout)); err != nil {
		t.Fatal(err)
	}
	if found := routesFound(t, h.Store, a.ID, "a"); len(found) != 0 {
		t.Errorf("the expired session's records outlived it: %v", found)
	}
	_, err := h.Store.TakeReverse(ctx, a.ID, `"r-a"`)
	notFound(t, "TakeReverse of an expired session's request", err)
	if found := routesFound(t, h.Store, b.ID, "b"); len(found) != 4 {
		t.Errorf("the live session's records: only %v found", found)
	}
}

func (s suite) deleteDropsRoutesAndTasks(t *testing.T) {
	h, _, ctx := s.open(t, Options{})
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})
	putRoutes(t, h.Store, a.ID, "a")
	putRoutes(t, h.Store, b.ID, "b")
	if err := h.Store.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if found := routesFound(t, h.Store, a.ID, "a"); len(found) != 0 {
		t.Errorf("the deleted session's records outlived it: %v", found)
	}
	_, err := h.Store.TakeReverse(ctx, a.ID, `"r-a"`)
	notFound(t, "TakeReverse of a deleted session's request", err)
	if found := routesFound(t, h.Store, b.ID, "b"); len(found) != 4 {
		t.Errorf("b's records went with a: only %v found", found)
	}
	if err := h.Store.EndTask(ctx, "t-a"); err != nil {
		t.Errorf("EndTask of a deleted session's task: %v", err)
	}
}

func (s suite) reverse(t *testing.T) {
	h, clock, ctx := s.open(t, Options{})
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})

	r1 := session.ReverseRecord{SessionID: a.ID, ID: `"r-1"`, Method: "sampling/createMessage", Upstream: "u", UpstreamID: "5", Sent: clock.Now()}
	if err := h.Store.PutReverse(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Store.ReverseByUpstream(ctx, "u", "5"); err != nil || recordDiff(r1, got) != "" {
		t.Errorf("ReverseByUpstream = %+v, %v; want %+v", got, err, r1)
	}
	_, err := h.Store.ReverseByUpstream(ctx, "u", "6")
	notFound(t, "ReverseByUpstream of another upstream id", err)
	_, err = h.Store.ReverseByUpstream(ctx, "v", "5")
	notFound(t, "ReverseByUpstream of another upstream", err)
	_, err = h.Store.TakeReverse(ctx, b.ID, `"r-1"`)
	notFound(t, "another session took a's request", err)
	if got, err := h.Store.TakeReverse(ctx, a.ID, `"r-1"`); err != nil || recordDiff(r1, got) != "" {
		t.Errorf("TakeReverse = %+v, %v; want %+v", got, err, r1)
	}
	_, err = h.Store.TakeReverse(ctx, a.ID, `"r-1"`)
	notFound(t, "a request answered twice", err)
	_, err = h.Store.ReverseByUpstream(ctx, "u", "5")
	notFound(t, "ReverseByUpstream of a request answered", err)

	// The connection key of an isolated upstream names the session.
	iso := session.ReverseRecord{SessionID: a.ID, ID: "7", Method: "elicitation/create", Upstream: "u\x00" + a.ID, UpstreamID: "1", Sent: clock.Now()}
	if err := h.Store.PutReverse(ctx, iso); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Store.ReverseByUpstream(ctx, iso.Upstream, "1"); err != nil || recordDiff(iso, got) != "" {
		t.Errorf("ReverseByUpstream of an isolated upstream = %+v, %v; want %+v", got, err, iso)
	}
	if got, err := h.Store.TakeReverse(ctx, a.ID, "7"); err != nil || recordDiff(iso, got) != "" {
		t.Errorf("TakeReverse of an isolated upstream's request = %+v, %v; want %+v", got, err, iso)
	}

	// An upstream request id used again (a restarted upstream) leads to the latest record;
	// the earlier one can still be answered.
	older := session.ReverseRecord{SessionID: a.ID, ID: "1", Upstream: "u", UpstreamID: "9", Sent: clock.Now()}
	newer := session.ReverseRecord{SessionID: b.ID, ID: "2", Upstream: "u", UpstreamID: "9", Sent: clock.Now()}
	_ = h.Store.PutReverse(ctx, older)
	_ = h.Store.PutReverse(ctx, newer)
	if got, err := h.Store.ReverseByUpstream(ctx, "u", "9"); err != nil || recordDiff(newer, got) != "" {
		t.Errorf("ReverseByUpstream of a reused id = %+v, %v; want the newer %+v", got, err, newer)
	}
	if _, err := h.Store.TakeReverse(ctx, b.ID, "2"); err != nil {
		t.Errorf("TakeReverse of the newer: %v", err)
	}
	if got, err := h.Store.TakeReverse(ctx, a.ID, "1"); err != nil || recordDiff(older, got) != "" {
		t.Errorf("TakeReverse of the older = %+v, %v; want %+v", got, err, older)
	}
}

func (s suite) tasks(t *testing.T) {
	h, clock, ctx := s.open(t, Options{})
	a := mustCreate(t, h.Store, session.Record{})
	b := mustCreate(t, h.Store, session.Record{})

	t1 := session.TaskRecord{ID: "mf-t-1", SessionID: a.ID, Upstream: "u", UpstreamID: "up-1", TTL: time.Hour}
	if err := h.Store.PutTask(ctx, t1); err != nil {
		t.Fatal(err)
	}
	t1.Created = clock.Now() // PutTask sets it
	if got, err := h.Store.Task(ctx, "mf-t-1"); err != nil || recordDiff(t1, got) != "" {
		t.Errorf("Task = %+v, %v; want %+v", got, err, t1)
	}
	if got, err := h.Store.TaskByUpstream(ctx, "u", "up-1"); err != nil || recordDiff(t1, got) != "" {
		t.Errorf("TaskByUpstream = %+v, %v; want %+v", got, err, t1)
	}
	if mine, err := h.Store.TasksOf(ctx, a.ID); err != nil || recordDiff([]session.TaskRecord{t1}, mine) != "" {
		t.Errorf("TasksOf(a) = %+v, %v; want [%+v]", mine, err, t1)
	}
	if theirs, err := h.Store.TasksOf(ctx, b.ID); err != nil || len(theirs) != 0 {
		t.Errorf("TasksOf(b) = %+v, %v; want none", theirs, err)
	}
	_, err := h.Store.Task(ctx, "mf-t-2")
	notFound(t, "Task of an unknown id", err)
	_, err = h.Store.TaskByUpstream(ctx, "u", "up-2")
	notFound(t, "TaskByUpstream of an unknown id", err)

	// EndTask sets Ended once.
	clock.Advance(time.Second)
	if err := h.Store.EndTask(ctx, "mf-t-1"); err != nil {
		t.Fatal(err)
	}
	t1.Ended = clock.Now()
	clock.Advance(time.Second)
	_ = h.Store.EndTask(ctx, "mf-t-1")
	if got, err := h.Store.Task(ctx, "mf-t-1"); err != nil || recordDiff(t1, got) != "" {
		t.Errorf("Task after EndTask = %+v, %v; want %+v", got, err, t1)
	}
	if err := h.Store.EndTask(ctx, "nope"); err != nil {
		t.Errorf("EndTask of an unknown task: %v", err)
	}

	// A Created the caller sets is kept; an isolated upstream's key names the session.
	iso := session.TaskRecord{ID: "mf-t-3", SessionID: b.ID, Upstream: "u\x00" + b.ID, UpstreamID: "up-3", Created: start.Add(-time.Minute)}
	if err := h.Store.PutTask(ctx, iso); err != nil {
		t.Fatal(err)
	}
	if got, err := h.Store.Task(ctx, iso.ID); err != nil || recordDiff(iso, got) != "" {
		t.Errorf("Task of an isolated upstream = %+v, %v; want %+v", got, err, iso)
	}
	if got, err := h.Store.TaskByUpstream(ctx, iso.Upstream, "up-3"); err != nil || recordDiff(iso, got) != "" {
		t.Errorf("TaskByUpstream of an isolated upstream = %+v, %v; want %+v", got, err, iso)
	}
	if theirs, err := h.Store.TasksOf(ctx, b.ID); err != nil || recordDiff([]session.TaskRecord{iso}, theirs) != "" {
		t.Errorf("TasksOf(b) = %+v, %v; want [%+v]", theirs, err, iso)
	}
}

// taskRecordsAreBounded: a session's task records do not grow without bound. A session holds
// at most session.MaxTasksPerSession; when full, the task that ended first makes room, and
// with none ended a new task is refused. Ended tasks go after session.TaskRetention, and any
// task once its ttl has passed; a running task without a ttl stays while its session lives.
func (s suite) taskRecordsAreBounded(t *testing.T) {
	h, clock, ctx := s.open(t, Options{})
	st := h.Store
	a := mustCreate(t, st, session.Record{})
	b := mustCreate(t, st, session.Record{})
	put := func(sessionID, id string, ttl time.Duration) error {
		return st.PutTask(ctx, session.TaskRecord{ID: id, SessionID: sessionID, Upstream: "u", UpstreamID: "up-" + id, TTL: ttl})
	}
	found := func(id string) bool {
		t.Helper()
		rec, err := st.Task(ctx, id)
		byUp, errUp := st.TaskByUpstream(ctx, "u", "up-"+id)
		if (err == nil) != (errUp == nil) || err == nil && recordDiff(rec, byUp) != "" {
			t.Errorf("task %s: Task = %+v, %v but TaskByUpstream = %+v, %v", id, rec, err, byUp, errUp)
		}
		if err != nil && !errors.Is(err, session.ErrNotFound) {
			t.Errorf("task %s: %v, want ErrNotFound", id, err)
		}
		return err == nil
	}
	const limit = session.MaxTasksPerSession

	for i := range limit {
		if err := put(a.ID, fmt.Sprintf("a%d", i), 0); err != nil {
			t.Fatalf("task %d of %d: %v", i+1, limit, err)
		}
	}
	if rec, _ := st.Task(ctx, "a0"); !rec.Created.Equal(start) {
		t.Errorf("Created = %v, want now (%v)", rec.Created, start)
	}
	// Full, and nothing has ended: refused, and nothing stored.
	if err := put(a.ID, "extra", 0); !errors.Is(err, session.ErrTooManyTasks) {
		t.Fatalf("task %d with none ended: %v, want ErrTooManyTasks", limit+1, err)
	}
	if found("extra") {
		t.Error("a refused task was stored")
	}
	// The cap is per session.
	if err := put(b.ID, "b0", 0); err != nil {
		t.Errorf("another session's first task: %v", err)
	}

	// The task that ended first makes room, whatever the order of creation; ending a task
	// twice keeps the first time, and ending an unknown one is no error.
	_ = st.EndTask(ctx, "a5")
	clock.Advance(time.Second)
	_ = st.EndTask(ctx, "a3")
	_ = st.EndTask(ctx, "a5")
	if err := st.EndTask(ctx, "nope"); err != nil {
		t.Errorf("EndTask of an unknown task: %v", err)
	}
	if rec, _ := st.Task(ctx, "a5"); !rec.Ended.Equal(start) {
		t.Errorf("a5 ended at %v, want the first EndTask's %v", rec.Ended, start)
	}
	if err := put(a.ID, "extra", 0); err != nil {
		t.Fatalf("full session with ended tasks: %v", err)
	}
	if found("a5") || !found("a3") || !found("extra") {
		t.Errorf("after making room: a5 %v, a3 %v, extra %v; want only a5 (ended first) gone", found("a5"), found("a3"), found("extra"))
	}

	// An ended task is kept for TaskRetention after it ended, then goes.
	clock.Set(start.Add(time.Second + session.TaskRetention - time.Nanosecond))
	if !found("a3") {
		t.Error("a3 went before TaskRetention had passed")
	}
	clock.Advance(time.Nanosecond)
	if found("a3") {
		t.Error("a3 stayed after TaskRetention")
	}
	if !found("a0") {
		t.Error("a running task without a ttl went with time")
	}
	if mine, _ := st.TasksOf(ctx, a.ID); len(mine) != limit-1 {
		t.Errorf("TasksOf = %d tasks, want %d", len(mine), limit-1)
	}

	// A task goes once its ttl has passed, running or not.
	if err := put(b.ID, "short", time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute - time.Nanosecond)
	if !found("short") {
		t.Error("a task went before its ttl")
	}
	clock.Advance(time.Nanosecond)
	if found("short") {
		t.Error("a task stayed after its ttl")
	}
	if mine, _ := st.TasksOf(ctx, b.ID); len(mine) != 1 || mine[0].ID != "b0" {
		t.Errorf("TasksOf(b) = %+v, want b0 only", mine)
	}

	// A long-lived session whose tasks end runs any number of them, keeping the latest.
	for i := range 3 * limit {
		id := fmt.Sprintf("loop%d", i)
		if err := put(b.ID, id, 0); err != nil {
			t.Fatalf("task %d of a session whose tasks end: %v", i, err)
		}
		_ = st.EndTask(ctx, id)
	}
	if mine, _ := st.TasksOf(ctx, b.ID); len(mine) != limit {
		t.Errorf("TasksOf(b) = %d tasks, want %d", len(mine), limit)
	}
	if !found("b0") || !found(fmt.Sprintf("loop%d", 3*limit-1)) || found(fmt.Sprintf("loop%d", 2*limit)) {
		t.Error("the running task or the latest ended one went, or an older ended one stayed")
	}

	// The records go with their session.
	_ = st.Delete(ctx, a.ID)
	_ = st.Delete(ctx, b.ID)
	for _, id := range []string{"a0", "extra", "b0", fmt.Sprintf("loop%d", 3*limit-1)} {
		if found(id) {
			t.Errorf("task %s outlived its session", id)
		}
	}
}

// goneTasksMakeRoom: in a full session, the records whose ttl has passed and those past
// their retention make room for new tasks, exactly when they are gone, and without having
// been read since.
func (s suite) goneTasksMakeRoom(t *testing.T) {
	h, clock, ctx := s.open(t, Options{})
	st := h.Store
	a := mustCreate(t, st, session.Record{})
	put := func(id string, ttl time.Duration) error {
		return st.PutTask(ctx, session.TaskRecord{ID: id, SessionID: a.ID, Upstream: "u", UpstreamID: "up-" + id, TTL: ttl})
	}
	const limit = session.MaxTasksPerSession
	// Two tasks with a ttl of a minute, two that end now, the rest running without a ttl.
	for i := range limit {
		ttl := time.Duration(0)
		if i < 2 {
			ttl = time.Minute
		}
		if err := put(fmt.Sprint(i), ttl); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.EndTask(ctx, "2")
	_ = st.EndTask(ctx, "3")

	// A nanosecond before the ttl, the tasks that ended make room.
	clock.Advance(time.Minute - time.Nanosecond)
	for _, id := range []string{"new0", "new1"} {
		if err := put(id, 0); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if err := put("new2", 0); !errors.Is(err, session.ErrTooManyTasks) {
		t.Fatalf("a nanosecond before the ttl passed: %v, want ErrTooManyTasks", err)
	}
	// Once the ttl has passed, its tasks make room, running or not.
	clock.Advance(time.Nanosecond)
	for _, id := range []string{"new2", "new3"} {
		if err := put(id, 0); err != nil {
			t.Fatalf("%s once the ttl passed: %v", id, err)
		}
	}
	if err := put("new4", 0); !errors.Is(err, session.ErrTooManyTasks) {
		t.Fatalf("full of running tasks: %v, want ErrTooManyTasks", err)
	}

	// A task past its retention makes room even where it would not be the first to end.
	_ = st.EndTask(ctx, "4")
	clock.Advance(time.Second)
	_ = st.EndTask(ctx, "5")
	clock.Advance(session.TaskRetention - time.Second)
	if err := put("new4", 0); err != nil { // drops 4, past its retention (5 stays: ended later)
		t.Fatal(err)
	}
	if _, err := st.Task(ctx, "5"); err != nil {
		t.Errorf("task 5, ended a second after 4, went: %v", err)
	}
	if mine, _ := st.TasksOf(ctx, a.ID); len(mine) != limit {
		t.Errorf("TasksOf = %d tasks, want %d", len(mine), limit)
	}
	for _, id := range []string{"0", "1", "2", "3", "4"} {
		if _, err := st.Task(ctx, id); !errors.Is(err, session.ErrNotFound) {
			t.Errorf("task %s stayed: %v", id, err)
		}
	}
}

// concurrent: the operations of many sessions at once, for the race detector.
func (s suite) concurrent(t *testing.T) {
	h, _, ctx := s.open(t, Options{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 10 {
				tag := fmt.Sprintf("%d-%d", w, i)
				rec, err := h.Store.Create(ctx, session.Record{})
				if err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				steps := []error{
					h.Store.Touch(ctx, rec.ID),
					h.Store.PutReverse(ctx, session.ReverseRecord{SessionID: rec.ID, ID: tag, Upstream: "u", UpstreamID: tag}),
					h.Store.PutTask(ctx, session.TaskRecord{ID: tag, SessionID: rec.ID, Upstream: "u", UpstreamID: tag}),
					h.Store.EndTask(ctx, tag),
				}
				_, err = h.Store.Get(ctx, rec.ID)
				steps = append(steps, err)
				_, err = h.Store.Update(ctx, rec.ID, func(r *session.Record) { r.LogLevel = tag })
				steps = append(steps, err)
				_, err = h.Store.TakeReverse(ctx, rec.ID, tag)
				steps = append(steps, err)
				_, err = h.Store.TasksOf(ctx, rec.ID)
				steps = append(steps, err, h.Store.Delete(ctx, rec.ID))
				if err := errors.Join(steps...); err != nil {
					t.Errorf("session %s: %v", tag, err)
				}
			}
		})
	}
	wg.Wait()
}

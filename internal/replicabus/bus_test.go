package replicabus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// These tests run several buses (replicas) on the test Redis, each on a store of its own
// under one key prefix, as separate processes would. A message that must not arrive is
// checked after a marker sent later has arrived: Redis delivers a subscriber's messages in
// the order it took them, so whatever was published before the marker came before it.

func TestMain(m *testing.M) { testredis.Main(m) }

// busWait bounds every wait for a message; it fails a test that would hang, it asserts no
// speed.
const busWait = 10 * time.Second

// Kinds the tests themselves send, besides the ones under test.
const (
	kindReady = "test-ready"
	kindMark  = "test-mark"
)

// goneCall is one call of BusOptions.Gone.
type goneCall struct {
	Replica string
	Claimed bool
}

// busRecorder records what a bus hands to Receive and Gone, and signals each change.
type busRecorder struct {
	mu   sync.Mutex
	msgs []session.BusMessage
	gone []goneCall
	// changed receives (without blocking the bus) after each record.
	changed chan struct{}
}

func newBusRecorder() *busRecorder { return &busRecorder{changed: make(chan struct{}, 1)} }

func (r *busRecorder) receive(m *session.BusMessage) {
	r.mu.Lock()
	r.msgs = append(r.msgs, *m)
	r.mu.Unlock()
	r.signal()
}

func (r *busRecorder) goneFn(replica string, claimed bool) {
	r.mu.Lock()
	r.gone = append(r.gone, goneCall{replica, claimed})
	r.mu.Unlock()
	r.signal()
}

func (r *busRecorder) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// await fails t unless cond holds of what was recorded within busWait; it wakes on each
// record.
func (r *busRecorder) await(t *testing.T, what string, cond func(msgs []session.BusMessage, gone []goneCall) bool) {
	t.Helper()
	deadline := time.NewTimer(busWait)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond(r.msgs, r.gone)
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("%s did not happen within %s; received %s, gone %v", what, busWait, describeMsgs(r.msgs), r.gone)
		}
	}
}

// of returns the messages of kind received so far.
func (r *busRecorder) of(kind string) []session.BusMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []session.BusMessage
	for _, m := range r.msgs {
		if m.Kind == kind {
			out = append(out, m)
		}
	}
	return out
}

// goneOf returns the Gone calls about replica so far.
func (r *busRecorder) goneOf(replica string) []goneCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []goneCall
	for _, g := range r.gone {
		if g.Replica == replica {
			out = append(out, g)
		}
	}
	return out
}

func hasMsg(kind, text string) func([]session.BusMessage, []goneCall) bool {
	return func(msgs []session.BusMessage, _ []goneCall) bool {
		return slices.ContainsFunc(msgs, func(m session.BusMessage) bool { return m.Kind == kind && m.Text == text })
	}
}

func describeMsgs(msgs []session.BusMessage) string {
	var b strings.Builder
	b.WriteString("[")
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s from %s", m.Kind, m.Text, m.From)
	}
	b.WriteString("]")
	return b.String()
}

// testBus is a running bus and what it received.
type testBus struct {
	*RedisBus
	rec *busRecorder
	// stop cancels Run and waits for it to return; it may be called more than once, and is
	// called when the test ends.
	stop func()
}

// replica is what one replica holds of the test Redis: its session store, and what its bus
// shares with it.
type replica struct {
	*session.RedisStore
	shared Shared
}

// replicaStores returns n replicas on the test Redis sharing one key prefix, each with a
// client of its own, as separate processes would.
func replicaStores(t *testing.T, n int) []*replica {
	t.Helper()
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	testwait.Goroutines(t)
	var stores []*replica
	for range n {
		client, err := session.NewRedisClient(&session.RedisOptions{URL: "redis://" + addr, IdleTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		opts := session.RedisOptions{Client: client, KeyPrefix: prefix, IdleTimeout: time.Minute}
		s, err := session.NewRedisStore(&opts)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, &replica{RedisStore: s, shared: Shared{Client: client, KeyPrefix: prefix, OpTimeout: opts.OpTimeout(), IDOf: s.IDOf}})
	}
	return stores
}

// newTestBus returns a bus named replica on s (with lease, zero for the default) that records
// what it receives; runBus runs it.
func newTestBus(s *replica, replica string, lease time.Duration) *testBus {
	rec := newBusRecorder()
	b := NewBus(s.shared, &BusOptions{Replica: replica, Lease: lease, Receive: rec.receive, Gone: rec.goneFn, Sealer: testSealer})
	return &testBus{RedisBus: b, rec: rec, stop: func() {}}
}

// startBus runs a new bus named replica on s until the test ends: see runBus.
func startBus(t *testing.T, s *replica, replica string, lease time.Duration) *testBus {
	t.Helper()
	return runBus(t, newTestBus(s, replica, lease))
}

// runBus runs tb until the test ends (or tb.stop), and returns once it holds its lease and
// receives what is sent to it.
func runBus(t *testing.T, tb *testBus) *testBus {
	t.Helper()
	b, replica := tb.RedisBus, tb.Replica()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(ctx)
	}()
	tb.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(tb.stop)

	// Its subscription is Redis's state, with no event here: wait for it there, then for a
	// message of its own (which also orders what Run set up before what the test does next).
	raw := redis.NewClient(&redis.Options{Addr: testredis.Addr(t), DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer raw.Close()
	channel := b.replicaChannel(replica)
	testwait.Until(t, busWait, replica+"'s subscription", func() bool {
		n, err := raw.PubSubNumSub(context.Background(), channel).Result()
		return err == nil && n[channel] == 1
	})
	if ok, err := b.Send(context.Background(), replica, &session.BusMessage{Kind: kindReady, Text: replica}); err != nil || !ok {
		t.Fatalf("%s: Send to itself = %v, %v; want true", replica, ok, err)
	}
	tb.rec.await(t, replica+" receiving its own message", hasMsg(kindReady, replica))
	testwait.Until(t, busWait, replica+"'s lease", func() bool {
		alive, err := b.Alive(context.Background(), replica)
		return err == nil && alive
	})
	return tb
}

// events returns the events numbered seqs, their data naming each.
func events(seqs ...uint64) []session.LoggedEvent {
	out := make([]session.LoggedEvent, len(seqs))
	for i, s := range seqs {
		out[i] = session.LoggedEvent{Seq: s, Data: []byte(fmt.Sprintf("event %d", s))}
	}
	return out
}

// mark sends a marker from `from` to each of to and waits until each has it: what was
// published before it has reached them by then.
func mark(t *testing.T, from *testBus, to ...*testBus) {
	t.Helper()
	text := session.NewID()
	for _, b := range to {
		if ok, err := from.Send(context.Background(), b.Replica(), &session.BusMessage{Kind: kindMark, Text: text}); err != nil || !ok {
			t.Fatalf("marker to %s: Send = %v, %v", b.Replica(), ok, err)
		}
	}
	for _, b := range to {
		b.rec.await(t, "the marker reaching "+b.Replica(), hasMsg(kindMark, text))
	}
}

// TestBusSendReachesOnlyTheNamedReplica: a message sent to a replica reaches it alone, with
// its sender; Send reports whether that replica listens.
func TestBusSendReachesOnlyTheNamedReplica(t *testing.T) {
	stores := replicaStores(t, 3)
	buses := []*testBus{startBus(t, stores[0], "a", 0), startBus(t, stores[1], "b", 0), startBus(t, stores[2], "c", 0)}
	a := buses[0]
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		to   string
	}{
		{"to another replica", "b"},
		{"to the third replica", "c"},
		{"to itself", "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := "hello " + tc.to
			ok, err := a.Send(ctx, tc.to, &session.BusMessage{Kind: "hello", Text: text, Data: []byte(`{"x":1}`)})
			if err != nil || !ok {
				t.Fatalf("Send to %s = %v, %v; want true", tc.to, ok, err)
			}
			mark(t, a, buses...)
			for _, b := range buses {
				var got []string
				for _, m := range b.rec.of("hello") {
					if m.Text == text {
						got = append(got, m.From+":"+string(m.Data))
					}
				}
				var want []string
				if b.Replica() == tc.to {
					want = []string{`a:{"x":1}`}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s received (-want +got):\n%s", b.Replica(), diff)
				}
			}
		})
	}

	t.Run("to a replica nobody runs", func(t *testing.T) {
		if ok, err := a.Send(ctx, "nobody", &session.BusMessage{Kind: "hello"}); err != nil || ok {
			t.Errorf("Send to a replica that does not listen = %v, %v; want false, nil", ok, err)
		}
	})
}

// TestBusBroadcastReachesEveryReplica: a broadcast reaches every replica, its sender
// included, once.
func TestBusBroadcastReachesEveryReplica(t *testing.T) {
	stores := replicaStores(t, 3)
	buses := []*testBus{startBus(t, stores[0], "a", 0), startBus(t, stores[1], "b", 0), startBus(t, stores[2], "c", 0)}
	if err := buses[1].Broadcast(context.Background(), &session.BusMessage{Kind: "changed", Text: "tools"}); err != nil {
		t.Fatal(err)
	}
	mark(t, buses[1], buses...)
	for _, b := range buses {
		got := b.rec.of("changed")
		if len(got) != 1 || got[0].From != "b" || got[0].Text != "tools" {
			t.Errorf("%s received %s; want the broadcast from b once", b.Replica(), describeMsgs(got))
		}
	}
}

// TestBusPublishReachesFollowers: a message published for a session reaches the replicas
// that follow it, with the session's id filled in, and no other; Follow counts, so that it
// stops only after as many Unfollows; Publish reports whether a replica follows.
func TestBusPublishReachesFollowers(t *testing.T) {
	ctx := context.Background()
	stores := replicaStores(t, 3)
	a, b, c := startBus(t, stores[0], "a", 0), startBus(t, stores[1], "b", 0), startBus(t, stores[2], "c", 0)
	all := []*testBus{a, b, c}
	id, other := session.NewID(), session.NewID()
	digest := session.Digest(id)
	monitored := testredis.Monitor(t, testredis.Addr(t)) // what anyone reading Redis sees

	steps := []struct {
		name string
		// do changes what b follows before a publishes.
		do func(t *testing.T)
		// wantPublished is what Publish reports; wantAt the replicas the message reaches.
		wantPublished bool
		wantAt        []string
	}{
		{"nobody follows", func(*testing.T) {}, false, nil},
		{"b follows", func(t *testing.T) {
			if err := b.Follow(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"b"}},
		{"b follows twice", func(t *testing.T) {
			if err := b.Follow(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"b"}},
		{"c follows another session", func(t *testing.T) {
			if err := c.Follow(ctx, other); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"b"}},
		{"b unfollows once of two", func(*testing.T) { b.Unfollow(id) }, true, []string{"b"}},
		{"b unfollows the second", func(*testing.T) { b.Unfollow(id) }, false, nil},
		{"an Unfollow too many changes nothing", func(*testing.T) { b.Unfollow(id) }, false, nil},
		{"a follows it itself", func(t *testing.T) {
			if err := a.Follow(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, true, []string{"a"}},
	}
	raw := redis.NewClient(&redis.Options{Addr: testredis.Addr(t), DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer raw.Close()
	channel := session.SessionChannel(stores[0].shared.KeyPrefix, digest)
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			// Follow returns once subscribed; Unfollow does not wait for Redis to take its
			// unsubscription in, which (from another connection) may come after a publish.
			want := int64(len(step.wantAt))
			testwait.Until(t, busWait, fmt.Sprintf("%d subscribers to the session's channel", want), func() bool {
				n, err := raw.PubSubNumSub(ctx, channel).Result()
				return err == nil && n[channel] == want
			})
			text := session.NewID()
			published, err := a.Publish(ctx, digest, &session.BusMessage{Kind: "deliver", SessionID: id, Stream: "st", Text: text})
			if err != nil || published != step.wantPublished {
				t.Errorf("Publish = %v, %v; want %v", published, err, step.wantPublished)
			}
			mark(t, a, all...)
			var at []string
			for _, x := range all {
				for _, m := range x.rec.of("deliver") {
					if m.Text != text {
						continue
					}
					at = append(at, x.Replica())
					if m.Session != digest || m.SessionID != id || m.From != "a" || m.Stream != "st" {
						t.Errorf("%s received session %q, id %q, from %q, stream %q; want the digest, the id, a, st", x.Replica(), m.Session, m.SessionID, m.From, m.Stream)
					}
				}
			}
			if diff := cmp.Diff(step.wantAt, at); diff != "" {
				t.Errorf("the message reached (-want +got):\n%s", diff)
			}
		})
	}

	// Nothing that crossed Redis named the session by its id, though the message given to
	// Publish held it.
	checkNoID(t, monitored(), digest, id, other)
}

// TestBusFollowBeforeRunLeavesNoTrace: a Follow refused because the bus does not run yet
// leaves nothing behind: once the bus runs, a Follow of that session subscribes to it.
func TestBusFollowBeforeRunLeavesNoTrace(t *testing.T) {
	ctx := context.Background()
	stores := replicaStores(t, 2)
	id := session.NewID()
	b := newTestBus(stores[1], "b", 0)
	if err := b.Follow(ctx, id); err == nil {
		t.Fatal("Follow before Run succeeded; want an error")
	}
	runBus(t, b)
	a := startBus(t, stores[0], "a", 0)
	if err := b.Follow(ctx, id); err != nil {
		t.Fatalf("Follow once running: %v", err)
	}
	defer b.Unfollow(id)
	if published, err := a.Publish(ctx, session.Digest(id), &session.BusMessage{Kind: "deliver", Text: "after"}); err != nil || !published {
		t.Fatalf("Publish to a session followed once the bus runs = %v, %v; want true", published, err)
	}
	b.rec.await(t, "the message reaching the follower", hasMsg("deliver", "after"))
}

// checkNoID fails t if a command MONITOR saw holds one of ids, or if none published for
// digest (the check saw nothing of the bus).
func checkNoID(t *testing.T, lines []string, digest string, ids ...string) {
	t.Helper()
	published := false
	for _, line := range lines {
		if strings.Contains(line, `"publish"`) && strings.Contains(line, digest) {
			published = true
		}
		for _, id := range ids {
			if strings.Contains(line, id) {
				t.Errorf("a command sent to Redis holds a session id: %s", line)
			}
		}
	}
	if !published {
		t.Errorf("MONITOR saw no PUBLISH for the session's digest among %d commands", len(lines))
	}
}

// TestBusCarriesEventLogAppends: an event log's append reaches a replica following the
// session as session.BusEvents, with the session's id filled in, its stream, events and end; nothing
// published holds the id.
func TestBusCarriesEventLogAppends(t *testing.T) {
	ctx := context.Background()
	stores := replicaStores(t, 2)
	follower, other := startBus(t, stores[1], "follower", 0), startBus(t, stores[0], "other", 0)
	monitored := testredis.Monitor(t, testredis.Addr(t)) // what anyone reading Redis sees
	id := session.NewID()
	if err := follower.Follow(ctx, id); err != nil {
		t.Fatal(err)
	}
	defer follower.Unfollow(id)

	log := stores[0].NewEventLog(&session.EventLogOptions{Sealer: testSealer}) // the producer's: another replica's store
	defer log.Close()
	log.Start(id, "st", []byte(`[1]`))
	log.Append(id, "st", events(1, 2), false)
	log.Append(id, "st", events(3), true)
	log.Append(session.NewID(), "st", events(1), false) // another session's

	follower.rec.await(t, "the stream's end reaching the follower", func(msgs []session.BusMessage, _ []goneCall) bool {
		return slices.ContainsFunc(msgs, func(m session.BusMessage) bool { return m.Kind == session.BusEvents && m.Complete })
	})
	mark(t, other, follower, other)

	type got struct {
		SessionID, Session, Stream string
		Seqs                       []uint64
		Data                       []string
		Complete                   bool
	}
	var gots []got
	for _, m := range follower.rec.of(session.BusEvents) {
		var seqs []uint64
		var data []string
		for _, e := range m.Events {
			seqs = append(seqs, e.Seq)
			data = append(data, string(e.Data))
		}
		gots = append(gots, got{m.SessionID, m.Session, m.Stream, seqs, data, m.Complete})
	}
	want := []got{
		{id, session.Digest(id), "st", []uint64{1, 2}, []string{"event 1", "event 2"}, false},
		{id, session.Digest(id), "st", []uint64{3}, []string{"event 3"}, true},
	}
	if diff := cmp.Diff(want, gots); diff != "" {
		t.Errorf("the follower received (-want +got):\n%s", diff)
	}
	if n := len(other.rec.of(session.BusEvents)); n != 0 {
		t.Errorf("a replica that does not follow the session received %d event messages", n)
	}
	checkNoID(t, monitored(), session.Digest(id), id)
}

// TestBusLeaseOfAStoppedReplica: a replica that stops gives its lease up; the survivors
// learn it once each (Gone), exactly one of them claims it, and that one gets what it owned.
func TestBusLeaseOfAStoppedReplica(t *testing.T) {
	const lease = 600 * time.Millisecond
	ctx := context.Background()
	stores := replicaStores(t, 3)
	a, b, c := startBus(t, stores[0], "a", lease), startBus(t, stores[1], "b", lease), startBus(t, stores[2], "c", lease)
	survivors := []*testBus{a, b}
	for _, d := range []string{"d1", "d2"} {
		if err := c.Own(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	c.stop()
	for _, s := range survivors {
		s.rec.await(t, s.Replica()+" learning that c stopped", func(_ []session.BusMessage, gone []goneCall) bool {
			return slices.ContainsFunc(gone, func(g goneCall) bool { return g.Replica == "c" })
		})
	}
	// The claimer's broadcast went out before this marker: a second Gone would be in by now.
	mark(t, a, survivors...)

	var claimers []*testBus
	for _, s := range survivors {
		calls := s.rec.goneOf("c")
		if len(calls) != 1 {
			t.Errorf("%s: Gone about c called %d times (%v); want once", s.Replica(), len(calls), calls)
		}
		if slices.ContainsFunc(calls, func(g goneCall) bool { return g.Claimed }) {
			claimers = append(claimers, s)
		}
		for _, tc := range []struct {
			replica string
			want    bool
		}{{"a", true}, {"b", true}, {"c", false}} {
			if alive, err := s.Alive(ctx, tc.replica); err != nil || alive != tc.want {
				t.Errorf("%s: Alive(%s) = %v, %v; want %v", s.Replica(), tc.replica, alive, err, tc.want)
			}
		}
	}
	if len(claimers) != 1 {
		t.Fatalf("%d survivors claimed c; want exactly one", len(claimers))
	}
	got, err := claimers[0].ClaimOwned(ctx, "c")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"d1", "d2"}) {
		t.Errorf("the claimer's ClaimOwned(c) = %v, %v; want [d1 d2]", got, err)
	}
	for _, s := range survivors {
		if got, err := s.ClaimOwned(ctx, "c"); err != nil || len(got) != 0 {
			t.Errorf("%s: ClaimOwned(c) once claimed = %v, %v; want none", s.Replica(), got, err)
		}
	}
}

// TestBusLeaseRunsOutByRedisTime: a replica that stops renewing without giving its lease up
// (a crash; here an entry written directly) is alive until its expiry by Redis's clock, and
// then claimed by exactly one survivor and learnt once by each.
func TestBusLeaseRunsOutByRedisTime(t *testing.T) {
	const lease = 600 * time.Millisecond
	ctx := context.Background()
	stores := replicaStores(t, 2)
	a, b := startBus(t, stores[0], "a", lease), startBus(t, stores[1], "b", lease)
	survivors := []*testBus{a, b}
	raw := redis.NewClient(&redis.Options{Addr: testredis.Addr(t), DisableIdentity: true, ReadTimeout: 5 * time.Second})
	defer raw.Close()

	for _, tc := range []struct {
		name    string
		replica string
		// expiry is the lease's end from now, by Redis's clock.
		expiry    time.Duration
		wantAlive bool
	}{
		{"a lease that still runs", "crashed", 1500 * time.Millisecond, true},
		{"a lease already run out", "long-gone", -time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, err := raw.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			score := float64(now.Add(tc.expiry).UnixMilli())
			if err := raw.ZAdd(ctx, a.leasesKey(), redis.Z{Score: score, Member: tc.replica}).Err(); err != nil {
				t.Fatal(err)
			}
			if alive, err := a.Alive(ctx, tc.replica); err != nil || alive != tc.wantAlive {
				t.Errorf("Alive(%s) right after its renewal = %v, %v; want %v", tc.replica, alive, err, tc.wantAlive)
			}
			for _, s := range survivors {
				s.rec.await(t, s.Replica()+" learning that "+tc.replica+" stopped", func(_ []session.BusMessage, gone []goneCall) bool {
					return slices.ContainsFunc(gone, func(g goneCall) bool { return g.Replica == tc.replica })
				})
			}
			if elapsed, err := raw.Time(ctx).Result(); err == nil && elapsed.Before(now.Add(tc.expiry)) {
				t.Errorf("%s was found gone at %v, before its lease ran out at %v", tc.replica, elapsed, now.Add(tc.expiry))
			}
			mark(t, a, survivors...)
			claimed := 0
			for _, s := range survivors {
				calls := s.rec.goneOf(tc.replica)
				if len(calls) != 1 {
					t.Errorf("%s: Gone about %s called %d times (%v); want once", s.Replica(), tc.replica, len(calls), calls)
				}
				for _, g := range calls {
					if g.Claimed {
						claimed++
					}
				}
				if alive, err := s.Alive(ctx, tc.replica); err != nil || alive {
					t.Errorf("%s: Alive(%s) after it ran out = %v, %v; want false", s.Replica(), tc.replica, alive, err)
				}
			}
			if claimed != 1 {
				t.Errorf("%s was claimed %d times; want once", tc.replica, claimed)
			}
			if n, err := raw.ZScore(ctx, a.leasesKey(), tc.replica).Result(); !errors.Is(err, redis.Nil) {
				t.Errorf("the claimed replica's lease is still there: %v, %v", n, err)
			}
		})
	}
	for _, s := range survivors {
		if calls := append(s.rec.goneOf("a"), s.rec.goneOf("b")...); len(calls) != 0 {
			t.Errorf("%s was told that a live replica stopped: %v", s.Replica(), calls)
		}
	}
}

// TestBusClaimOwned: what a replica owned goes whole to one claimer, however many claim it
// at once; Disown takes a session out of it.
func TestBusClaimOwned(t *testing.T) {
	ctx := context.Background()
	stores := replicaStores(t, 3)
	// Own and ClaimOwned need no Run.
	owner := NewBus(stores[0].shared, &BusOptions{Replica: "owner"})
	claimers := []*RedisBus{NewBus(stores[1].shared, &BusOptions{Replica: "x"}), NewBus(stores[2].shared, &BusOptions{Replica: "y"})}

	for _, tc := range []struct {
		name   string
		own    []string
		disown []string
		want   []string
	}{
		{"three sessions", []string{"d1", "d2", "d3"}, nil, []string{"d1", "d2", "d3"}},
		{"one disowned", []string{"d1", "d2", "d3"}, []string{"d2"}, []string{"d1", "d3"}},
		{"owned twice", []string{"d1", "d1"}, nil, []string{"d1"}},
		{"all disowned", []string{"d1"}, []string{"d1"}, nil},
		{"nothing owned", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for round := range 10 {
				for _, d := range tc.own {
					if err := owner.Own(ctx, d); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range tc.disown {
					if err := owner.Disown(ctx, d); err != nil {
						t.Fatal(err)
					}
				}
				got := make([][]string, len(claimers))
				errs := make([]error, len(claimers))
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i, c := range claimers {
					wg.Go(func() {
						<-start
						got[i], errs[i] = c.ClaimOwned(ctx, "owner")
					})
				}
				close(start)
				wg.Wait()
				var nonEmpty [][]string
				for i := range claimers {
					if errs[i] != nil {
						t.Fatalf("round %d: claimer %d: %v", round, i, errs[i])
					}
					if len(got[i]) > 0 {
						slices.Sort(got[i])
						nonEmpty = append(nonEmpty, got[i])
					}
				}
				var want [][]string
				if tc.want != nil {
					want = [][]string{tc.want}
				}
				if diff := cmp.Diff(want, nonEmpty); diff != "" {
					t.Fatalf("round %d: what the claimers got (-want +got):\n%s", round, diff)
				}
			}
		})
	}
}

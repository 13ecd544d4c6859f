package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testredis"
)

// eventLogOn returns a store on the test Redis, under a prefix of the test's own, and a
// function that opens an event log on it (closed when the test ends; Close writes what is
// queued).
func eventLogOn(t *testing.T, opts *EventLogOptions) (*RedisStore, func() *RedisEventLog) {
	t.Helper()
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute})
	return s, func() *RedisEventLog {
		l := s.NewEventLog(opts)
		t.Cleanup(func() { l.Close() })
		return l
	}
}

func events(seqs ...uint64) []LoggedEvent {
	out := make([]LoggedEvent, len(seqs))
	for i, s := range seqs {
		out[i] = LoggedEvent{Seq: s, Data: []byte(fmt.Sprintf("event %d", s))}
	}
	return out
}

func seqsOf(es []LoggedEvent) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// TestEventLogReplay: a stream's events come back after the id asked about, each once, with
// its end; a stream known only by its start is found with nothing to send; another
// session's stream, or an absurd id, is not found.
func TestEventLogReplay(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, nil)
	l := open()
	l.Append("s1", "st", nil, false) // the client holds the priming event's id
	l.Append("s1", "quiet", nil, false)
	l.Append("s1", "st", events(1, 2), false)
	l.Append("s1", "st", events(2, 3), true) // 2 again: refused by Redis, not stored twice
	l.Close()

	got, complete, found, err := replayOf(ctx, l, "s1", "st", 1)
	if err != nil || !found || !complete || fmt.Sprint(seqsOf(got)) != "[2 3]" || string(got[0].Data) != "event 2" {
		t.Errorf("Replay after 1 = %v, complete %v, found %v, %v; want [2 3], complete", seqsOf(got), complete, found, err)
	}
	got, complete, found, err = replayOf(ctx, l, "s1", "quiet", 0)
	if err != nil || !found || complete || len(got) != 0 {
		t.Errorf("a stream with nothing yet: %v, complete %v, found %v, %v; want found, empty", seqsOf(got), complete, found, err)
	}
	for _, tc := range []struct {
		session string
		after   uint64
	}{{"s2", 0}, {"s1", math.MaxUint64}, {"s1", math.MaxUint64 - 1}} {
		if got, _, found, err := replayOf(ctx, l, tc.session, "st", tc.after); found || err != nil || len(got) != 0 {
			t.Errorf("Replay(%s, after %d) = %v, found %v, %v; want not found", tc.session, tc.after, seqsOf(got), found, err)
		}
	}
}

// TestEventLogAppendWaitReturnsOnceWritten: AppendWait returns once Redis holds what it
// appends, and what was queued before it; an event Redis holds already (another replica
// wrote it first) counts as written. Once the log is closed it fails rather than wait.
func TestEventLogAppendWaitReturnsOnceWritten(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, nil)
	l := open()
	l.Append("s1", "st", events(1), false)
	if err := l.AppendWait(ctx, "s1", "st", events(2, 3), true); err != nil {
		t.Fatalf("AppendWait: %v", err)
	}
	got, complete, found, err := replayOf(ctx, l, "s1", "st", 0)
	if err != nil || !found || !complete || fmt.Sprint(seqsOf(got)) != "[1 2 3]" {
		t.Errorf("the log once AppendWait returned: %v complete %v found %v %v; want [1 2 3], complete", seqsOf(got), complete, found, err)
	}
	if err := l.AppendWait(ctx, "s1", "st", events(3), false); err != nil {
		t.Errorf("AppendWait of an event held already: %v, want it written", err)
	}
	l.Close()
	if err := l.AppendWait(ctx, "s1", "st", events(4), true); err == nil {
		t.Errorf("AppendWait on a closed log: nil, want an error")
	}
}

// TestEventLogReplaySaysWhatIsLost: events trimmed from the head, or missing in the middle
// (an append dropped), are ErrEventsLost, never a shorter stream.
func TestEventLogReplaySaysWhatIsLost(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, &EventLogOptions{MaxEvents: 10})
	l := open()
	l.Append("s", "trimmed", nil, false)
	var many []uint64
	for i := uint64(1); i <= 500; i++ {
		many = append(many, i)
	}
	l.Append("s", "trimmed", events(many...), false)
	l.Append("s", "holey", nil, false)
	l.Append("s", "holey", events(1, 2, 4), false)
	l.Close()
	if _, _, _, err := replayOf(ctx, l, "s", "trimmed", 3); !errors.Is(err, ErrEventsLost) {
		t.Errorf("after trimmed events: %v, want ErrEventsLost", err)
	}
	if got, _, _, err := replayOf(ctx, l, "s", "trimmed", 499); err != nil || fmt.Sprint(seqsOf(got)) != "[500]" {
		t.Errorf("after what is still held: %v, %v; want [500]", seqsOf(got), err)
	}
	if _, _, _, err := replayOf(ctx, l, "s", "holey", 1); !errors.Is(err, ErrEventsLost) {
		t.Errorf("across a missing event: %v, want ErrEventsLost", err)
	}
}

// TestEventLogReplaysInPages: a long stream comes back a page at a time; the last page has
// its end.
func TestEventLogReplaysInPages(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, nil)
	l := open()
	var seqs []uint64
	for i := uint64(1); i <= replayPage+10; i++ {
		seqs = append(seqs, i)
	}
	l.Append("s", "long", events(seqs...), true)
	l.Close()
	got, complete, _, err := replayOf(ctx, l, "s", "long", 0)
	if err != nil || len(got) != replayPage || complete {
		t.Fatalf("first page: %d events, complete %v, %v; want %d, not complete", len(got), complete, err, replayPage)
	}
	got, complete, _, err = replayOf(ctx, l, "s", "long", got[len(got)-1].Seq)
	if err != nil || len(got) != 10 || !complete {
		t.Errorf("second page: %d events, complete %v, %v; want 10, complete", len(got), complete, err)
	}
}

// TestEventLogKeysHoldNoSessionID: the log's keys name a session by its hash, as the
// store's do.
func TestEventLogKeysHoldNoSessionID(t *testing.T) {
	s, open := eventLogOn(t, nil)
	l := open()
	id := NewID()
	l.Append(id, "st", events(1), true)
	l.Close()
	keys, err := testredis.Keys(redisAddr(t), s.opts.KeyPrefix)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v; want the stream's one", keys, err)
	}
	if keys[0] != s.opts.KeyPrefix+":{"+sessionHash(id)+"}:ev:st" {
		t.Errorf("key %q", keys[0])
	}
}

// TestWatchEnded: a session deleted through one store is announced to another on the same
// Redis that knows it, by id; one it never saw is not; the watch ends with its context.
func TestWatchEnded(t *testing.T) {
	first := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute})
	open := func() *RedisStore {
		return OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: first.opts.KeyPrefix})
	}
	a, b := first, open()
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan string, 4)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		NewRedisEndedWatch(b).WatchEnded(ctx, func(id string) { ended <- id })
	}()

	known, err := a.Create(ctx, Record{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, known.ID); err != nil { // b serves it: b knows it
		t.Fatal(err)
	}
	unseen, err := a.Create(ctx, Record{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	// The subscription may not be up yet: delete until the announcement comes.
	deadline := time.After(10 * time.Second)
	for done := false; !done; {
		if err := a.Delete(ctx, unseen.ID); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete(ctx, known.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-ended:
			if id != known.ID {
				t.Fatalf("announced %q, want the session b knows", id)
			}
			done = true
		case <-time.After(100 * time.Millisecond):
			// b forgot nothing yet; a Get again keeps it known after a missed message
			_, _ = b.Get(ctx, known.ID)
		case <-deadline:
			t.Fatal("no announcement of the deleted session reached b")
		}
	}
	cancel()
	select {
	case <-watched:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchEnded did not return when its context ended")
	}
}

// replayOf is Replay as separate values.
func replayOf(ctx context.Context, l *RedisEventLog, sessionID, streamID string, after uint64) ([]LoggedEvent, bool, bool, error) {
	got, err := l.Replay(ctx, sessionID, streamID, after)
	if got == nil {
		return nil, false, errors.Is(err, ErrEventsLost), err
	}
	return got.Events, got.Complete, true, err
}

// TestEventLogKeepsRequestsAndPublishesAppends: Start records the ids a stream answers, which
// Replay returns; each append is published on the session's channel in the same round trip,
// for a replica following the session.
func TestEventLogKeepsRequestsAndPublishesAppends(t *testing.T) {
	ctx := context.Background()
	s, open := eventLogOn(t, nil)
	id := NewID()
	sub := s.client.Subscribe(ctx, s.sessionChannel(Digest(id)))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	l := open()
	l.Start(id, "st", json.RawMessage(`[7,"x"]`))
	l.Append(id, "st", events(1), true)
	l.Close()
	got, err := l.Replay(ctx, id, "st", 0)
	if err != nil || got == nil || string(got.Requests) != `[7,"x"]` || len(got.Events) != 1 || !got.Complete {
		t.Fatalf("Replay = %+v, %v; want requests [7,\"x\"], one event, complete", got, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m BusMessage
	if err := json.Unmarshal([]byte(msg.Payload), &m); err != nil || m.Kind != BusEvents || m.Stream != "st" || len(m.Events) != 1 || m.Events[0].Seq != 1 || !m.Complete || m.Session != Digest(id) {
		t.Errorf("published %s (%v); want the events of st, complete, for the session's digest", msg.Payload, err)
	}
	if strings.Contains(msg.Payload, id) {
		t.Errorf("the published message holds the session id: %s", msg.Payload)
	}
}

// TestEventLogClaimsAStreamOnce: a session's standalone stream is marked so by its start; a
// replica claims it from the producer that stopped, once: a second claimer gets the first
// one's name, the claim from the new producer's own name holds, and Replay names the
// producer. The followers of the session hear of the claim. Touch keeps the stream's log,
// and the claim, beyond the retention of the last append.
func TestEventLogClaimsAStreamOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, open := eventLogOn(t, &EventLogOptions{Retention: time.Minute})
	id := NewID()
	sub := s.client.Subscribe(ctx, s.sessionChannel(Digest(id)))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	l := open()
	l.StartStandalone(id, "a_1")
	l.Append(id, "a_1", events(1), false)
	l.Close()
	got, err := l.Replay(ctx, id, "a_1", 0)
	if err != nil || got == nil || !got.Standalone || got.Producer != "" {
		t.Fatalf("Replay = %+v, %v; want a standalone stream none took over", got, err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"a", "b", "b"},
		{"a", "c", "b"}, // b was first
		{"b", "b", "b"}, // b again: still b
		{"b", "c", "c"}, // b stopped too
	} {
		if owner, err := l.Claim(ctx, id, "a_1", tc.from, tc.to); err != nil || owner != tc.want {
			t.Errorf("Claim(from %s, to %s) = %q, %v; want %q", tc.from, tc.to, owner, err, tc.want)
		}
	}
	if got, err := l.Replay(ctx, id, "a_1", 0); err != nil || got == nil || got.Producer != "c" {
		t.Errorf("Replay after the claims = %+v, %v; want producer c", got, err)
	}
	var taken []string
	for len(taken) < 2 { // after the append's events
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m BusMessage
		if err := json.Unmarshal([]byte(msg.Payload), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind == BusStreamTaken && m.Stream == "a_1" && m.Session == Digest(id) {
			taken = append(taken, m.Replica)
		}
	}
	if fmt.Sprint(taken) != "[b c]" {
		t.Errorf("the session's followers heard of claims by %v, want [b c]", taken)
	}

	// Touch renews the time to live of the stream's keys, and of the key naming the session's
	// standalone stream.
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	keys := []string{l.key(id, "a_1"), l.producerKey(id, "a_1"), l.metaKey(id, "a_1"), l.currentKey(Digest(id))}
	for _, key := range keys {
		if err := raw.PExpire(ctx, key, time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l2 := open()
	l2.Touch(id, "a_1")
	l2.Close()
	for _, key := range keys {
		if ttl, err := raw.PTTL(ctx, key).Result(); err != nil || ttl <= time.Second {
			t.Errorf("the time to live of %s after Touch: %v %v, want the retention", key, ttl, err)
		}
	}
}

// TestStandaloneMarkSurvivesTrimming: a stream's start says that it is its session's
// standalone stream, or which requests it answers; trimming the stream to MaxEvents removes
// its first entries, and must not remove that: a standalone stream whose producer stops is
// taken over however long it ran, and a call's stream answers its requests with errors.
func TestStandaloneMarkSurvivesTrimming(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, &EventLogOptions{MaxEvents: 50})
	l := open()
	id := NewID()
	l.StartStandalone(id, "a_1")
	l.Start(id, "a_2", json.RawMessage(`[7]`))
	var seqs []uint64
	for i := uint64(1); i <= 300; i++ {
		seqs = append(seqs, i)
	}
	l.Append(id, "a_1", events(seqs...), false)
	l.Append(id, "a_2", events(seqs...), false)
	l.Close()
	if got, err := l.Replay(ctx, id, "a_1", 299); err != nil || got == nil || !got.Standalone || len(got.Events) != 1 {
		t.Errorf("the standalone stream after 300 events: %+v, %v; want standalone, one event after 299", got, err)
	}
	if got, err := l.Replay(ctx, id, "a_2", 299); err != nil || got == nil || string(got.Requests) != `[7]` || got.Standalone {
		t.Errorf("the call's stream after 300 events: %+v, %v; want requests [7]", got, err)
	}
}

// TestNewStandaloneStreamEndsThePreviousOne: the log records which stream is its session's
// standalone stream now; a new one's start logs the end of the one before (whose producer
// may have stopped without logging it), so that a stale resume of the old one ends rather
// than bring it back in place of the new one. Another session's standalone stream, and a
// call's stream, are not ended; nor is a log that expired written again.
func TestNewStandaloneStreamEndsThePreviousOne(t *testing.T) {
	ctx := context.Background()
	_, open := eventLogOn(t, nil)
	l := open()
	id, other := NewID(), NewID()
	l.StartStandalone(id, "a_1")
	l.Append(id, "a_1", events(1), false)
	l.StartStandalone(other, "a_2")
	l.Start(id, "a_3", json.RawMessage(`[1]`))
	l.Close()
	l = open()
	l.StartStandalone(id, "c_1")
	l.StartStandalone(id, "c_1") // its start again: it does not end itself
	l.Close()
	if got, err := l.Replay(ctx, id, "a_1", 0); err != nil || got == nil || !got.Complete || len(got.Events) != 1 {
		t.Errorf("the previous standalone stream: %+v, %v; want its event, then its end", got, err)
	}
	// Nobody takes it over either; the new one, or a call's stream, is taken over.
	if owner, err := l.Claim(ctx, id, "a_1", "a", "b"); !errors.Is(err, ErrStreamReplaced) {
		t.Errorf("Claim of the previous standalone stream = %q, %v; want ErrStreamReplaced", owner, err)
	}
	for _, stream := range []string{"c_1", "a_3"} {
		if owner, err := l.Claim(ctx, id, stream, stream[:1], "b"); err != nil || owner != "b" {
			t.Errorf("Claim of %s = %q, %v; want b", stream, owner, err)
		}
	}
	for _, st := range []struct{ session, stream string }{{id, "c_1"}, {other, "a_2"}, {id, "a_3"}} {
		if got, err := l.Replay(ctx, st.session, st.stream, 0); err != nil || got == nil || got.Complete {
			t.Errorf("stream %s: %+v, %v; want it going on", st.stream, got, err)
		}
	}

	// The previous stream's log expired: nothing of it comes back.
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	if err := raw.Del(ctx, l.key(id, "c_1")).Err(); err != nil {
		t.Fatal(err)
	}
	l = open()
	l.StartStandalone(id, "d_1")
	l.Close()
	if n, err := raw.Exists(ctx, l.key(id, "c_1")).Result(); err != nil || n != 0 {
		t.Errorf("the expired log of the previous stream: exists %d, %v; want it still gone", n, err)
	}
}

// monitored is one command Redis ran, as MONITOR shows it: its words, and whether a script
// ran it.
type monitored struct {
	words []string
	lua   bool
}

// parseMonitored reads MONITOR's lines.
func parseMonitored(lines []string) []monitored {
	var out []monitored
	for _, line := range lines {
		// +1700000000.123456 [0 127.0.0.1:1234] "cmd" "arg" ...
		_, rest, _ := strings.Cut(line, " [")
		source, args, _ := strings.Cut(rest, "] ")
		var words []string
		for _, w := range strings.Split(args, `" "`) {
			words = append(words, strings.Trim(w, `"`))
		}
		out = append(out, monitored{words: words, lua: strings.HasSuffix(source, " lua")})
	}
	return out
}

// privateEventLog returns a store and an event log on a Redis server of the test's own, and
// its address: what the test sees of it is the log's doing alone.
func privateEventLog(t *testing.T) (*RedisStore, func() *RedisEventLog, string) {
	t.Helper()
	addr := testredis.StartServer(t, "--save", "", "--appendonly", "no")
	s := OpenTestRedisStore(t, RedisOptions{URL: "redis://" + addr, IdleTimeout: time.Minute})
	return s, func() *RedisEventLog {
		l := s.NewEventLog(nil)
		t.Cleanup(func() { l.Close() })
		return l
	}, addr
}

// TestNewStandaloneStreamIsNamedAndEndsThePreviousInOneStep: the start of a session's new
// standalone stream names it the current one, and ends the one it replaces, in one script:
// no failure, nor a replica's death, can come between the two and leave the old stream
// claimable while the new one is current. What the start says (…:evm) is written with its
// time to live in the same step: a key without one would never go.
func TestNewStandaloneStreamIsNamedAndEndsThePreviousInOneStep(t *testing.T) {
	_, open, addr := privateEventLog(t)
	id := NewID()
	l := open()
	l.StartStandalone(id, "a_1")
	l.Append(id, "a_1", events(1), false)
	l.Close()
	lines := monitor(t, addr)
	l = open()
	l.StartStandalone(id, "c_1")
	l.Close()
	ran := parseMonitored(lines())
	raw := rawClient(addr)
	defer raw.Close()

	evs, prev, meta := l.currentKey(Digest(id)), l.key(id, "a_1"), l.metaKey(id, "c_1")
	is := func(c monitored, words ...string) bool {
		return len(c.words) >= len(words) && slices.EqualFunc(c.words[:len(words)], words, strings.EqualFold)
	}
	steps := map[string]func(monitored) bool{
		"SET " + evs:            func(c monitored) bool { return is(c, "set", evs, "c_1") },
		"XADD " + prev + " end": func(c monitored) bool { return is(c, "xadd", prev) && slices.Contains(c.words, "end") },
		"HSET " + meta:          func(c monitored) bool { return is(c, "hset", meta) },
		"PEXPIRE " + meta:       func(c monitored) bool { return is(c, "pexpire", meta) },
	}
	// A script's commands run one after the other, nothing between them: a run of "lua"
	// commands is one script.
	runOf := map[string]int{}
	run := 0
	for i, c := range ran {
		if c.lua && (i == 0 || !ran[i-1].lua) {
			run++
		}
		for name, match := range steps {
			if !match(c) {
				continue
			}
			if !c.lua {
				if !strings.HasPrefix(name, "PEXPIRE") { // the renewal that comes with each append
					t.Errorf("%s was sent by the client, not run in the start's script", name)
				}
			} else if r, ok := runOf[name]; ok && r != run {
				t.Errorf("%s ran twice", name)
			}
			runOf[name] = run
		}
	}
	var runs []int
	for name := range steps {
		r, ok := runOf[name]
		if !ok {
			t.Errorf("%s did not run", name)
		}
		runs = append(runs, r)
	}
	if slices.Sort(runs); len(runs) > 0 && runs[0] != runs[len(runs)-1] {
		t.Errorf("the new stream's name, the old one's end and what the new one's start says ran in %d steps (%v), want one script", len(slices.Compact(runs)), runOf)
	}
	if ttl, err := raw.PTTL(context.Background(), meta).Result(); err != nil || ttl <= 0 {
		t.Errorf("the time to live of %s: %v %v, want the retention", meta, ttl, err)
	}
}

// TestEventLogScriptsGoBySHA: the event log's scripts are sent by their SHA once Redis knows
// them, not their whole text with each stream's start.
func TestEventLogScriptsGoBySHA(t *testing.T) {
	_, open, addr := privateEventLog(t)
	id := NewID()
	l := open()
	l.StartStandalone(id, "a_1") // Redis learns the scripts
	l.Close()
	lines := monitor(t, addr)
	l = open()
	l.StartStandalone(id, "b_1")
	l.Start(id, "b_2", json.RawMessage(`[1]`))
	l.Close()
	l = open()
	l.StartStandalone(id, "c_1")
	l.Close()
	scripts := 0
	for _, c := range parseMonitored(lines()) {
		if c.lua || len(c.words) == 0 {
			continue
		}
		switch strings.ToLower(c.words[0]) {
		case "eval":
			t.Errorf("a script was sent whole: %.80q", strings.Join(c.words, " "))
		case "evalsha":
			scripts++
		}
	}
	if scripts == 0 {
		t.Errorf("no script ran by its SHA")
	}
}

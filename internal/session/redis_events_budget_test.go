package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testclock"
)

// budgetLog returns a function that writes appends to an event log with a byte budget, on a
// store whose clock the test moves: each call's appends are written (the log closed) before it
// returns, so that each is one flush at the clock's time.
func budgetLog(t *testing.T, budget int64) (*RedisEventLog, *testclock.Clock, func(func(*RedisEventLog))) {
	t.Helper()
	clock := testclock.New(time.Unix(1_000_000, 0))
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, Now: clock.Now})
	opts := &EventLogOptions{Retention: time.Minute, Budget: budget}
	reader := s.NewEventLog(opts)
	t.Cleanup(func() { reader.Close() })
	return reader, clock, func(write func(*RedisEventLog)) {
		l := s.NewEventLog(opts)
		write(l)
		l.Close()
	}
}

// sized is one event of n bytes.
func sized(seq uint64, n int) []LoggedEvent {
	return []LoggedEvent{{Seq: seq, Data: []byte(strings.Repeat("x", n))}}
}

// logged reports whether the log holds anything of a stream of session s1.
func logged(t *testing.T, l *RedisEventLog, stream string) bool {
	t.Helper()
	got, err := l.Replay(context.Background(), "s1", stream, 0)
	if err != nil {
		t.Fatalf("replay %s: %v", stream, err)
	}
	return got != nil
}

// TestEventLogBudgetEvictsTheOldestFinishedStreamFirst: past the budget, the log of the
// stream that ended first goes, and only as many as needed; an open stream's stays, although
// it was written before the ones kept. A resume of the evicted one finds nothing, as for a log
// that expired.
func TestEventLogBudgetEvictsTheOldestFinishedStreamFirst(t *testing.T) {
	reader, clock, write := budgetLog(t, 1000)
	write(func(l *RedisEventLog) { l.Append("s1", "open", sized(1, 300), false) })
	for _, stream := range []string{"first", "second", "third"} {
		clock.Advance(time.Second)
		write(func(l *RedisEventLog) { l.Append("s1", stream, sized(1, 300), true) })
	}
	for _, tc := range []struct {
		stream string
		want   bool
	}{{"open", true}, {"first", false}, {"second", true}, {"third", true}} {
		if got := logged(t, reader, tc.stream); got != tc.want {
			t.Errorf("stream %s logged %v, want %v", tc.stream, got, tc.want)
		}
	}
}

// TestEventLogBudgetNeverEvictsAnOpenStream: open streams alone over the budget stay; a
// stream that finishes meanwhile goes at once, and the open ones still take events.
func TestEventLogBudgetNeverEvictsAnOpenStream(t *testing.T) {
	reader, clock, write := budgetLog(t, 500)
	write(func(l *RedisEventLog) {
		l.Append("s1", "a", sized(1, 400), false)
		l.Append("s1", "b", sized(1, 400), false)
	})
	clock.Advance(time.Second)
	write(func(l *RedisEventLog) { l.Append("s1", "done", sized(1, 10), true) })
	clock.Advance(time.Second)
	write(func(l *RedisEventLog) { l.Append("s1", "a", sized(2, 400), false) })
	for _, tc := range []struct {
		stream string
		want   bool
	}{{"a", true}, {"b", true}, {"done", false}} {
		if got := logged(t, reader, tc.stream); got != tc.want {
			t.Errorf("stream %s logged %v, want %v", tc.stream, got, tc.want)
		}
	}
	got, err := reader.Replay(context.Background(), "s1", "a", 0)
	if err != nil || got == nil || len(got.Events) != 2 {
		t.Errorf("open stream a after the budget was passed: %+v, %v; want both its events", got, err)
	}
}

// TestEventLogBudgetForgetsExpiredLogs: the books forget a log once it expired, so that its
// bytes no longer count: a finished stream written after it is not evicted for them.
func TestEventLogBudgetForgetsExpiredLogs(t *testing.T) {
	reader, clock, write := budgetLog(t, 1000)
	write(func(l *RedisEventLog) { l.Append("s1", "old", sized(1, 800), false) })
	clock.Advance(2 * time.Minute) // past its retention: the books drop it at the next sweep
	write(func(l *RedisEventLog) { l.Append("s1", "new", sized(1, 800), true) })
	if !logged(t, reader, "new") {
		t.Error("a finished stream was evicted for the bytes of a log that expired")
	}
}

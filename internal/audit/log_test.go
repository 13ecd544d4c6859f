package audit_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// stallWriter is an output that takes no write until the test lets it: each Write announces
// itself on entered, then waits for a token on release, or for release to be closed.
type stallWriter struct {
	entered chan struct{}
	release chan struct{}
	out     syncBuffer
}

func newStallWriter() *stallWriter {
	return &stallWriter{entered: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.entered <- struct{}{}
	<-w.release
	return w.out.Write(p)
}

// requestIDs returns the requestId of each line of out.
func requestIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	for _, obj := range jsonLines(t, out) {
		id, _ := obj["requestId"].(string)
		ids = append(ids, id)
	}
	return ids
}

// seq returns the strings of from, from+1, ..., to-1.
func seq(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, strconv.Itoa(i))
	}
	return s
}

func record(id string) audit.Record {
	return audit.Record{RequestID: id, Session: "3f9a1c2b7d4e", Principal: "anonymous", Method: "tools/call", Outcome: audit.OutcomeOK}
}

// TestRecordNeverWaitsForTheOutput fills the queue of a Log whose output takes no writes far
// beyond its size: Record must return every time, and count exactly the records past it.
func TestRecordNeverWaitsForTheOutput(t *testing.T) {
	const buffer, overflow = 8, 10000
	w := newStallWriter()
	l := audit.New(w, &audit.Options{Buffer: buffer})

	l.Record(record("0"))
	<-w.entered // the writer holds record 0, stuck in Write; the queue is empty
	for i := 1; i <= buffer+overflow; i++ {
		l.Record(record(strconv.Itoa(i)))
	}
	if got := l.Dropped(); got != overflow {
		t.Errorf("Dropped() = %d, want %d", got, overflow)
	}

	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if diff := cmp.Diff(seq(0, buffer+1), requestIDs(t, w.out.String())); diff != "" {
		t.Errorf("records written mismatch (-want +got):\n%s", diff)
	}
}

// TestCloseDrainsTheQueue checks that Close waits until the queued records are written, and
// that records made after Close are dropped.
func TestCloseDrainsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newStallWriter()
		l := audit.New(w, nil)
		for i := range 5 {
			l.Record(record(strconv.Itoa(i)))
		}

		closed := make(chan error)
		go func() { closed <- l.Close() }()
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v before the queue was written", err)
		default:
		}

		close(w.release)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if diff := cmp.Diff(seq(0, 5), requestIDs(t, w.out.String())); diff != "" {
			t.Errorf("records written mismatch (-want +got):\n%s", diff)
		}

		l.Record(record("late"))
		if got := l.Dropped(); got != 1 {
			t.Errorf("Dropped() after a Record past Close = %d, want 1", got)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestCloseGivesUpOnAStuckOutput checks that Close returns after its timeout when the output
// takes no writes, counts the records lost, and that the writer writes nothing more once the
// stuck write returns.
func TestCloseGivesUpOnAStuckOutput(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration // Options.CloseTimeout
		want    time.Duration // how long Close waits
	}{
		{"default timeout", 0, 5 * time.Second},
		{"given timeout", 2 * time.Second, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newStallWriter()
				l := audit.New(w, &audit.Options{CloseTimeout: tt.timeout})
				for i := range 3 {
					l.Record(record(strconv.Itoa(i)))
				}
				<-w.entered // the writer is stuck on record 0

				start := time.Now()
				err := l.Close()
				if waited := time.Since(start); waited != tt.want {
					t.Errorf("Close waited %v, want %v", waited, tt.want)
				}
				var terr *audit.CloseTimeoutError
				if !errors.As(err, &terr) {
					t.Fatalf("Close error = %v, want a *CloseTimeoutError", err)
				}
				if diff := cmp.Diff(&audit.CloseTimeoutError{Unwritten: 3, Timeout: tt.want}, terr); diff != "" {
					t.Errorf("Close error mismatch (-want +got):\n%s", diff)
				}
				if again := l.Close(); again != err {
					t.Errorf("second Close = %v, want the first one's error %v", again, err)
				}

				// The stuck write completes; the writer goroutine must then return (the bubble
				// would not end otherwise) without writing records 1 and 2.
				close(w.release)
				synctest.Wait()
				if diff := cmp.Diff([]string{"0"}, requestIDs(t, w.out.String())); diff != "" {
					t.Errorf("records written mismatch (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestNilLog(t *testing.T) {
	var l *audit.Log
	l.Record(record("1"))
	if got := l.Dropped(); got != 0 {
		t.Errorf("Dropped() = %d, want 0", got)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
}

// TestConcurrentRecord records from many goroutines at once (run it with -race): every record
// is written, on a line of its own, and each goroutine's records keep their order.
func TestConcurrentRecord(t *testing.T) {
	const goroutines, each = 32, 200
	var out syncBuffer
	l := audit.New(&out, &audit.Options{Buffer: goroutines * each})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				l.Record(record(fmt.Sprintf("%d-%d", g, i)))
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := l.Dropped(); got != 0 {
		t.Errorf("Dropped() = %d, want 0", got)
	}

	next := make([]int, goroutines) // the index of the record expected next from each goroutine
	for _, id := range requestIDs(t, out.String()) {
		var g, i int
		if _, err := fmt.Sscanf(id, "%d-%d", &g, &i); err != nil || g < 0 || g >= goroutines {
			t.Fatalf("unexpected requestId %q", id)
		}
		if i != next[g] {
			t.Fatalf("record %q written after %d of goroutine %d's records, want record %d-%d", id, next[g], g, g, next[g])
		}
		next[g]++
	}
	for g, n := range next {
		if n != each {
			t.Errorf("goroutine %d: %d records written, want %d", g, n, each)
		}
	}
}

// warning is what a test checks of one of the Log's warnings.
type warning struct {
	Msg          string
	Dropped      float64 `json:"dropped"`
	DroppedTotal float64 `json:"dropped_total"`
	Failed       float64 `json:"failed"`
}

func warnings(t *testing.T, out string) []warning {
	t.Helper()
	var ws []warning
	for _, obj := range jsonLines(t, out) {
		w := warning{Msg: obj["msg"].(string)}
		w.Dropped, _ = obj["dropped"].(float64)
		w.DroppedTotal, _ = obj["dropped_total"].(float64)
		w.Failed, _ = obj["failed"].(float64)
		ws = append(ws, w)
	}
	return ws
}

// TestDropWarningsAreSpaced checks that dropped records are told at most once a second, by
// the writer after a write or once Close has drained the queue, and that none goes untold.
func TestDropWarningsAreSpaced(t *testing.T) {
	const msg = "audit records dropped: the audit output falls behind and the queue is full"
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var logs syncBuffer
	w := newStallWriter()
	l := audit.New(w, &audit.Options{Buffer: 2, Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	check := func(step string, want ...warning) {
		t.Helper()
		if diff := cmp.Diff(want, warnings(t, logs.String())); diff != "" {
			t.Errorf("%s: warnings mismatch (-want +got):\n%s", step, diff)
		}
	}

	l.Record(record("a"))
	<-w.entered // writing a
	for _, id := range []string{"b", "c", "d", "e"} {
		l.Record(record(id)) // b and c are queued, d and e dropped
	}
	check("before any write")

	w.release <- struct{}{}
	<-w.entered // a is written, b is being written
	first := warning{Msg: msg, Dropped: 2, DroppedTotal: 2}
	check("after the first write", first)

	l.Record(record("f")) // queued behind c
	l.Record(record("g")) // dropped
	w.release <- struct{}{}
	<-w.entered // b is written, c is being written
	check("within a second of the first warning", first)

	clock.Advance(time.Second)
	w.release <- struct{}{}
	<-w.entered // c is written, f is being written
	second := warning{Msg: msg, Dropped: 1, DroppedTotal: 3}
	check("a second after the first warning", first, second)

	l.Record(record("h"))
	l.Record(record("i"))
	l.Record(record("j")) // dropped
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	check("after Close", first, second, warning{Msg: msg, Dropped: 1, DroppedTotal: 4})
	if diff := cmp.Diff([]string{"a", "b", "c", "f", "h", "i"}, requestIDs(t, w.out.String())); diff != "" {
		t.Errorf("records written mismatch (-want +got):\n%s", diff)
	}
	if got := l.Dropped(); got != 4 {
		t.Errorf("Dropped() = %d, want 4", got)
	}
}

// failWriter is an output whose every write fails.
type failWriter struct{}

var errDiskFull = errors.New("disk full")

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestFailedWritesAreWarned(t *testing.T) {
	var logs syncBuffer
	l := audit.New(failWriter{}, &audit.Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now:    func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) },
	})
	for i := range 3 {
		l.Record(record(strconv.Itoa(i)))
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The first failure is told at once, the two within the same second when Close drains.
	const msg = "audit records not written"
	want := []warning{{Msg: msg, Failed: 1}, {Msg: msg, Failed: 2}}
	got := warnings(t, logs.String())
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
	for _, obj := range jsonLines(t, logs.String()) {
		if obj["error"] != errDiskFull.Error() {
			t.Errorf("warning error = %v, want %q", obj["error"], errDiskFull)
		}
	}
}

func TestNewPanicsOnNilWriter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("New(nil, nil) did not panic")
		}
	}()
	audit.New(nil, nil)
}

// BenchmarkRecord measures what Record costs the request that calls it, from many goroutines
// at once. Records the writer cannot keep up with are dropped, as in production; dropped/op
// says how many.
func BenchmarkRecord(b *testing.B) {
	l := audit.New(io.Discard, nil)
	r := audit.Record{
		RequestID: "12345", Session: "3f9a1c2b7d4e", Principal: "anonymous", Method: "tools/call",
		Upstream: "github", Target: "create_issue", Latency: 3 * time.Millisecond, Outcome: audit.OutcomeOK,
		Time: time.Now(),
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Record(r)
		}
	})
	b.StopTimer()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(l.Dropped())/float64(b.N), "dropped/op")
}

package hub

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testclock"
)

// keptStream makes a stream of session s whose response of n bytes its client read, and whose
// connection then dropped: kept for resumption only.
func keptStream(t *testing.T, s *Session, n int) *Stream {
	t.Helper()
	return streamOf(t, s, n, true)
}

// openStream makes a stream of session s that awaits its response, with a message of n bytes
// that no connection wrote.
func openStream(t *testing.T, s *Session, n int) *Stream {
	t.Helper()
	return streamOf(t, s, n, false)
}

// streamOf makes a resumable stream of s holding n bytes: a response its client read and a
// connection gone when complete, else a message not written yet.
func streamOf(t *testing.T, s *Session, n int, complete bool) *Stream {
	t.Helper()
	st := s.NewStream(1)
	c, err := st.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	c.MarkResumable()
	if err := st.Put([]byte(strings.Repeat("x", n)), complete); err != nil {
		t.Fatal(err)
	}
	if complete {
		drain(c)
		c.Detach()
	}
	return st
}

// resumable reports whether the client can resume st of s.
func resumable(t *testing.T, s *Session, st *Stream) bool {
	t.Helper()
	_, c, err := s.Resume(context.Background(), st.EventID(0))
	switch {
	case errors.Is(err, ErrUnknownStream):
		return false
	case err != nil:
		t.Fatalf("resume %s: %v", st.ID(), err)
	}
	c.Detach()
	return true
}

// TestBudgetEvictsTheOldestKeptStreamFirst: past the hub's byte budget, the streams kept for
// resumption only go, oldest first and only as many as needed, across sessions; a client that
// resumes one is answered as for a stream kept past its retention.
func TestBudgetEvictsTheOldestKeptStreamFirst(t *testing.T) {
	clock := testclock.New(time.Unix(1000, 0))
	h := newTestHub(t, &Options{Now: clock.Now, Retention: time.Minute, Budget: 1000})
	a, b := openSession(t, h, "a"), openSession(t, h, "b")
	oldest := keptStream(t, a, 300)
	clock.Advance(time.Second)
	second := keptStream(t, b, 300)
	clock.Advance(time.Second)
	third := keptStream(t, a, 300)
	if got := h.HeldBytes(); got != 900 {
		t.Fatalf("held %d bytes, want 900", got)
	}
	clock.Advance(time.Second)
	newest := keptStream(t, b, 300) // 1200 > 1000: the oldest goes, and no more
	if got := h.HeldBytes(); got != 900 {
		t.Errorf("held %d bytes after the budget was passed, want 900", got)
	}
	for _, tc := range []struct {
		name string
		s    *Session
		st   *Stream
		want bool
	}{
		{"oldest", a, oldest, false},
		{"second", b, second, true},
		{"third", a, third, true},
		{"newest", b, newest, true},
	} {
		if got := resumable(t, tc.s, tc.st); got != tc.want {
			t.Errorf("%s stream resumable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBudgetNeverEvictsAnOpenStream: streams still running (or written by a connection) are
// never evicted, however far over the budget they are; the streams kept for resumption only
// go as soon as they are kept, and the open ones stay resumable.
func TestBudgetNeverEvictsAnOpenStream(t *testing.T) {
	clock := testclock.New(time.Unix(1000, 0))
	h := newTestHub(t, &Options{Now: clock.Now, Retention: time.Minute, Budget: 500})
	s := openSession(t, h, "a")
	kept := keptStream(t, s, 100)
	running := openStream(t, s, 400)
	clock.Advance(time.Second)
	alsoRunning := openStream(t, s, 400) // 900 > 500: the kept one goes
	if resumable(t, s, kept) {
		t.Error("the kept stream is still resumable past the budget")
	}
	if got := h.HeldBytes(); got != 800 {
		t.Errorf("held %d bytes, want the open streams' 800", got)
	}
	late := keptStream(t, s, 50) // kept while the open ones alone are over: it goes at once
	if resumable(t, s, late) {
		t.Error("a stream kept while the open ones alone are over the budget is still resumable")
	}
	for _, st := range []*Stream{running, alsoRunning} {
		if !resumable(t, s, st) {
			t.Errorf("open stream %s evicted", st.ID())
		}
	}
	// Once the open streams end and their bytes go, the budget holds kept streams again.
	for _, st := range []*Stream{running, alsoRunning} {
		st.Unanswered()
	}
	h.Sweep(clock.Now())
	if got := h.HeldBytes(); got > 500 {
		t.Errorf("held %d bytes once the open streams completed, want at most the budget", got)
	}
}

// TestBudgetCountsWhatStreamsRelease: bytes written out of a stream its client cannot
// resume, streams dropped, expired or ended with their session leave the count.
func TestBudgetCountsWhatStreamsRelease(t *testing.T) {
	clock := testclock.New(time.Unix(1000, 0))
	h := newTestHub(t, &Options{Now: clock.Now, Retention: time.Minute, Budget: 1 << 20})
	s := openSession(t, h, "a")
	keptStream(t, s, 100)
	openStream(t, s, 200)
	unresumable := s.NewStream(1)
	c, _ := unresumable.Attach(0)
	_ = unresumable.Put([]byte("xxxxxxxxxx"), false)
	drain(c) // written out, and the client holds no event id: it goes at once
	if got := h.HeldBytes(); got != 300 {
		t.Errorf("held %d bytes, want 300", got)
	}
	clock.Advance(2 * time.Minute)
	h.Sweep(clock.Now()) // the kept one expires
	if got := h.HeldBytes(); got != 200 {
		t.Errorf("held %d bytes after the kept stream expired, want 200", got)
	}
	h.End("a")
	if got := h.HeldBytes(); got != 0 {
		t.Errorf("held %d bytes after the session ended, want 0", got)
	}
}

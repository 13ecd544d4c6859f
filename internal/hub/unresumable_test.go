package hub

import (
	"fmt"
	"testing"
	"time"
)

// A stream its client cannot resume (no event id of it was written: a JSON answer, an SSE
// answer of a client older than 2025-11-25) kept what it had written: every event until the
// stream went, and the whole stream for a while after its end.

// TestUnresumableStreamKeepsNothingWritten: its events go once written.
func TestUnresumableStreamKeepsNothingWritten(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	st := s.NewStream(2)
	c, err := st.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Put([]byte("progress"), false)
	_ = st.Put([]byte("first answer"), true)
	if got, state := drain(c); fmt.Sprint(got) != "[progress first answer]" || state != Live {
		t.Fatalf("written %v (%v), want both events and the stream live", got, state)
	}
	st.mu.Lock()
	held, size := len(st.events), st.size
	st.mu.Unlock()
	if held != 0 || size != 0 {
		t.Errorf("after they were written, the stream holds %d events (%d bytes), want none", held, size)
	}
	_ = st.Put([]byte("second answer"), true)
	if got, state := drain(c); fmt.Sprint(got) != "[second answer]" || state != Complete {
		t.Errorf("then written %v (%v), want the second answer and the end", got, state)
	}
}

// TestUnresumableStreamGoesWhenFinished: written to its end, it goes at once, not after the
// retention of a finished stream.
func TestUnresumableStreamGoesWhenFinished(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newTestHub(t, &Options{Now: func() time.Time { return now }, FinishedRetention: 10 * time.Second})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	_ = st.Put([]byte("answer"), true)
	drain(c)
	c.Finish()
	if s.Stream(st.ID()) != nil {
		t.Error("a stream its client cannot resume is kept after it was written to its end")
	}
	resumable := s.NewStream(1)
	c2, _ := resumable.Attach(0)
	c2.MarkResumable()
	_ = resumable.Put([]byte("answer"), true)
	drain(c2)
	c2.Finish()
	if s.Stream(resumable.ID()) == nil {
		t.Error("a stream its client can resume went at once; it is kept for FinishedRetention")
	}
}

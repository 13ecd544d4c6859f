package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// memLog is an EventLog in a map, as a shared log would be seen by two processes.
type memLog struct {
	mu       sync.Mutex
	events   map[string][]Event
	complete map[string]bool
}

func newMemLog() *memLog {
	return &memLog{events: map[string][]Event{}, complete: map[string]bool{}}
}

func (l *memLog) Append(sessionID, streamID string, events []Event, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := sessionID + "/" + streamID
	if l.events[key] == nil {
		l.events[key] = []Event{} // the stream exists from its first append
	}
	for _, e := range events {
		l.events[key] = append(l.events[key], Event{Seq: e.Seq, Data: append([]byte(nil), e.Data...)})
	}
	if complete {
		l.complete[key] = true
	}
}

func (l *memLog) Replay(_ context.Context, sessionID, streamID string, after uint64) (*Replayed, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := sessionID + "/" + streamID
	if _, ok := l.events[key]; !ok && !l.complete[key] {
		return nil, nil
	}
	r := &Replayed{Complete: l.complete[key]}
	for _, e := range l.events[key] {
		if e.Seq > after {
			r.Events = append(r.Events, e)
		}
	}
	return r, nil
}

func (l *memLog) seqs(sessionID, streamID string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var seqs []uint64
	for _, e := range l.events[sessionID+"/"+streamID] {
		seqs = append(seqs, e.Seq)
	}
	return fmt.Sprint(seqs, l.complete[sessionID+"/"+streamID])
}

// TestEventLogHoldsWhatAClientCanResume: a stream's events reach the log once the client
// holds an event id of it, each once and in order, with its end.
func TestEventLogHoldsWhatAClientCanResume(t *testing.T) {
	log := newMemLog()
	h := newTestHub(t, &Options{Log: log})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, err := st.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Put([]byte("early"), false) // before the client has an id: held here only
	if _, known := log.events["a/"+st.ID()]; known {
		t.Fatalf("before the priming event the log knows the stream")
	}
	c.MarkResumable() // the priming event was written
	_ = st.Put([]byte("progress"), false)
	_ = st.Put([]byte("result"), true)
	if got := log.seqs("a", st.ID()); got != "[1 2 3] true" {
		t.Errorf("the log holds %s, want [1 2 3] true", got)
	}

	// A JSON answer (never resumable) writes nothing.
	json := s.NewStream(1)
	_ = json.Put([]byte("result"), true)
	if got := log.seqs("a", json.ID()); got != "[] false" {
		t.Errorf("a JSON answer reached the log: %s", got)
	}
}

// TestResumeFromTheEventLog: another process (a hub sharing the log) resumes a stream it
// never held: it gets the events after the client's last id, and the stream ends there.
func TestResumeFromTheEventLog(t *testing.T) {
	log := newMemLog()
	first := newTestHub(t, &Options{Log: log, Tag: "first"})
	s := openSession(t, first, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	_ = st.Put([]byte("progress 1"), false)
	_ = st.Put([]byte("progress 2"), false)
	_ = st.Put([]byte("result"), true)

	second := newTestHub(t, &Options{Log: log, Tag: "second"})
	s2 := openSession(t, second, "a")
	resumed, c2, err := s2.Resume(context.Background(), st.EventID(1))
	if err != nil {
		t.Fatal(err)
	}
	if resumed.ID() != st.ID() {
		t.Errorf("resumed stream %q, want %q", resumed.ID(), st.ID())
	}
	got, state := drain(c2)
	if fmt.Sprint(got) != "[progress 2 result]" || state != Complete {
		t.Errorf("resumed from the log: %v, %v; want [progress 2 result], complete", got, state)
	}
	if got := log.seqs("a", st.ID()); got != "[1 2 3] true" {
		t.Errorf("resuming wrote to the log again: %s", got)
	}
	c2.Finish()

	// What the log gains later comes with the next resume (the stream read back is not kept
	// as it was).
	log.Append("a", st.ID(), []Event{{Seq: 4, Data: []byte("late")}}, true)
	_, c3, err := s2.Resume(context.Background(), st.EventID(3))
	if err != nil {
		t.Fatal(err)
	}
	if got, state := drain(c3); fmt.Sprint(got) != "[late]" || state != Complete {
		t.Errorf("the second resume: %v, %v; want [late], complete", got, state)
	}
	// Another session's id, or a stream the log never held, stays unknown.
	other := openSession(t, second, "b")
	if _, _, err := other.Resume(context.Background(), st.EventID(1)); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("another session resuming: %v, want ErrUnknownStream", err)
	}
	if _, _, err := s2.Resume(context.Background(), "first_zz.1"); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("an unknown stream: %v, want ErrUnknownStream", err)
	}
}

// TestResumeFromThePrimingEventAlone: a stream whose client has only the priming event id
// (the call sent nothing yet) is known to the log: another process resumes it (nothing to
// send yet) rather than calling it unknown, and later gets what came meanwhile.
func TestResumeFromThePrimingEventAlone(t *testing.T) {
	log := newMemLog()
	first := newTestHub(t, &Options{Log: log, Tag: "first"})
	st := openSession(t, first, "a").NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()

	s2 := openSession(t, newTestHub(t, &Options{Log: log, Tag: "second"}), "a")
	_, c2, err := s2.Resume(context.Background(), st.EventID(0))
	if err != nil {
		t.Fatalf("resuming from the priming event: %v", err)
	}
	if got, _ := drain(c2); len(got) != 0 {
		t.Errorf("got %v before anything was sent", got)
	}
	c2.Finish()
	_ = st.Put([]byte("result"), true)
	_, c3, err := s2.Resume(context.Background(), st.EventID(0))
	if err != nil {
		t.Fatal(err)
	}
	if got, state := drain(c3); fmt.Sprint(got) != "[result]" || state != Complete {
		t.Errorf("the second resume: %v, %v; want [result]", got, state)
	}
}

// gapLog is a log that lost the first events of every stream.
type gapLog struct{ memLog }

func (l *gapLog) Replay(ctx context.Context, sessionID, streamID string, after uint64) (*Replayed, error) {
	return &Replayed{Events: []Event{{Seq: after + 5, Data: []byte("later")}}, Complete: true}, nil
}

// TestResumeRefusesAGapAndAnAbsurdID: events missing from the log, or an id at the end of
// the sequence numbers, are refused, never replayed as a short stream (or a panic).
func TestResumeRefusesAGapAndAnAbsurdID(t *testing.T) {
	s := openSession(t, newTestHub(t, &Options{Log: &gapLog{memLog: *newMemLog()}}), "a")
	if _, _, err := s.Resume(context.Background(), "other_1.1"); !errors.Is(err, ErrEventsLost) {
		t.Errorf("a gap in the log: %v, want ErrEventsLost", err)
	}
	for _, id := range []string{"other_1.18446744073709551615", "other_1.18446744073709551614"} {
		if _, _, err := s.Resume(context.Background(), id); !errors.Is(err, ErrUnknownStream) {
			t.Errorf("Resume(%q): %v, want ErrUnknownStream", id, err)
		}
	}
}

package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

func newTestHub(t *testing.T, opts *Options) *Local {
	t.Helper()
	h := New(context.Background(), opts)
	t.Cleanup(h.Close)
	return h
}

func openSession(t *testing.T, h *Local, id string) *Session {
	t.Helper()
	s, err := h.Open(id, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// drain returns the data of the events a cursor has now, and the stream's state, as a
// connection that wrote them all would.
func drain(c *Cursor) ([]string, State) {
	events, state, _ := c.Next()
	var out []string
	for _, e := range events {
		out = append(out, string(e.Data))
	}
	if len(events) > 0 {
		c.Wrote(events[len(events)-1].Seq)
	}
	return out, state
}

func TestResumeDeliversWhatTheDroppedConnectionMissed(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, err := st.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	c.MarkResumable()
	_ = st.Put([]byte("progress 1"), false)
	got, _ := drain(c)
	if fmt.Sprint(got) != "[progress 1]" {
		t.Fatalf("first connection got %v", got)
	}
	c.Detach() // the connection dropped; the call goes on
	_ = st.Put([]byte("progress 2"), false)
	if err := st.Put([]byte("result"), true); err != nil {
		t.Fatalf("the answer after the drop: %v", err)
	}

	resumed, c2, err := s.Resume(context.Background(), st.EventID(1))
	if err != nil || resumed != st {
		t.Fatalf("Resume: %v, %v", resumed, err)
	}
	got, state := drain(c2)
	if fmt.Sprint(got) != "[progress 2 result]" || state != Complete {
		t.Errorf("resumed connection got %v (%v), want what came after event 1, complete", got, state)
	}
	// Resuming again from the priming event replays everything, once each.
	_, c3, err := s.Resume(context.Background(), st.EventID(0))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := drain(c3); fmt.Sprint(got) != "[progress 1 progress 2 result]" {
		t.Errorf("resumed from the priming event: %v", got)
	}
}

func TestResumeRefusesIDsOfOtherSessionsAndUnknownStreams(t *testing.T) {
	h := newTestHub(t, nil)
	a, b := openSession(t, h, "a"), openSession(t, h, "b")
	st := a.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	_ = st.Put([]byte("for a only"), false)
	c.Detach()

	for _, id := range []string{st.EventID(0), "nonsense", "", "x.1", st.ID() + ".x"} {
		if _, _, err := b.Resume(context.Background(), id); !errors.Is(err, ErrUnknownStream) {
			t.Errorf("session b resumed %q: %v, want ErrUnknownStream", id, err)
		}
	}
	// An id past what the stream holds is no place to resume from.
	if _, _, err := a.Resume(context.Background(), st.EventID(5)); !errors.Is(err, ErrEventsLost) {
		t.Errorf("resume past the end: %v", err)
	}
}

func TestStreamThatCannotBeResumedIsDroppedWithItsConnection(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.Detach() // never told the client an id: it cannot come back
	if err := st.Put([]byte("request to the client"), false); !errors.Is(err, ErrStreamDone) {
		t.Errorf("put after the connection left: %v, want ErrStreamDone", err)
	}
	if s.Stream(st.ID()) != nil {
		t.Error("the stream is still held")
	}
}

func TestStreamLogIsBounded(t *testing.T) {
	h := newTestHub(t, &Options{Limits: Limits{Messages: 4, Bytes: 1 << 20}})
	s := openSession(t, h, "a")

	// Written events make room for new ones.
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	for i := range 10 {
		if err := st.Put(fmt.Appendf(nil, "m%d", i), false); err != nil {
			t.Fatalf("put %d with a reader keeping up: %v", i, err)
		}
		drain(c)
	}
	if _, _, err := s.Resume(context.Background(), st.EventID(1)); !errors.Is(err, ErrEventsLost) {
		t.Errorf("resume from an event no longer held: %v, want ErrEventsLost", err)
	}

	// Unwritten events past the bound drop the stream; the response still goes before that.
	st2 := s.NewStream(1)
	var err error
	for i := 0; err == nil && i < 10; i++ {
		err = st2.Put([]byte("x"), false)
	}
	if !errors.Is(err, ErrStreamOverflow) {
		t.Errorf("unread stream: %v, want ErrStreamOverflow", err)
	}
	if err := st2.Put([]byte("late"), true); !errors.Is(err, ErrStreamDone) {
		t.Errorf("put after the overflow: %v", err)
	}
}

func TestStandaloneStream(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	st, c, err := s.OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	c.MarkResumable()
	if _, _, err := s.OpenStandalone(); !errors.Is(err, ErrStreamOpen) {
		t.Errorf("a second standalone connection: %v, want ErrStreamOpen", err)
	}
	if !s.Listening() {
		t.Error("Listening is false with a connection")
	}
	c.Detach()
	if s.Listening() {
		t.Error("Listening is true without a connection")
	}
	// While the client is away, messages wait for it.
	if err := h.Deliver("a", "", []byte("list_changed")); err != nil {
		t.Fatalf("Deliver to the standalone stream: %v", err)
	}
	_, c2, err := s.Resume(context.Background(), st.EventID(0))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := drain(c2); fmt.Sprint(got) != "[list_changed]" {
		t.Errorf("resumed standalone stream: %v", got)
	}
	// Another connection taking the stream over detaches the first.
	_, c3, err := s.Resume(context.Background(), st.EventID(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, state := drain(c2); state != Detached {
		t.Errorf("the replaced connection's state: %v, want Detached", state)
	}
	c3.Detach()
	// A new GET without Last-Event-ID replaces a detached standalone stream.
	st4, _, err := s.OpenStandalone()
	if err != nil || st4 == st {
		t.Fatalf("reopen: %v", err)
	}
	if _, _, err := s.Resume(context.Background(), st.EventID(1)); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("resume of the replaced stream: %v", err)
	}
}

func TestCompleteStreamsAreKeptForTheRetentionPeriod(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newTestHub(t, &Options{Now: func() time.Time { return now }, Retention: time.Minute, MaxStreams: 3})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	_ = st.Put([]byte("result"), true)
	drain(c)
	c.Detach()
	if _, _, err := s.Resume(context.Background(), st.EventID(0)); err != nil {
		t.Fatalf("resume within the retention period: %v", err)
	}
	s.Stream(st.ID()).writer.Detach()
	now = now.Add(2 * time.Minute)
	h.Sweep(now)
	if _, _, err := s.Resume(context.Background(), st.EventID(0)); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("resume after the retention period: %v", err)
	}
	// A session keeps at most MaxStreams: at the cap, the oldest complete stream goes, never
	// one still running.
	keep := func() *Stream {
		kept := s.NewStream(1)
		kc, _ := kept.Attach(0)
		kc.MarkResumable()
		_ = kept.Put([]byte("r"), true)
		kc.Detach()
		return kept
	}
	oldest, second := keep(), keep()
	running := s.NewStream(1)
	s.NewStream(1) // at the cap of 3: the oldest complete one makes room
	if s.Stream(oldest.ID()) != nil || s.Stream(second.ID()) == nil || s.Stream(running.ID()) == nil {
		t.Errorf("at the cap: oldest kept %v, second kept %v, running kept %v; want only the oldest gone",
			s.Stream(oldest.ID()) != nil, s.Stream(second.ID()) != nil, s.Stream(running.ID()) != nil)
	}
	if n := len(s.streams); n != 3 {
		t.Errorf("%d streams kept, want 3", n)
	}
}

func TestEndedSessionRefusesWork(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	ctx, _, done, err := s.Begin(protocol.IntID(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Begin(protocol.IntID(1), 0); !errors.Is(err, ErrDuplicateID) {
		t.Errorf("same id twice: %v", err)
	}
	if _, _, _, err := s.Begin(protocol.IntID(2), 1); !errors.Is(err, ErrTooManyCalls) {
		t.Errorf("past the limit: %v", err)
	}
	st := s.NewStream(1)
	h.End("a")
	if ctx.Err() == nil {
		t.Error("the request's context outlived its session")
	}
	done()
	s.RequestDone()
	if err := st.Put([]byte("x"), true); !errors.Is(err, ErrStreamDone) {
		t.Errorf("put on an ended session's stream: %v", err)
	}
	if _, err := h.Open("a", ""); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("reopen an ended session: %v", err)
	}
	select {
	case <-h.RequestsDone():
	case <-time.After(time.Minute):
		t.Error("RequestsDone did not close")
	}
}

func TestAskAndAnswer(t *testing.T) {
	h := newTestHub(t, &Options{Tag: "rep1"})
	s := openSession(t, h, "a")
	cancelled := make(chan struct{})
	id, answer, forget := s.Ask(func() { close(cancelled) })
	defer forget()
	if id.String() != `"rep1-1"` {
		t.Errorf("id %s does not carry the hub's tag", id)
	}
	if s.Answer(&protocol.Response{ID: protocol.StringID("other")}) {
		t.Error("an answer to nothing was taken")
	}
	if !s.Answer(&protocol.Response{ID: id, Result: []byte(`{}`)}) {
		t.Fatal("the answer was not taken")
	}
	if resp := <-answer; string(resp.Result) != "{}" {
		t.Errorf("answer %s", resp.Result)
	}
	id2, _, forget2 := s.Ask(func() { close(cancelled) })
	defer forget2()
	s.CancelAsk(id2)
	<-cancelled
}

// TestFinishedStreamIsKeptBriefly: a stream written to its end is kept only a short while,
// for a connection that broke just after the last flush.
func TestFinishedStreamIsKeptBriefly(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newTestHub(t, &Options{Now: func() time.Time { return now }, Retention: time.Minute, FinishedRetention: 10 * time.Second})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	_ = st.Put([]byte("progress"), false)
	drain(c)
	c.Finish() // not complete yet: the same as Detach
	_, c2, err := s.Resume(context.Background(), st.EventID(1))
	if err != nil {
		t.Fatalf("an unfinished stream was not kept: %v", err)
	}
	_ = st.Put([]byte("result"), true)
	drain(c2)
	c2.Finish()
	if _, c3, err := s.Resume(context.Background(), st.EventID(1)); err != nil {
		t.Fatalf("resume just after the end: %v", err)
	} else {
		if got, _ := drain(c3); fmt.Sprint(got) != "[result]" {
			t.Errorf("resumed after the end: %v", got)
		}
		c3.Finish()
	}
	now = now.Add(11 * time.Second)
	h.Sweep(now)
	if _, _, err := s.Resume(context.Background(), st.EventID(2)); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("resume of a finished stream after its short retention: %v, want ErrUnknownStream", err)
	}
}

// TestStreamCompletedWhileAwayExpires: a call that ends after its client's connection broke
// keeps its result for the retention period, counted from its end, and no longer.
func TestStreamCompletedWhileAwayExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newTestHub(t, &Options{Now: func() time.Time { return now }, Retention: time.Minute})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	c.Detach()
	now = now.Add(30 * time.Second)
	_ = st.Put([]byte("result"), true)
	now = now.Add(45 * time.Second)
	h.Sweep(now)
	if s.Stream(st.ID()) == nil {
		t.Fatal("the result went before the retention period after it came")
	}
	now = now.Add(time.Minute)
	h.Sweep(now)
	if s.Stream(st.ID()) != nil {
		t.Error("a complete stream nobody resumed is still kept after its retention period")
	}
}

// TestEventsHandedOutButNotWrittenStay: events a connection took but failed to write are not
// the ones that make room: a client resuming from what it has gets them.
func TestEventsHandedOutButNotWrittenStay(t *testing.T) {
	h := newTestHub(t, &Options{Limits: Limits{Messages: 4, Bytes: 1 << 20}})
	s := openSession(t, h, "a")
	st, c, _ := s.OpenStandalone()
	c.MarkResumable()
	for _, m := range []string{"a", "b", "c"} {
		_ = st.Put([]byte(m), false)
	}
	c.Next() // taken, but the write of the first failed
	c.Detach()
	if err := st.Put([]byte("d"), false); err != nil {
		t.Fatalf("put d: %v", err)
	}
	_, c2, err := s.Resume(context.Background(), st.EventID(0))
	if err != nil {
		t.Fatalf("resume from the priming event: %v", err)
	}
	if got, _ := drain(c2); fmt.Sprint(got) != "[a b c d]" {
		t.Errorf("resumed %v, want all four", got)
	}
}

// TestDroppedStreamTellsWaiters: a stream dropped while nobody reads it is forgotten, and
// closes Dropped so that requests put on it stop waiting.
func TestDroppedStreamTellsWaiters(t *testing.T) {
	h := newTestHub(t, &Options{Limits: Limits{Messages: 2, Bytes: 1 << 20}})
	s := openSession(t, h, "a")
	st := s.NewStream(1)
	c, _ := st.Attach(0)
	c.MarkResumable()
	c.Detach()
	var err error
	for i := 0; err == nil && i < 5; i++ {
		err = st.Put([]byte("x"), false)
	}
	if !errors.Is(err, ErrStreamOverflow) {
		t.Fatalf("overflow: %v", err)
	}
	select {
	case <-st.Dropped():
	default:
		t.Error("Dropped is not closed")
	}
	if s.Stream(st.ID()) != nil {
		t.Error("an overflowed stream nobody reads is still held")
	}
}

// TestConcurrentStandaloneOpens: of two GETs at once, one gets the stream and the other is
// told it is taken; never a stream that vanishes under the first.
func TestConcurrentStandaloneOpens(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	for range 2000 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		cursors := make([]*Cursor, 2)
		for i := range 2 {
			wg.Go(func() { _, cursors[i], errs[i] = s.OpenStandalone() })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil && !errors.Is(err, ErrStreamOpen) {
				t.Fatalf("open %d: %v", i, err)
			}
		}
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("both or neither opened: %v", errs)
		}
		for _, c := range cursors {
			if c != nil {
				c.Detach()
			}
		}
	}
}

// TestOnWakeReportsEveryChangeAfterAttach: a connection busy serving the request learns from
// OnWake of each message, of the answer, and of the ends it must notice (drop, take-over).
func TestOnWakeReportsEveryChangeAfterAttach(t *testing.T) {
	cases := []struct {
		name   string
		change func(s *Session, st *Stream)
		want   State
	}{
		{"message", func(_ *Session, st *Stream) { _ = st.Put([]byte("progress"), false) }, Live},
		{"response", func(_ *Session, st *Stream) { _ = st.Put([]byte("result"), true) }, Complete},
		{"unanswered", func(_ *Session, st *Stream) { st.Unanswered() }, Complete},
		{"session ended", func(s *Session, _ *Stream) { s.hub.End(s.ID()) }, Dropped},
		{"taken over", func(_ *Session, st *Stream) { _, _ = st.Attach(0) }, Detached},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHub(t, nil)
			s := openSession(t, h, "a")
			st := s.NewStream(1)
			c, err := st.Attach(0)
			if err != nil {
				t.Fatal(err)
			}
			woken := 0
			c.OnWake(func() { woken++ })
			if woken != 0 {
				t.Fatalf("OnWake called %d times before any change", woken)
			}
			tc.change(s, st)
			if woken != 1 {
				t.Errorf("OnWake called %d times, want 1", woken)
			}
			if _, state, _ := c.Next(); state != tc.want {
				t.Errorf("state %v, want %v", state, tc.want)
			}
		})
	}
}

// TestRequestCancelReachesOnlyItsOwnRequest: the cancel func Begin returns cancels its own
// request, never a later one that reuses the id after it ended.
func TestRequestCancelReachesOnlyItsOwnRequest(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	_, cancelFirst, doneFirst, err := s.Begin(protocol.IntID(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	doneFirst()
	s.RequestDone()
	second, _, doneSecond, err := s.Begin(protocol.IntID(1), 0)
	if err != nil {
		t.Fatalf("the id again, once the first request ended: %v", err)
	}
	defer s.RequestDone()
	defer doneSecond()
	cancelFirst(ErrAnswerUndeliverable)
	if err := second.Err(); err != nil {
		t.Errorf("the first request's cancel reached the second: %v", err)
	}
}

// TestCancelBeforeItsRequestBeginsCancelsIt: behind a balancer without affinity a client's
// cancel may come before the request it cancels; that request begins cancelled, the others
// do not, and the cancels kept for requests not seen are bounded.
func TestCancelBeforeItsRequestBeginsCancelsIt(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	if s.CancelRequest(protocol.IntID(7)) {
		t.Fatal("CancelRequest reported a request in flight that never began")
	}
	for i := range maxEarlyCancels - 1 { // late cancels of requests long answered
		s.CancelRequest(protocol.IntID(int64(100 + i)))
	}
	begin := func(id int64) context.Context {
		ctx, _, done, err := s.Begin(protocol.IntID(id), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { done(); s.RequestDone() })
		return ctx
	}
	if ctx := begin(7); !errors.Is(context.Cause(ctx), ErrClientCancelled) {
		t.Errorf("request 7, cancelled before it began: cause %v, want ErrClientCancelled", context.Cause(ctx))
	}
	if ctx := begin(8); ctx.Err() != nil {
		t.Errorf("request 8, never cancelled, began cancelled: %v", context.Cause(ctx))
	}
	// One more than the bound pushes out the oldest kept cancel (id 100).
	s.CancelRequest(protocol.IntID(200))
	s.CancelRequest(protocol.IntID(201))
	if ctx := begin(100); ctx.Err() != nil {
		t.Errorf("the oldest kept cancel outlived the bound: %v", context.Cause(ctx))
	}
	if ctx := begin(201); !errors.Is(context.Cause(ctx), ErrClientCancelled) {
		t.Errorf("request 201: cause %v, want ErrClientCancelled", context.Cause(ctx))
	}
}

// TestDrainRefusesNewRequestsAndEndRequestsEndsTheRest: after Drain no request begins, the one
// in flight goes on until EndRequests cancels it with its cause, and RequestsDone then closes.
func TestDrainRefusesNewRequestsAndEndRequestsEndsTheRest(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	running, _, done, err := s.Begin(protocol.IntID(1), 0)
	if err != nil {
		t.Fatal(err)
	}
	h.Drain()
	if _, _, _, err := s.Begin(protocol.IntID(2), 0); !errors.Is(err, ErrClosing) {
		t.Errorf("Begin during the drain: %v, want ErrClosing", err)
	}
	if running.Err() != nil {
		t.Fatal("the drain cancelled the request in flight")
	}
	h.EndRequests(ErrShuttingDown)
	if cause := context.Cause(running); !errors.Is(cause, ErrShuttingDown) {
		t.Errorf("cause of the request ended by EndRequests: %v, want ErrShuttingDown", cause)
	}
	done()
	s.RequestDone()
	select {
	case <-h.RequestsDone():
	case <-time.After(10 * time.Second):
		t.Fatal("RequestsDone did not close once the last request ended")
	}
}

// TestStreamsOpen: a session counts the streams a connection writes now, not those kept
// for resumption without one.
func TestStreamsOpen(t *testing.T) {
	h := newTestHub(t, nil)
	s := openSession(t, h, "a")
	if n := s.StreamsOpen(); n != 0 {
		t.Errorf("StreamsOpen of a new session = %d, want 0", n)
	}
	_, c, err := s.OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	c.MarkResumable()
	if n := s.StreamsOpen(); n != 1 {
		t.Errorf("StreamsOpen with a standalone connection = %d, want 1", n)
	}
	c.Detach()
	if n := s.StreamsOpen(); n != 0 {
		t.Errorf("StreamsOpen after the connection left = %d, want 0", n)
	}
}

package hub

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/protocol"
)

// standaloneID is the standalone stream the takeover tests resume, produced by "prod".
const standaloneID = "prod_7"

// seedStandalone writes what a producer logged of a session's standalone stream: its start
// and the events given.
func (l *reqLog) seedStandalone(sessionID string, events ...Event) {
	l.Start(sessionID, standaloneID, nil, true)
	l.Append(sessionID, standaloneID, events, false)
}

// claimsOf returns the log's successful claims.
func (l *reqLog) claimsOf() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.claims)
}

// TestStandaloneStreamOfAStoppedProducerIsTakenOver: a client resumes, on this hub, the
// standalone stream of a hub that stopped. It reads what it missed from the log, and the
// stream does not end: this hub claims it and goes on producing it, after the last event
// logged, under the same id, so that messages for the session's standalone stream reach the
// client, and are logged for a resume elsewhere. A third hub resuming it later follows this
// one rather than claim it again.
func TestStandaloneStreamOfAStoppedProducerIsTakenOver(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)), ev(2, notice(2)))
	p := &producers{running: map[string]bool{}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")

	st, c, err := s.Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Fatalf("resumed after event 1: %v, state %v; want [notice], live (the standalone stream goes on)", got, state)
	}
	if s.Standalone() != st {
		t.Errorf("the stream taken over is not the session's standalone stream here")
	}
	if err := h.Deliver("s", "", notice(3)); err != nil {
		t.Fatalf("a message for the session's standalone stream: %v", err)
	}
	events, state, _ := c.Next()
	if len(events) != 1 || events[0].Seq != 3 || state != Live {
		t.Fatalf("after the message the connection reads %+v, state %v; want event 3, live", events, state)
	}
	if got := st.EventID(events[0].Seq); got != standaloneID+".3" {
		t.Errorf("the message's event id is %q, want %s.3: the stream's id goes on", got, standaloneID)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice", "3 notice"}, log.contents("s", standaloneID)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{standaloneID + " prod→here"}, log.claimsOf()); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}

	// A third hub, where the client resumes next, follows this one (which runs).
	p2 := &producers{running: map[string]bool{"here": true}}
	third := newTestHub(t, &Options{Tag: "third", Log: log, Producing: p2.producing})
	_, c3, err := openSession(t, third, "s").Resume(context.Background(), standaloneID+".2")
	if err != nil {
		t.Fatal(err)
	}
	if got, state := read(c3); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("resumed on a third hub: %v, state %v; want [notice], live", got, state)
	}
	if len(log.claimsOf()) != 1 {
		t.Errorf("the third hub claimed the stream too: %v", log.claimsOf())
	}
}

// TestFollowedStandaloneStreamIsTakenOverWhenItsProducerStops: a client reads here the
// standalone stream another hub produces. Messages for it reach this hub meanwhile (Keep);
// one the producer logs is forgotten here, one it never logged before it stopped is not.
// When the producer's end is known (TakeOver), the stream goes on here without a break: the
// message the producer never logged comes first, then new ones. A copy whose client is away
// is taken over too, with what was kept for it, for its client to resume.
func TestFollowedStandaloneStreamIsTakenOverWhenItsProducerStops(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	log.seedStandalone("idle", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".0")
	if err != nil {
		t.Fatal(err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Fatalf("followed: %v, %v", got, state)
	}
	_, idle, err := openSession(t, h, "idle").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	idle.Detach()
	h.Keep("idle", notice(7))

	if !h.Keep("s", notice(2)) || !h.Keep("s", notice(3)) {
		t.Fatalf("Keep found no followed standalone stream")
	}
	// The producer logged the first and published it, then stopped.
	log.Append("s", standaloneID, []Event{ev(2, notice(2))}, false)
	h.Extend("s", standaloneID, []Event{ev(2, notice(2))}, false)
	read(c)

	got := h.TakeOver(context.Background(), producer)
	slices.Sort(got)
	if !slices.Equal(got, []string{"idle", "s"}) {
		t.Errorf("TakeOver reported sessions %v, want [idle s]", got)
	}
	events, state, _ := c.Next()
	if len(events) != 1 || events[0].Seq != 3 || !slices.Equal(events[0].Data, notice(3)) || state != Live {
		t.Fatalf("after the takeover the connection reads %+v, state %v; want the message never logged as event 3, live", events, state)
	}
	c.Wrote(3)
	if err := h.Deliver("s", "", notice(4)); err != nil {
		t.Fatalf("a message after the takeover: %v", err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("after a new message: %v, %v", got, state)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice", "3 notice", "4 notice"}, log.contents("s", standaloneID)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
	// The client away comes back: it gets what was kept for it.
	_, back, err := h.Lookup("idle").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	if got, state := read(back); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("the client away, back: %v, %v; want the kept message, live", got, state)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice"}, log.contents("idle", standaloneID)); diff != "" {
		t.Errorf("the log of the stream whose client was away (-want +got):\n%s", diff)
	}
	if h.Keep("s", notice(5)) {
		t.Errorf("Keep kept a message for a stream produced here")
	}
}

// TestTakeOverFollowsTheHubThatClaimedFirst: when another hub claimed the stream first, the
// copy here follows that hub: its events come, and its end ends the stream here.
func TestTakeOverFollowsTheHubThatClaimedFirst(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	read(c)
	if owner, _ := log.Claim(context.Background(), "s", standaloneID, producer, "other"); owner != "other" {
		t.Fatalf("claim by other: %s", owner)
	}
	if got := h.TakeOver(context.Background(), producer); len(got) != 0 {
		t.Errorf("TakeOver took over %v, want nothing: another hub claimed it", got)
	}
	h.Extend("s", standaloneID, []Event{ev(2, notice(2))}, false)
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("following the other hub: %v, %v", got, state)
	}
	// That hub stops too: the copy, which follows it now, is taken over here.
	if got := h.TakeOver(context.Background(), "other"); !slices.Equal(got, []string{"s"}) {
		t.Errorf("TakeOver(other) = %v, want [s]", got)
	}
	if diff := cmp.Diff([]string{standaloneID + " prod→other", standaloneID + " other→here"}, log.claimsOf()); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
}

// TestKeptMessagesExpire: a message kept for a followed standalone stream longer than Hold is
// forgotten: the producer, which ran, had it.
func TestKeptMessagesExpire(t *testing.T) {
	clock := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing, Now: clock.Now, Hold: time.Minute})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	h.Keep("s", notice(8))
	clock.Advance(time.Minute + time.Second)
	h.Keep("s", notice(9))
	h.TakeOver(context.Background(), producer)
	events, _, _ := c.Next()
	if len(events) != 1 || !slices.Equal(events[0].Data, notice(9)) {
		t.Errorf("after the takeover: %d events %+v, want the message kept within Hold alone", len(events), events)
	}
}

// TestOpeningTheStandaloneStreamElsewhereDropsTheCopies: DropStandalone drops the session's
// own standalone stream and the copies followed here of another's, but not a copy of the
// stream kept; this hub's own stream, when it is the one kept (taken over elsewhere), is
// dropped with no end logged.
func TestOpeningTheStandaloneStreamElsewhereDropsTheCopies(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	_, c, err := s.Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	s.DropStandalone(standaloneID)
	if _, state := read(c); state != Live {
		t.Errorf("the copy of the stream kept: %v, want live", state)
	}
	s.DropStandalone("other_1")
	if _, state := read(c); state != Dropped {
		t.Errorf("the copy after another stream opened: %v, want dropped", state)
	}

	// This hub's own standalone stream, taken over elsewhere (this hub was taken for
	// stopped): dropped here, its end not logged.
	own, oc, err := s.OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	oc.MarkResumable()
	s.DropStandalone(own.ID())
	if _, state := read(oc); state != Dropped || s.Standalone() != nil {
		t.Errorf("the own stream taken over elsewhere: %v, want dropped", state)
	}
	if r, _ := log.Replay(context.Background(), "s", own.ID(), 0); r == nil || r.Complete {
		t.Errorf("the log of the own stream taken over elsewhere: %+v, want it not ended", r)
	}
}

// TestAdoptGoesOnWithACallsStream: a hub that finishes a call another stopped producing
// takes its stream over: it awaits the requests the log recorded and no event answers, goes
// on after the last logged event, and completes with the last answer; the log records it as
// the producer, and a second Adopt elsewhere fails.
func TestAdoptGoesOnWithACallsStream(t *testing.T) {
	log := newReqLog()
	log.seed("s", followed, []int64{1, 2}, []Event{ev(1, notice(1)), ev(2, result(1))}, false)
	h := newTestHub(t, &Options{Tag: "here", Log: log})
	st, err := openSession(t, h, "s").Adopt(context.Background(), followed)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Awaiting(); len(got) != 1 || got[0] != protocol.IntID(2) {
		t.Fatalf("Awaiting = %v, want [2]", got)
	}
	if err := h.Deliver("s", followed, notice(3)); err != nil {
		t.Fatalf("a message about the call: %v", err)
	}
	if err := st.Put(result(2), true); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 result 1", "3 notice", "4 result 2", "end"}, log.contents("s", followed)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
	_, c, err := openSession(t, h, "s").Resume(context.Background(), followed+".2")
	if err != nil {
		t.Fatal(err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice", "result 2"}) || state != Complete {
		t.Errorf("resumed here after event 2: %v, %v", got, state)
	}
	if _, err := openSession(t, newTestHub(t, &Options{Tag: "third", Log: log}), "s").Adopt(context.Background(), followed); err == nil {
		t.Errorf("a second Adopt of the ended stream succeeded")
	}
}

// TestDroppedStandaloneStreamIsNotResumed: a standalone stream whose end was logged (it was
// dropped: its client opened another, or did not keep up) is refused as unknown once its
// events are read, rather than resumed into a stream that ends at once, again and again;
// one whose hub closed has no end logged, and is taken over.
func TestDroppedStandaloneStreamIsNotResumed(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	log.Append("s", standaloneID, nil, true)
	h := newTestHub(t, &Options{Tag: "here", Log: log})
	s := openSession(t, h, "s")
	if _, c, err := s.Resume(context.Background(), standaloneID+".0"); err != nil {
		t.Errorf("resume before its last event: %v", err)
	} else if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Complete {
		t.Errorf("resume before its last event: %v, %v", got, state)
	}
	if _, _, err := s.Resume(context.Background(), standaloneID+".1"); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("resume after its last event: %v, want ErrUnknownStream", err)
	}

	prod := newTestHub(t, &Options{Tag: producer, Log: log})
	st, c, err := openSession(t, prod, "t").OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	c.MarkResumable()
	_ = st.Put(notice(1), false)
	prod.Close()
	if diff := cmp.Diff([]string{"1 notice"}, log.contents("t", st.ID())); diff != "" {
		t.Errorf("the log of a standalone stream whose hub closed (-want +got):\n%s", diff)
	}
	_, c2, err := openSession(t, h, "t").Resume(context.Background(), st.EventID(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, state := read(c2); state != Live {
		t.Errorf("resumed after its hub closed: %v, want live (taken over)", state)
	}
}

// TestKeepLoggedTouchesOnlyWhatThisHubProduces: a quiet standalone stream produced here is
// kept in the log (Touch) once its client holds an event id of it; a copy followed from
// another hub, or a stream not yet logged, is not touched from here.
func TestKeepLoggedTouchesOnlyWhatThisHubProduces(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	copied, _, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	copied.KeepLogged()
	own, c, err := openSession(t, h, "t").OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	own.KeepLogged() // no event id written yet: nothing logged
	c.MarkResumable()
	own.KeepLogged()
	log.mu.Lock()
	touches := slices.Clone(log.touches)
	log.mu.Unlock()
	if diff := cmp.Diff([]string{"t/" + own.ID()}, touches); diff != "" {
		t.Errorf("touches (-want +got):\n%s", diff)
	}
}

package hub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testclock"
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

	got := h.TakeOver(context.Background(), producer, time.Minute)
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
	if got := h.TakeOver(context.Background(), producer, time.Minute); len(got) != 0 {
		t.Errorf("TakeOver took over %v, want nothing: another hub claimed it", got)
	}
	h.Extend("s", standaloneID, []Event{ev(2, notice(2))}, false)
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("following the other hub: %v, %v", got, state)
	}
	// That hub stops too: the copy, which follows it now, is taken over here.
	if got := h.TakeOver(context.Background(), "other", time.Minute); !slices.Equal(got, []string{"s"}) {
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
	h.TakeOver(context.Background(), producer, time.Minute)
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
	st, err := openSession(t, h, "s").Adopt(context.Background(), followed, producer)
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
	if _, err := openSession(t, newTestHub(t, &Options{Tag: "third", Log: log}), "s").Adopt(context.Background(), followed, producer); err == nil {
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

// TestFollowedStandaloneStreamKeepsItsLogAlive: a quiet standalone stream is kept in the log
// (Touch) wherever its client reads it: on the hub producing it, once its client holds an
// event id of it, and on a hub following it from another, whose client would otherwise find
// it expired when it must take it over. A copy no longer followed (ended, or dropped) is not
// touched.
func TestFollowedStandaloneStreamKeepsItsLogAlive(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	log.seed("e", followed, []int64{1}, []Event{ev(1, result(1))}, true)
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	copied, _, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	copied.KeepLogged()
	ended, _, err := openSession(t, h, "e").Resume(context.Background(), followed+".0")
	if err != nil {
		t.Fatal(err)
	}
	ended.KeepLogged()
	own, c, err := openSession(t, h, "t").OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	own.KeepLogged() // no event id written yet: nothing logged
	c.MarkResumable()
	own.KeepLogged()
	h.Lookup("s").DropStandalone("other_1")
	copied.KeepLogged()
	log.mu.Lock()
	touches := slices.Clone(log.touches)
	log.mu.Unlock()
	if diff := cmp.Diff([]string{"s/" + standaloneID, "t/" + own.ID()}, touches); diff != "" {
		t.Errorf("touches (-want +got):\n%s", diff)
	}
}

// TestTakeOverRacingAResumeKeepsTheResumedStream: TakeOver picks a copy of the standalone
// stream followed here; before it installs it, the client reconnects, and its resume takes
// the stream over itself (the producer stopped) with a new copy. The copy TakeOver picked is
// not installed over the resumed one: the client's new connection stays, nothing ends the
// stream in the log, and the messages kept on the old copy go on the new one.
func TestTakeOverRacingAResumeKeepsTheResumedStream(t *testing.T) {
	ctx := context.Background()
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	picked, old, err := s.Resume(ctx, standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	h.Keep("s", notice(2)) // never logged by the producer, which stops
	p.mu.Lock()
	p.running[producer] = false
	p.mu.Unlock()

	resumed, c, err := s.Resume(ctx, standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	if s.takeOverFollowed(ctx, picked, producer) {
		t.Errorf("TakeOver installed the copy it picked over the one the resume took over")
	}
	if s.Standalone() != resumed {
		t.Errorf("the session's standalone stream is not the resumed one")
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("the resumed connection: %v, %v; want the kept message, live", got, state)
	}
	if _, state := read(old); state != Dropped {
		t.Errorf("the replaced copy's connection: %v, want dropped", state)
	}
	if err := h.Deliver("s", "", notice(3)); err != nil {
		t.Fatalf("a message after the takeover: %v", err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("after a new message: %v, %v", got, state)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice", "3 notice"}, log.contents("s", standaloneID)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
}

// TestStaleResumeOfAReplacedStandaloneStreamEnds: the client opened another standalone
// stream elsewhere; a late resume of the old one, whose producer stopped, is not taken over
// (the log refuses the claim): it ends after its events, or is unknown when none are left,
// rather than fail as if the log were out of reach.
func TestStaleResumeOfAReplacedStandaloneStreamEnds(t *testing.T) {
	ctx := context.Background()
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	// The new stream is named already; the old one's end is not written yet.
	log.mu.Lock()
	log.current["s"] = "other_1"
	log.mu.Unlock()
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: (&producers{}).producing})
	s := openSession(t, h, "s")
	_, c, err := s.Resume(ctx, standaloneID+".0")
	if err != nil {
		t.Fatalf("a resume before the old stream's last event: %v", err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Complete {
		t.Errorf("a resume before the old stream's last event: %v, %v; want its event, then its end", got, state)
	}
	if _, _, err := s.Resume(ctx, standaloneID+".1"); !errors.Is(err, ErrUnknownStream) {
		t.Errorf("a resume after its last event: %v, want ErrUnknownStream", err)
	}
	if s.Standalone() != nil || len(log.claimsOf()) != 0 {
		t.Errorf("the old stream was taken over: standalone %v, claims %v", s.Standalone(), log.claimsOf())
	}
}

// TestKeptMessageLoggedBeforeItCameIsNotRepeated: the producer's event for a message can
// reach this hub before the message itself (Keep): the message is not kept then, and not put
// on the stream a second time when the producer stops.
func TestKeptMessageLoggedBeforeItCameIsNotRepeated(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	log.Append("s", standaloneID, []Event{ev(2, notice(2))}, false)
	h.Extend("s", standaloneID, []Event{ev(2, notice(2))}, false)
	h.Keep("s", notice(2))
	h.Keep("s", notice(3))
	if got, _ := read(c); !slices.Equal(got, []string{"notice"}) {
		t.Fatalf("the followed stream: %v, want the logged event", got)
	}
	h.TakeOver(context.Background(), producer, time.Minute)
	events, state, _ := c.Next()
	if len(events) != 1 || !slices.Equal(events[0].Data, notice(3)) || state != Live {
		t.Errorf("after the takeover: %+v, %v; want the message never logged alone", events, state)
	}
}

// TestKeptMessagesAreBoundedByBytes: the messages kept for a followed standalone stream take
// no more than a stream's bytes (Limits.Bytes), the oldest going first, as well as no more
// than its messages.
func TestKeptMessagesAreBoundedByBytes(t *testing.T) {
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing, Limits: Limits{Messages: 256, Bytes: 1000}})
	st, _, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	big := func(n int) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d,"data":%q}}`, n, strings.Repeat("x", 300)))
	}
	for i := range 10 {
		h.Keep("s", big(i))
	}
	st.mu.Lock()
	var size int
	var kept [][]byte
	for _, k := range st.kept.msgs {
		size += len(k.data)
		kept = append(kept, k.data)
	}
	st.mu.Unlock()
	if size > 1000 || len(kept) == 0 || !slices.Equal(kept[len(kept)-1], big(9)) {
		t.Errorf("kept %d messages, %d bytes; want the newest, within 1000 bytes", len(kept), size)
	}
}

// TestSweepForgetsKeptMessages: a message kept longer than Hold is forgotten by the hub's
// sweep, not only when the next message comes.
func TestSweepForgetsKeptMessages(t *testing.T) {
	clock := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing, Now: clock.Now, Hold: time.Minute})
	st, _, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	h.Keep("s", notice(8))
	clock.Advance(time.Minute + time.Second)
	h.Sweep(clock.Now().Add(-time.Minute))
	st.mu.Lock()
	n := len(st.kept.msgs)
	st.mu.Unlock()
	if n != 0 {
		t.Errorf("%d messages kept past Hold after a sweep, want none", n)
	}
}

// slowClaims is a log whose claims take a while (on the synctest clock).
type slowClaims struct {
	*reqLog
	each time.Duration
}

func (l slowClaims) Claim(ctx context.Context, sessionID, streamID, from, to string) (string, error) {
	select {
	case <-time.After(l.each):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return l.reqLog.Claim(ctx, sessionID, streamID, from, to)
}

// TestTakeOverClaimsEachStreamInItsOwnTime: the standalone streams of a stopped producer are
// claimed one after another; each gets its own time, so that many sessions, or a slow log,
// do not make the later claims run out of it and drop their streams.
func TestTakeOverClaimsEachStreamInItsOwnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newReqLog()
		p := &producers{running: map[string]bool{producer: true}}
		h := newTestHub(t, &Options{Tag: "here", Log: slowClaims{log, 4 * time.Second}, Producing: p.producing})
		sessions := []string{"s1", "s2", "s3", "s4"}
		for _, id := range sessions {
			log.seedStandalone(id, ev(1, notice(1)))
			if _, _, err := openSession(t, h, id).Resume(context.Background(), standaloneID+".1"); err != nil {
				t.Fatal(err)
			}
		}
		got := h.TakeOver(context.Background(), producer, 10*time.Second)
		slices.Sort(got)
		if !slices.Equal(got, sessions) {
			t.Errorf("TakeOver took over %v, want %v", got, sessions)
		}
	})
}

// TestAbandonAnswersWhatAStreamAwaits: a hub that cannot go on with a stream another stopped
// producing (a held call it could not take over) ends it in the log: the request it was to
// run gets the answer given, every other request the stream awaits gets ErrProducerStopped,
// after the last event, and the stream's end follows; a copy followed here ends with them. A
// log that no longer holds the stream gets the answer as its first event; one that ended is
// left alone.
func TestAbandonAnswersWhatAStreamAwaits(t *testing.T) {
	ctx := context.Background()
	notRun := protocol.Errorf(protocol.CodeShuttingDown, "it did not run")
	log := newReqLog()
	log.seed("s", followed, []int64{1, 2, 3}, []Event{ev(1, notice(1)), ev(2, result(1))}, false)
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	_, c, err := s.Resume(ctx, followed+".2")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Abandon(ctx, followed, &protocol.Response{ID: protocol.IntID(3), Error: notRun}); err != nil {
		t.Fatal(err)
	}
	want := []string{"1 notice", "2 result 1", "3 error 2 -32010", "4 error 3 -32009 (not ErrProducerStopped)", "end"}
	got := log.contents("s", followed)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
	events, state, _ := c.Next()
	if len(events) != 2 || state != Complete {
		t.Fatalf("the copy followed here: %d events, %v; want the two answers, complete", len(events), state)
	}
	for i, want := range []string{ErrProducerStopped.Message, notRun.Message} {
		if msg, _ := protocol.Decode(events[i].Data); msg.(*protocol.Response).Error.Message != want {
			t.Errorf("answer %d: %s, want the message %q", i, events[i].Data, want)
		}
	}
	// Done again (another hub, or a retry): nothing more.
	if err := s.Abandon(ctx, followed, &protocol.Response{ID: protocol.IntID(3), Error: notRun}); err != nil || !slices.Equal(log.contents("s", followed), got) {
		t.Errorf("Abandon of an ended stream: %v, the log holds %v", err, log.contents("s", followed))
	}

	// Its log expired: the answer is its first event.
	if err := s.Abandon(ctx, "prod_9", &protocol.Response{ID: protocol.IntID(5), Error: notRun}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1 error 5 -32009 (not ErrProducerStopped)", "end"}, log.contents("s", "prod_9")); diff != "" {
		t.Errorf("the expired stream's log (-want +got):\n%s", diff)
	}
	if r, _ := log.Replay(ctx, "s", "prod_9", 0); r == nil || len(r.Events) != 1 || !strings.Contains(string(r.Events[0].Data), notRun.Message) {
		t.Errorf("the expired stream's answer: %+v, want the one given", r)
	}
}

// queuedLog is a log that writes Append in the background, as the Redis log does: an append
// is held back until flush; AppendWait writes what was queued, then its own, at once, or
// fails while failing is set.
type queuedLog struct {
	*reqLog
	mu sync.Mutex
	// pending are the appends not written yet, in order; failing fails AppendWait. Guarded
	// by mu.
	pending []func()
	failing bool
}

var _ DurableLog = (*queuedLog)(nil)

func (l *queuedLog) Append(sessionID, streamID string, events []Event, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = append(l.pending, func() { l.reqLog.Append(sessionID, streamID, events, complete) })
}

func (l *queuedLog) AppendWait(_ context.Context, sessionID, streamID string, events []Event, complete bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing {
		return errors.New("the log is out of reach")
	}
	for _, write := range l.pending {
		write()
	}
	l.pending = nil
	l.reqLog.Append(sessionID, streamID, events, complete)
	return nil
}

// setFailing makes AppendWait fail (on) or write.
func (l *queuedLog) setFailing(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = on
}

// TestAbandonReturnsOnceTheLogHoldsTheEnd: Abandon queued the stream's end and returned before
// the log held it; its caller then let the held call's record go, and a replica that read the
// log after that found the stream neither held nor ended, and ended it with "it may have run
// in part". Abandon returns once the log holds the answers and the end; when they cannot be
// written it fails (ErrLogUnavailable), and the copy followed here stays open.
func TestAbandonReturnsOnceTheLogHoldsTheEnd(t *testing.T) {
	ctx := context.Background()
	notRun := protocol.Errorf(protocol.CodeShuttingDown, "it did not run")
	log := &queuedLog{reqLog: newReqLog()}
	log.seed("s", followed, []int64{1, 2}, []Event{ev(1, notice(1))}, false)
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	_, c, err := s.Resume(ctx, followed+".1")
	if err != nil {
		t.Fatal(err)
	}

	log.setFailing(true)
	if err := s.Abandon(ctx, followed, &protocol.Response{ID: protocol.IntID(2), Error: notRun}); !errors.Is(err, ErrLogUnavailable) {
		t.Errorf("Abandon while the log cannot be written: %v, want ErrLogUnavailable", err)
	}
	if events, state, _ := c.Next(); len(events) != 0 || state != Live {
		t.Errorf("the copy followed here after a failed Abandon: %d events, %v; want it open", len(events), state)
	}

	log.setFailing(false)
	if err := s.Abandon(ctx, followed, &protocol.Response{ID: protocol.IntID(2), Error: notRun}); err != nil {
		t.Fatal(err)
	}
	want := []string{"1 notice", "2 error 1 -32010", "3 error 2 -32009 (not ErrProducerStopped)", "end"}
	if diff := cmp.Diff(want, log.contents("s", followed)); diff != "" {
		t.Errorf("the log once Abandon returned (-want +got):\n%s", diff)
	}
	if events, state, _ := c.Next(); len(events) != 2 || state != Complete {
		t.Errorf("the copy followed here: %d events, %v; want the two answers, complete", len(events), state)
	}
}

// TestTakeOverRacingAResumeThatFollowsProducesTheStream: TakeOver claims a standalone stream
// (every replica following it now names this hub its producer), but a resume meanwhile
// replaced the copy it picked with one of its own that follows the stopped producer (whether
// that one ran could not be learnt, so it is taken to run). The resumed copy is taken over
// here: the claim is this hub's, and nobody else would produce the stream.
func TestTakeOverRacingAResumeThatFollowsProducesTheStream(t *testing.T) {
	ctx := context.Background()
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	picked, _, err := s.Resume(ctx, standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	h.Keep("s", notice(2)) // never logged by the producer, which stops
	// The client reconnects; the producer is still taken to run (its end is not known yet).
	resumed, c, err := s.Resume(ctx, standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	if !s.takeOverFollowed(ctx, picked, producer) {
		t.Errorf("TakeOver claimed the stream but reports that it does not produce it")
	}
	if s.Standalone() != resumed {
		t.Errorf("the session's standalone stream is not the resumed copy")
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("the resumed connection: %v, %v; want the kept message, live", got, state)
	}
	if err := h.Deliver("s", "", notice(3)); err != nil {
		t.Fatalf("a message after the takeover: %v", err)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("after a new message: %v, %v", got, state)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice", "3 notice"}, log.contents("s", standaloneID)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
}

// TestKeepRacingAResumeKeepsTheMessage: a message for a followed standalone stream comes
// (Keep) as the client resumes the stream anew (its copy here replaced by a new one, which
// takes over what was kept on the old): the message is kept on the new copy, not on the old
// one, which is dropped with it; it goes on the stream when the producer's end is known.
// The resume comes between Keep's pick of the copies and its keeping (a test hook).
func TestKeepRacingAResumeKeepsTheMessage(t *testing.T) {
	ctx := context.Background()
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	s := openSession(t, h, "s")
	if _, _, err := s.Resume(ctx, standaloneID+".1"); err != nil {
		t.Fatal(err)
	}
	var c *Cursor
	keepPicked = func() {
		keepPicked = nil
		var err error
		if _, c, err = s.Resume(ctx, standaloneID+".1"); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { keepPicked = nil })
	h.Keep("s", notice(2))
	if c == nil {
		t.Fatal("the resume did not come")
	}
	if got := h.TakeOver(ctx, producer, time.Minute); !slices.Equal(got, []string{"s"}) {
		t.Fatalf("TakeOver = %v, want [s]", got)
	}
	if got, state := read(c); !slices.Equal(got, []string{"notice"}) || state != Live {
		t.Errorf("the resumed connection after the takeover: %v, %v; want the kept message, live", got, state)
	}
	if diff := cmp.Diff([]string{"1 notice", "2 notice"}, log.contents("s", standaloneID)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
}

// TestIdenticalMessageAfterTheProducersOwnIsKept: the producer's own message for the
// session's standalone stream (a list_changed, byte for byte what any replica sends) comes
// here as its event, with no message of this hub's before it; a while later an upstream of
// this hub raises the same message for the stream. It is kept: the producer's event was not
// this message's, and had the producer stopped before it logged this one, the client would
// never learn of it. (An event is taken for a message's that came first only within a short
// window, the bus's latency.)
func TestIdenticalMessageAfterTheProducersOwnIsKept(t *testing.T) {
	clock := testclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	log := newReqLog()
	log.seedStandalone("s", ev(1, notice(1)))
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing, Now: clock.Now, Hold: time.Minute})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), standaloneID+".1")
	if err != nil {
		t.Fatal(err)
	}
	log.Append("s", standaloneID, []Event{ev(2, notice(5))}, false)
	h.Extend("s", standaloneID, []Event{ev(2, notice(5))}, false)
	read(c)
	clock.Advance(10 * time.Second)
	h.Keep("s", notice(5))
	h.TakeOver(context.Background(), producer, time.Minute)
	events, state, _ := c.Next()
	if len(events) != 1 || events[0].Seq != 3 || !slices.Equal(events[0].Data, notice(5)) || state != Live {
		t.Errorf("after the takeover: %+v, %v; want this hub's message, never logged, as event 3", events, state)
	}
}

// lostLog is a log that lost the first events of every stream.
type lostLog struct{ *reqLog }

func (lostLog) Replay(context.Context, string, string, uint64) (*Replayed, error) {
	return nil, ErrEventsLost
}

// TestAbandonOfAStreamWhoseFirstEventsAreLostEndsIt pins a limit: a stream whose first events
// the log lost gets its end alone from Abandon, not the answer given: where its events end is
// not known, so an answer would land in a gap. Its client's stream ends rather than wait.
func TestAbandonOfAStreamWhoseFirstEventsAreLostEndsIt(t *testing.T) {
	log := newReqLog()
	log.seed("s", followed, []int64{3}, []Event{ev(7, notice(7))}, false)
	h := newTestHub(t, &Options{Tag: "here", Log: lostLog{log}})
	notRun := protocol.Errorf(protocol.CodeShuttingDown, "it did not run")
	if err := openSession(t, h, "s").Abandon(context.Background(), followed, &protocol.Response{ID: protocol.IntID(3), Error: notRun}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"7 notice", "end"}, log.contents("s", followed)); diff != "" {
		t.Errorf("the log holds (-want +got):\n%s", diff)
	}
}

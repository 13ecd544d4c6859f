package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// heldReplicaGateway is a replica on the test Redis (a key prefix of the test's own) with an
// admin API, so that it holds calls for operators and takes over those of stopped replicas;
// it has no upstream and serves no HTTP: the test drives it.
func heldReplicaGateway(t *testing.T) *Gateway {
	t.Helper()
	return heldReplicaGatewayWith(t, &Options{Logger: slog.New(slog.DiscardHandler)})
}

// heldReplicaGatewayWith is heldReplicaGateway with opts.
func heldReplicaGatewayWith(t *testing.T, opts *Options) *Gateway {
	t.Helper()
	addr := testredis.Addr(t)
	yaml := fmt.Sprintf(`session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
admin:
  listen: 127.0.0.1:0
  api_keys:
    - {name: ops, hash: %q}
upstreams: []
`+testKeysYAML, addr, testredis.Prefix(t, addr), auth.HashAPIKey("mfk_ops-key-of-the-takeover-tests"))
	cfg, err := config.Parse("t.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// heldOnDeadReplica records a session, and a call held on replica "dead" whose client reads
// its answer on stream dead_1 (request id 9); logged says whether the stream's start is in
// the event log (it expired otherwise). It returns the call.
func heldOnDeadReplica(t *testing.T, g *Gateway, logged bool) approval.HeldCall {
	t.Helper()
	ctx := context.Background()
	rec, err := g.store.Create(ctx, session.Record{ProtocolVersion: protocol.Version20251125})
	if err != nil {
		t.Fatal(err)
	}
	const stream = "dead_1"
	if logged {
		g.events.(hub.RequestLog).Start(rec.ID, stream, []protocol.ID{protocol.IntID(9)}, false)
		testwait.Until(t, 10*time.Second, "the stream's start to be logged", func() bool {
			r, err := g.events.Replay(ctx, rec.ID, stream, 0)
			return err == nil && r != nil
		})
	}
	now := time.Now()
	c := approval.HeldCall{ID: approval.NewID(), Replica: "dead", Session: "fp", Principal: "anonymous", Upstream: "alpha", Tool: "alpha__echo", Original: "echo",
		Rule: "echo-needs-approval", Held: now, Deadline: now.Add(time.Minute), SessionID: rec.ID, StreamID: stream, ClientID: json.RawMessage(`9`),
		Method: protocol.MethodCallTool, Params: json.RawMessage(`{"name":"alpha__echo","arguments":{"text":"x"}}`)}
	if err := g.held.Store.Hold(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// loggedAnswer waits until the event log holds an event of the held call's stream, and
// returns the first.
func loggedAnswer(t *testing.T, g *Gateway, c approval.HeldCall) (*protocol.Response, *hub.Replayed) {
	t.Helper()
	var r *hub.Replayed
	if !testwait.Within(10*time.Second, func() bool {
		var err error
		r, err = g.events.Replay(context.Background(), c.SessionID, c.StreamID, 0)
		return err == nil && r != nil && len(r.Events) > 0
	}) {
		t.Fatalf("no answer in the event log of the call's stream: %+v", r)
	}
	msg, err := protocol.Decode(r.Events[0].Data)
	resp, ok := msg.(*protocol.Response)
	if err != nil || !ok {
		t.Fatalf("the stream's first event: %s, want an answer", r.Events[0].Data)
	}
	return resp, r
}

// notRunAnswer checks that resp tells the held call's client that its call did not run: a
// tool result with isError (the refusal table for tools/call), not "it may have run in part".
func notRunAnswer(t *testing.T, resp *protocol.Response) {
	t.Helper()
	var result struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if resp.ID != protocol.IntID(9) || resp.Error != nil || json.Unmarshal(resp.Result, &result) != nil || !result.IsError || len(result.Content) != 1 ||
		!strings.Contains(result.Content[0].Text, "did not run") {
		t.Errorf("the held call's answer: %+v %s, want a tool error result saying that it did not run", resp.Error, resp.Result)
	}
}

// TestHeldCallWhoseStreamExpiredIsAnsweredThatItDidNotRun: a held call is taken over from a
// stopped replica, but its stream's log expired while it was held (Adopt finds nothing): its
// client, which may wait on the stream resumed on another replica, gets an answer all the
// same, that the call did not run, as the stream's first event, and the stream's end.
func TestHeldCallWhoseStreamExpiredIsAnsweredThatItDidNotRun(t *testing.T) {
	g := heldReplicaGateway(t)
	c := heldOnDeadReplica(t, g, false)
	g.held.takeOver(c)
	resp, r := loggedAnswer(t, g, c)
	notRunAnswer(t, resp)
	if len(r.Events) != 1 || !r.Complete {
		t.Errorf("the stream's log: %d events, complete %v; want the answer, then the end", len(r.Events), r.Complete)
	}
	if _, err := g.held.Store.Get(context.Background(), c.ID); err == nil {
		t.Errorf("the held call is still recorded after its takeover failed")
	}
}

// TestHeldCallThatCannotBeginIsAnsweredThatItDidNotRun: a held call taken over whose request
// cannot begin here (its id is in flight on this replica) is answered that it did not run,
// not that it "may have run in part".
func TestHeldCallThatCannotBeginIsAnsweredThatItDidNotRun(t *testing.T) {
	g := heldReplicaGateway(t)
	c := heldOnDeadReplica(t, g, true)
	rec, err := g.store.Get(context.Background(), c.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := g.hub.Open(rec.ID, rec.Profile)
	if err != nil {
		t.Fatal(err)
	}
	_, _, end, err := ls.Begin(protocol.IntID(9), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { end(); ls.RequestDone() }()
	g.held.takeOver(c)
	resp, r := loggedAnswer(t, g, c)
	notRunAnswer(t, resp)
	if len(r.Events) != 1 || !r.Complete {
		t.Errorf("the stream's log: %d events, complete %v; want the answer, then the end", len(r.Events), r.Complete)
	}
}

// TestHeldCallWhoseStreamAnotherReplicaTookIsLeftToIt: the stream of a held call taken over
// here was claimed by another replica first (it produces the stream now): nothing is written
// to its log here, neither a "did not run" answer nor an end, which would cut the other
// replica's stream short; the record goes.
func TestHeldCallWhoseStreamAnotherReplicaTookIsLeftToIt(t *testing.T) {
	g := heldReplicaGateway(t)
	c := heldOnDeadReplica(t, g, true)
	ctx := context.Background()
	if owner, err := g.events.(hub.TakeoverLog).Claim(ctx, c.SessionID, c.StreamID, "dead", "other"); err != nil || owner != "other" {
		t.Fatalf("claim by another replica: %q, %v", owner, err)
	}
	g.held.takeOver(c)
	// A marker after what takeOver may have written: once it is in the log, so is that.
	g.events.Append(c.SessionID, c.StreamID, []hub.Event{{Seq: 1, Data: []byte(`{"jsonrpc":"2.0","method":"notifications/progress"}`)}}, false)
	var r *hub.Replayed
	testwait.Until(t, 10*time.Second, "the marker to be logged", func() bool {
		var err error
		r, err = g.events.Replay(ctx, c.SessionID, c.StreamID, 0)
		return err == nil && r != nil && (len(r.Events) > 0 || r.Complete)
	})
	if len(r.Events) != 1 || !strings.Contains(string(r.Events[0].Data), "progress") || r.Complete {
		t.Errorf("the stream's log: %d events (first %s), complete %v; want the other replica's marker alone, not ended", len(r.Events), firstData(r), r.Complete)
	}
	if _, err := g.held.Store.Get(ctx, c.ID); err == nil {
		t.Errorf("the held call is still recorded")
	}
}

func firstData(r *hub.Replayed) string {
	if r == nil || len(r.Events) == 0 {
		return ""
	}
	return string(r.Events[0].Data)
}

// heldClockGateway is heldReplicaGateway on a clock the test moves, with the expiry pass run
// often (on the real clock) once started.
func heldClockGateway(t *testing.T) (*Gateway, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(time.Now())
	return heldReplicaGatewayWith(t, &Options{Logger: slog.New(slog.DiscardHandler), Now: clock.Now, ExpiryInterval: 10 * time.Millisecond}), clock
}

// resumeHeld resumes the held call's stream here, from its priming event, as its client does
// on a replica other than the one that held the call.
func resumeHeld(t *testing.T, g *Gateway, c approval.HeldCall) *hub.Cursor {
	t.Helper()
	ls, err := g.hub.Open(c.SessionID, "")
	if err != nil {
		t.Fatal(err)
	}
	_, cur, err := ls.Resume(context.Background(), c.StreamID+".0")
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// answeredOn waits until the cursor reads an answer, and returns it; it fails the test if the
// stream does not end after it.
func answeredOn(t *testing.T, cur *hub.Cursor) *protocol.Response {
	t.Helper()
	var got []hub.Event
	var state hub.State
	if !testwait.Within(10*time.Second, func() bool {
		events, s, _ := cur.Next()
		got, state = append(got, events...), s
		return s != hub.Live
	}) {
		t.Fatalf("the held call's stream is still open with %d events: its client waits with no end", len(got))
	}
	if len(got) != 1 || state != hub.Complete {
		t.Fatalf("the held call's stream: %d events, state %v; want its answer, then its end", len(got), state)
	}
	msg, err := protocol.Decode(got[0].Data)
	resp, ok := msg.(*protocol.Response)
	if err != nil || !ok {
		t.Fatalf("the stream's event: %s, want an answer", got[0].Data)
	}
	return resp
}

// TestFollowedHeldCallIsAnsweredOnceItsTimeIsPast: a client reads here the stream of a call
// held on a replica that stopped; no replica takes the call over (the store was out of reach
// for the replica that tried, until the call's time ran out). Once the call's deadline has
// passed by the store's grace, this replica, which keeps the stream open for the call, ends
// it with the call's answer, that it did not run: the client does not wait with no bound.
func TestFollowedHeldCallIsAnsweredOnceItsTimeIsPast(t *testing.T) {
	g, clock := heldClockGateway(t)
	c := heldOnDeadReplica(t, g, true)
	cur := resumeHeld(t, g, c)
	if events, state, _ := cur.Next(); len(events) != 0 || state != hub.Live {
		t.Fatalf("the resumed stream of a held call: %d events, %v; want it open for the call's answer", len(events), state)
	}
	g.Start()
	clock.Advance(time.Minute - time.Second)
	if events, state, _ := cur.Next(); len(events) != 0 || state != hub.Live {
		t.Fatalf("before the call's time is past: %d events, %v; want it open", len(events), state)
	}
	clock.Advance(approval.Grace + 2*time.Second)
	notRunAnswer(t, answeredOn(t, cur))
	resp, r := loggedAnswer(t, g, c)
	notRunAnswer(t, resp)
	if len(r.Events) != 1 || !r.Complete {
		t.Errorf("the stream's log: %d events, complete %v; want the answer, then the end", len(r.Events), r.Complete)
	}
}

// TestHeldCallAnsweredElsewhereEndsWithItsAnswer: a client reads here the stream of a call
// held on a replica that stopped. Another replica took the call over, could not run it, wrote
// its answer (that it did not run) and the stream's end to the stream's log, and let the
// call's record go, all before this replica learnt that the holder stopped, and before the
// live copy of that answer came here. Not knowing of a held call any more, this replica ended
// the stream with "it may have run in part" (CodeInterrupted) for a call that never ran; the
// stream ends with the answer the log holds.
func TestHeldCallAnsweredElsewhereEndsWithItsAnswer(t *testing.T) {
	g := heldReplicaGateway(t)
	ctx := context.Background()
	c := heldOnDeadReplica(t, g, true)
	cur := resumeHeld(t, g, c)
	// The other replica's takeover, as this one sees it: no live copy of its events comes
	// here (the gateway is not started: it follows no session on the bus).
	data, err := protocol.Encode(g.held.answerOf(ctx, c))
	if err != nil {
		t.Fatal(err)
	}
	g.events.Append(c.SessionID, c.StreamID, []hub.Event{{Seq: 1, Data: data}}, true)
	testwait.Until(t, 10*time.Second, "the other replica's answer to be logged", func() bool {
		r, err := g.events.Replay(ctx, c.SessionID, c.StreamID, 0)
		return err == nil && r != nil && r.Complete
	})
	if err := g.held.Store.Release(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	g.held.orphan("dead", false)
	notRunAnswer(t, answeredOn(t, cur))
}

// failingAll is a held-call store whose All fails while fail is set: the store is out of
// reach for the look-ups of a replica following held calls' streams.
type failingAll struct {
	approval.HeldCalls
	fail atomic.Bool
}

func (f *failingAll) All(ctx context.Context) ([]approval.HeldCall, error) {
	if f.fail.Load() {
		return nil, errors.New("the store is out of reach")
	}
	return f.HeldCalls.All(ctx)
}

// TestHeldCallStreamStaysOpenWhileTheHeldCallsCannotBeRead: a replica reading a stopped
// replica's stream cannot read the held calls (the store is out of reach): it does not know
// that the stream is a held call's, which a survivor may still run, so it keeps the stream
// open (as it does when it cannot learn whether a replica runs) rather than end it with
// "it may have run in part"; once the store answers it knows, and the call's stream gets its
// answer when its time is past. So when the client resumes the stream here, and so when the
// replica's end is learnt while the client reads it here.
func TestHeldCallStreamStaysOpenWhileTheHeldCallsCannotBeRead(t *testing.T) {
	for _, when := range []string{"resumed", "replica gone"} {
		t.Run(when, func(t *testing.T) {
			g, clock := heldClockGateway(t)
			c := heldOnDeadReplica(t, g, true)
			store := &failingAll{HeldCalls: g.held.Store}
			g.held.Store = store
			var cur *hub.Cursor
			if when == "resumed" {
				store.fail.Store(true)
				cur = resumeHeld(t, g, c)
			} else {
				cur = resumeHeld(t, g, c)
				store.fail.Store(true)
				g.held.orphan("dead", false)
			}
			if events, state, _ := cur.Next(); len(events) != 0 || state != hub.Live {
				t.Fatalf("the held call's stream while the held calls cannot be read: %d events, %v; want it open", len(events), state)
			}
			store.fail.Store(false)
			g.Start()
			clock.Advance(time.Minute + approval.Grace + 2*time.Second)
			notRunAnswer(t, answeredOn(t, cur))
		})
	}
}

// TestHeldCallTakenOverAtShutdownStaysForTheNextReplica: this replica shuts down while it
// takes a held call over (its hub refuses the session): the call stays recorded, held by this
// replica, for the replica that takes over from this one; its stream is left as it was.
func TestHeldCallTakenOverAtShutdownStaysForTheNextReplica(t *testing.T) {
	g := heldReplicaGateway(t)
	c := heldOnDeadReplica(t, g, true)
	g.hub.Close()
	g.held.takeOver(c)
	ctx := context.Background()
	got, err := g.held.Store.Get(ctx, c.ID)
	if err != nil || got.Replica != g.held.Replica {
		t.Fatalf("the held call after a takeover cut by shutdown: %+v, %v; want it recorded, held by this replica", got, err)
	}
	if r, err := g.events.Replay(ctx, c.SessionID, c.StreamID, 0); err != nil || r == nil || len(r.Events) != 0 || r.Complete {
		t.Errorf("the held call's stream: %+v, %v; want it as it was", r, err)
	}
}

// unreadableSessions is a session store whose Get fails: the store is out of reach for the
// reads of a replica taking a held call over.
type unreadableSessions struct{ session.Store }

func (unreadableSessions) Get(context.Context, string) (*session.Record, error) {
	return nil, errors.New("the store is out of reach")
}

// TestHeldCallWhoseSessionCannotBeReadIsAnsweredThatItDidNotRun: a held call is taken over,
// but its session's record cannot be read until the call's time is past: its client, which
// may wait on the stream resumed on another replica, is told all the same that it did not
// run, in the stream's log (without opening the session here).
func TestHeldCallWhoseSessionCannotBeReadIsAnsweredThatItDidNotRun(t *testing.T) {
	g, clock := heldClockGateway(t)
	c := heldOnDeadReplica(t, g, true)
	g.store = unreadableSessions{g.store}
	clock.Set(c.Deadline.Add(approval.Grace + time.Second)) // every try is the last
	g.held.takeOver(c)
	resp, r := loggedAnswer(t, g, c)
	notRunAnswer(t, resp)
	if len(r.Events) != 1 || !r.Complete {
		t.Errorf("the stream's log: %d events, complete %v; want the answer, then the end", len(r.Events), r.Complete)
	}
	if g.hub.Lookup(c.SessionID) != nil {
		t.Errorf("the session was opened here, with no record to say its group")
	}
}

// TestHeldCallWhoseStreamEndedIsNotSaidToBeTold: the stream of a held call taken over here
// had ended already (its client gets nothing more on it): the log says so, and not that the
// client was told that the call did not run, which nothing did.
func TestHeldCallWhoseStreamEndedIsNotSaidToBeTold(t *testing.T) {
	var logs syncBuffer
	g := heldReplicaGatewayWith(t, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	c := heldOnDeadReplica(t, g, true)
	ctx := context.Background()
	g.events.Append(c.SessionID, c.StreamID, nil, true)
	testwait.Until(t, 10*time.Second, "the stream's end to be logged", func() bool {
		r, err := g.events.Replay(ctx, c.SessionID, c.StreamID, 0)
		return err == nil && r != nil && r.Complete
	})
	g.held.takeOver(c)
	if out := logs.String(); strings.Contains(out, "did not run") || !strings.Contains(out, "its stream ended") {
		t.Errorf("the log of the takeover of a held call whose stream ended:\n%s\nwant it to say that the stream ended, not that its client was told", out)
	}
	if _, err := g.held.Store.Get(ctx, c.ID); err == nil {
		t.Errorf("the held call is still recorded")
	}
}

// syncBuffer is a bytes.Buffer safe for the gateway's goroutines to log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStandaloneStreamKeptOpenWhileTheHeldCallsCannotBeReadIsTakenOver: a client resumes
// here the standalone stream of a stopped replica while the held calls cannot be read: kept
// open (it might have been a held call's), it is taken over once they can be read, as the
// session's standalone stream always is, not ended.
func TestStandaloneStreamKeptOpenWhileTheHeldCallsCannotBeReadIsTakenOver(t *testing.T) {
	g, _ := heldClockGateway(t)
	ctx := context.Background()
	rec, err := g.store.Create(ctx, session.Record{ProtocolVersion: protocol.Version20251125})
	if err != nil {
		t.Fatal(err)
	}
	const stream = "dead_2"
	g.events.(hub.RequestLog).Start(rec.ID, stream, nil, true)
	g.events.Append(rec.ID, stream, []hub.Event{{Seq: 1, Data: []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)}}, false)
	testwait.Until(t, 10*time.Second, "the stream to be logged", func() bool {
		r, err := g.events.Replay(ctx, rec.ID, stream, 0)
		return err == nil && r != nil && len(r.Events) == 1
	})
	store := &failingAll{HeldCalls: g.held.Store}
	g.held.Store = store
	store.fail.Store(true)
	ls, err := g.hub.Open(rec.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	st, cur, err := ls.Resume(ctx, stream+".1")
	if err != nil {
		t.Fatal(err)
	}
	if _, state, _ := cur.Next(); state != hub.Live {
		t.Fatalf("the standalone stream while the held calls cannot be read: %v, want open", state)
	}
	store.fail.Store(false)
	g.Start()
	testwait.Until(t, 10*time.Second, "the standalone stream to be taken over here", func() bool {
		return ls.Standalone() == st && !st.FromLog()
	})
	if _, state, _ := cur.Next(); state != hub.Live {
		t.Errorf("the standalone stream taken over: %v, want open", state)
	}
}

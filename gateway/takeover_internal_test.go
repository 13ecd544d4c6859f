package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/hold"
	"github.com/manifold-mcp/manifold/hub"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
)

// heldReplicaGateway is a replica on the test Redis (a key prefix of the test's own) with an
// admin API, so that it holds calls for operators and takes over those of stopped replicas;
// it has no upstream and serves no HTTP: the test drives it.
func heldReplicaGateway(t *testing.T) *Gateway {
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
`, addr, testredis.Prefix(t, addr), auth.HashAPIKey("mfk_ops-key-of-the-takeover-tests"))
	cfg, err := config.Parse("t.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// heldOnDeadReplica records a session, and a call held on replica "dead" whose client reads
// its answer on stream dead_1 (request id 9); logged says whether the stream's start is in
// the event log (it expired otherwise). It returns the call.
func heldOnDeadReplica(t *testing.T, g *Gateway, logged bool) hold.Call {
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
	c := hold.Call{ID: hold.NewID(), Replica: "dead", Session: "fp", Principal: "anonymous", Upstream: "alpha", Tool: "alpha__echo", Original: "echo",
		Rule: "echo-needs-approval", Held: now, Deadline: now.Add(time.Minute), SessionID: rec.ID, StreamID: stream, ClientID: json.RawMessage(`9`),
		Method: protocol.MethodCallTool, Params: json.RawMessage(`{"name":"alpha__echo","arguments":{"text":"x"}}`)}
	if err := g.held.store.Hold(ctx, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// loggedAnswer waits until the event log holds an event of the held call's stream, and
// returns the first.
func loggedAnswer(t *testing.T, g *Gateway, c hold.Call) (*protocol.Response, *hub.Replayed) {
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
	if _, err := g.held.store.Get(context.Background(), c.ID); err == nil {
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

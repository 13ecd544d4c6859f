package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Resumable streams (2025-11-25 transport, mcp-notes §4.5): a client whose SSE connection
// drops reconnects with GET and Last-Event-ID and gets what it missed on that stream, in
// order, once each; its call went on meanwhile (design decision 10).

// TestResumeAfterADroppedPOSTStream: the connection of a call's stream drops while the call
// waits for the client (sampling); the client answers on a new POST, and resumes: the
// elicitation the call sent while nobody listened, then the result, arrive on the resumed
// stream, and nothing of the first connection comes again.
func TestResumeAfterADroppedPOSTStream(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	resumeAfterDroppedPOSTStream(t, tg)
}

// resumeAfterDroppedPOSTStream is the flow of TestResumeAfterADroppedPOSTStream on tg, whose
// upstream r is of the reverse flavor.
func resumeAfterDroppedPOSTStream(t *testing.T, tg *testGateway) {
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{"sampling":{},"elicitation":{}}`)
	h := map[string]string{"Mcp-Session-Id": sid}

	conn, drop := context.WithCancel(t.Context())
	resp := c.post(conn, sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"r__ask","arguments":{"text":"q"}}}`)
	first := readSSE(t, resp.Body)
	sampling := first.next(t, "the sampling request")
	if sampling.Method != "sampling/createMessage" || sampling.EventID == "" {
		t.Fatalf("first message: %+v, want sampling/createMessage with an event id", sampling)
	}
	drop() // the connection is gone; the call is not

	answer := `{"jsonrpc":"2.0","id":` + string(sampling.ID) + `,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"sampled"}}}`
	if r := c.do(http.MethodPost, answer, h); r.status != http.StatusAccepted {
		t.Fatalf("the sampling answer: %d %s", r.status, r.body)
	}

	_, resumed := c.resume(t.Context(), sid, sampling.EventID)
	elicit := resumed.next(t, "the elicitation sent while the client was away")
	if elicit.Method != "elicitation/create" {
		t.Fatalf("resumed stream began with %+v, want elicitation/create (the sampling request must not come again)", elicit)
	}
	answer = `{"jsonrpc":"2.0","id":` + string(elicit.ID) + `,"result":{"action":"accept","content":{"answer":"yes"}}}`
	if r := c.do(http.MethodPost, answer, h); r.status != http.StatusAccepted {
		t.Fatalf("the elicitation answer: %d %s", r.status, r.body)
	}
	rest, err := resumed.rest(t)
	if err != nil || len(rest) != 1 || !rest[0].isResponse() || string(rest[0].ID) != "7" {
		t.Fatalf("the rest of the resumed stream: %+v, %v; want the call's result alone", rest, err)
	}
	if !strings.Contains(string(rest[0].Result), "sampled=sampled;elicited=yes") {
		t.Errorf("result %s", rest[0].Result)
	}
}

// TestResumeAfterADroppedGETStream: updates for a subscribed resource that come while the
// standalone stream's connection is down reach the client when it resumes, after the last
// event it had, and only those.
func TestResumeAfterADroppedGETStream(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("sem", "semantics", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"sem+file:///watched.txt"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	touch := func(id int) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":` + strings.Repeat("1", id) + `,"method":"tools/call","params":{"name":"sem__touch"}}`
		if r := c.do(http.MethodPost, body, h); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("touch: %d %s", r.status, r.body)
		}
	}

	conn, drop := context.WithCancel(t.Context())
	_, stream := c.openStandalone(conn, sid)
	touch(2) // the update goes on the stream before the touch's answer
	updated := stream.next(t, "the first update")
	if updated.Method != "notifications/resources/updated" || updated.EventID == "" {
		t.Fatalf("first event: %+v", updated)
	}
	drop()
	// While the connection is down. A second GET without Last-Event-ID would start afresh;
	// the client resumes instead.
	touch(3)
	touch(4)
	_, resumed := c.resume(t.Context(), sid, updated.EventID)
	for i := range 2 {
		m := resumed.next(t, "an update missed while away")
		if m.Method != "notifications/resources/updated" || m.EventID == updated.EventID {
			t.Fatalf("missed update %d: %+v", i, m)
		}
	}
	// And then live events.
	touch(5)
	if m := resumed.next(t, "a live update after the resume"); m.Method != "notifications/resources/updated" {
		t.Fatalf("live event: %+v", m)
	}
}

// TestForeignLastEventIDIsRefused: an event id of another session's stream (or of none) does
// not resume anything: 400, and nothing of the other session is replayed.
func TestForeignLastEventIDIsRefused(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	victim := c.initializeAs("2025-11-25", `{}`)
	attacker := c.initializeAs("2025-11-25", `{}`)

	resp := c.post(t.Context(), victim, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__progress","_meta":{"progressToken":"secret"}}}`)
	progress := readSSE(t, resp.Body).next(t, "the victim's progress")
	if progress.EventID == "" {
		t.Fatal("the victim's event has no id")
	}
	for _, id := range []string{progress.EventID, "nothing", strings.SplitN(progress.EventID, ".", 2)[0] + ".0"} {
		if r := c.refusedResume(attacker, id); r.status != http.StatusBadRequest || !strings.Contains(r.message, "names no stream of this session") {
			t.Errorf("GET with Last-Event-ID %q of another session: %+v, want 400 naming the problem", id, r)
		}
	}
}

// TestShortCallIsAnsweredAsJSON: a call that ends before stream_after with no message on
// the way gets plain JSON, which is not resumable; a longer one switches to SSE with a
// priming event (an id and a retry field) first.
func TestShortCallIsAnsweredAsJSON(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nstream_after: 1ms\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("ping: %d %q, want JSON", r.status, r.header.Get("Content-Type"))
	}
	// "hold" runs until cancelled: past stream_after, so its answer becomes a stream.
	resp := c.post(t.Context(), sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"r__hold"}}`)
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("a long call's answer: %q, want an SSE stream", resp.Header.Get("Content-Type"))
	}
	stream := readSSE(t, resp.Body)
	waitUntil(t, "the priming event", func() bool { return stream.lastID.Load() != nil })
	if id := *stream.lastID.Load(); !strings.HasSuffix(id, ".0") {
		t.Errorf("priming event id %q", id)
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %d", r.status)
	}
}

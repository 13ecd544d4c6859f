package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestResumeOfAStreamEvictedForTheBudgetIsRefused: a replica over stream_budget_bytes forgets
// a finished stream kept for its client before its retention ends; the client that resumes it
// is answered as for a stream kept past its retention: 400, naming no stream of the session.
func TestResumeOfAStreamEvictedForTheBudgetIsRefused(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nstream_budget_bytes: 1\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)

	conn, drop := context.WithCancel(t.Context())
	resp := c.post(conn, sid, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__progress","_meta":{"progressToken":"p"}}}`)
	progress := readSSE(t, resp.Body).next(t, "the first progress")
	if progress.EventID == "" {
		t.Fatal("the progress event has no id")
	}
	drop() // the client is away; the call goes on, finishes, and its stream is kept for it...
	// ...only as long as the budget allows: an open stream is never evicted, a finished one at
	// once past the budget.
	waitUntil(t, "the finished stream's eviction", func() bool { return tg.gw.HeldStreamBytes() == 0 })

	if r := c.refusedResume(sid, progress.EventID); r.status != http.StatusBadRequest || r.code != -32600 || !strings.Contains(r.message, "names no stream of this session") {
		t.Errorf("resume of the evicted stream: %+v, want 400 -32600 naming no stream of the session", r)
	}
}

// resumeRefusal is how a GET with Last-Event-ID was answered: its status and JSON-RPC error.
type resumeRefusal struct {
	status  int
	code    int
	message string
}

// refusedResume sends a GET with Last-Event-ID for session sid and reads the error it gets.
func (c rawClient) refusedResume(sid, lastEventID string) resumeRefusal {
	c.t.Helper()
	r := c.get(c.t.Context(), sid, lastEventID)
	var body struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	out := resumeRefusal{status: r.StatusCode}
	if body.Error != nil {
		out.code, out.message = body.Error.Code, body.Error.Message
	}
	return out
}

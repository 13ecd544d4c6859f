package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestPostAnsweredAsAStreamAfterClose: a POST whose answer turns out to be an SSE stream
// just as the connection closes does not start its stream goroutine after Close waited for
// them (a WaitGroup's Add after its Wait: -race reports it, and the goroutine outlives
// Close): the POST fails, saying the connection closed.
func TestPostAnsweredAsAStreamAfterClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	}))
	defer srv.Close()
	c := newStreamableConn("closing", httpOptions{URL: srv.URL, Client: srv.Client(), MaxMessageBytes: 1 << 20}, slog.New(slog.DiscardHandler))
	beforeStreamStart = func(c *streamableConn) { _ = c.Close() } // Close wins the race
	t.Cleanup(func() { beforeStreamStart = nil })
	answer, err := c.post(context.Background(), &protocol.Request{ID: protocol.IntID(1), Method: "tools/list"})
	if err == nil || answer != nil {
		t.Fatalf("a POST whose stream would start after Close: %v, %v; want an error", answer, err)
	}
}

package gateway

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// bubbleGateway serves a gateway without upstreams over in-memory connections, inside the
// synctest bubble of t; it returns the gateway and an HTTP client whose connections reach it.
func bubbleGateway(t *testing.T) (*Gateway, *http.Client) {
	cfg, err := config.Parse("t.yaml", []byte("upstreams: []\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	ln := newPipeListener()
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	transport := &http.Transport{DialContext: ln.DialContext}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		g.Drain()
		_ = srv.Close()
		g.Close()
	})
	return g, &http.Client{Transport: transport}
}

// testPost sends one JSON-RPC message and returns the answer and its body, read whole.
func (g *Gateway) testPost(t *testing.T, client *http.Client, sid, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set(headerSessionID, sid)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", body, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", body, err)
	}
	return resp, string(data)
}

// TestStandaloneStreamStaysOpenAfterAnEvent: a standalone GET stream that carried an event
// must survive the keep-alives that follow it, each write with a deadline of its own (an
// event's deadline once cut the first keep-alive after it).
func TestStandaloneStreamStaysOpenAfterAnEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, client := bubbleGateway(t)
		resp, _ := g.testPost(t, client, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		sid := resp.Header.Get(headerSessionID)

		get, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/mcp", nil)
		get.Header.Set("Accept", "text/event-stream")
		get.Header.Set(headerSessionID, sid)
		stream, err := client.Do(get)
		if err != nil || stream.StatusCode != http.StatusOK {
			t.Fatalf("GET: %v %v", stream, err)
		}
		defer stream.Body.Close()
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stream.Body)
			for sc.Scan() {
				if line := sc.Text(); line != "" {
					lines <- line
				}
			}
		}()

		// The priming event gives the client an id to resume with (2025-11-25).
		for _, want := range []string{"id: ", "retry: ", "data:"} {
			if line := <-lines; !strings.HasPrefix(line, want) {
				t.Fatalf("stream line %q, want %q…", line, want)
			}
		}
		g.router.notifySessions(&protocol.Notification{Method: protocol.NotificationToolsChanged})
		for _, want := range []string{"id: ", "event: message", "data: "} {
			if line := <-lines; !strings.HasPrefix(line, want) {
				t.Fatalf("stream line %q, want %q…", line, want)
			}
		}
		// Keep-alives come every 25 s; the event's write deadline lies 10 s behind it.
		start := time.Now()
		for range 4 {
			line, ok := <-lines
			if !ok {
				t.Fatalf("the stream ended %s after an event; it must stay open", time.Since(start))
			}
			if line != ": keep-alive" {
				t.Fatalf("stream line %q, want a keep-alive", line)
			}
		}
	})
}

// TestKeepAlivesTouchTheLogWithinItsRetention: the keep-alives of a connection reading a
// quiet standalone stream touch its log (Stream.KeepLogged); they come more than twice within
// the least retention the log is given (stream_retention below it is raised to it), so a
// stream read anywhere never expires while it is read.
func TestKeepAlivesTouchTheLogWithinItsRetention(t *testing.T) {
	if 2*keepAliveInterval >= backend.MinLogRetention {
		t.Errorf("keep-alives every %s touch a log kept %s at least: one lost touch lets it expire", keepAliveInterval, backend.MinLogRetention)
	}
}

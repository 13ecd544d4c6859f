package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

// Regression tests for a client that locked everyone else out: it opened sessions and their
// GET streams and never read them, and the gateway, full, answered every new client 503 until
// it let go.

// unreadStream opens the standalone stream of session sid with client and never reads it;
// the stream is closed when the test ends.
func unreadStream(t *testing.T, client *http.Client, url, sid string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET stream: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	return resp
}

// streamEnds reports whether the body of a stream ends (the gateway closed it) within
// waitBound; whatever it carried before is read and dropped.
func streamEnds(resp *http.Response) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	select {
	case <-done:
		return true
	case <-time.After(waitBound):
		resp.Body.Close()
		<-done
		return false
	}
}

// pingAs sends a ping in session sid with client and returns the status.
func pingAs(t *testing.T, client *http.Client, url, sid string) int {
	t.Helper()
	req := boundedRequest(t, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// hostileSession is a session of the hostile client: its id, and its stream, never read.
type hostileSession struct {
	id     string
	stream *http.Response
}

// flood has the hostile client try tries sessions from each of addrs, opening the stream of
// each it gets and never reading it; it returns the sessions it got, oldest first. The clock
// moves a second after each, so that their ages differ.
func flood(t *testing.T, clock *testclock.Clock, url string, tries int, addrs ...string) []hostileSession {
	t.Helper()
	var got []hostileSession
	for _, addr := range addrs {
		client := clientFrom(t, addr)
		for range tries {
			status, sid := initializeFrom(t, client, url, "")
			switch status {
			case http.StatusOK:
				got = append(got, hostileSession{id: sid, stream: unreadStream(t, client, url, sid)})
				clock.Advance(time.Second)
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			default:
				t.Fatalf("initialize from %s: %d", addr, status)
			}
		}
	}
	return got
}

// TestUnreadStreamsDoNotLockOthersOut: a client opened sessions and their GET streams from
// two addresses and never read them; each address could hold 512 sessions, the streams kept
// them from expiring, and with max_sessions reached every other client got 503 for as long as
// it liked. An address holds at most an eighth of max_sessions, so that a few addresses
// cannot fill the gateway: another client is served at once. Should more addresses fill it,
// an initialize evicts the session whose client has sent no request for longest, once that
// is session_evict_idle ago (an open stream is no request): its stream closes, its id is
// unknown from then on, and a session in use stays.
func TestUnreadStreamsDoNotLockOthersOut(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, "listen: 127.0.0.1:0\nmax_sessions: 16\nupstreams: []\n", &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond})
	t.Cleanup(tg.close)

	// Thousands of tries from three addresses: 2 sessions each (16/8).
	hostile := flood(t, clock, tg.url, 400, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	if len(hostile) != 6 {
		t.Fatalf("the hostile client holds %d sessions from 3 addresses, want 6 (2 each)", len(hostile))
	}
	honest := clientFrom(t, "127.0.0.10")
	status, inUse := initializeFrom(t, honest, tg.url, "")
	if status != http.StatusOK {
		t.Fatalf("a client of another address, while the hostile one holds its sessions: %d, want 200 at once", status)
	}

	// From five more addresses it fills the gateway: 16 sessions, one of them in use.
	hostile = append(hostile, flood(t, clock, tg.url, 10, "127.0.0.5", "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9")...)
	if len(hostile) != 15 {
		t.Fatalf("the hostile client holds %d sessions, want 15 (the gateway full)", len(hostile))
	}
	newcomer := clientFrom(t, "127.0.0.11")
	if status, _ := initializeFrom(t, newcomer, tg.url, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("initialize in a full gateway whose sessions all made requests just now: %d, want 503", status)
	}

	// Five minutes after the last, the session in use makes a request; the hostile ones only
	// hold their streams (the gateway marks them in use meanwhile, which keeps them from
	// expiring).
	clock.Advance(5 * time.Minute)
	if status := pingAs(t, honest, tg.url, inUse); status != http.StatusOK {
		t.Fatalf("ping in the session in use: %d", status)
	}
	for i, h := range hostile {
		status, _ := initializeFrom(t, newcomer, tg.url, "")
		if status != http.StatusOK {
			t.Fatalf("initialize %d in a full gateway with %d sessions idle for at least 5 minutes: %d, want 200", i+1, len(hostile)-i, status)
		}
		if !streamEnds(h.stream) {
			t.Fatalf("the stream of the session idle longest (%d) stayed open after it was evicted", i+1)
		}
		if status := pingAs(t, clientFrom(t, "127.0.0.2"), tg.url, h.id); status != http.StatusNotFound {
			t.Errorf("a request in an evicted session: %d, want 404", status)
		}
		newcomer = clientFrom(t, fmt.Sprintf("127.0.1.%d", i+1)) // a fresh address for the next
	}
	if status := pingAs(t, honest, tg.url, inUse); status != http.StatusOK {
		t.Errorf("ping in the session in use, after the evictions: %d, want 200", status)
	}
	// Every session is now one that made a request within the threshold: none is evicted.
	if status, _ := initializeFrom(t, newcomer, tg.url, ""); status != http.StatusServiceUnavailable {
		t.Errorf("initialize in a gateway full of sessions used within 5 minutes: %d, want 503", status)
	}
}

// TestEvictedSessionEndsOnTheReplicaHoldingIt: with sessions in Redis, the session evicted
// by an initialize on one replica has its stream on another: that one closes it, and the
// session is unknown on both.
func TestEvictedSessionEndsOnTheReplicaHoldingIt(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	addr := testredis.Addr(t)
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
max_sessions: 4
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
upstreams: []
`+keysYAML, addr, testredis.Prefix(t, addr))
	opts := func() *gateway.Options {
		return &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond}
	}
	a, b := startGateway(t, yaml, opts()), startGateway(t, yaml, opts())
	t.Cleanup(a.close)
	t.Cleanup(b.close)

	// The hostile session lives on A, with its stream; three more fill the gateway on B.
	hostile := flood(t, clock, a.url, 3, "127.0.0.2")
	if len(hostile) != 1 {
		t.Fatalf("the hostile client holds %d sessions from one address, want 1 (4/8, at least 1)", len(hostile))
	}
	clock.Advance(time.Minute)
	var used []string
	for _, ip := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		status, sid := initializeFrom(t, clientFrom(t, ip), b.url, "")
		if status != http.StatusOK {
			t.Fatalf("initialize from %s: %d", ip, status)
		}
		used = append(used, sid)
	}
	newcomer := clientFrom(t, "127.0.0.6")
	if status, _ := initializeFrom(t, newcomer, b.url, ""); status != http.StatusServiceUnavailable {
		t.Fatalf("initialize in a full gateway: %d, want 503", status)
	}

	// Seven minutes on (past session_evict_idle and the margin of a store shared by
	// replicas), the others make requests; the hostile session only holds its stream.
	clock.Advance(7 * time.Minute)
	for _, sid := range used {
		if status := pingAs(t, newcomer, b.url, sid); status != http.StatusOK {
			t.Fatalf("ping: %d", status)
		}
	}
	if status, _ := initializeFrom(t, newcomer, b.url, ""); status != http.StatusOK {
		t.Fatalf("initialize in a full gateway with a session idle for 8 minutes: %d, want 200", status)
	}
	if !streamEnds(hostile[0].stream) {
		t.Fatal("the evicted session's stream, on the other replica, stayed open")
	}
	for name, tg := range map[string]*testGateway{"A": a, "B": b} {
		if status := pingAs(t, clientFrom(t, "127.0.0.2"), tg.url, hostile[0].id); status != http.StatusNotFound {
			t.Errorf("a request in the evicted session on replica %s: %d, want 404", name, status)
		}
	}
	for _, sid := range used {
		if status := pingAs(t, newcomer, a.url, sid); status != http.StatusOK {
			t.Errorf("a session in use, after the eviction: %d, want 200", status)
		}
	}
}

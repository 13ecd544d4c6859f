package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// Regression tests for connections that a hostile or broken client held open: a body that
// stopped arriving kept its connection after the 408, and one client address could hold any
// number of connections.

// stalledPOST opens a connection of its own to the gateway at addr (from local address from,
// if not nil), sends a POST's headers announcing a 100-byte body and 17 bytes of it, then
// nothing.
func stalledPOST(t *testing.T, addr string, from net.IP, header string) net.Conn {
	t.Helper()
	return stalledBody(t, addr, from, header, 100, `{"jsonrpc":"2.0",`)
}

// stalledBody is stalledPOST with a body of length bytes announced, of which sent is sent.
func stalledBody(t *testing.T, addr string, from net.IP, header string, length int, sent string) net.Conn {
	t.Helper()
	d := net.Dialer{}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n%sContent-Length: %d\r\n\r\n%s", addr, header, length, sent); err != nil {
		t.Fatal(err)
	}
	return conn
}

// checkClosedAfter408 reads the answer on conn, which must be a 408, and then the end of the
// connection: the gateway must close it rather than wait for the rest of the body.
func checkClosedAfter408(t *testing.T, conn net.Conn) {
	t.Helper()
	checkClosedAfter(t, conn, http.StatusRequestTimeout)
}

// checkClosedAfter is checkClosedAfter408 for an answer of status.
func checkClosedAfter(t *testing.T, conn net.Conn, status int) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(waitBound)) // a connection left open fails the test here
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a body that stopped arriving: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("reading the 408's body: %v", err)
	}
	if resp.StatusCode != status {
		t.Fatalf("a body that stopped arriving: %d, want %d", resp.StatusCode, status)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the %d, reading the connection gave %v, want EOF: the gateway kept the connection, waiting for the rest of the body", status, err)
	}
}

// TestStalledBodyClosesConnection: after the body timeout's 408 the gateway lifted the read
// deadline, and net/http then waited, with no deadline, for the rest of the body before it
// let the connection go: each stalled client held a file descriptor and a goroutine for as
// long as it liked. The connection closes with the 408; so it does with the 413 of a body
// over max_body_bytes that stops arriving.
func TestStalledBodyClosesConnection(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nbody_read_timeout: 100ms\nmax_body_bytes: 2048\nupstreams: []\n", nil)
	t.Cleanup(tg.close)
	addr := tg.srv.Listener.Addr().String()
	conns := make([]net.Conn, 20)
	for i := range conns {
		conns[i] = stalledPOST(t, addr, nil, "")
	}
	for _, conn := range conns {
		checkClosedAfter408(t, conn)
	}
	oversized := stalledBody(t, addr, nil, "", 10000, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"`+strings.Repeat("a", 3000))
	checkClosedAfter(t, oversized, http.StatusRequestEntityTooLarge)
}

// clientFrom returns an HTTP client whose connections come from the loopback address ip
// (Linux routes all of 127.0.0.0/8 to the loopback interface), each request on a connection
// of its own. It has no timeout, which would cut streams: requests are bounded by
// boundedRequest.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// boundedRequest is a request whose answer must come within waitBound.
func boundedRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// initializeFrom sends initialize with client (and X-Forwarded-For xff, unless empty) and
// returns the status and the session id.
func initializeFrom(t *testing.T, client *http.Client, url, xff string) (int, string) {
	t.Helper()
	req := boundedRequest(t, http.MethodPost, url, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("initialize (X-Forwarded-For %q): %v", xff, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

// probe sends GET /healthz with client (and X-Forwarded-For xff, unless empty) and returns
// the status, 0 if the connection was closed without one.
func probe(t *testing.T, client *http.Client, mcpURL, xff string) int {
	t.Helper()
	status, _ := probeErr(t, client, mcpURL, xff)
	return status
}

// probeErr is probe with the error of a request that got no answer.
func probeErr(t *testing.T, client *http.Client, mcpURL, xff string) (int, error) {
	t.Helper()
	req := boundedRequest(t, http.MethodGet, strings.TrimSuffix(mcpURL, "/mcp")+"/healthz", nil)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// refusedAtOnce reports whether the gateway closed conn without an answer: a request written
// on it gets none.
func refusedAtOnce(t *testing.T, conn net.Conn) bool {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(waitBound))
	_, _ = fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	_, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection past the cap was neither answered nor closed: %v", err)
	}
	return err != nil
}

// TestConnectionsPerAddressAreCapped: one client address could open any number of
// connections, each a file descriptor of the gateway's held as long as the client liked
// (stalled bodies, idle keep-alives, streams). Past max_connections_per_address a connection
// from that address is closed as soon as it is accepted; other addresses are served, and the
// address is served again once it holds fewer.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmax_connections_per_address: 3\nbody_read_timeout: 1m\nupstreams: []\n", nil)
	t.Cleanup(tg.close)
	addr := tg.srv.Listener.Addr().String()
	attacker := net.ParseIP("127.0.0.2")
	held := make([]net.Conn, 3)
	for i := range held {
		held[i] = stalledPOST(t, addr, attacker, "")
	}
	// The server takes connections in the order they come: the 4th comes after the 3 held.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: attacker}}
	extra, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !refusedAtOnce(t, extra) {
		t.Fatalf("a 4th connection from an address with 3 open was served; max_connections_per_address is 3")
	}
	if status, _ := initializeFrom(t, clientFrom(t, "127.0.0.3"), tg.url, ""); status != http.StatusOK {
		t.Errorf("initialize from another address while the first holds its maximum: %d, want 200", status)
	}

	held[0].Close()
	again := clientFrom(t, "127.0.0.2")
	waitUntil(t, "the address to be served again after closing a connection", func() bool {
		return probe(t, again, tg.url, "") == http.StatusOK
	})
}

// TestTrustedProxyNamesTheClient: behind a load balancer every client had the balancer's
// address, so the per-address caps counted all clients as one, and logs named the balancer.
// A request from a trusted proxy (trusted_proxies) has the client address its
// X-Forwarded-For names (the rightmost that is not a trusted proxy's): the anonymous
// sessions' cap and the connections' cap count that address. From any other peer the header
// is ignored.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	store := session.NewMemoryStore(&session.MemoryOptions{MaxSessions: 100, MaxPerAnonymousAddr: 2})
	// The gateway's warnings and errors (refusals, the server's own errors), said if the test fails.
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tg := startGateway(t, "listen: 127.0.0.1:0\ntrusted_proxies: [127.0.0.1/32, 127.0.0.5]\nmax_connections_per_address: 3\nbody_read_timeout: 1m\nupstreams: []\n", &gateway.Options{Backends: backend.NewMemory(store), Logger: logger})
	t.Cleanup(tg.close)
	proxy := clientFrom(t, "127.0.0.1")
	clientAddrOf := func(sid string) string {
		t.Helper()
		rec, err := store.Get(context.Background(), sid)
		if err != nil {
			t.Fatal(err)
		}
		return rec.ClientAddr
	}

	for _, tc := range []struct {
		name, xff, client string
		want              int
	}{
		{"a client behind the proxy", "203.0.113.9", "203.0.113.9", http.StatusOK},
		{"the same client again", "203.0.113.9", "203.0.113.9", http.StatusOK},
		{"the same client past its cap", "203.0.113.9", "", http.StatusTooManyRequests},
		{"the client writes another address before its own", "198.51.100.1, 203.0.113.9", "", http.StatusTooManyRequests},
		{"another client", "203.0.113.10", "203.0.113.10", http.StatusOK},
		{"a client behind two trusted proxies", "198.51.100.2, 203.0.113.11, 127.0.0.5", "203.0.113.11", http.StatusOK},
		{"a client address with a port", "[2001:db8::7]:4711", "2001:db8::7", http.StatusOK},
		{"an entry that is no address: the proxy that passed it on", "garbage", "127.0.0.1", http.StatusOK},
	} {
		status, sid := initializeFrom(t, proxy, tg.url, tc.xff)
		if status != tc.want {
			t.Errorf("%s (X-Forwarded-For %q): %d, want %d", tc.name, tc.xff, status, tc.want)
			continue
		}
		if tc.client != "" {
			if got := clientAddrOf(sid); got != tc.client {
				t.Errorf("%s (X-Forwarded-For %q): the session's client address is %q, want %q", tc.name, tc.xff, got, tc.client)
			}
		}
	}

	// From a peer that is not a trusted proxy, X-Forwarded-For is not believed: whatever it
	// says, the peer's address counts.
	direct := clientFrom(t, "127.0.0.2")
	for i, xff := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		status, sid := initializeFrom(t, direct, tg.url, xff)
		want := http.StatusOK
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if status != want {
			t.Errorf("initialize %d from an untrusted peer with X-Forwarded-For %q: %d, want %d", i+1, xff, status, want)
		}
		if status == http.StatusOK {
			if got := clientAddrOf(sid); got != "127.0.0.2" {
				t.Errorf("a session from an untrusted peer with X-Forwarded-For %q has client address %q, want the peer's, 127.0.0.2", xff, got)
			}
		}
	}

	// The proxy's own connections are not capped (it carries every client's); a client's
	// requests in progress through it are, each holding one of them.
	addr := tg.srv.Listener.Addr().String()
	proxyIP := net.ParseIP("127.0.0.1")
	var stalled []net.Conn
	for range 3 {
		stalled = append(stalled, stalledPOST(t, addr, proxyIP, "X-Forwarded-For: 198.51.100.7\r\n"))
	}
	var last string
	var answers []string // each distinct answer, with how many probes got it and the longest one's time
	seen := map[string]int{}
	longest := map[string]time.Duration{}
	if !testwait.Within(waitBound, func() bool {
		start := time.Now()
		status, err := probeErr(t, proxy, tg.url, "198.51.100.7")
		took := time.Since(start)
		last = fmt.Sprintf("%d %v", status, err)
		if seen[last] == 0 {
			answers = append(answers, last)
		}
		seen[last]++
		longest[last] = max(longest[last], took)
		return status == http.StatusTooManyRequests
	}) {
		// Say why: a stalled request the gateway answered no longer holds its place; a probe
		// that waited long, or the server's errors, say that it was not served in time.
		for i, c := range stalled {
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			line, err := bufio.NewReader(c).ReadString('\n')
			t.Logf("stalled request %d: read %q, %v", i+1, line, err)
		}
		for _, a := range answers {
			t.Logf("probes answered %s: %d, the longest in %s", a, seen[a], longest[a])
		}
		t.Logf("the gateway's warnings and errors:\n%s", logs.String())
		t.Fatalf("a 4th request of a client with 3 in progress through the proxy did not get 429 within %s; the last answer: %s", waitBound, last)
	}
	if status := probe(t, proxy, tg.url, "198.51.100.8"); status != http.StatusOK {
		t.Errorf("another client through the proxy, which holds 4 connections: %d, want 200", status)
	}
}

// TestAdminListenerLimits: the admin listener, beside the MCP one, neither keeps a
// connection whose body stopped arriving nor lets one address hold any number of connections.
func TestAdminListenerLimits(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nbody_read_timeout: 200ms\nmax_connections_per_address: 2\nupstreams: []\n"+adminYAML(""), nil)
	t.Cleanup(tg.close)
	h, err := tg.gw.AdminHandler()
	if err != nil || h == nil {
		t.Fatalf("admin handler: %v %v", h, err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = tg.gw.AdminServer(h)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	// The stalled request comes from an address of its own: the server counts its connection
	// released only after the client has seen it closed, which must not count against the
	// cap tested next.
	ds := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	stalled, err := ds.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "POST /api/approvals/x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"decision\":", addr, adminKey)
	_ = stalled.SetReadDeadline(time.Now().Add(waitBound))
	if _, err := io.Copy(io.Discard, stalled); err != nil {
		t.Errorf("an admin request whose body stopped arriving: the connection was not closed (%v)", err)
	}

	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	held := make([]net.Conn, 2)
	for i := range held {
		if held[i], err = d.DialContext(t.Context(), "tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer held[i].Close()
		// A request whose headers never end holds the connection for 10 seconds.
		fmt.Fprintf(held[i], "GET /api/whoami HTTP/1.1\r\nHost: %s\r\n", addr)
	}
	extra, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !refusedAtOnce(t, extra) {
		t.Errorf("a 3rd connection to the admin listener from an address with 2 open was served; max_connections_per_address is 2")
	}
}

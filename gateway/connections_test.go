package gateway_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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

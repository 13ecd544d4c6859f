package gateway

import (
	"context"
	"net"
	"sync"
)

// pipeListener is a net.Listener of in-memory connections (the stdio face's hop to the
// endpoint; tests' servers on a fake clock): DialContext hands the server one end of
// a net.Pipe and returns the other. Nothing listens on a port. Safe for concurrent use;
// Close may be called more than once.
type pipeListener struct {
	conns chan net.Conn
	// closed is closed by Close. Lifecycle: closed once, through closeOnce.
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

var _ net.Listener = (*pipeListener)(nil)

// Accept waits for the next Dial; it fails with net.ErrClosed once the listener is closed.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial fail from now on; connections already made stay open.
func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

// Addr implements net.Listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// DialContext connects to the listener, for an http.Transport; network and address are
// ignored. It waits for Accept, until ctx ends or the listener closes.
func (l *pipeListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// pipeAddr is the address of both ends of a pipeListener's connections.
type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "stdio" }

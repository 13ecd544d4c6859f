// Package tcprelay is a TCP relay on loopback for tests: it forwards connections to a target
// and can be severed (every connection cut, new ones refused) and restored, so that a test can
// take a server such as Redis away from its clients and give it back.
package tcprelay

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Relay forwards connections from its loopback address to a target.
type Relay struct {
	target string
	ln     net.Listener

	// sends counts the reads from clients: on loopback, each is one write of a client, such
	// as one round trip's commands (a pipeline's together).
	sends atomic.Int64

	mu      sync.Mutex
	severed bool
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
}

// Sends returns how many times clients have sent something so far: with a request-response
// protocol such as Redis's, the round trips (a pipeline counts once).
func (r *Relay) Sends() int64 { return r.sends.Load() }

// New starts a relay to target on a free loopback port. Close stops it.
func New(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Relay{target: target, ln: ln, conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.severed {
			r.mu.Unlock()
			c.Close()
			continue
		}
		r.mu.Unlock()
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		if r.severed {
			r.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		r.conns[c], r.conns[up] = true, true
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(up, countingReader{c, &r.sends})
		go r.pipe(c, up)
	}
}

// pipe copies from src to dst until either ends, then closes both.
func (r *Relay) pipe(dst net.Conn, src io.Reader) {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	_, _ = io.CopyBuffer(onlyWriter{dst}, src, buf)
	dst.Close()
	if c, ok := src.(interface{ Close() error }); ok {
		c.Close()
	}
	r.mu.Lock()
	delete(r.conns, dst)
	if c, ok := src.(countingReader); ok {
		delete(r.conns, c.Conn)
	} else if c, ok := src.(net.Conn); ok {
		delete(r.conns, c)
	}
	r.mu.Unlock()
}

// countingReader counts the reads that return data.
type countingReader struct {
	net.Conn
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.Add(1)
	}
	return n, err
}

// onlyWriter hides everything but Write, so that io.CopyBuffer uses its buffer and calls
// Read, rather than a ReadFrom or WriteTo that would bypass the counting.
type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }

// Sever cuts every connection and refuses new ones until Restore: to its clients, the target
// is gone.
func (r *Relay) Sever() {
	r.mu.Lock()
	r.severed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
}

// Restore accepts connections again.
func (r *Relay) Restore() {
	r.mu.Lock()
	r.severed = false
	r.mu.Unlock()
}

// Close stops the relay and its connections, and waits for its goroutines.
func (r *Relay) Close() error {
	err := r.ln.Close()
	r.Sever()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

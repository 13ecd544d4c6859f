package session

import (
	"net"
	"sync"
	"testing"
)

// relay is a TCP relay between a client and a Redis server that a test can cut (the server
// is gone: connections refused), stall (the server hangs: what is sent is swallowed and
// nothing comes back) and restore.
type relay struct {
	t      testing.TB
	target string
	addr   string

	mu sync.Mutex
	// All guarded by mu.
	ln      net.Listener // nil while cut
	stalled bool
	conns   map[net.Conn]bool

	wg sync.WaitGroup // the relay's goroutines
}

func newRelay(t testing.TB, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	r.serve(ln)
	t.Cleanup(func() {
		r.cut()
		r.wg.Wait()
	})
	return r
}

func (r *relay) serve(ln net.Listener) {
	r.mu.Lock()
	r.ln = ln
	r.mu.Unlock()
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.handle(c)
		}
	})
}

// handle relays client connection c to the target.
func (r *relay) handle(c net.Conn) {
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		_ = c.Close()
		return
	}
	r.mu.Lock()
	r.conns[c], r.conns[up] = true, true
	r.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer func() {
			_ = dst.Close()
			_ = src.Close()
			r.mu.Lock()
			delete(r.conns, dst)
			delete(r.conns, src)
			r.mu.Unlock()
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			stalled := r.stalled
			r.mu.Unlock()
			if stalled {
				continue // swallowed
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	r.wg.Go(func() { pipe(up, c) })
	r.wg.Go(func() { pipe(c, up) })
}

// cut closes the relay's listener and connections: connecting is refused until restore.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		_ = r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

// stall makes the relay swallow everything: the server seems to hang.
func (r *relay) stall(on bool) {
	r.mu.Lock()
	r.stalled = on
	r.mu.Unlock()
}

// restore listens again at the relay's address, relaying as before.
func (r *relay) restore() {
	r.t.Helper()
	r.stall(false)
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatalf("relay: listening again at %s: %v", r.addr, err)
	}
	r.serve(ln)
}

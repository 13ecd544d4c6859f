package tcprelay

import (
	"bufio"
	"net"
	"testing"
)

// echoServer answers each line with itself.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestSeverAndRestore(t *testing.T) {
	r, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := roundTrip(r.Addr()); err != nil || got != "ping\n" {
		t.Fatalf("through the relay: %q, %v", got, err)
	}
	if n := r.Sends(); n != 1 {
		t.Errorf("Sends = %d after one round trip, want 1", n)
	}
	// A connection open when the relay is severed is cut.
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("before severing: %q, %v", line, err)
	}
	r.Sever()
	if _, err := br.ReadString('\n'); err == nil {
		t.Error("a connection survived Sever")
	}
	if got, err := roundTrip(r.Addr()); err == nil {
		t.Errorf("a new connection worked while severed: %q", got)
	}
	r.Restore()
	if got, err := roundTrip(r.Addr()); err != nil || got != "ping\n" {
		t.Errorf("after Restore: %q, %v", got, err)
	}
}

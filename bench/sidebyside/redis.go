package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// redisGateway starts a gateway over the stdio echo upstream whose session store is the
// Redis at addr, under a key prefix of its own, and returns the Redis round trip (the median
// of 1000 PINGs) measured first, the yardstick of what the store may add to a call. The
// run's keys are deleted once the fleet has stopped.
func (f *fleet) redisGateway(bin, echo, addr string) (url string, rtt time.Duration, err error) {
	rtt, err = pingRTT(addr, 1000)
	if err != nil {
		return "", 0, fmt.Errorf("Redis at %s: %w", addr, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "mfbench-" + hex.EncodeToString(b[:])
	settings := fmt.Sprintf("session_store:\n  type: redis\n  url: redis://%s/0\n  key_prefix: %s\n", addr, prefix) + keysSetting()
	url, err = f.gateway(bin, "stdio-redis", settings, fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo))
	f.afterStop = append(f.afterStop, func() { _ = deleteKeys(addr, prefix) })
	if err != nil {
		return "", 0, err
	}
	return url, rtt, nil
}

// keysSetting is the top-level `keys` of gateways on Redis: one key of 32 random bytes,
// which replicas given the same settings share.
func keysSetting() string {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return fmt.Sprintf("keys: [{id: bench, secret: %q}]\n", base64.StdEncoding.EncodeToString(secret))
}

// resp sends one command over a plain RESP connection and reads the first line of its reply.
type resp struct {
	c net.Conn
	r *bufio.Reader
}

func dialRESP(addr string) (*resp, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &resp{c: c, r: bufio.NewReader(c)}, nil
}

func (p *resp) do(args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = p.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := p.c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := p.r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// pingRTT returns the median round trip of n PINGs.
func pingRTT(addr string, n int) (time.Duration, error) {
	p, err := dialRESP(addr)
	if err != nil {
		return 0, err
	}
	defer p.c.Close()
	rtts := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		line, err := p.do("PING")
		if err != nil {
			return 0, err
		}
		if line != "+PONG" {
			return 0, fmt.Errorf("PING answered %q", line)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// deleteKeys deletes the keys under prefix (SCAN, then DEL one by one: a run leaves few).
func deleteKeys(addr, prefix string) error {
	p, err := dialRESP(addr)
	if err != nil {
		return err
	}
	defer p.c.Close()
	cursor := "0"
	for {
		// A SCAN reply is an array: the next cursor, then the keys.
		if _, err := p.do("SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000"); err != nil {
			return err
		}
		next, keys, err := p.readScan()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := p.do("DEL", k); err != nil {
				return err
			}
		}
		if cursor = next; cursor == "0" {
			return nil
		}
	}
}

// readScan reads the rest of a SCAN reply whose "*2" line was read: the cursor and the keys.
func (p *resp) readScan() (string, []string, error) {
	bulk := func() (string, error) {
		if _, err := p.r.ReadString('\n'); err != nil { // $len
			return "", err
		}
		s, err := p.r.ReadString('\n')
		return strings.TrimSpace(s), err
	}
	cursor, err := bulk()
	if err != nil {
		return "", nil, err
	}
	head, err := p.r.ReadString('\n') // *count
	if err != nil {
		return "", nil, err
	}
	var n int
	fmt.Sscanf(strings.TrimSpace(head), "*%d", &n)
	keys := make([]string, 0, n)
	for range n {
		k, err := bulk()
		if err != nil {
			return "", nil, err
		}
		keys = append(keys, k)
	}
	return cursor, keys, nil
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// replicaTargets adds two targets to the Redis comparison, both behind the benchmark's own
// round-robin reverse proxy:
//
//   - gateway-redis-proxied: the proxy in front of the one gateway at redisURL, so that the
//     proxy's own cost is measured in the same run (its ratio to gateway-redis);
//   - gateway-2replicas: the proxy in front of two gateways over the stdio echo upstream
//     sharing the Redis at addr under one key prefix of their own, every session's requests
//     alternating between them (its ratio to gateway-redis-proxied is the cross-replica cost).
//
// The replicas are processes of f, stopped with it. closeAll shuts the proxies down, prints
// and returns how many requests each replica got (nil when they got none); call it before f.close, which deletes the
// replicas' keys once they have stopped.
func (f *fleet) replicaTargets(bin, echo, addr, redisURL string, floor []string) (targets []target, closeAll func() []int64, err error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "mfbench-" + hex.EncodeToString(b[:])
	settings := fmt.Sprintf("session_store:\n  type: redis\n  url: redis://%s/0\n  key_prefix: %s\n", addr, prefix) + keysSetting()
	upstream := fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo)
	f.afterStop = append(f.afterStop, func() { _ = deleteKeys(addr, prefix) })
	var replicas []string
	for _, name := range []string{"replica1", "replica2"} {
		u, err := f.gateway(bin, name, settings, upstream)
		if err != nil {
			return nil, nil, err
		}
		replicas = append(replicas, u)
	}

	one, err := startRoundRobin(filepath.Join(f.dir, "proxy-redis.log"), []string{redisURL})
	if err != nil {
		return nil, nil, err
	}
	two, err := startRoundRobin(filepath.Join(f.dir, "proxy-2replicas.log"), replicas)
	if err != nil {
		one.close()
		return nil, nil, err
	}
	closeAll = func() []int64 {
		one.close()
		two.close()
		counts := two.counts()
		if counts[0]+counts[1] == 0 {
			return nil // not measured (-only)
		}
		fmt.Printf("gateway-2replicas: requests per replica %d and %d (every session alternating)\n\n", counts[0], counts[1])
		return counts
	}
	targets = []target{
		{name: "gateway-redis-proxied", url: one.url, floor: floor, versus: "gateway-redis"},
		{name: "gateway-2replicas", url: two.url, floor: floor, versus: "gateway-redis-proxied"},
	}
	return targets, closeAll, nil
}

// roundRobin is a reverse proxy on a loopback port that sends the requests of each session
// to its backends in turn: consecutive requests of one session alternate (no affinity), the
// first request after initialize going to the backend after the one that initialized it.
// Initializes take the next backend of a turn shared by all. SSE answers pass through as
// they come. Safe for concurrent use.
type roundRobin struct {
	url      string     // the proxy's MCP endpoint
	backends []*url.URL // MCP endpoints; the proxy keeps each request's path
	served   []atomic.Int64
	shared   atomic.Uint64 // the turn of requests without a session id

	mu sync.Mutex // guards turns
	// turns holds, by session id, the index of the next backend of that session. An entry
	// is set when an initialize answer gives the id and goes when the session's DELETE is
	// sent.
	turns map[string]uint64

	srv  *http.Server
	tr   *http.Transport
	logf *os.File
	done chan struct{} // closed when srv.Serve returns
}

// startRoundRobin starts a proxy over backends (MCP endpoint URLs of one path) with its
// errors in logPath.
func startRoundRobin(logPath string, backends []string) (*roundRobin, error) {
	p := &roundRobin{served: make([]atomic.Int64, len(backends)), turns: map[string]uint64{}, done: make(chan struct{})}
	for _, b := range backends {
		u, err := url.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("backend %q: %w", b, err)
		}
		p.backends = append(p.backends, u)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logf.Close()
		return nil, err
	}
	p.logf = logf
	p.url = "http://" + ln.Addr().String() + p.backends[0].Path
	errLog := log.New(logf, "", log.LstdFlags)
	// The transport keeps a connection per concurrent session and backend alive, as the
	// load tool does towards the proxy: the proxy must not add a dial to a call.
	p.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.learnSession,
		Transport:      p.tr,
		FlushInterval:  -1,
		ErrorLog:       errLog,
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// rewrite sends the request to the session's next backend.
func (p *roundRobin) rewrite(pr *httputil.ProxyRequest) {
	i := p.pick(pr.In)
	p.served[i].Add(1)
	b := p.backends[i]
	pr.Out.URL.Scheme, pr.Out.URL.Host = b.Scheme, b.Host
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	pr.Out.Host = "" // the backend's own host name, as a balancer would send
}

func (p *roundRobin) pick(r *http.Request) int {
	n := uint64(len(p.backends))
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		return int((p.shared.Add(1) - 1) % n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.turns[sid]
	if !ok {
		t = p.shared.Add(1) - 1
	}
	if r.Method == http.MethodDelete {
		delete(p.turns, sid)
	} else {
		p.turns[sid] = t + 1
	}
	return int(t % n)
}

// learnSession records the session an initialize answer opens, so that its next request
// goes to the other backend.
func (p *roundRobin) learnSession(resp *http.Response) error {
	sid := resp.Header.Get(headerSessionID)
	if sid == "" || resp.Request.Header.Get(headerSessionID) != "" {
		return nil
	}
	for i, b := range p.backends {
		if b.Host == resp.Request.URL.Host {
			p.mu.Lock()
			p.turns[sid] = uint64(i) + 1
			p.mu.Unlock()
			break
		}
	}
	return nil
}

// counts returns how many requests each backend was sent.
func (p *roundRobin) counts() []int64 {
	c := make([]int64, len(p.served))
	for i := range p.served {
		c[i] = p.served[i].Load()
	}
	return c
}

// close shuts the proxy down, gracefully for a few seconds, then at once, and waits for it.
func (p *roundRobin) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
	<-p.done
	p.tr.CloseIdleConnections()
	p.logf.Close()
}

const headerSessionID = "Mcp-Session-Id"

// nameWidth is the width of the target column: the longest name, at least 14.
func nameWidth(targets []target) int {
	w := 14
	for _, t := range targets {
		w = max(w, len(t.name))
	}
	return w
}

package gateway

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// This file holds who a client is on the network: its address, which a trusted proxy's
// X-Forwarded-For may name (trusted_proxies), and the cap on the connections one address holds
// (max_connections_per_address).

// clientAddrKey is the context key of a request's client address.
type clientAddrKey struct{}

// clientAddr is the address the request came from, without the port: its TCP peer's, or,
// from a trusted proxy, the client's that its X-Forwarded-For names (set by the gateway's
// handler; see proxies.clientOf).
func clientAddr(r *http.Request) string {
	if a, ok := r.Context().Value(clientAddrKey{}).(string); ok {
		return a
	}
	return hostOf(r.RemoteAddr)
}

// hostOf is the host of a host:port address, in the form the gateway compares addresses in
// (an IPv4 address mapped into IPv6 as IPv4, no zone); the address itself if it is not one.
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return host
}

// proxies are the trusted proxies (trusted_proxies): the only peers whose X-Forwarded-For is
// believed.
type proxies []netip.Prefix

// trusts reports whether addr (as hostOf gives it) is a trusted proxy's.
func (p proxies) trusts(addr string) bool {
	if len(p) == 0 {
		return false
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	for _, prefix := range p {
		if prefix.Contains(a) {
			return true
		}
	}
	return false
}

// clientOf returns the client address of a request whose TCP peer is peer (hostOf), and
// whether it came through a trusted proxy. From anyone else the peer is the client, whatever
// the headers say. From a trusted proxy the client is the rightmost address of
// X-Forwarded-For that is not itself a trusted proxy's: each proxy appends the peer it heard
// from, so addresses to the right of that one were written by trusted proxies, and those to
// the left by the client, who may write anything. Should every address be a trusted proxy's,
// the leftmost is the client; should an entry not be an address, the one that passed it on is
// (the last address believed); without the header, the proxy itself is.
func (p proxies) clientOf(r *http.Request, peer string) (addr string, proxied bool) {
	if !p.trusts(peer) {
		return peer, false
	}
	values := r.Header.Values("X-Forwarded-For")
	if len(values) == 0 {
		return peer, false
	}
	var hops []string
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			hops = append(hops, strings.TrimSpace(part))
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := forwardedAddr(hops[i])
		if !ok {
			break
		}
		client = a
		if !p.trusts(a) {
			break
		}
	}
	return client, true
}

// forwardedAddr reads one entry of X-Forwarded-For: an IP address, which some proxies write
// with a port (1.2.3.4:5678, [2001:db8::1]:5678) or bracketed.
func forwardedAddr(s string) (string, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone("").String(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("").String(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone("").String(), true
		}
	}
	return "", false
}

// addrLimiter counts what each client address holds open (its connections, or through a
// trusted proxy its requests in progress) against max_connections_per_address. It is safe for
// concurrent use.
type addrLimiter struct {
	max int

	mu sync.Mutex
	// held counts by address. Guarded by mu. Invariant: no count is zero (an address goes
	// with its last).
	held map[string]int
}

func newAddrLimiter(max int) *addrLimiter {
	return &addrLimiter{max: max, held: map[string]int{}}
}

// acquire counts one more for addr, unless it holds its maximum already (false). A limiter
// with no maximum admits everything.
func (l *addrLimiter) acquire(addr string) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[addr] >= l.max {
		return false
	}
	l.held[addr]++
	return true
}

// release counts one fewer for addr, which acquire admitted.
func (l *addrLimiter) release(addr string) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.held[addr] - 1; n > 0 {
		l.held[addr] = n
	} else {
		delete(l.held, addr)
	}
}

// connLimit is the HTTP server's half of max_connections_per_address: it counts each
// accepted connection against its peer's address and closes one past the cap at once. A
// trusted proxy's connections are not counted: they carry many clients' requests, which
// withClientAddr counts instead.
type connLimit struct {
	g       *Gateway
	limiter *addrLimiter
	// counted holds the connections counted, by net.Conn, with their address.
	counted sync.Map // net.Conn → string
}

// connState is the server's ConnState hook. StateNew runs on the server's accept loop, before
// the connection is read.
func (c *connLimit) connState(conn net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		addr := hostOf(conn.RemoteAddr().String())
		if c.g.proxies.trusts(addr) {
			return
		}
		if !c.limiter.acquire(addr) {
			c.g.logger.Warn("connection refused: its address holds its maximum of connections (max_connections_per_address); behind a proxy or load balancer, list it in trusted_proxies",
				"remote", addr, "limit", c.limiter.max)
			_ = conn.Close()
			return
		}
		c.counted.Store(conn, addr)
	case http.StateClosed, http.StateHijacked:
		if addr, ok := c.counted.LoadAndDelete(conn); ok {
			c.limiter.release(addr.(string))
		}
	}
}

// withClientAddr finds the client address of each request (proxies.clientOf) and keeps it in
// the request's context for clientAddr. A request that came through a trusted proxy counts,
// while it is in progress, against its client's max_connections_per_address (it holds one of
// the proxy's connections): past the cap it gets 429.
func (g *streamableServer) withClientAddr(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr, proxied := g.proxies.clientOf(r, hostOf(r.RemoteAddr))
		r = r.WithContext(context.WithValue(r.Context(), clientAddrKey{}, addr))
		if proxied {
			if !g.addrs.acquire(addr) {
				g.logger.Warn("request refused: its client address holds its maximum of connections (max_connections_per_address)",
					"remote", addr, "limit", g.addrs.max)
				w.Header().Set("Retry-After", "1")
				writeHTTPError(w, http.StatusTooManyRequests, nil, protocol.Errorf(protocol.CodeRequestRejected,
					"your address already holds %d connections to the gateway (max_connections_per_address): close some, then retry", g.addrs.max))
				return
			}
			defer g.addrs.release(addr)
		}
		next.ServeHTTP(w, r)
	})
}

package gateway

import (
	"net"
	"net/http"
	"strings"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/loopback"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// checkOrigin refuses, on every method, a request whose Origin is present and not allowed:
// the DNS-rebinding protection the transport requires (mcp-notes §4.1). When the gateway
// listens on loopback it also refuses a Host that is not a loopback name, since a rebound
// browser request carries the attacker's host name.
func checkOrigin(allowed []string, loopbackOnly bool, next http.Handler) http.Handler {
	next = checkHost(loopbackOnly, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !config.OriginAllowed(allowed, origin) {
			writeHTTPError(w, http.StatusForbidden, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"origin %q is not allowed: add it to allowed_origins in the gateway's config if it is yours", origin))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses, when the gateway listens on loopback only, a request whose Host header
// names anything but this machine's loopback interface: the defence against DNS rebinding.
func checkHost(loopbackOnly bool, next http.Handler) http.Handler {
	if !loopbackOnly {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			writeHTTPError(w, http.StatusForbidden, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"host %q is not allowed: this gateway listens on loopback and answers only localhost names", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopbackListen reports whether a listen address binds only loopback.
func isLoopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

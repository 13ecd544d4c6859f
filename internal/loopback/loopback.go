// Package loopback tells whether a Host header names this machine's loopback interface: the
// check against DNS rebinding of the gateway's listeners that bind loopback only.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether a Host header (host or host:port) names this machine's loopback
// interface: localhost, or a loopback IP address.
func Host(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package config

import (
	"net/netip"
	"strconv"
	"strings"
)

// OriginAllowed reports whether origin, the value of an HTTP Origin header,
// is matched by one of the allowed patterns (see Config.AllowedOrigins).
//
// Scheme and host compare case-insensitively. A pattern ending in ":*"
// matches any port of its scheme and host, including none. Any other pattern
// matches its own port only, where no port stands for the scheme's default
// (80 for http, 443 for https). A malformed pattern matches nothing, and a
// malformed origin (including "null" and "") is never allowed. Requests
// without an Origin header are the caller's decision, made before calling
// this. OriginAllowed is safe for concurrent use.
func OriginAllowed(allowed []string, origin string) bool {
	o, ok := parseOrigin(origin, false)
	if !ok {
		return false
	}
	for _, a := range allowed {
		if p, ok := parseOrigin(a, true); ok && p.matches(o) {
			return true
		}
	}
	return false
}

// anyPort is the port of a pattern that ends in ":*".
const anyPort = "*"

// origin is a parsed origin or origin pattern, in canonical form: scheme
// and host in lower case, an IPv6 host in brackets, and the port in decimal,
// the scheme's default if none was given, or anyPort.
type origin struct {
	scheme, host, port string
}

func (p origin) matches(o origin) bool {
	return p.scheme == o.scheme && p.host == o.host && (p.port == anyPort || p.port == o.port)
}

// parseOrigin parses s as scheme://host or scheme://host:port, with scheme
// http or https. If pattern is set, the port may also be "*".
func parseOrigin(s string, pattern bool) (origin, bool) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return origin{}, false
	}
	o := origin{scheme: strings.ToLower(scheme)}
	var defaultPort string
	switch o.scheme {
	case "http":
		defaultPort = "80"
	case "https":
		defaultPort = "443"
	default:
		return origin{}, false
	}

	var port string
	hasPort := false
	if strings.HasPrefix(rest, "[") { // [IPv6]
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return origin{}, false
		}
		addr, err := netip.ParseAddr(rest[1:end])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return origin{}, false
		}
		o.host = "[" + addr.String() + "]"
		if after := rest[end+1:]; after != "" {
			port, hasPort = strings.CutPrefix(after, ":")
			if !hasPort {
				return origin{}, false
			}
		}
	} else {
		o.host, port, hasPort = strings.Cut(rest, ":")
		o.host = strings.ToLower(o.host)
		if !validHostname(o.host) {
			return origin{}, false
		}
	}

	switch {
	case !hasPort:
		o.port = defaultPort
	case pattern && port == anyPort:
		o.port = anyPort
	default:
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return origin{}, false
		}
		o.port = strconv.FormatUint(n, 10)
	}
	return o, true
}

// validHostname reports whether s, in lower case, is a non-empty host name
// or IPv4 address: letters, digits, '.', '-' and '_'.
func validHostname(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

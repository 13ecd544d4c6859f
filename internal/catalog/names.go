package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxNameLen is the longest tool or prompt name the gateway exposes: the limit the
// conformance suite checks and common hosts accept (mcp-notes §6.1).
const maxNameLen = 64

// ExposedName is the name a client sees for an upstream's tool or prompt: prefix, separator
// and name, kept within [A-Za-z0-9_.-] and maxNameLen characters. Characters outside the set
// become '_'; a name that is still too long, or that had to change, ends in a hash of the
// original so that two different originals never meet.
func ExposedName(prefix, sep, name string) string {
	full := name
	if prefix != "" {
		full = prefix + sep + name
	}
	clean, changed := sanitizeName(full)
	if !changed && len(clean) <= maxNameLen {
		return clean
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(clean)+len(suffix) > maxNameLen {
		clean = clean[:maxNameLen-len(suffix)]
	}
	return clean + suffix
}

// sanitizeName replaces every character outside [A-Za-z0-9_.-] with '_'.
func sanitizeName(s string) (string, bool) {
	ok := true
	for i := 0; i < len(s); i++ {
		if !isNameChar(s[i]) {
			ok = false
			break
		}
	}
	if ok && s != "" {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; isNameChar(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		b.WriteByte('_')
	}
	return b.String(), true
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// URIScheme turns an upstream's prefix into the scheme prefix of its exposed URIs: lower
// case, only the characters RFC 3986 allows in a scheme except '+', which separates it from
// the original URI, and starting with a letter; "" for no prefix. Two prefixes may give the
// same scheme ("a_b", "a-b"): [Namespaces] numbers the later ones.
func URIScheme(prefix string) string {
	if prefix == "" {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.':
			b.WriteByte(c)
		default:
			b.WriteByte('-')
		}
	}
	s := b.String()
	if s[0] < 'a' || s[0] > 'z' {
		s = "x" + s
	}
	return s
}

// ExposeURI returns the URI (or URI template) a client sees for an upstream's uri:
// "<scheme>+<uri>", so that "file:///a" of upstream "gh" becomes "gh+file:///a", still a
// valid URI with the template expressions where they were (mcp-notes §14.8, option A). An
// empty scheme leaves uri unchanged. [Snapshot.ResolveURI] reverses it.
func ExposeURI(scheme, uri string) string {
	if scheme == "" {
		return uri
	}
	return scheme + "+" + uri
}

// splitExposedURI returns the scheme prefix and the upstream's URI of an exposed URI, or
// ok=false when it carries no prefix.
func splitExposedURI(uri string) (scheme, original string, ok bool) {
	plus := strings.IndexByte(uri, '+')
	if plus <= 0 {
		return "", "", false
	}
	head := uri[:plus]
	for i := 0; i < len(head); i++ {
		c := head[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", "", false
		}
	}
	return strings.ToLower(head), uri[plus+1:], true
}

package auth

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// ClaimNames name the claims a Principal is read from. A name may be a dotted path into
// nested objects ("realm_access.roles"); a claim whose own name contains dots
// ("https://example.com/groups") is found too, as the literal name is tried first. Zero
// fields take the defaults in parentheses.
type ClaimNames struct {
	// Subject (sub) is required: a token without it is refused.
	Subject string
	// Email (email) is a string.
	Email string
	// Groups (groups) and Roles (roles) are an array of strings or one string (one value).
	Groups string
	Roles  string
	// Scopes (scope) is a space-separated string (RFC 9068 "scope") or an array of strings
	// ("scp" style).
	Scopes string
}

func (c ClaimNames) withDefaults() ClaimNames {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Subject, "sub")
	def(&c.Email, "email")
	def(&c.Groups, "groups")
	def(&c.Roles, "roles")
	def(&c.Scopes, "scope")
	return c
}

// claimError is a claim of the wrong type or value.
func claimError(name string, v any) *Error {
	return invalidToken(fmt.Sprintf("token claim %q is malformed", name), fmt.Errorf("claim %q is %T", name, v))
}

// lookupClaim finds the claim path in claims: the literal name first, then a dotted path,
// where each step may itself be a literal name with dots.
func lookupClaim(claims map[string]any, path string) (any, bool) {
	if v, ok := claims[path]; ok {
		return v, true
	}
	for i := 0; i < len(path); i++ {
		if path[i] != '.' {
			continue
		}
		sub, ok := claims[path[:i]].(map[string]any)
		if !ok {
			continue
		}
		if v, ok := lookupClaim(sub, path[i+1:]); ok {
			return v, true
		}
	}
	return nil, false
}

// ClaimString returns the string claim at path of claims, found as the gateway finds a
// token's claims (the literal name first, then a dotted path); "" when it is absent or not a
// string.
func ClaimString(claims map[string]any, path string) string {
	s, err := stringClaim(claims, path)
	if err != nil {
		return ""
	}
	return s
}

// stringClaim returns the string claim name, "" when absent.
func stringClaim(claims map[string]any, name string) (string, *Error) {
	v, ok := lookupClaim(claims, name)
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", claimError(name, v)
	}
	return s, nil
}

// listClaim returns the claim name as a list of strings: an array, or one string that is
// split at spaces when split is set and is one value otherwise. Absent: nil.
func listClaim(claims map[string]any, name string, split bool) ([]string, *Error) {
	v, ok := lookupClaim(claims, name)
	if !ok || v == nil {
		return nil, nil
	}
	switch v := v.(type) {
	case string:
		if split {
			if f := strings.Fields(v); len(f) > 0 {
				return f, nil
			}
			return nil, nil
		}
		if v == "" {
			return nil, nil
		}
		return []string{v}, nil
	case []any:
		if len(v) == 0 {
			return nil, nil
		}
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, claimError(name, e)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, claimError(name, v)
}

// maxNumericDate is 9999-12-31T23:59:59Z; later dates are refused as malformed.
const maxNumericDate = 253402300799

// timeClaim returns the NumericDate claim name (RFC 7519 §2), and whether it is present.
func timeClaim(claims map[string]any, name string) (time.Time, bool, *Error) {
	v, ok := claims[name]
	if !ok || v == nil {
		return time.Time{}, false, nil
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return time.Time{}, false, claimError(name, v)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true, nil
}

// canonicalResource puts a resource URI in the form used to compare audiences: scheme and
// host in lower case and one trailing slash removed (RFC 8707 and RFC 9728 write the same
// resource with and without it; RFC 3986 §6.2.2.1 makes scheme and host case-insensitive).
// A value that is not an absolute URI (a client id, say) is returned as it is.
func canonicalResource(s string) string {
	i := strings.Index(s, "://")
	if i <= 0 {
		return s
	}
	rest := s[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	tail := rest[end:]
	if !strings.ContainsAny(tail, "?#") {
		tail = strings.TrimSuffix(tail, "/")
	}
	return strings.ToLower(s[:i]) + "://" + strings.ToLower(rest[:end]) + tail
}

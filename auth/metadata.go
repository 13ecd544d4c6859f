package auth

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// ResourceMetadata is the RFC 9728 protected resource metadata document.
type ResourceMetadata struct {
	// Resource is the gateway's resource URI (the value tokens carry as aud).
	Resource string `json:"resource"`
	// AuthorizationServers are the issuers that clients get tokens from (Authenticator.Issuers);
	// the MCP authorization spec (2025-11-25) requires at least one.
	AuthorizationServers []string `json:"authorization_servers"`
	// ScopesSupported are the scopes a client should ask for; the MCP spec's scope
	// minimisation advice is to keep it to what basic use needs.
	ScopesSupported []string `json:"scopes_supported,omitempty"`
	// BearerMethodsSupported is ["header"]: tokens in a query or body are refused. If empty,
	// MetadataHandler serves ["header"].
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	// ResourceName is a human-readable name of the gateway.
	ResourceName string `json:"resource_name,omitempty"`
}

// MetadataHandler serves md (copied now) as JSON: 200 to GET and HEAD, 204 to a CORS
// preflight (OPTIONS), 405 to other methods. Every answer allows any origin: the document is
// public, and browser-based MCP clients read it cross-origin (RFC 9728 §3).
func MetadataHandler(md ResourceMetadata) http.Handler {
	md.AuthorizationServers = slices.Clone(md.AuthorizationServers)
	if md.AuthorizationServers == nil {
		md.AuthorizationServers = []string{}
	}
	md.ScopesSupported = slices.Clone(md.ScopesSupported)
	md.BearerMethodsSupported = slices.Clone(md.BearerMethodsSupported)
	if len(md.BearerMethodsSupported) == 0 {
		md.BearerMethodsSupported = []string{"header"}
	}
	body, err := json.Marshal(md)
	if err != nil {
		panic("auth: marshal resource metadata: " + err.Error()) // only strings: cannot fail
	}
	body = append(body, '\n')
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			h.Set("Content-Type", "application/json")
			h.Set("Cache-Control", "max-age=300")
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				_, _ = w.Write(body)
			}
		case http.MethodOptions:
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Content-Type, MCP-Protocol-Version")
			h.Set("Access-Control-Max-Age", "86400")
			w.WriteHeader(http.StatusNoContent)
		default:
			h.Set("Allow", "GET, HEAD, OPTIONS")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

// Challenge returns the HTTP status and the WWW-Authenticate value for err, a failure of
// Authenticate (RFC 6750 §3, RFC 9728 §5.1). scopes are those the request needs; the
// challenge names them when given, and resourceMetadataURL when not "".
//
//   - ErrNoCredentials (or nil): 401 and `Bearer resource_metadata="…", scope="…"`, with no
//     error code (RFC 6750 §3.1);
//   - an *Error: its status and `Bearer error="…", error_description="…",
//     resource_metadata="…", scope="…"`;
//   - any other error: 401 and `Bearer error="invalid_token", resource_metadata="…", scope="…"`.
func Challenge(err error, resourceMetadataURL string, scopes []string) (status int, header string) {
	var c challenge
	status = http.StatusUnauthorized
	var ae *Error
	switch {
	case err == nil, errors.Is(err, ErrNoCredentials):
	case errors.As(err, &ae):
		status = ae.Status
		c.param("error", ae.Code)
		if ae.Description != "" {
			c.param("error_description", ae.Description)
		}
	default:
		c.param("error", CodeInvalidToken)
	}
	if resourceMetadataURL != "" {
		c.param("resource_metadata", resourceMetadataURL)
	}
	if len(scopes) > 0 {
		c.param("scope", strings.Join(scopes, " "))
	}
	return status, c.String()
}

// InsufficientScope returns 403 and the WWW-Authenticate value for a token that lacks scopes
// (RFC 6750 §3.1, MCP step-up): `Bearer error="insufficient_scope", scope="<needed>",
// resource_metadata="…"`. needed should hold every scope the request needs, the granted ones
// included, so that a client re-authorizing does not lose them.
func InsufficientScope(needed []string, resourceMetadataURL string) (status int, header string) {
	var c challenge
	c.param("error", "insufficient_scope")
	c.param("scope", strings.Join(needed, " "))
	if resourceMetadataURL != "" {
		c.param("resource_metadata", resourceMetadataURL)
	}
	return http.StatusForbidden, c.String()
}

// challenge builds a Bearer challenge (RFC 7235 §2.1): "Bearer" and comma-separated
// auth-params with quoted values.
type challenge struct{ b strings.Builder }

func (c *challenge) param(name, value string) {
	if c.b.Len() == 0 {
		c.b.WriteString("Bearer ")
	} else {
		c.b.WriteString(", ")
	}
	c.b.WriteString(name)
	c.b.WriteByte('=')
	writeQuoted(&c.b, value)
}

func (c *challenge) String() string {
	if c.b.Len() == 0 {
		return "Bearer"
	}
	return c.b.String()
}

// writeQuoted writes s as an RFC 7230 quoted-string: `"` and `\` escaped with a backslash;
// control and non-ASCII bytes, which a header value cannot carry safely, become '?'.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

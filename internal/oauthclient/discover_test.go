package oauthclient

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseChallenge(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   Challenge
		ok     bool
	}{
		{"MCP 401", []string{`Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="files:read files:write"`},
			Challenge{ResourceMetadata: "https://mcp.example.com/.well-known/oauth-protected-resource/mcp", Scope: "files:read files:write"}, true},
		{"insufficient scope, unquoted token", []string{`Bearer error=insufficient_scope, scope="admin", error_description="needs \"admin\""`},
			Challenge{Error: "insufficient_scope", Scope: "admin", ErrorDescription: `needs "admin"`}, true},
		{"after another scheme", []string{`Basic realm="x", Bearer realm="mcp", resource_metadata="https://a.example/prm"`},
			Challenge{ResourceMetadata: "https://a.example/prm"}, true},
		{"in a second header, case of scheme and names", []string{`Negotiate abc==`, `bearer Resource_Metadata="https://a.example/prm"`},
			Challenge{ResourceMetadata: "https://a.example/prm"}, true},
		{"bare Bearer", []string{`Bearer`}, Challenge{}, true},
		{"no Bearer", []string{`Basic realm="x"`}, Challenge{}, false},
		{"none", nil, Challenge{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("WWW-Authenticate", v)
			}
			got, ok := ParseChallenge(h)
			if diff := cmp.Diff(tt.want, got); diff != "" || ok != tt.ok {
				t.Errorf("ParseChallenge ok = %v, want %v (-want +got):\n%s", ok, tt.ok, diff)
			}
		})
	}
}

// TestWellKnownURLs: the order of MCP 2025-11-25 for resource metadata (path-inserted, then
// root) and authorization server metadata (RFC 8414 path insertion, then OpenID Connect).
func TestWellKnownURLs(t *testing.T) {
	u, _ := url.Parse("https://mcp.example.com/team/mcp")
	if diff := cmp.Diff([]string{"https://mcp.example.com/.well-known/oauth-protected-resource/team/mcp",
		"https://mcp.example.com/.well-known/oauth-protected-resource"}, resourceMetadataURLs(u)); diff != "" {
		t.Errorf("resource metadata (-want +got):\n%s", diff)
	}
	u, _ = url.Parse("https://auth.example.com/tenant1")
	if diff := cmp.Diff([]string{"https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
		"https://auth.example.com/.well-known/openid-configuration/tenant1", "https://auth.example.com/tenant1/.well-known/openid-configuration"},
		serverMetadataURLs(u)); diff != "" {
		t.Errorf("issuer with a path (-want +got):\n%s", diff)
	}
	u, _ = url.Parse("https://auth.example.com")
	if diff := cmp.Diff([]string{"https://auth.example.com/.well-known/oauth-authorization-server", "https://auth.example.com/.well-known/openid-configuration"},
		serverMetadataURLs(u)); diff != "" {
		t.Errorf("issuer without a path (-want +got):\n%s", diff)
	}
}

package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestParseAuth(t *testing.T) {
	const hash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	yaml := `
listen: 0.0.0.0:8080
public_url: https://mcp.example.com
auth:
  scopes: [mcp]
  oidc:
    - issuer: https://login.example.com/realms/acme
    - issuer: https://idp.example.org
      audiences: [api://manifold]
      claims: {roles: realm_access.roles, scopes: scp}
      clock_skew: 5s
      jwks_refresh_interval: 5m
  api_keys:
    - {name: ci-bot, hash: "` + hash + `", groups: [ci], scopes: [mcp]}
  max_sessions_per_principal: 4
upstreams:
  - name: tickets
    url: https://tickets.internal/mcp
    isolation: principal
    credentials:
      token_exchange: {token_url: "https://login.example.com/token", client_id: manifold, client_secret: s3cret}
  - name: search
    url: https://search.internal/mcp
    credentials:
      header_files: [{name: Authorization, path: /run/secrets/search, prefix: "Bearer "}]
      client_credentials: {token_url: "https://login.example.com/token", client_id: manifold, scopes: [search], resource: https://search.internal}
`
	c, err := config.Parse("gw.yaml", []byte(yaml), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Auth{
		Resource: "https://mcp.example.com/mcp",
		Scopes:   []string{"mcp"},
		OIDC: []config.Issuer{
			{URL: "https://login.example.com/realms/acme", SubjectClaim: "sub", EmailClaim: "email", GroupsClaim: "groups", RolesClaim: "roles", ScopesClaim: "scope", ClockSkew: 30 * time.Second, JWKSRefreshInterval: time.Minute},
			{URL: "https://idp.example.org", Audiences: []string{"api://manifold"}, SubjectClaim: "sub", EmailClaim: "email", GroupsClaim: "groups", RolesClaim: "realm_access.roles", ScopesClaim: "scp", ClockSkew: 5 * time.Second, JWKSRefreshInterval: 5 * time.Minute},
		},
		APIKeys:                 []config.APIKey{{Name: "ci-bot", Hash: hash, Groups: []string{"ci"}, Scopes: []string{"mcp"}}},
		MaxSessionsPerPrincipal: 4,
		MaxSessionsPerAddress:   125,
	}
	if diff := cmp.Diff(want, c.Auth); diff != "" {
		t.Errorf("auth (-want +got):\n%s", diff)
	}
	if got := c.Upstreams[0].Credentials.TokenExchange; got == nil || got.Resource != "https://tickets.internal/mcp" || got.ClientSecret != "s3cret" {
		t.Errorf("token exchange %+v: want the upstream's URL as resource by default", got)
	}
	cred := c.Upstreams[1].Credentials
	if diff := cmp.Diff([]config.HeaderFile{{Name: "Authorization", Path: "/run/secrets/search", Prefix: "Bearer "}}, cred.HeaderFiles); diff != "" {
		t.Errorf("header files (-want +got):\n%s", diff)
	}
	if cred.ClientCredentials == nil || cred.ClientCredentials.Resource != "https://search.internal" {
		t.Errorf("client credentials %+v: want the configured resource", cred.ClientCredentials)
	}
	if !c.Auth.Enabled() {
		t.Error("auth with issuers and keys is not enabled")
	}
}

func TestAuthProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"no auth beyond loopback", "listen: 0.0.0.0:8080\nupstreams: []\n", []config.Problem{
			p(1, "listen", `"0.0.0.0:8080" is reachable beyond this machine and no authentication is configured: configure auth (oidc or api_keys), listen on 127.0.0.1, or set auth.allow_unauthenticated: true to serve anyone who can reach it`),
		}},
		{"no auth on all interfaces, by choice", "listen: :8080\nauth: {allow_unauthenticated: true}\nupstreams: []\n", nil},
		{"no auth on loopback", "listen: 127.0.0.1:8080\nupstreams: []\n", nil},
		{"an issuer beyond loopback and no public URL", "listen: 0.0.0.0:8080\nauth:\n  oidc: [{issuer: \"https://idp.example.com\"}]\nupstreams: []\n", []config.Problem{
			p(1, "listen", "clients beyond this machine get tokens for the URL they reach the gateway at: set public_url, like https://mcp.example.com (or auth.resource)"),
		}},
		{"an issuer beyond loopback and a resource", "listen: 0.0.0.0:8080\nauth:\n  resource: https://mcp.example.com/mcp\n  oidc: [{issuer: \"https://idp.example.com\"}]\nupstreams: []\n", nil},
		{"API keys beyond loopback need no public URL", "listen: 0.0.0.0:8080\nauth:\n  api_keys: [{name: a, hash: \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}]\nupstreams: []\n", nil},
		{"bad issuer settings", "auth:\n  oidc:\n    - {audiences: [\"\"]}\n    - {issuer: \"login.example.com\", jwks_refresh_interval: 10ms, clock_skew: -1s, claims: {subject: \"\"}}\nupstreams: []\n", []config.Problem{
			p(3, "auth.oidc[0].issuer", "required: the issuer's URL, exactly as its tokens' iss claim, like https://login.example.com/realms/acme"),
			p(3, "auth.oidc[0].audiences[0]", "empty: write the aud value your identity provider puts in tokens for this gateway"),
			p(4, "auth.oidc[1].issuer", `"login.example.com" is not an absolute http(s) URL, like https://mcp.example.com`),
			p(4, "auth.oidc[1].clock_skew", "must be 0 or more, like 30s"),
			p(4, "auth.oidc[1].jwks_refresh_interval", "must be at least 1s, like 1m: tokens with unknown keys make the gateway fetch the issuer's keys at most this often"),
			p(4, "auth.oidc[1].claims.subject", "empty: name the claim, or remove the key for the default"),
		}},
		{"bad API keys", "auth:\n  api_keys:\n    - {name: a, hash: mfk_secret}\n    - {name: a, hash: \"sha256:00\"}\n    - {hash: x}\nupstreams: []\n", []config.Problem{
			p(3, "auth.api_keys[0].hash", "not a key hash: want sha256: and 64 lower-case hex digits; `gateway apikey` makes a key and its hash (never put the key itself here)"),
			p(4, "auth.api_keys[1].name", `"a" names another API key too: names must be unique`),
			p(4, "auth.api_keys[1].hash", "not a key hash: want sha256: and 64 lower-case hex digits; `gateway apikey` makes a key and its hash (never put the key itself here)"),
			p(5, "auth.api_keys[2].name", "required: the service account's name, which policy and the audit trail show"),
			p(5, "auth.api_keys[2].hash", "not a key hash: want sha256: and 64 lower-case hex digits; `gateway apikey` makes a key and its hash (never put the key itself here)"),
		}},
		{"bad public URL", "public_url: mcp.example.com\nupstreams: []\n", []config.Problem{
			p(1, "public_url", `"mcp.example.com" is not an absolute http(s) URL, like https://mcp.example.com`),
		}},
		{"credentials", `upstreams:
  - name: a
    command: x
    credentials: {header_files: [{name: X, path: /p}]}
  - name: b
    url: https://b.example.com/mcp
    credentials:
      header_files: [{name: "Mcp-Session-Id", path: ""}]
      token_exchange: {token_url: "nope", client_id: ""}
`, []config.Problem{
			p(4, "upstreams[0].credentials", "only for an HTTP upstream (with url): a stdio upstream takes its credentials from env"),
			p(8, "upstreams[1].credentials.header_files[0].name", `"Mcp-Session-Id" is set by the gateway's transport: remove it`),
			p(8, "upstreams[1].credentials.header_files[0].path", "required: the file holding the header's value, like /run/secrets/token"),
			p(9, "upstreams[1].credentials.token_exchange.token_url", `"nope" is not an absolute http(s) URL, like https://mcp.example.com`),
			p(9, "upstreams[1].credentials.token_exchange.client_id", "required: the gateway's client id at that authorization server"),
			p(9, "upstreams[1].credentials.token_exchange", "needs isolation: principal, so that each user's calls travel on a connection carrying that user's token"),
			p(9, "upstreams[1].credentials.token_exchange", "needs auth.oidc: the tokens exchanged are the users' own access tokens (an API key or an anonymous client has none)"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// userOAuthBase is what user_oauth needs of the top-level settings, on lines 1 to 8.
const userOAuthBase = `public_url: https://mcp.example.com
state_dir: /var/lib/manifold
auth:
  oidc:
    - issuer: https://login.example.com
    - issuer: https://idp.example.org
  login: {client_id: manifold-web}
` + testKeysYAML

// TestParseUserOAuth: user_oauth and auth.login as read, with their defaults, also when a
// top-level override sets them.
func TestParseUserOAuth(t *testing.T) {
	yaml := userOAuthBase + `upstreams:
  - name: github
    url: https://github.example.com/mcp
    isolation: principal
    credentials:
      user_oauth: {}
  - name: tickets
    url: https://tickets.example.com/mcp
    isolation: principal
    credentials:
      header_files: [{name: X-Tenant, path: /run/secrets/tenant}]
      user_oauth:
        client_id: manifold
        client_secret: ${TICKETS_SECRET}
        client_metadata_document: false
        dynamic_registration: false
        scopes: [tickets.read, tickets.write]
        allow_private_network: true
        connect_wait: 2m
        catalog_credentials:
          header_files: [{name: X-Catalog, path: /run/secrets/catalog}]
          client_credentials: {token_url: "https://login.example.com/token", client_id: catalog, client_secret: s3cret}
  - name: wiki
    url: https://wiki.example.com/mcp
overrides:
  - name: wiki
    isolation: principal
    credentials:
      user_oauth:
        connect_wait: 5s
        catalog_credentials:
          client_credentials: {token_url: "https://login.example.com/token", client_id: catalog}
`
	c, err := config.Parse("gw.yaml", []byte(yaml), env(map[string]string{"TICKETS_SECRET": "t0ps3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	wantLogin := &config.Login{Issuer: "https://login.example.com", ClientID: "manifold-web", Scopes: []string{"openid"}}
	if diff := cmp.Diff(wantLogin, c.Auth.Login); diff != "" {
		t.Errorf("auth.login (-want +got):\n%s", diff)
	}
	want := []config.Credentials{
		{UserOAuth: &config.UserOAuth{ClientMetadataDocument: true, DynamicRegistration: true, ConnectWait: time.Minute}},
		{
			HeaderFiles: []config.HeaderFile{{Name: "X-Tenant", Path: "/run/secrets/tenant"}},
			UserOAuth: &config.UserOAuth{
				ClientID:            "manifold",
				ClientSecret:        "t0ps3cret",
				Scopes:              []string{"tickets.read", "tickets.write"},
				AllowPrivateNetwork: true,
				ConnectWait:         2 * time.Minute,
				CatalogCredentials: &config.Credentials{
					HeaderFiles: []config.HeaderFile{{Name: "X-Catalog", Path: "/run/secrets/catalog"}},
					ClientCredentials: &config.TokenRequest{
						TokenURL: "https://login.example.com/token", ClientID: "catalog", ClientSecret: "s3cret",
						Resource: "https://tickets.example.com/mcp",
					},
				},
			},
		},
		{UserOAuth: &config.UserOAuth{
			ClientMetadataDocument: true, DynamicRegistration: true, ConnectWait: 5 * time.Second,
			CatalogCredentials: &config.Credentials{ClientCredentials: &config.TokenRequest{
				TokenURL: "https://login.example.com/token", ClientID: "catalog", Resource: "https://wiki.example.com/mcp",
			}},
		}},
	}
	for i, w := range want {
		if diff := cmp.Diff(w, c.Upstreams[i].Credentials); diff != "" {
			t.Errorf("upstreams[%d].credentials (-want +got):\n%s", i, diff)
		}
	}
}

// TestParseLogin: auth.login with every key set keeps them.
func TestParseLogin(t *testing.T) {
	yaml := `auth:
  oidc: [{issuer: "https://login.example.com"}, {issuer: "https://idp.example.org"}]
  login:
    issuer: https://idp.example.org
    client_id: manifold-web
    client_secret: ${LOGIN_SECRET}
    scopes: [openid, email, profile]
upstreams: []
`
	c, err := config.Parse("gw.yaml", []byte(yaml), env(map[string]string{"LOGIN_SECRET": "l0gin"}))
	if err != nil {
		t.Fatal(err)
	}
	want := &config.Login{Issuer: "https://idp.example.org", ClientID: "manifold-web", ClientSecret: "l0gin", Scopes: []string{"openid", "email", "profile"}}
	if diff := cmp.Diff(want, c.Auth.Login); diff != "" {
		t.Errorf("auth.login (-want +got):\n%s", diff)
	}
}

// Messages of TestUserOAuthProblems.
const (
	needsPrincipal   = "needs isolation: principal, so that each user's calls travel on a connection carrying that user's token"
	needsOIDC        = "needs auth.oidc with an issuer: users sign in at it (auth.login) before they connect their accounts"
	needsLogin       = "needs auth.login: users sign in on the gateway's pages to connect their accounts there; add login: {client_id: ...} under auth, the gateway's client at an auth.oidc issuer"
	needsPublicURL   = "needs public_url, like https://mcp.example.com: the authorization server sends users back to a redirect URI, which must be absolute"
	needsKeys        = "needs keys: users' grants are sealed with them; add `keys: [{id: k1, secret: ${MANIFOLD_KEY_1}}]` and make one with `openssl rand -base64 32`"
	needsDurable     = "needs state_dir or session_store type redis: users' grants must outlive a restart; set state_dir, like /var/lib/manifold, or use a Redis session store"
	twoWays          = "token_exchange and user_oauth are two ways to get each user's token for this upstream: keep one (user_oauth to have users connect their accounts at the upstream, token_exchange to trade their tokens from auth.oidc)"
	catalogCC        = "beside user_oauth, calls carry each user's own token: put client_credentials under user_oauth.catalog_credentials, for the shared connection that lists the upstream's catalog"
	connectWaitRange = "must be greater than 0 and at most 10m, like 60s: a 2026-07-28 client's retry waits this long for its user to finish connecting"
	stdioCredentials = "only for an HTTP upstream (with url): a stdio upstream takes its credentials from env"
)

// TestUserOAuthProblems: what user_oauth and auth.login refuse, and where.
func TestUserOAuthProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	// up is an upstream on lines 10 to 13 after userOAuthBase (and `upstreams:` on line 9),
	// whose credentials (line 13) are creds.
	up := func(isolation, creds string) string {
		return userOAuthBase + "upstreams:\n  - name: gh\n    url: https://gh.example.com/mcp\n    isolation: " + isolation + "\n    credentials: " + creds + "\n"
	}
	const uo = "upstreams[0].credentials.user_oauth"
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"all it needs", up("principal", "{user_oauth: {}}"), nil},
		{"redis instead of state_dir", "session_store: {type: redis, url: \"redis://r:6379\"}\n" +
			"public_url: https://mcp.example.com\nauth:\n  oidc: [{issuer: \"https://login.example.com\"}]\n  login: {client_id: web}\n" + testKeysYAML +
			"upstreams:\n  - {name: gh, url: \"https://gh.example.com/mcp\", isolation: principal, credentials: {user_oauth: {}}}\n", nil},
		{"on a stdio upstream", userOAuthBase + "upstreams:\n  - name: gh\n    command: gh-mcp\n    isolation: principal\n    credentials: {user_oauth: {}}\n", []config.Problem{
			p(13, "upstreams[0].credentials", stdioCredentials),
		}},
		{"without isolation principal", up("shared", "{user_oauth: {}}"), []config.Problem{
			p(13, uo, needsPrincipal),
		}},
		{"nothing it needs", "upstreams:\n  - name: gh\n    url: https://gh.example.com/mcp\n    isolation: principal\n    credentials:\n      user_oauth: {}\n", []config.Problem{
			p(6, "upstreams[0].credentials.user_oauth", needsOIDC),
			p(6, "upstreams[0].credentials.user_oauth", needsLogin),
			p(6, "upstreams[0].credentials.user_oauth", needsPublicURL),
			p(6, "upstreams[0].credentials.user_oauth", needsKeys),
			p(6, "upstreams[0].credentials.user_oauth", needsDurable),
		}},
		{"a bad public_url is reported once", "public_url: mcp.example.com\nstate_dir: /s\nauth:\n  oidc: [{issuer: \"https://login.example.com\"}]\n  login: {client_id: web}\n" + testKeysYAML +
			"upstreams:\n  - {name: gh, url: \"https://gh.example.com/mcp\", isolation: principal, credentials: {user_oauth: {}}}\n", []config.Problem{
			p(1, "public_url", `"mcp.example.com" is not an absolute http(s) URL, like https://mcp.example.com`),
		}},
		{"beside token_exchange and client_credentials", up("principal", `
      header_files: [{name: X-Tenant, path: /t}]
      token_exchange: {token_url: "https://login.example.com/token", client_id: m}
      client_credentials: {token_url: "https://login.example.com/token", client_id: m}
      user_oauth: {}`), []config.Problem{
			p(15, "upstreams[0].credentials.token_exchange", twoWays),
			p(16, "upstreams[0].credentials.client_credentials", catalogCC),
		}},
		{"bad settings", up("principal", `
      user_oauth:
        client_secret: s
        client_metadata_document: false
        dynamic_registration: false
        scopes: [a, ""]
        connect_wait: 11m`), []config.Problem{
			p(14, uo, "the gateway has no way to identify itself at the authorization server: set client_id (registered there beforehand), or leave client_metadata_document or dynamic_registration on"),
			p(15, uo+".client_secret", "needs client_id: a secret goes with a client registered at the authorization server beforehand; set client_id, or remove client_secret"),
			p(18, uo+".scopes[1]", "empty: name the scope, or remove the entry"),
			p(19, uo+".connect_wait", connectWaitRange),
		}},
		{"connect_wait 0", up("principal", "{user_oauth: {connect_wait: 0s}}"), []config.Problem{
			p(13, uo+".connect_wait", connectWaitRange),
		}},
		{"connect_wait at its bound", up("principal", "{user_oauth: {connect_wait: 10m}}"), nil},
		{"catalog credentials", up("principal", `
      user_oauth:
        catalog_credentials:
          header_files: [{name: Host, path: ""}]
          client_credentials: {token_url: nope}
          token_exchange: {token_url: "https://login.example.com/token", client_id: m}
          user_oauth: {}`), []config.Problem{
			p(16, uo+".catalog_credentials.header_files[0].name", `"Host" is set by the gateway's transport: remove it`),
			p(16, uo+".catalog_credentials.header_files[0].path", "required: the file holding the header's value, like /run/secrets/token"),
			p(17, uo+".catalog_credentials.client_credentials.token_url", `"nope" is not an absolute http(s) URL, like https://mcp.example.com`),
			p(17, uo+".catalog_credentials.client_credentials.client_id", "required: the gateway's client id at that authorization server"),
			p(18, uo+".catalog_credentials.token_exchange", "token_exchange gets a user's token, and the catalog connection acts for no user: give it header_files or client_credentials, or remove catalog_credentials"),
			p(19, uo+".catalog_credentials.user_oauth", "user_oauth gets a user's token, and the catalog connection acts for no user: give it header_files or client_credentials, or remove catalog_credentials"),
		}},
		{"unknown key in catalog credentials", up("principal", "{user_oauth: {catalog_credentials: {headers: {}}}}"), []config.Problem{
			p(13, uo+".catalog_credentials.headers", "unknown field (known: header_files, client_credentials)"),
		}},
		{"set by an override, reported there", userOAuthBase + `upstreams:
  - name: gh
    url: https://gh.example.com/mcp
overrides:
  - name: gh
    credentials:
      user_oauth: {connect_wait: -1s}
`, []config.Problem{
			p(15, "overrides[0].credentials.user_oauth", needsPrincipal),
			p(15, "overrides[0].credentials.user_oauth.connect_wait", connectWaitRange),
		}},
		{"login without issuers", "auth:\n  api_keys: [{name: a, hash: \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}]\n  login: {client_id: web}\nupstreams: []\n", []config.Problem{
			p(3, "auth.login", "needs auth.oidc: users sign in at one of its issuers; add the issuer under auth.oidc"),
		}},
		{"bad login settings", "auth:\n  oidc: [{issuer: \"https://login.example.com\"}, {issuer: \"https://idp.example.org\"}]\n  login:\n    issuer: https://login.example.com/\n    scopes: [email]\nupstreams: []\n", []config.Problem{
			p(3, "auth.login.client_id", "required: the gateway's client id at the issuer users sign in at"),
			p(4, "auth.login.issuer", `"https://login.example.com/" is not one of auth.oidc's issuers: write one of them exactly (https://login.example.com, https://idp.example.org), or remove the key for the first`),
			p(5, "auth.login.scopes", "must include openid: signing in is OpenID Connect; add it, or remove the key for [openid]"),
		}},
		{"login with no value", "auth:\n  oidc: [{issuer: \"https://login.example.com\"}]\n  login:\nupstreams: []\n", []config.Problem{
			p(3, "auth.login", "want a mapping with `client_id:`, the gateway's client at an auth.oidc issuer, got no value"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

// TestUserOAuthChangedKeys: a changed auth.login is a change of auth, which only api_keys
// may undergo while the gateway runs; a changed user_oauth is a change of its upstream.
func TestUserOAuthChangedKeys(t *testing.T) {
	parse := func(text string) *config.Config {
		t.Helper()
		c, err := config.Parse("gw.yaml", []byte(text), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const up = "upstreams:\n  - {name: gh, url: \"https://gh.example.com/mcp\", isolation: principal, credentials: {user_oauth: {%s}}}\n"
	base := parse(userOAuthBase + fmt.Sprintf(up, ""))
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"login", strings.Replace(userOAuthBase, "client_id: manifold-web", "client_id: other", 1) + fmt.Sprintf(up, ""), []string{"auth"}},
		{"user_oauth", userOAuthBase + fmt.Sprintf(up, "connect_wait: 2m"), []string{"upstreams"}},
		{"user_oauth at its defaults", userOAuthBase + fmt.Sprintf(up, "connect_wait: 60s, dynamic_registration: true"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, base.ChangedKeys(parse(tc.text))); diff != "" {
				t.Errorf("ChangedKeys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCredentialsSetByOverrideGetDefaults: a token_exchange a top-level override sets asks for
// the upstream's URL as resource, as one in the upstream's own entry does.
func TestCredentialsSetByOverrideGetDefaults(t *testing.T) {
	yaml := `auth: {oidc: [{issuer: "https://login.example.com"}]}
upstreams:
  - {name: a, url: "https://a.example.com/mcp"}
overrides:
  - name: a
    isolation: principal
    credentials: {token_exchange: {token_url: "https://login.example.com/token", client_id: m}}
`
	c, err := config.Parse("gw.yaml", []byte(yaml), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if te := c.Upstreams[0].Credentials.TokenExchange; te == nil || te.Resource != "https://a.example.com/mcp" {
		t.Errorf("token exchange %+v: want the upstream's URL as resource", te)
	}
}

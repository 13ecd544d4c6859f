package testissuer_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/oauthclient"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// redirectURI is the client's callback; it is never contacted, the browser stops there.
const redirectURI = "http://127.0.0.1:9/oauth/callback"

// world is an issuer and an upstream protected by it.
type world struct {
	as    *testissuer.Issuer
	up    *testupstream.Protected
	f     *oauthclient.Fetcher
	clock *testclock.Clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{as: testissuer.New(t), f: oauthclient.NewFetcher(&oauthclient.FetcherOptions{AllowPrivate: true}),
		clock: testclock.New(time.Now())}
	w.as.Now = w.clock.Now
	w.up = testupstream.NewProtected(t, w.as, testupstream.ProtectedOptions{})
	t.Cleanup(w.f.CloseIdleConnections)
	return w
}

// discover discovers the upstream's authorization server from its 401 challenge.
func (w *world) discover(t *testing.T) *oauthclient.Discovery {
	t.Helper()
	resp, err := http.Post(w.up.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ch, ok := oauthclient.ParseChallenge(resp.Header)
	if resp.StatusCode != http.StatusUnauthorized || !ok {
		t.Fatalf("unauthenticated call: %d %v, want 401 with a Bearer challenge", resp.StatusCode, resp.Header)
	}
	d, err := w.f.Discover(context.Background(), w.up.URL, &ch)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// browser is an HTTP client signed in as user that stops at the redirect URI.
func (w *world) browser(user string) *http.Client {
	c := &http.Client{CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURI) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	if user != "" {
		w.as.SignIn(c, user)
	}
	return c
}

// authorize follows authURL with browser and returns the query brought to the redirect URI.
func authorize(t *testing.T, browser *http.Client, authURL string) url.Values {
	t.Helper()
	resp, err := browser.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), redirectURI) {
		t.Fatalf("authorize: %d to %q, want 302 to the redirect URI", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.Query()
}

// whoami calls the upstream's whoami with token.
func (w *world) whoami(t *testing.T, token string) string {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	hc := &http.Client{Transport: bearer(token)}
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: w.up.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "whoami"})
	if err != nil {
		t.Fatal(err)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func oauthCode(err error) string {
	if oe, ok := errors.AsType[*oauthclient.OAuthError](err); ok {
		return oe.Code
	}
	if se, ok := errors.AsType[*oauthclient.StatusError](err); ok && se.OAuth != nil {
		return se.OAuth.Code
	}
	return ""
}

// TestOAuthClientFlow runs the gateway's OAuth client against the issuer, for each way of
// obtaining a client identity: discovery from the upstream's challenge, registration, the
// authorization code flow, a call of the upstream, refresh with rotation, revocation.
func TestOAuthClientFlow(t *testing.T) {
	cimd := httptest.NewServer(nil)
	t.Cleanup(cimd.Close)
	cimdURL := cimd.URL + "/client.json"
	cimd.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(rw).Encode(map[string]any{"client_id": cimdURL, "client_name": "Manifold",
			"redirect_uris": []string{redirectURI}, "token_endpoint_auth_method": "none"})
	})
	tests := []struct {
		name       string
		cfg        oauthclient.ClientConfig
		register   func(as *testissuer.Issuer)
		method     string // forced token endpoint authentication; "" keeps Register's
		wantHow    string
		wantMethod string
	}{
		{name: "preregistered public", cfg: oauthclient.ClientConfig{ClientID: "pub"},
			register: func(as *testissuer.Issuer) { as.RegisterClient("pub", "", redirectURI) },
			wantHow:  oauthclient.HowPreregistered, wantMethod: "none"},
		{name: "preregistered basic", cfg: oauthclient.ClientConfig{ClientID: "conf", ClientSecret: "s3cret"},
			register: func(as *testissuer.Issuer) { as.RegisterClient("conf", "s3cret", redirectURI) },
			wantHow:  oauthclient.HowPreregistered, wantMethod: "client_secret_basic"},
		{name: "preregistered post", cfg: oauthclient.ClientConfig{ClientID: "conf", ClientSecret: "s3cret"},
			register: func(as *testissuer.Issuer) { as.RegisterClient("conf", "s3cret", redirectURI) },
			method:   "client_secret_post", wantHow: oauthclient.HowPreregistered, wantMethod: "client_secret_post"},
		{name: "dynamic", cfg: oauthclient.ClientConfig{ClientName: "Manifold", RedirectURI: redirectURI},
			wantHow: oauthclient.HowDynamic, wantMethod: "none"},
		{name: "metadata document", cfg: oauthclient.ClientConfig{MetadataDocumentURL: cimdURL, ClientName: "Manifold", RedirectURI: redirectURI},
			wantHow: oauthclient.HowMetadataDocument, wantMethod: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			if tt.register != nil {
				tt.register(w.as)
			}
			d := w.discover(t)
			if d.Resource != w.up.URL || d.Server.Issuer != w.as.URL || !d.Server.AuthorizationResponseIssParameterSupported {
				t.Fatalf("discovery: %+v", d)
			}
			c, err := w.f.Register(ctx, &d.Server, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tt.method != "" {
				c.Method = tt.method
			}
			if c.How != tt.wantHow || c.Method != tt.wantMethod {
				t.Errorf("client %+v, want how %s and method %s", c, tt.wantHow, tt.wantMethod)
			}
			fl := &oauthclient.Flow{Fetcher: w.f, Discovery: d, Client: c, RedirectURI: redirectURI, Now: w.clock.Now}
			store := oauthclient.NewPendingStore(0, w.clock.Now)
			p, err := fl.Start("principal-alice")
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Put(p); err != nil {
				t.Fatal(err)
			}
			q := authorize(t, w.browser("alice"), p.URL)
			if q.Get("iss") != w.as.URL || q.Get("state") != p.State {
				t.Errorf("authorization response %v, want iss %s and the state", q, w.as.URL)
			}
			if got := w.as.LastAuthorization().Get("resource"); got != w.up.URL {
				t.Errorf("authorization request's resource = %q, want %s", got, w.up.URL)
			}
			tok, _, err := fl.Callback(ctx, store, "principal-alice", q)
			if err != nil {
				t.Fatal(err)
			}
			sub, scopes, aud, err := w.as.Check(tok.AccessToken)
			if err != nil || sub != "alice" || !slices.Equal(aud, []string{w.up.URL}) || !slices.Equal(scopes, []string{"read", "write"}) {
				t.Errorf("Check = %q %v %v %v; want alice, [read write], [%s]", sub, scopes, aud, err, w.up.URL)
			}
			if got := w.whoami(t, tok.AccessToken); got != "alice" {
				t.Errorf("whoami = %q, want alice", got)
			}

			// Refresh rotates: the old refresh token is refused afterwards.
			w.clock.Advance(time.Minute)
			tok2, err := fl.Refresh(ctx, tok)
			if err != nil {
				t.Fatal(err)
			}
			if tok2.RefreshToken == tok.RefreshToken || tok2.AccessToken == tok.AccessToken {
				t.Error("refresh gave back the same tokens")
			}
			if _, err := fl.Refresh(ctx, tok); oauthCode(err) != "invalid_grant" {
				t.Errorf("refresh with the rotated token: %v, want invalid_grant", err)
			}
			if got := w.whoami(t, tok2.AccessToken); got != "alice" {
				t.Errorf("whoami after refresh = %q, want alice", got)
			}

			// Revoking the refresh token revokes it and its access tokens.
			if err := fl.Revoke(ctx, tok2); err != nil {
				t.Fatal(err)
			}
			if _, err := fl.Refresh(ctx, tok2); oauthCode(err) != "invalid_grant" {
				t.Errorf("refresh after revocation: %v, want invalid_grant", err)
			}
			if _, _, _, err := w.as.Check(tok2.AccessToken); !errors.Is(err, testissuer.ErrInvalidToken) {
				t.Errorf("Check after revocation: %v, want ErrInvalidToken", err)
			}

			if got := []int{w.as.TokenRequests("authorization_code"), w.as.TokenRequests("refresh_token"), w.as.Revocations(), w.as.Authorizations()}; !slices.Equal(got, []int{1, 3, 1, 1}) {
				t.Errorf("code, refresh, revoke, authorize requests = %v, want [1 3 1 1]", got)
			}
		})
	}
}

// code runs an authorization for user with the public client "pub" by hand, with extra
// query parameters, and returns the code and verifier.
func (w *world) code(t *testing.T, user string, extra url.Values) (code, verifier string) {
	t.Helper()
	verifier = "a-verifier-long-enough-for-pkce-rules-0123456789"
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {"pub"}, "redirect_uri": {redirectURI}, "state": {"st"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	for k, v := range extra {
		q[k] = v
	}
	back := authorize(t, w.browser(user), w.as.URL+testissuer.AuthorizePath+"?"+q.Encode())
	if back.Get("code") == "" {
		t.Fatalf("no code: %v", back)
	}
	return back.Get("code"), verifier
}

// token posts form to the token endpoint and decodes the answer.
func (w *world) token(t *testing.T, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(w.as.URL+testissuer.TokenPath, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func TestIDToken(t *testing.T) {
	w := newWorld(t)
	w.as.RegisterClient("pub", "", redirectURI)
	code, verifier := w.code(t, "alice", url.Values{"scope": {"openid read"}, "nonce": {"n-0S6"}})
	status, out := w.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
		"redirect_uri": {redirectURI}, "client_id": {"pub"}})
	raw, _ := out["id_token"].(string)
	if status != http.StatusOK || raw == "" {
		t.Fatalf("token: %d %v, want an id_token", status, out)
	}
	ctx := oidc.ClientContext(context.Background(), http.DefaultClient)
	provider, err := oidc.NewProvider(ctx, w.as.URL)
	if err != nil {
		t.Fatal(err)
	}
	idt, err := provider.VerifierContext(ctx, &oidc.Config{ClientID: "pub", Now: w.clock.Now}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if idt.Subject != "alice" || idt.Nonce != "n-0S6" {
		t.Errorf("id_token sub %q nonce %q, want alice and n-0S6", idt.Subject, idt.Nonce)
	}
	// Without openid there is none.
	code, verifier = w.code(t, "alice", url.Values{"scope": {"read"}})
	_, out = w.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
		"redirect_uri": {redirectURI}, "client_id": {"pub"}})
	if _, ok := out["id_token"]; ok || out["access_token"] == nil {
		t.Errorf("token without openid: %v, want an access token and no id_token", out)
	}
}

func TestAuthorizeRefuses(t *testing.T) {
	w := newWorld(t)
	w.as.RegisterClient("pub", "", redirectURI)
	good := url.Values{"response_type": {"code"}, "client_id": {"pub"}, "redirect_uri": {redirectURI}, "state": {"st"},
		"code_challenge": {"abc"}, "code_challenge_method": {"S256"}}
	with := func(k, v string) url.Values {
		q := url.Values{}
		for key, vs := range good {
			q[key] = vs
		}
		if v == "" {
			q.Del(k)
		} else {
			q.Set(k, v)
		}
		return q
	}
	tests := []struct {
		name      string
		user      string
		query     url.Values
		status    int
		wantError string // the error brought back to the redirect URI
	}{
		{"not signed in", "", good, http.StatusUnauthorized, ""},
		{"unknown client", "alice", with("client_id", "nobody"), http.StatusBadRequest, ""},
		{"unregistered redirect", "alice", with("redirect_uri", "http://127.0.0.1:9/elsewhere"), http.StatusBadRequest, ""},
		{"no PKCE", "alice", with("code_challenge", ""), http.StatusFound, "invalid_request"},
		{"plain PKCE", "alice", with("code_challenge_method", "plain"), http.StatusFound, "invalid_request"},
		{"token response type", "alice", with("response_type", "token"), http.StatusFound, "unsupported_response_type"},
		{"unknown scope", "alice", with("scope", "read admin"), http.StatusFound, "invalid_scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := w.browser(tt.user).Get(w.as.URL + testissuer.AuthorizePath + "?" + tt.query.Encode())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			loc, _ := url.Parse(resp.Header.Get("Location"))
			if resp.StatusCode != tt.status || loc.Query().Get("error") != tt.wantError {
				t.Errorf("got %d to %q, want %d with error %q", resp.StatusCode, loc, tt.status, tt.wantError)
			}
			if tt.status != http.StatusFound && loc.String() != "" {
				t.Errorf("redirected to %s on a refusal that must not redirect", loc)
			}
		})
	}
	// Signing out makes the browser anonymous again.
	b := w.browser("alice")
	w.as.SignOut(b)
	resp, err := b.Get(w.as.URL + testissuer.AuthorizePath + "?" + good.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after SignOut: %d, want 401", resp.StatusCode)
	}
	if got := w.as.Authorizations(); got != len(tests)+1 {
		t.Errorf("Authorizations() = %d, want %d", got, len(tests)+1)
	}
}

func TestTokenRefuses(t *testing.T) {
	w := newWorld(t)
	w.as.RegisterClient("pub", "", redirectURI)
	w.as.RegisterClient("conf", "s3cret", redirectURI)
	redeem := func(code, verifier string) url.Values {
		return url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
			"redirect_uri": {redirectURI}, "client_id": {"pub"}}
	}
	t.Run("code reused", func(t *testing.T) {
		code, verifier := w.code(t, "alice", nil)
		if status, out := w.token(t, redeem(code, verifier)); status != http.StatusOK {
			t.Fatalf("first redemption: %d %v", status, out)
		}
		if status, out := w.token(t, redeem(code, verifier)); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Errorf("second redemption: %d %v, want invalid_grant", status, out)
		}
	})
	t.Run("wrong verifier", func(t *testing.T) {
		code, _ := w.code(t, "alice", nil)
		if _, out := w.token(t, redeem(code, "another-verifier-that-does-not-match-the-challenge")); out["error"] != "invalid_grant" {
			t.Errorf("got %v, want invalid_grant", out)
		}
	})
	t.Run("code expired", func(t *testing.T) {
		code, verifier := w.code(t, "alice", nil)
		w.clock.Advance(2 * time.Minute)
		if _, out := w.token(t, redeem(code, verifier)); out["error"] != "invalid_grant" {
			t.Errorf("got %v, want invalid_grant", out)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		status, out := w.token(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {"conf"}, "client_secret": {"nope"}})
		if status != http.StatusUnauthorized || out["error"] != "invalid_client" {
			t.Errorf("got %d %v, want 401 invalid_client", status, out)
		}
	})
	t.Run("unsupported grant", func(t *testing.T) {
		if _, out := w.token(t, url.Values{"grant_type": {"password"}, "client_id": {"pub"}}); out["error"] != "unsupported_grant_type" {
			t.Errorf("got %v, want unsupported_grant_type", out)
		}
	})
	t.Run("client credentials", func(t *testing.T) {
		status, out := w.token(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {"conf"}, "client_secret": {"s3cret"},
			"scope": {"read"}, "resource": {w.up.URL}})
		at, _ := out["access_token"].(string)
		if status != http.StatusOK || out["refresh_token"] != nil {
			t.Fatalf("got %d %v, want an access token without refresh token", status, out)
		}
		sub, scopes, aud, err := w.as.Check(at)
		if diff := cmp.Diff([]any{"conf", []string{"read"}, []string{w.up.URL}, nil}, []any{sub, scopes, aud, err}); diff != "" {
			t.Errorf("Check (-want +got):\n%s", diff)
		}
		if w.as.TokenRequests("client_credentials") != 2 {
			t.Errorf("TokenRequests(client_credentials) = %d, want 2", w.as.TokenRequests("client_credentials"))
		}
	})
}

func TestExpiryAndRevokeUser(t *testing.T) {
	w := newWorld(t)
	w.as.AccessTTL = 5 * time.Minute
	w.as.RegisterClient("pub", "", redirectURI)
	get := func(user string) map[string]any {
		code, verifier := w.code(t, user, url.Values{"resource": {w.up.URL}})
		status, out := w.token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
			"redirect_uri": {redirectURI}, "client_id": {"pub"}})
		if status != http.StatusOK || out["expires_in"] != float64(300) {
			t.Fatalf("token: %d %v, want expires_in 300", status, out)
		}
		return out
	}
	alice, bob := get("alice"), get("bob")
	w.as.RevokeUser("alice")
	if _, _, _, err := w.as.Check(alice["access_token"].(string)); !errors.Is(err, testissuer.ErrInvalidToken) {
		t.Errorf("Check after RevokeUser: %v, want ErrInvalidToken", err)
	}
	if _, out := w.token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {alice["refresh_token"].(string)}, "client_id": {"pub"}}); out["error"] != "invalid_grant" {
		t.Errorf("refresh after RevokeUser: %v, want invalid_grant", out)
	}
	if sub, _, _, err := w.as.Check(bob["access_token"].(string)); err != nil || sub != "bob" {
		t.Errorf("bob's token after RevokeUser(alice): %q %v", sub, err)
	}
	if got := w.whoami(t, bob["access_token"].(string)); got != "bob" {
		t.Errorf("whoami = %q, want bob", got)
	}
	w.clock.Advance(6 * time.Minute)
	if _, _, _, err := w.as.Check(bob["access_token"].(string)); !errors.Is(err, testissuer.ErrInvalidToken) {
		t.Errorf("Check of an expired token: %v, want ErrInvalidToken", err)
	}
}

func TestRegistrationKnobs(t *testing.T) {
	w := newWorld(t)
	w.as.NoDynamicRegistration = true
	w.as.NoMetadataDocuments = true
	d := w.discover(t)
	if d.Server.RegistrationEndpoint != "" || d.Server.ClientIDMetadataDocumentSupported {
		t.Errorf("metadata %+v advertises registration", d.Server)
	}
	_, err := w.f.Register(context.Background(), &d.Server, oauthclient.ClientConfig{ClientName: "Manifold", RedirectURI: redirectURI,
		MetadataDocumentURL: "https://gw.example.com/client.json"})
	if !errors.Is(err, oauthclient.ErrNoRegistration) {
		t.Errorf("Register: %v, want ErrNoRegistration", err)
	}
	if status := postStatus(t, w.as.URL+testissuer.RegisterPath, `{"redirect_uris":["`+redirectURI+`"]}`); status != http.StatusNotFound {
		t.Errorf("register while off: %d, want 404", status)
	}
}

// postStatus posts a JSON body to u and returns the answer's status.
func postStatus(t *testing.T, u, body string) int {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestDynamicConfidentialClient(t *testing.T) {
	w := newWorld(t)
	resp, err := http.Post(w.as.URL+testissuer.RegisterPath, "application/json",
		strings.NewReader(`{"redirect_uris":["`+redirectURI+`"],"token_endpoint_auth_method":"client_secret_post"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || reg.ClientID == "" || reg.ClientSecret == "" {
		t.Fatalf("register: %d %+v, want 201 with an id and a secret", resp.StatusCode, reg)
	}
	status, out := w.token(t, url.Values{"grant_type": {"client_credentials"}, "client_id": {reg.ClientID}, "client_secret": {reg.ClientSecret}})
	if status != http.StatusOK {
		t.Errorf("client credentials of the registered client: %d %v", status, out)
	}
}

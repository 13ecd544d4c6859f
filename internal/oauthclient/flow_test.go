package oauthclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/demo/issuer"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

const redirectURI = "http://127.0.0.1:9/oauth/callback"

// world is an authorization server (the demo issuer) and an MCP-like resource server that
// accepts only its tokens for itself, both on loopback.
type world struct {
	as, rs   *httptest.Server
	resource string // the resource server's MCP endpoint
	clock    *testclock.Clock
	// prm is the resource the metadata names; "" means the resource itself.
	prm string
}

func newWorld(t *testing.T, opts *issuer.Options) *world {
	t.Helper()
	w := &world{clock: testclock.New(time.Unix(1_800_000_000, 0))}
	w.as = httptest.NewServer(nil)
	t.Cleanup(w.as.Close)
	if opts == nil {
		opts = &issuer.Options{}
	}
	opts.Now = w.clock.Now
	iss, err := issuer.New(w.as.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	w.as.Config.Handler = iss.Handler()

	mux := http.NewServeMux()
	w.rs = httptest.NewServer(mux)
	t.Cleanup(w.rs.Close)
	w.resource = w.rs.URL + "/mcp"
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(rw http.ResponseWriter, _ *http.Request) {
		res := w.prm
		if res == "" {
			res = w.resource
		}
		json.NewEncoder(rw).Encode(ResourceMetadata{Resource: res, AuthorizationServers: []string{w.as.URL}, ScopesSupported: []string{"mcp", "extra"}})
	})
	mux.HandleFunc("/mcp", func(rw http.ResponseWriter, r *http.Request) {
		if err := w.verify(r); err != nil {
			rw.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="invalid_token", error_description=%q, resource_metadata="%s/.well-known/oauth-protected-resource/mcp", scope="mcp"`, err.Error(), w.rs.URL))
			http.Error(rw, err.Error(), http.StatusUnauthorized)
			return
		}
		rw.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	})
	return w
}

// verify checks the request's bearer token: signed by the issuer, for this resource.
func (w *world) verify(r *http.Request) error {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return errors.New("no bearer token")
	}
	resp, err := http.Get(w.as.URL + "/jwks")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var keys jose.JSONWebKeySet
	if err := json.NewDecoder(resp.Body).Decode(&keys); err != nil {
		return err
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return err
	}
	var claims jwt.Claims
	if err := tok.Claims(keys, &claims); err != nil {
		return err
	}
	return claims.ValidateWithLeeway(jwt.Expected{Issuer: w.as.URL, AnyAudience: jwt.Audience{w.resource}, Time: w.clock.Now()}, 0)
}

// call calls the resource server with token ("" for none).
func (w *world) call(t *testing.T, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, w.resource, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// flow discovers from the resource server's 401 and registers dynamically.
func (w *world) flow(t *testing.T, f *Fetcher) *Flow {
	t.Helper()
	ctx := context.Background()
	resp := w.call(t, "")
	ch, ok := ParseChallenge(resp.Header)
	if resp.StatusCode != http.StatusUnauthorized || !ok {
		t.Fatalf("unauthenticated call: %d %v, want 401 with a Bearer challenge", resp.StatusCode, resp.Header)
	}
	d, err := f.Discover(ctx, w.resource, &ch)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	c, err := f.Register(ctx, &d.Server, ClientConfig{ClientName: "Manifold", RedirectURI: redirectURI})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return &Flow{Fetcher: f, Discovery: d, Client: c, RedirectURI: redirectURI, Now: w.clock.Now}
}

// authorize starts an authorization and returns the query the authorization server sends
// back to the redirect URI.
func authorize(t *testing.T, fl *Flow, store *PendingStore) (*Pending, url.Values) {
	t.Helper()
	p, err := fl.Start("alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(p); err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.Get(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), redirectURI+"?") {
		t.Fatalf("authorize: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return p, loc.Query()
}

// TestFullFlow: discovery from a 401 → dynamic registration → authorize → callback → token
// accepted by the resource server → refresh (rotated) → revoke; the callback's answer cannot
// be replayed.
func TestFullFlow(t *testing.T) {
	w := newWorld(t, nil)
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	fl := w.flow(t, f)
	ctx := context.Background()
	if fl.Discovery.Resource != w.resource || fl.Discovery.Server.Issuer != w.as.URL || fl.Client.How != HowDynamic || fl.Client.Method != "none" {
		t.Errorf("discovered %+v, client %+v", fl.Discovery, fl.Client)
	}
	if diff := cmp.Diff([]string{"mcp"}, fl.Discovery.Scopes); diff != "" {
		t.Errorf("scopes (the challenge's, not all supported) (-want +got):\n%s", diff)
	}
	store := NewPendingStore(0, w.clock.Now)
	p, answer := authorize(t, fl, store)
	u, _ := url.Parse(p.URL)
	for k, want := range map[string]string{"resource": w.resource, "code_challenge_method": "S256", "scope": "mcp", "client_id": fl.Client.ID, "state": p.State} {
		if got := u.Query().Get(k); got != want {
			t.Errorf("authorize URL %s = %q, want %q", k, got, want)
		}
	}
	tok, got, err := fl.Callback(ctx, store, "alice", answer)
	if err != nil {
		t.Fatalf("Callback: %v", err)
	}
	if got.Owner != "alice" || tok.RefreshToken == "" || !tok.Expiry.Equal(w.clock.Now().Add(time.Hour)) {
		t.Errorf("token %+v for %q, want a refresh token, expiry in an hour, owner alice", tok, got.Owner)
	}
	if resp := w.call(t, tok.AccessToken); resp.StatusCode != http.StatusOK {
		t.Errorf("call with the token: %d, want 200", resp.StatusCode)
	}
	if _, _, err := fl.Callback(ctx, store, "alice", answer); !errors.Is(err, ErrMismatch) {
		t.Errorf("the same answer again: %v, want %v", err, ErrMismatch)
	}

	w.clock.Advance(50 * time.Minute)
	if !tok.Valid(w.clock.Now(), time.Minute) || tok.Valid(w.clock.Now(), 11*time.Minute) {
		t.Errorf("Valid at 50 minutes of 60: wrong with skews 1 and 11 minutes")
	}
	renewed, err := fl.Refresh(ctx, tok)
	if err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if renewed.RefreshToken == "" || renewed.RefreshToken == tok.RefreshToken || !renewed.Expiry.Equal(w.clock.Now().Add(time.Hour)) {
		t.Errorf("refreshed %+v, want a rotated refresh token and expiry an hour from now", renewed)
	}
	if resp := w.call(t, renewed.AccessToken); resp.StatusCode != http.StatusOK {
		t.Errorf("call with the refreshed token: %d, want 200", resp.StatusCode)
	}
	if err := fl.Revoke(ctx, renewed); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	_, err = fl.Refresh(ctx, renewed)
	if oe, ok := errors.AsType[*OAuthError](err); !ok || oe.Code != "invalid_grant" {
		t.Errorf("refresh after revocation: %v, want invalid_grant", err)
	}
}

// TestRefreshKeepsAnUnrotatedToken: when the server answers a refresh without a new refresh
// token, the old one is kept, and works again.
func TestRefreshKeepsAnUnrotatedToken(t *testing.T) {
	w := newWorld(t, &issuer.Options{KeepRefreshTokens: true})
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	fl := w.flow(t, f)
	store := NewPendingStore(0, w.clock.Now)
	_, answer := authorize(t, fl, store)
	tok, _, err := fl.Callback(context.Background(), store, "alice", answer)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		renewed, err := fl.Refresh(context.Background(), tok)
		if err != nil || renewed.RefreshToken != tok.RefreshToken {
			t.Fatalf("Refresh: %v, refresh token %q, want %q kept", err, renewed.RefreshToken, tok.RefreshToken)
		}
		tok = renewed
	}
}

// TestCallbackRefuses: an answer with another iss, without the iss the server advertises,
// with another state, brought back by another user than the one who started it, or past its
// time is refused before the code is redeemed.
func TestCallbackRefuses(t *testing.T) {
	w := newWorld(t, nil)
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	fl := w.flow(t, f)
	store := NewPendingStore(0, w.clock.Now)
	keep := func(url.Values) {}
	tests := []struct {
		name   string
		owner  string // the user at the callback; the flow was started by alice
		change func(url.Values)
		want   string
	}{
		{"another iss", "alice", func(q url.Values) { q.Set("iss", "https://evil.example.com") }, "not " + w.as.URL},
		{"no iss", "alice", func(q url.Values) { q.Del("iss") }, "lacks the iss"},
		{"two iss", "alice", func(q url.Values) { q.Add("iss", w.as.URL) }, "RFC 9207"},
		{"unknown state", "alice", func(q url.Values) { q.Set("state", "forged") }, "no authorization is waiting"},
		{"another user completes it", "mallory", keep, "another user"},
		{"no user completes it", "", keep, "another user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, answer := authorize(t, fl, store)
			tt.change(answer)
			if _, _, err := fl.Callback(context.Background(), store, tt.owner, answer); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Callback: %v, want %v naming %q", err, ErrMismatch, tt.want)
			}
			// The code is still unredeemed: the refusal came first.
			if _, err := fl.Exchange(context.Background(), p, url.Values{"state": {p.State}, "iss": {w.as.URL}, "code": answer["code"]}); err != nil {
				t.Errorf("the code after the refusal: %v, want it still redeemable", err)
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		_, answer := authorize(t, fl, store)
		w.clock.Advance(pendingLifetime + time.Second)
		if _, _, err := fl.Callback(context.Background(), store, "alice", answer); !errors.Is(err, ErrMismatch) {
			t.Errorf("Callback after %v: %v, want %v", pendingLifetime, err, ErrMismatch)
		}
	})
}

// TestDiscoverRefuses: metadata for another resource, an authorization server whose metadata
// names another issuer, targets inside the network, and a redirect to another host.
func TestDiscoverRefuses(t *testing.T) {
	ctx := context.Background()
	allow := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer allow.CloseIdleConnections()

	t.Run("resource of another server", func(t *testing.T) {
		for _, res := range []string{"https://other.example.com/mcp", "RS/other", "RS/mcp/deeper"} {
			w := newWorld(t, nil)
			w.prm = strings.Replace(res, "RS", w.rs.URL, 1)
			if _, err := allow.Discover(ctx, w.resource, nil); !errors.Is(err, ErrMismatch) {
				t.Errorf("metadata naming %s: %v, want %v", w.prm, err, ErrMismatch)
			}
		}
	})
	t.Run("resource of its origin", func(t *testing.T) {
		w := newWorld(t, nil)
		w.prm = w.rs.URL + "/"
		d, err := allow.Discover(ctx, w.resource, nil)
		if err != nil || d.Resource != w.rs.URL {
			t.Errorf("metadata naming the origin: %v, %+v", err, d)
		}
		if diff := cmp.Diff([]string{"mcp", "extra"}, d.Scopes); err == nil && diff != "" {
			t.Errorf("scopes without a challenge (-want +got):\n%s", diff)
		}
	})
	t.Run("issuer of another server", func(t *testing.T) {
		w := newWorld(t, nil)
		fake := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(rw).Encode(ServerMetadata{Issuer: w.as.URL, AuthorizationEndpoint: w.as.URL + "/authorize", TokenEndpoint: w.as.URL + "/token",
				CodeChallengeMethodsSupported: []string{"S256"}})
		}))
		defer fake.Close()
		if _, err := allow.ServerMetadata(ctx, fake.URL); !errors.Is(err, ErrMismatch) {
			t.Errorf("metadata naming issuer %s fetched for %s: %v, want %v", w.as.URL, fake.URL, err, ErrMismatch)
		}
	})
	t.Run("no PKCE", func(t *testing.T) {
		fake := httptest.NewServer(nil)
		defer fake.Close()
		fake.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			json.NewEncoder(rw).Encode(ServerMetadata{Issuer: fake.URL, AuthorizationEndpoint: fake.URL + "/authorize", TokenEndpoint: fake.URL + "/token"})
		})
		if _, err := allow.ServerMetadata(ctx, fake.URL); err == nil || !strings.Contains(err.Error(), "S256") {
			t.Errorf("metadata without code_challenge_methods_supported: %v, want refused", err)
		}
	})
	t.Run("loopback by default", func(t *testing.T) {
		w := newWorld(t, nil)
		if _, err := NewFetcher(nil).Discover(ctx, w.resource, nil); !errors.Is(err, ErrForbiddenTarget) {
			t.Errorf("Discover of a loopback server by default: %v, want %v", err, ErrForbiddenTarget)
		}
	})
	t.Run("challenge pointing at cloud metadata", func(t *testing.T) {
		w := newWorld(t, nil)
		ch := &Challenge{ResourceMetadata: "https://169.254.169.254/latest/meta-data/"}
		if _, err := allow.Discover(ctx, w.resource, ch); !errors.Is(err, ErrForbiddenTarget) {
			t.Errorf("Discover: %v, want %v", err, ErrForbiddenTarget)
		}
	})
	t.Run("redirect to another host", func(t *testing.T) {
		w := newWorld(t, nil)
		jump := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			http.Redirect(rw, r, strings.Replace(w.rs.URL, "127.0.0.1", "localhost", 1)+r.URL.Path, http.StatusFound)
		}))
		defer jump.Close()
		ch := &Challenge{ResourceMetadata: jump.URL + "/.well-known/oauth-protected-resource/mcp"}
		if _, err := allow.Discover(ctx, w.resource, ch); !errors.Is(err, ErrForbiddenTarget) || !strings.Contains(err.Error(), "another host") {
			t.Errorf("Discover: %v, want %v for another host", err, ErrForbiddenTarget)
		}
	})
}

// TestOpenIDFallbackAndConfiguredScopes: an authorization server with OpenID Connect
// discovery only is found; configured scopes replace the challenge's.
func TestOpenIDFallbackAndConfiguredScopes(t *testing.T) {
	w := newWorld(t, nil)
	inner := w.as.Config.Handler
	w.as.Config.Handler = http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-authorization-server" {
			http.NotFound(rw, r)
			return
		}
		inner.ServeHTTP(rw, r)
	})
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	fl := w.flow(t, f)
	fl.Scopes = []string{"files:read", "mcp"}
	p, err := fl.Start("alice")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(p.URL)
	if got := u.Query().Get("scope"); got != "files:read mcp" {
		t.Errorf("scope = %q, want the configured scopes", got)
	}
}

package issuer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8090": true, "[::1]:8090": true, "localhost:8090": true, "127.0.0.1:0": true,
		"0.0.0.0:8090": false, ":8090": false, "[::]:8090": false, "192.0.2.1:8090": false, "example.com:8090": false, "127.0.0.1": false,
	} {
		if err := CheckLoopback(addr); (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// start serves a new issuer whose clock is *now.
func start(t *testing.T, now *time.Time) (*Issuer, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	iss, err := New(srv.URL, &Options{Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = iss.Handler()
	return iss, srv
}

// noRedirects is a client that returns each redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestTokenByClientCredentials: a token for the demo user, with the resource asked for as
// its audience (or the default), verifiable with the published keys.
func TestTokenByClientCredentials(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	iss, srv := start(t, &now)
	var keys jose.JSONWebKeySet
	resp, err := http.Get(srv.URL + "/jwks")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&keys)
	resp.Body.Close()
	for _, tc := range []struct{ resource, wantAud string }{
		{"https://gw.example.com/mcp", "https://gw.example.com/mcp"},
		{"", "http://127.0.0.1:8080/mcp"},
	} {
		resp, err := http.PostForm(srv.URL+"/token", url.Values{"grant_type": {"client_credentials"}, "resource": {tc.resource}})
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			AccessToken string `json:"access_token"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		tok, err := jwt.ParseSigned(body.AccessToken, []jose.SignatureAlgorithm{jose.RS256})
		if err != nil {
			t.Fatalf("resource %q: %v", tc.resource, err)
		}
		var claims jwt.Claims
		var extra struct {
			Scope  string   `json:"scope"`
			Groups []string `json:"groups"`
		}
		if err := tok.Claims(keys.Keys[0].Key, &claims, &extra); err != nil {
			t.Fatalf("the token does not verify with the published key: %v", err)
		}
		if err := claims.Validate(jwt.Expected{Issuer: iss.URL(), Subject: Subject, AnyAudience: []string{tc.wantAud}, Time: now}); err != nil || extra.Scope != DefaultScope || len(extra.Groups) != 1 {
			t.Errorf("resource %q: claims %+v %+v: %v", tc.resource, claims, extra, err)
		}
	}
}

// TestAuthorizeRefuses: the authorize endpoint redirects only to loopback, requires PKCE
// S256, and its codes expire.
func TestAuthorizeRefuses(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	_, srv := start(t, &now)
	authorize := func(q url.Values) *http.Response {
		resp, err := noRedirects.Get(srv.URL + "/authorize?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	good := url.Values{"response_type": {"code"}, "client_id": {"c"}, "redirect_uri": {"http://localhost:6274/oauth/callback"},
		"code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"}, "code_challenge_method": {"S256"}, "state": {"s"}}
	with := func(k, v string) url.Values {
		q := url.Values{}
		for key, vals := range good {
			q[key] = vals
		}
		q.Set(k, v)
		return q
	}
	if resp := authorize(with("redirect_uri", "https://attacker.example.com/cb")); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a redirect beyond loopback: %d, want 400 and no redirect", resp.StatusCode)
	}
	for name, q := range map[string]url.Values{"no PKCE": with("code_challenge", ""), "plain PKCE": with("code_challenge_method", "plain")} {
		resp := authorize(q)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusFound || loc.Query().Get("error") != "invalid_request" || loc.Query().Get("code") != "" {
			t.Errorf("%s: %d to %s, want a redirect with invalid_request and no code", name, resp.StatusCode, loc)
		}
	}
	resp := authorize(good)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if resp.StatusCode != http.StatusFound || code == "" || !strings.HasPrefix(loc.String(), "http://localhost:6274/oauth/callback?") {
		t.Fatalf("authorize: %d to %s", resp.StatusCode, loc)
	}
	now = now.Add(codeLifetime + time.Second)
	// The verifier of the challenge above, from RFC 7636 appendix B.
	tr, err := http.PostForm(srv.URL+"/token", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {"c"},
		"redirect_uri": {"http://localhost:6274/oauth/callback"}, "code_verifier": {"dBjftJeZ4CVP-mJ92K9TQYnBamlFdoyjs28t2H8mnTs"}})
	if err != nil {
		t.Fatal(err)
	}
	tr.Body.Close()
	if tr.StatusCode != http.StatusBadRequest {
		t.Errorf("an expired code: %d, want 400", tr.StatusCode)
	}
}

// TestHostMustBeLoopback: a request whose Host is not loopback (DNS rebinding) is refused.
func TestHostMustBeLoopback(t *testing.T) {
	now := time.Now()
	_, srv := start(t, &now)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/.well-known/openid-configuration", nil)
	req.Host = "rebound.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host rebound.example.com: %d, want 403", resp.StatusCode)
	}
}

// TestBrowserClientsMayCall: a client running in a browser on a loopback origin (an
// inspector on localhost) may fetch the metadata and post to the token endpoint (CORS, with
// its preflight); its origin is echoed, never "*".
func TestBrowserClientsMayCall(t *testing.T) {
	now := time.Now()
	_, srv := start(t, &now)
	for _, origin := range []string{"http://localhost:6274", "http://127.0.0.1:6274", "http://[::1]:6274", "http://LOCALHOST", "https://localhost:8443"} {
		t.Run(origin, func(t *testing.T) {
			resp := corsRequest(t, http.MethodOptions, srv.URL+"/token", origin)
			if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != origin || !strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
				t.Errorf("preflight of /token: %d %v", resp.StatusCode, resp.Header)
			}
			resp = corsRequest(t, http.MethodGet, srv.URL+"/.well-known/oauth-authorization-server", origin)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != origin || !slices.Contains(resp.Header.Values("Vary"), "Origin") {
				t.Errorf("metadata: %d %v", resp.StatusCode, resp.Header)
			}
		})
	}
}

// TestOtherOriginsMayNotRead: a web page of any origin but loopback, open in the user's
// browser, gets no CORS grant, so it cannot read the token that the auto-approving
// authorization would give it.
func TestOtherOriginsMayNotRead(t *testing.T) {
	now := time.Now()
	_, srv := start(t, &now)
	for _, origin := range []string{"https://evil.example.com", "http://localhost.evil.example", "http://127.0.0.1.evil.example:80",
		"null", "http://10.0.0.1:6274", "file://", "http://localhost:6274/path", "http://user@localhost:6274", ""} {
		t.Run(origin, func(t *testing.T) {
			for _, r := range []struct{ method, path string }{
				{http.MethodOptions, "/token"},
				{http.MethodGet, "/.well-known/oauth-authorization-server"},
				{http.MethodPost, "/token"},
				{http.MethodPost, "/register"},
			} {
				resp := corsRequest(t, r.method, srv.URL+r.path, origin)
				for k := range resp.Header {
					if strings.HasPrefix(k, "Access-Control-") {
						t.Errorf("%s %s from %q: %s: %q, want no CORS header", r.method, r.path, origin, k, resp.Header.Get(k))
					}
				}
			}
		})
	}
}

// corsRequest sends an empty request of method to u with the Origin header (none if ""), as
// a browser's fetch or preflight would, and returns its closed response.
func corsRequest(t *testing.T, method, u, origin string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if method == http.MethodOptions {
		req.Header.Set("Access-Control-Request-Method", "POST")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestRefreshRotatesAndRevokes: a code's token comes with a refresh token that works once
// (rotated), and whose successor stops working once revoked; with KeepRefreshTokens the same
// refresh token keeps working.
func TestRefreshRotatesAndRevokes(t *testing.T) {
	for _, keep := range []bool{false, true} {
		now := time.Now()
		iss, srv := start(t, &now)
		iss.keepRefresh = keep
		post := func(endpoint string, form url.Values) (int, map[string]any) {
			t.Helper()
			resp, err := http.PostForm(srv.URL+endpoint, form)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, body
		}
		redirect := "http://127.0.0.1:9/cb"
		resp, err := noRedirects.Get(srv.URL + "/authorize?" + url.Values{"response_type": {"code"}, "client_id": {"c"}, "redirect_uri": {redirect},
			"code_challenge": {"jm5gr0EqWmg3YitUcFQSGfIbZMy5EguOAoAfpNAUYRM"}, "code_challenge_method": {"S256"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		status, body := post("/token", url.Values{"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {"c"},
			"redirect_uri": {redirect}, "code_verifier": {"dBjftJeZ4CVP-mJ92K9TQYnBamlFdoyjs28t2H8mnTs"}})
		first, _ := body["refresh_token"].(string)
		if status != http.StatusOK || first == "" {
			t.Fatalf("keep=%v: code redeemed: %d %v, want a refresh token", keep, status, body)
		}
		status, body = post("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {first}, "client_id": {"c"}})
		second, _ := body["refresh_token"].(string)
		if status != http.StatusOK || body["access_token"] == nil || (second == "") != keep {
			t.Fatalf("keep=%v: refresh: %d %v", keep, status, body)
		}
		if keep {
			second = first
		}
		if status, _ := post("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {first}, "client_id": {"c"}}); (status == http.StatusOK) != keep {
			t.Errorf("keep=%v: the first refresh token again: %d", keep, status)
		}
		if status, _ := post("/revoke", url.Values{"token": {second}, "client_id": {"c"}}); status != http.StatusOK {
			t.Errorf("keep=%v: revoke: %d, want 200", keep, status)
		}
		if status, _ := post("/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {second}, "client_id": {"c"}}); status != http.StatusBadRequest {
			t.Errorf("keep=%v: a revoked refresh token: %d, want 400", keep, status)
		}
	}
}

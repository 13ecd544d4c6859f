package connect

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// fakeAS is an authorization server for the tests, which also serves as the gateway's own
// OpenID Connect issuer (it adds an id_token when openid is asked) and as the protected
// resource "/mcp" whose metadata names it. Its /authorize approves, as the user named by the
// browser's fake_user cookie, without a page, unless told to deny (access_denied).
type fakeAS struct {
	URL    string
	now    func() time.Time
	key    *rsa.PrivateKey
	signer jose.Signer

	// mu guards the fields below.
	mu sync.Mutex
	// codes and refresh are the live authorization codes and refresh tokens.
	codes   map[string]fakeCode
	refresh map[string]fakeCode
	// revoked lists the tokens revoked, in order.
	revoked []string
	// tokens counts the token requests, by grant type.
	tokens map[string]int
	// serial numbers the tokens issued.
	serial int
	// deny makes /authorize refuse everyone.
	deny bool
	// down makes the metadata documents answer 503.
	down bool
	// clients are the dynamically registered client ids.
	clients []string
}

// fakeCode is what a code or refresh token was issued for.
type fakeCode struct {
	client, redirect, challenge, user, scope, nonce string
}

// newFakeAS starts a fakeAS whose clock is now; it stops when the test ends.
func newFakeAS(t *testing.T, now func() time.Time) *fakeAS {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	as := &fakeAS{now: now, key: key, signer: signer, codes: map[string]fakeCode{}, refresh: map[string]fakeCode{}, tokens: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", as.resourceMetadata)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", as.metadata)
	mux.HandleFunc("GET /.well-known/openid-configuration", as.metadata)
	mux.HandleFunc("GET /jwks", as.jwks)
	mux.HandleFunc("GET /authorize", as.authorize)
	mux.HandleFunc("POST /token", as.token)
	mux.HandleFunc("POST /revoke", as.revoke)
	mux.HandleFunc("POST /register", as.register)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	as.URL = srv.URL
	return as
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// isDown answers 503 and reports true while the server is set down.
func (as *fakeAS) isDown(w http.ResponseWriter) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}
	return as.down
}

// setDown makes the metadata documents answer 503 (down) or be served again.
func (as *fakeAS) setDown(down bool) {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.down = down
}

func (as *fakeAS) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	if as.isDown(w) {
		return
	}
	writeJSON(w, 200, map[string]any{"resource": as.URL + "/mcp", "authorization_servers": []string{as.URL},
		"scopes_supported": []string{"repo", "read:user"}})
}

func (as *fakeAS) metadata(w http.ResponseWriter, r *http.Request) {
	if as.isDown(w) {
		return
	}
	writeJSON(w, 200, map[string]any{
		"issuer": as.URL, "authorization_endpoint": as.URL + "/authorize", "token_endpoint": as.URL + "/token",
		"revocation_endpoint": as.URL + "/revoke", "jwks_uri": as.URL + "/jwks", "registration_endpoint": as.URL + "/register",
		"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"},
		"authorization_response_iss_parameter_supported": true,
	})
}

func (as *fakeAS) jwks(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &as.key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
}

func (as *fakeAS) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c, err := r.Cookie("fake_user")
	if err != nil {
		http.Error(w, "no fake_user cookie", http.StatusUnauthorized)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("state") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	answer := url.Values{"state": {q.Get("state")}, "iss": {as.URL}}
	as.mu.Lock()
	deny := as.deny
	as.mu.Unlock()
	if deny {
		answer.Set("error", "access_denied")
	} else {
		code := as.next("code")
		as.mu.Lock()
		as.codes[code] = fakeCode{client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge"),
			user: c.Value, scope: q.Get("scope"), nonce: q.Get("nonce")}
		as.mu.Unlock()
		answer.Set("code", code)
	}
	back.RawQuery = answer.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

// next returns a new token of kind.
func (as *fakeAS) next(kind string) string {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.serial++
	return fmt.Sprintf("%s-%d", kind, as.serial)
}

func (as *fakeAS) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	client := r.PostForm.Get("client_id")
	if id, _, ok := r.BasicAuth(); ok {
		client = id
	}
	grantType := r.PostForm.Get("grant_type")
	as.mu.Lock()
	as.tokens[grantType]++
	var g fakeCode
	var ok bool
	switch grantType {
	case "authorization_code":
		g, ok = as.codes[r.PostForm.Get("code")]
		delete(as.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		ok = ok && g.client == client && g.redirect == r.PostForm.Get("redirect_uri") &&
			g.challenge == base64.RawURLEncoding.EncodeToString(sum[:])
	case "refresh_token":
		g, ok = as.refresh[r.PostForm.Get("refresh_token")]
		delete(as.refresh, r.PostForm.Get("refresh_token")) // rotation
		ok = ok && g.client == client
	}
	as.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
		return
	}
	access, refresh := as.next("at"), as.next("rt")
	as.mu.Lock()
	as.refresh[refresh] = g
	as.mu.Unlock()
	answer := map[string]any{"access_token": access, "token_type": "Bearer", "refresh_token": refresh, "expires_in": 3600}
	if g.scope != "" && !strings.Contains(g.scope, "openid") {
		answer["scope"] = g.scope
	}
	if strings.Contains(g.scope, "openid") && grantType == "authorization_code" {
		idt, err := as.idToken(g)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		answer["id_token"] = idt
	}
	writeJSON(w, 200, answer)
}

// idToken signs the ID token of g.
func (as *fakeAS) idToken(g fakeCode) (string, error) {
	now := as.now()
	claims, err := json.Marshal(map[string]any{"iss": as.URL, "sub": g.user, "aud": g.client, "nonce": g.nonce,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "email": g.user + "@example.com"})
	if err != nil {
		return "", err
	}
	jws, err := as.signer.Sign(claims)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

func (as *fakeAS) revoke(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	as.mu.Lock()
	as.revoked = append(as.revoked, r.PostForm.Get("token"))
	delete(as.refresh, r.PostForm.Get("token"))
	as.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (as *fakeAS) register(w http.ResponseWriter, r *http.Request) {
	var md struct {
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(r.Body).Decode(&md); err != nil || len(md.RedirectURIs) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id := as.next("dyn")
	as.mu.Lock()
	as.clients = append(as.clients, id)
	as.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"client_id": id, "token_endpoint_auth_method": "none", "redirect_uris": md.RedirectURIs})
}

// registrations returns how many clients registered dynamically.
func (as *fakeAS) registrations() int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return len(as.clients)
}

// revokedTokens returns the tokens revoked so far.
func (as *fakeAS) revokedTokens() []string {
	as.mu.Lock()
	defer as.mu.Unlock()
	return append([]string(nil), as.revoked...)
}

// tokenRequests returns how many token requests of grantType were made.
func (as *fakeAS) tokenRequests(grantType string) int {
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.tokens[grantType]
}

// denyAll makes the server refuse every authorization from now on.
func (as *fakeAS) denyAll() {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.deny = true
}

// forgetRefreshTokens makes every refresh token invalid (the user revoked the grant at the
// server).
func (as *fakeAS) forgetRefreshTokens() {
	as.mu.Lock()
	defer as.mu.Unlock()
	clear(as.refresh)
}

// Package issuer is a small OpenID Connect issuer for trying the gateway's authentication
// offline: `gateway demo -issuer 127.0.0.1:PORT` serves it on loopback. It publishes a
// discovery document (also as RFC 8414 authorization server metadata) and a JWKS, registers
// any client (RFC 7591), and issues access tokens for one fixed demo user: by client
// credentials, or by the authorization code flow with PKCE (S256), whose authorize endpoint
// approves every request at once and redirects to a loopback redirect URI. A code's token
// comes with a refresh token, rotated at each use (or kept, Options.KeepRefreshTokens), and
// revocable at its RFC 7009 revocation endpoint.
//
// It is no identity provider: anyone who can reach it gets a token. It refuses to listen
// beyond loopback (CheckLoopback), answers only requests whose Host names loopback, and lets
// only web pages of loopback origins (http://localhost:*, http://127.0.0.1:*,
// http://[::1]:*, or https) read its answers (CORS): a page from elsewhere open in the
// user's browser gets no token.
//
//	iss, err := issuer.New("http://127.0.0.1:8090", nil)
//	srv := &http.Server{Handler: iss.Handler()}
//
// Tokens are JWTs (typ at+jwt, RS256, kid "demo-1") whose aud is the resource the request
// names (RFC 8707), or Options.Audience.
package issuer

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// The demo user every token is issued for.
const (
	Subject = "demo-user"
	Email   = "demo@example.com"
	Name    = "Demo User"
	Group   = "demo"
)

// DefaultScope is the scope of a token whose request names none.
const DefaultScope = "mcp"

// tokenLifetime is how long a token is valid; codeLifetime how long an authorization code.
const (
	tokenLifetime = time.Hour
	codeLifetime  = time.Minute
	// maxCodes bounds the codes issued and not yet redeemed; maxRefresh the live refresh
	// tokens (past it, a token comes without one).
	maxCodes   = 1024
	maxRefresh = 4096
	kid        = "demo-1"
)

// Options are an Issuer's settings; nil means the zero value.
type Options struct {
	// Audience is the aud of a token whose request names no resource; "" means the gateway's
	// default resource on loopback, http://127.0.0.1:8080/mcp.
	Audience string
	// Now gives the time of tokens and codes; nil means time.Now.
	Now func() time.Time
	// KeepRefreshTokens makes the refresh grant answer without a new refresh token, as an
	// authorization server that does not rotate them; false rotates at each use.
	KeepRefreshTokens bool
}

// Issuer issues tokens for the demo user. It is safe for concurrent use.
type Issuer struct {
	url      string
	audience string
	now      func() time.Time
	key      *rsa.PrivateKey
	signer   jose.Signer

	keepRefresh bool

	// mu guards codes, the authorization codes issued and not yet redeemed or expired, and
	// refresh, the refresh tokens issued and not yet rotated or revoked.
	mu      sync.Mutex
	codes   map[string]grant
	refresh map[string]grant
}

// grant is what an authorization code was issued for.
type grant struct {
	clientID    string
	redirectURI string
	challenge   string
	resource    string
	scope       string
	expires     time.Time
}

// CheckLoopback returns an error unless addr (host:port) binds a loopback address: the demo
// issuer hands tokens to anyone who asks.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port, like 127.0.0.1:8090", addr)
	}
	if !loopback.Host(host) {
		return fmt.Errorf("%q is not a loopback address: the demo issuer gives a token to anyone who asks, so it listens on localhost, 127.0.0.1 or [::1] only", addr)
	}
	return nil
}

// New returns an issuer whose identifier (the iss of its tokens and the base of its
// endpoints) is issuerURL, with a signing key of its own, made now: tokens do not outlive
// the process.
func New(issuerURL string, opts *Options) (*Issuer, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := url.Parse(issuerURL)
	if err != nil || u.Scheme != "http" || !loopback.Host(u.Host) || u.Path != "" {
		return nil, fmt.Errorf("issuer URL %q: want http://127.0.0.1:PORT (loopback, no path)", issuerURL)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("make the signing key: %w", err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: string(jose.RS256)}},
		(&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		return nil, fmt.Errorf("make the signer: %w", err)
	}
	i := &Issuer{url: issuerURL, audience: opts.Audience, now: opts.Now, key: key, signer: signer, codes: map[string]grant{},
		refresh: map[string]grant{}, keepRefresh: opts.KeepRefreshTokens}
	if i.audience == "" {
		i.audience = "http://127.0.0.1:8080/mcp"
	}
	if i.now == nil {
		i.now = time.Now
	}
	return i, nil
}

// URL is the issuer identifier.
func (i *Issuer) URL() string { return i.url }

// Handler serves the issuer's endpoints.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.serveMetadata)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", i.serveMetadata)
	mux.HandleFunc("GET /jwks", i.serveJWKS)
	mux.HandleFunc("POST /register", i.serveRegister)
	mux.HandleFunc("GET /authorize", i.serveAuthorize)
	mux.HandleFunc("POST /token", i.serveToken)
	mux.HandleFunc("POST /revoke", i.serveRevoke)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopback.Host(r.Host) {
			writeJSON(w, http.StatusForbidden, oauthError{"invalid_request", "the demo issuer answers only on loopback (localhost, 127.0.0.1, [::1])"})
			return
		}
		// A browser-based client on this machine (the MCP Inspector) fetches the metadata,
		// registers and redeems its code from its own loopback origin. No other origin may
		// read an answer: /authorize approves at once, so any web page the user opens could
		// otherwise obtain a token.
		w.Header().Add("Vary", "Origin")
		origin := r.Header.Get("Origin")
		allowed := loopbackOrigin(origin)
		if allowed {
			w.Header().Set("Access-Control-Allow-Origin", origin)
		}
		if r.Method == http.MethodOptions {
			if allowed {
				w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
				w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// loopbackOrigin reports whether origin (an Origin header) is a web origin on this machine's
// loopback interface: http or https, host localhost or a loopback address, any port.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false
	}
	return loopback.Host(u.Host)
}

func (i *Issuer) serveMetadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                           i.url,
		"authorization_endpoint":           i.url + "/authorize",
		"token_endpoint":                   i.url + "/token",
		"jwks_uri":                         i.url + "/jwks",
		"registration_endpoint":            i.url + "/register",
		"revocation_endpoint":              i.url + "/revoke",
		"response_types_supported":         []string{"code"},
		"grant_types_supported":            []string{"authorization_code", "client_credentials", "refresh_token"},
		"code_challenge_methods_supported": []string{"S256"},
		// The redirect carries iss (RFC 9207), which clients check against the issuer.
		"authorization_response_iss_parameter_supported": true,
		"token_endpoint_auth_methods_supported":          []string{"none", "client_secret_post", "client_secret_basic"},
		"subject_types_supported":                        []string{"public"},
		"id_token_signing_alg_values_supported":          []string{"RS256"},
		"scopes_supported":                               []string{DefaultScope},
	})
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: i.key.Public(), KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}}})
}

// serveRegister registers any client (RFC 7591): its id is made up, and no secret is needed.
func (i *Issuer) serveRegister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RedirectURIs []string `json:"redirect_uris"`
		ClientName   string   `json:"client_name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError{"invalid_client_metadata", "the body must be JSON client metadata"})
		return
	}
	for _, u := range req.RedirectURIs {
		if err := checkRedirect(u); err != nil {
			writeJSON(w, http.StatusBadRequest, oauthError{"invalid_redirect_uri", err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id":                  "demo-" + randomString(8),
		"client_name":                req.ClientName,
		"redirect_uris":              req.RedirectURIs,
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
	})
}

// serveAuthorize approves every request for the demo user at once: it redirects to the
// redirect URI with a code (and the state and iss, RFC 9207).
func (i *Issuer) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect := q.Get("redirect_uri")
	if err := checkRedirect(redirect); err != nil {
		// Not a redirect URI to send an error to (RFC 6749 §4.1.2.1).
		writeJSON(w, http.StatusBadRequest, oauthError{"invalid_request", err.Error()})
		return
	}
	target, _ := url.Parse(redirect)
	answer := target.Query()
	fail := func(code, description string) {
		answer.Set("error", code)
		answer.Set("error_description", description)
		answer.Set("state", q.Get("state"))
		target.RawQuery = answer.Encode()
		http.Redirect(w, r, target.String(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code":
		fail("unsupported_response_type", "response_type must be code")
		return
	case q.Get("client_id") == "":
		fail("invalid_request", "client_id is required")
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		fail("invalid_request", "PKCE is required: send code_challenge with code_challenge_method S256")
		return
	}
	code := randomString(24)
	g := grant{clientID: q.Get("client_id"), redirectURI: redirect, challenge: q.Get("code_challenge"),
		resource: q.Get("resource"), scope: q.Get("scope"), expires: i.now().Add(codeLifetime)}
	i.mu.Lock()
	i.pruneLocked()
	full := len(i.codes) >= maxCodes
	if !full {
		i.codes[code] = g
	}
	i.mu.Unlock()
	if full {
		fail("temporarily_unavailable", "too many codes are waiting to be redeemed; try again in a minute")
		return
	}
	answer.Set("code", code)
	answer.Set("iss", i.url)
	if s := q.Get("state"); s != "" {
		answer.Set("state", s)
	}
	target.RawQuery = answer.Encode()
	http.Redirect(w, r, target.String(), http.StatusFound)
}

// pruneLocked forgets the expired codes. i.mu must be held.
func (i *Issuer) pruneLocked() {
	now := i.now()
	for c, g := range i.codes {
		if now.After(g.expires) {
			delete(i.codes, c)
		}
	}
}

// readForm reads the form of a token or revocation request, bounded, and the client it names
// (HTTP Basic, else client_id); ok=false when the body is no form, which it answered.
func readForm(w http.ResponseWriter, r *http.Request) (clientID string, ok bool) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError{"invalid_request", "the body must be a form (application/x-www-form-urlencoded)"})
		return "", false
	}
	clientID = r.PostForm.Get("client_id")
	if id, _, basic := r.BasicAuth(); basic {
		clientID = id
	}
	return clientID, true
}

// serveToken issues a token by client credentials (any client), for an authorization code
// and its PKCE verifier, or for a refresh token.
func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	clientID, ok := readForm(w, r)
	if !ok {
		return
	}
	var resource, scope, refresh string
	switch r.PostForm.Get("grant_type") {
	case "client_credentials":
		resource, scope = r.PostForm.Get("resource"), r.PostForm.Get("scope")
		if clientID == "" {
			clientID = "demo-client"
		}
	case "authorization_code":
		g, err := i.redeem(r.PostForm.Get("code"), clientID, r.PostForm.Get("redirect_uri"), r.PostForm.Get("code_verifier"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, oauthError{"invalid_grant", err.Error()})
			return
		}
		resource, scope = g.resource, g.scope
		if res := r.PostForm.Get("resource"); res != "" {
			resource = res
		}
		g.resource, g.scope = resource, scope
		refresh = i.issueRefresh(g)
	case "refresh_token":
		old := r.PostForm.Get("refresh_token")
		g, err := i.useRefresh(old, clientID)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, oauthError{"invalid_grant", err.Error()})
			return
		}
		resource, scope = g.resource, g.scope
		if !i.keepRefresh {
			refresh = i.issueRefresh(g)
		}
	default:
		writeJSON(w, http.StatusBadRequest, oauthError{"unsupported_grant_type", "grant_type must be client_credentials, authorization_code or refresh_token"})
		return
	}
	if resource == "" {
		resource = i.audience
	}
	if scope == "" {
		scope = DefaultScope
	}
	token, err := i.Token(resource, scope, clientID)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, oauthError{"server_error", err.Error()})
		return
	}
	answer := map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": int(tokenLifetime.Seconds()), "scope": scope}
	if refresh != "" {
		answer["refresh_token"] = refresh
	}
	writeJSON(w, http.StatusOK, answer)
}

// issueRefresh returns a new refresh token for g, or "" when too many are live.
func (i *Issuer) issueRefresh(g grant) string {
	token := randomString(24)
	i.mu.Lock()
	defer i.mu.Unlock()
	if len(i.refresh) >= maxRefresh {
		return ""
	}
	i.refresh[token] = g
	return token
}

// useRefresh returns the grant of a refresh token issued to clientID, and forgets the token
// unless the issuer keeps them (Options.KeepRefreshTokens).
func (i *Issuer) useRefresh(token, clientID string) (grant, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	g, ok := i.refresh[token]
	switch {
	case !ok:
		return grant{}, errors.New("the refresh token is unknown, rotated or revoked: run the authorization again")
	case clientID != g.clientID:
		return grant{}, errors.New("the refresh token was issued to another client_id")
	}
	if !i.keepRefresh {
		delete(i.refresh, token)
	}
	return g, nil
}

// serveRevoke revokes a refresh token (RFC 7009). Access tokens are self-contained JWTs that
// live out their hour; revoking one, or a token the issuer does not know, succeeds all the
// same (RFC 7009 §2.2).
func (i *Issuer) serveRevoke(w http.ResponseWriter, r *http.Request) {
	clientID, ok := readForm(w, r)
	if !ok {
		return
	}
	token := r.PostForm.Get("token")
	i.mu.Lock()
	if g, ok := i.refresh[token]; ok && g.clientID == clientID {
		delete(i.refresh, token)
	}
	i.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// redeem takes the code's grant once, checked against the token request.
func (i *Issuer) redeem(code, clientID, redirectURI, verifier string) (grant, error) {
	i.mu.Lock()
	g, ok := i.codes[code]
	delete(i.codes, code)
	i.mu.Unlock()
	switch {
	case !ok || i.now().After(g.expires):
		return grant{}, errors.New("the code is unknown, used or expired: run the authorization again")
	case clientID != g.clientID:
		return grant{}, errors.New("the code was issued to another client_id")
	case redirectURI != g.redirectURI:
		return grant{}, errors.New("redirect_uri is not the one the code was issued for")
	}
	sum := sha256.Sum256([]byte(verifier))
	if verifier == "" || base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
		return grant{}, errors.New("code_verifier does not match the code_challenge (PKCE S256)")
	}
	return g, nil
}

// Token signs an access token for the demo user, for resource (its aud), with scope, as
// issued to clientID.
func (i *Issuer) Token(resource, scope, clientID string) (string, error) {
	now := i.now().Unix()
	claims, err := json.Marshal(map[string]any{
		"iss": i.url, "sub": Subject, "aud": resource,
		"email": Email, "name": Name, "groups": []string{Group},
		"scope": scope, "client_id": clientID, "jti": randomString(12),
		"iat": now, "nbf": now, "exp": now + int64(tokenLifetime.Seconds()),
	})
	if err != nil {
		return "", err
	}
	jws, err := i.signer.Sign(claims)
	if err != nil {
		return "", fmt.Errorf("sign the token: %w", err)
	}
	return jws.CompactSerialize()
}

// checkRedirect admits an http redirect URI on loopback only: the authorize endpoint
// approves everything, so its codes must not leave this machine.
func checkRedirect(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || raw == "" || u.Scheme != "http" || !loopback.Host(u.Host) || u.Fragment != "" {
		return fmt.Errorf("redirect_uri %q: the demo issuer redirects only to http://localhost, 127.0.0.1 or [::1]", raw)
	}
	return nil
}

type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// randomString is n random bytes, base64url.
func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return strings.TrimRight(base64.RawURLEncoding.EncodeToString(b), "=")
}

package testissuer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/manifold-mcp/manifold/internal/loopback"
)

// The authorization server's paths, below URL.
const (
	AuthorizePath = "/authorize"
	TokenPath     = "/token"
	RevokePath    = "/revoke"
	RegisterPath  = "/register"
)

// UserCookie is the name of the cookie, set for URL by SignIn, whose value is the signed-in
// user that /authorize authorizes for.
const UserCookie = "testissuer_user"

// DefaultScopes are the scopes_supported when ScopesSupported is nil.
var DefaultScopes = []string{"openid", "profile", "email", "read", "write"}

// codeTTL is how long an authorization code may be redeemed.
const codeTTL = time.Minute

// ErrInvalidToken is wrapped by Check's refusal of a token.
var ErrInvalidToken = errors.New("invalid token")

// authState is the authorization server's state. Its zero value is not usable: call init.
type authState struct {
	// mu guards every field below.
	mu sync.Mutex
	// clients are the registered clients by id, and the Client ID Metadata Documents read.
	clients map[string]*client
	// codes are the authorization codes issued and not yet redeemed (a code is deleted at
	// its first redemption, good or bad).
	codes map[string]*authCode
	// refresh are the refresh tokens issued; one stays after rotation, marked used.
	refresh map[string]*refreshToken
	// access are the grants of the access tokens issued by the token endpoint, by jti.
	access map[string]*grant
	// revokedJTI are access tokens revoked one by one.
	revokedJTI map[string]bool
	// grants are every grant, to revoke a user's.
	grants []*grant

	tokenRequests  map[string]int
	revocations    int
	authorizations int
	lastAuthorize  url.Values
}

func (s *authState) init() {
	s.clients = map[string]*client{}
	s.codes = map[string]*authCode{}
	s.refresh = map[string]*refreshToken{}
	s.access = map[string]*grant{}
	s.revokedJTI = map[string]bool{}
	s.tokenRequests = map[string]int{}
}

// client is a registered client. A public client has no secret.
type client struct {
	id           string
	secret       string
	redirectURIs []string
}

// authCode is what an authorization code was issued for.
type authCode struct {
	clientID    string
	redirectURI string
	challenge   string
	user        string
	scope       string
	resources   []string
	nonce       string
	expires     time.Time
}

// grant is one user's authorization of one client: its refresh and access tokens die with
// it.
type grant struct {
	clientID  string
	user      string
	scope     string
	resources []string
	// clientCredentials marks a client credentials grant: no refresh token, no id_token.
	clientCredentials bool
	revoked           bool
}

// refreshToken is a refresh token of a grant; used is set when it is rotated.
type refreshToken struct {
	grant *grant
	used  bool
}

// handleAuthServer adds the authorization server's endpoints to mux.
func (i *Issuer) handleAuthServer(mux *http.ServeMux) {
	mux.HandleFunc("GET "+AuthorizePath, i.serveAuthorize)
	mux.HandleFunc("POST "+TokenPath, i.serveToken)
	mux.HandleFunc("POST "+RevokePath, i.serveRevoke)
	mux.HandleFunc("POST "+RegisterPath, i.serveRegister)
}

// SignIn makes user the signed-in user of c at the issuer: it sets the UserCookie for URL in
// c.Jar, making a cookie jar first when c has none. Call it before c follows an
// authorization URL; it is not safe to call concurrently with requests made by c.
func (i *Issuer) SignIn(c *http.Client, user string) {
	if c.Jar == nil {
		jar, err := cookiejar.New(nil)
		if err != nil {
			panic(fmt.Sprintf("testissuer: cookie jar: %v", err)) // cookiejar.New(nil) cannot fail
		}
		c.Jar = jar
	}
	c.Jar.SetCookies(i.base(), []*http.Cookie{{Name: UserCookie, Value: url.QueryEscape(user), Path: "/"}})
}

// SignOut removes the signed-in user from c's jar; it does nothing when c has no jar.
func (i *Issuer) SignOut(c *http.Client) {
	if c.Jar == nil {
		return
	}
	c.Jar.SetCookies(i.base(), []*http.Cookie{{Name: UserCookie, Value: "", Path: "/", MaxAge: -1}})
}

func (i *Issuer) base() *url.URL {
	u, err := url.Parse(i.URL)
	if err != nil {
		panic(fmt.Sprintf("testissuer: own URL %q: %v", i.URL, err)) // the httptest server's URL
	}
	return u
}

// RegisterClient registers a client: confidential with secret, public when secret is "".
// /authorize accepts only the redirect URIs given. Registering an id again replaces it.
func (i *Issuer) RegisterClient(id, secret string, redirectURIs ...string) {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	i.as.clients[id] = &client{id: id, secret: secret, redirectURIs: slices.Clone(redirectURIs)}
}

// TokenRequests reports how many token requests of grantType ("authorization_code",
// "refresh_token", "client_credentials", or any other value sent) the token endpoint got,
// refused ones included.
func (i *Issuer) TokenRequests(grantType string) int {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	return i.as.tokenRequests[grantType]
}

// Revocations reports how many requests the revocation endpoint got.
func (i *Issuer) Revocations() int {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	return i.as.revocations
}

// Authorizations reports how many requests the authorize endpoint got, refused ones
// included.
func (i *Issuer) Authorizations() int {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	return i.as.authorizations
}

// LastAuthorization returns the query of the last request to the authorize endpoint, or nil
// when there was none.
func (i *Issuer) LastAuthorization() url.Values {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	if i.as.lastAuthorize == nil {
		return nil
	}
	out := url.Values{}
	for k, v := range i.as.lastAuthorize {
		out[k] = slices.Clone(v)
	}
	return out
}

// RefreshTokens returns every refresh token the token endpoint issued, so that a test can
// look for them where they must not be.
func (i *Issuer) RefreshTokens() []string {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	out := make([]string, 0, len(i.as.refresh))
	for rt := range i.as.refresh {
		out = append(out, rt)
	}
	return out
}

// RevokeUser revokes every grant of user: the refresh tokens and access tokens that the
// token endpoint issued for user are refused from now on. Tokens made by Token are not
// covered. Later authorizations of user work again.
func (i *Issuer) RevokeUser(user string) {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	for _, g := range i.as.grants {
		if g.user == user {
			g.revoked = true
		}
	}
}

// Check verifies token as a resource server would: a JWT signed by one of the issuer's
// published keys, of iss URL, with an exp not past (and an nbf not future) by Now, and not
// revoked. It returns its sub, its scopes (the space-separated "scope" claim) and its aud.
// A refusal wraps ErrInvalidToken. Check takes tokens made by Token as well.
func (i *Issuer) Check(token string) (sub string, scopes []string, aud []string, err error) {
	claims, jti, err := i.verify(token)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: i.URL, Time: i.now()}, 0); err != nil {
		return "", nil, nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if claims.Expiry == nil {
		return "", nil, nil, fmt.Errorf("%w: the token has no exp", ErrInvalidToken)
	}
	if jti != "" {
		i.as.mu.Lock()
		g := i.as.access[jti]
		revoked := i.as.revokedJTI[jti] || g != nil && g.revoked
		i.as.mu.Unlock()
		if revoked {
			return "", nil, nil, fmt.Errorf("%w: the token was revoked", ErrInvalidToken)
		}
	}
	return claims.Subject, strings.Fields(claims.Scope), claims.Audience, nil
}

// tokenClaims are the claims Check reads.
type tokenClaims struct {
	jwt.Claims
	Scope string `json:"scope"`
}

// verify checks token's signature by the published keys and returns its claims and jti.
func (i *Issuer) verify(token string) (*tokenClaims, string, error) {
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.PS256, jose.ES256, jose.EdDSA})
	if err != nil {
		return nil, "", fmt.Errorf("parse: %v", err)
	}
	if len(parsed.Headers) != 1 {
		return nil, "", errors.New("want one signature")
	}
	var set jose.JSONWebKeySet
	i.mu.Lock()
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg)})
	}
	i.mu.Unlock()
	keys := set.Key(parsed.Headers[0].KeyID)
	if len(keys) == 0 {
		return nil, "", fmt.Errorf("no published key has kid %q", parsed.Headers[0].KeyID)
	}
	var c tokenClaims
	if err := parsed.Claims(keys[0], &c); err != nil {
		return nil, "", fmt.Errorf("signature: %v", err)
	}
	return &c, c.ID, nil
}

func (i *Issuer) scopesSupported() []string {
	if i.ScopesSupported != nil {
		return i.ScopesSupported
	}
	return DefaultScopes
}

func (i *Issuer) accessTTL() time.Duration {
	if i.AccessTTL > 0 {
		return i.AccessTTL
	}
	return time.Hour
}

// serveAuthorize is the authorization endpoint (OAuth 2.1 §4.1.1), approving at once for the
// signed-in user. A bad client or redirect URI gets a 400 page, never a redirect; other
// errors go back to the redirect URI (RFC 6749 §4.1.2.1), with iss (RFC 9207).
func (i *Issuer) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	i.as.mu.Lock()
	i.as.authorizations++
	i.as.lastAuthorize = q
	i.as.mu.Unlock()

	c, err := i.lookupClient(r.Context(), q.Get("client_id"))
	if err != nil {
		http.Error(w, "unknown client: "+err.Error(), http.StatusBadRequest)
		return
	}
	redirectURI := q.Get("redirect_uri")
	if !slices.Contains(c.redirectURIs, redirectURI) {
		http.Error(w, "the redirect_uri is not registered for this client", http.StatusBadRequest)
		return
	}
	back := func(v url.Values) {
		v.Set("iss", i.URL)
		if st := q.Get("state"); st != "" {
			v.Set("state", st)
		}
		u, _ := url.Parse(redirectURI) // registered, so parsed when it was
		rq := u.Query()
		for k, vs := range v {
			rq[k] = vs
		}
		u.RawQuery = rq.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	}
	refuse := func(code, desc string) {
		back(url.Values{"error": {code}, "error_description": {desc}})
	}
	switch {
	case q.Get("response_type") != "code":
		refuse("unsupported_response_type", "only response_type=code is supported")
		return
	case q.Get("code_challenge") == "" || q.Get("code_challenge_method") != "S256":
		refuse("invalid_request", "PKCE is required: send code_challenge with code_challenge_method=S256")
		return
	}
	if oe := checkResources(q["resource"]); oe != nil {
		refuse(oe.Code, oe.Desc)
		return
	}
	scope := q.Get("scope")
	for _, s := range strings.Fields(scope) {
		if !slices.Contains(i.scopesSupported(), s) {
			refuse("invalid_scope", fmt.Sprintf("scope %q is not supported", s))
			return
		}
	}
	user := signedIn(r)
	if user == "" {
		http.Error(w, "not signed in", http.StatusUnauthorized)
		return
	}
	code := randomString()
	i.as.mu.Lock()
	i.as.codes[code] = &authCode{clientID: c.id, redirectURI: redirectURI, challenge: q.Get("code_challenge"), user: user,
		scope: scope, resources: q["resource"], nonce: q.Get("nonce"), expires: i.now().Add(codeTTL)}
	i.as.mu.Unlock()
	back(url.Values{"code": {code}})
}

// signedIn is the user named by r's UserCookie, or "".
func signedIn(r *http.Request) string {
	ck, err := r.Cookie(UserCookie)
	if err != nil {
		return ""
	}
	user, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return user
}

// lookupClient returns the registered client id, or, when id is a URL and metadata documents
// are on, the client its Client ID Metadata Document describes (fetched now).
func (i *Issuer) lookupClient(ctx context.Context, id string) (*client, error) {
	if id == "" {
		return nil, errors.New("no client_id")
	}
	i.as.mu.Lock()
	c := i.as.clients[id]
	i.as.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if i.NoMetadataDocuments || !strings.HasPrefix(id, "https://") && !strings.HasPrefix(id, "http://") {
		return nil, fmt.Errorf("client %q is not registered", id)
	}
	c, err := fetchMetadataDocument(ctx, id)
	if err != nil {
		return nil, err
	}
	i.as.mu.Lock()
	i.as.clients[id] = c
	i.as.mu.Unlock()
	return c, nil
}

// fetchMetadataDocument reads the Client ID Metadata Document at id
// (draft-ietf-oauth-client-id-metadata-document): its client_id must be id, and it must list
// redirect_uris. Plain http is taken from loopback hosts only. The client is public.
func fetchMetadataDocument(ctx context.Context, id string) (*client, error) {
	u, err := url.Parse(id)
	if err != nil || u.Host == "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client id %q is no metadata document URL", id)
	}
	if u.Scheme == "http" && !loopback.Host(u.Host) {
		return nil, fmt.Errorf("client id %q: a metadata document is read over https, or plain http from loopback", id)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, fmt.Errorf("client metadata document %s: %w", id, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client metadata document %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("client metadata document %s answered %d", id, resp.StatusCode)
	}
	var doc struct {
		ClientID     string   `json:"client_id"`
		RedirectURIs []string `json:"redirect_uris"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("client metadata document %s: %w", id, err)
	}
	if doc.ClientID != id || len(doc.RedirectURIs) == 0 {
		return nil, fmt.Errorf("client metadata document %s: want client_id equal to its URL and some redirect_uris", id)
	}
	return &client{id: id, redirectURIs: doc.RedirectURIs}, nil
}

// oauthError is an error answer of the token, revocation or registration endpoint (RFC 6749
// §5.2, RFC 7591 §3.2.2).
type oauthError struct {
	status int
	Code   string `json:"error"`
	Desc   string `json:"error_description,omitempty"`
}

func (e *oauthError) Error() string { return e.Code + ": " + e.Desc }

func fail(status int, code, desc string) *oauthError {
	return &oauthError{status: status, Code: code, Desc: desc}
}

// writeError answers e; an invalid_client of basic authentication gets its challenge.
func writeError(w http.ResponseWriter, r *http.Request, e *oauthError) {
	if e.status == http.StatusUnauthorized {
		if _, _, basic := r.BasicAuth(); basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="testissuer"`)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(e)
}

// authenticateClient identifies the client of a token or revocation request: by
// client_secret_basic, client_secret_post, or client_id alone for a public client.
func (i *Issuer) authenticateClient(ctx context.Context, r *http.Request) (*client, *oauthError) {
	id, secret, basic := r.BasicAuth()
	if basic {
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			return nil, fail(http.StatusUnauthorized, "invalid_client", "malformed basic credentials")
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id == "" {
		return nil, fail(http.StatusUnauthorized, "invalid_client", "no client authentication")
	}
	c, err := i.lookupClient(ctx, id)
	if err != nil {
		return nil, fail(http.StatusUnauthorized, "invalid_client", err.Error())
	}
	if c.secret != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(c.secret)) != 1 {
		return nil, fail(http.StatusUnauthorized, "invalid_client", "wrong or missing client secret")
	}
	return c, nil
}

// serveToken is the token endpoint (OAuth 2.1 §3.2).
func (i *Issuer) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, r, fail(http.StatusBadRequest, "invalid_request", "unreadable form"))
		return
	}
	gt := r.PostForm.Get("grant_type")
	i.as.mu.Lock()
	i.as.tokenRequests[gt]++
	i.as.mu.Unlock()
	c, oe := i.authenticateClient(r.Context(), r)
	if oe != nil {
		writeError(w, r, oe)
		return
	}
	var answer map[string]any
	switch gt {
	case "authorization_code":
		answer, oe = i.redeemCode(c, r.PostForm)
	case "refresh_token":
		answer, oe = i.redeemRefresh(c, r.PostForm)
	case "client_credentials":
		answer, oe = i.clientCredentials(c, r.PostForm)
	case "":
		oe = fail(http.StatusBadRequest, "invalid_request", "no grant_type")
	default:
		oe = fail(http.StatusBadRequest, "unsupported_grant_type", fmt.Sprintf("grant_type %q is not supported", gt))
	}
	if oe != nil {
		writeError(w, r, oe)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, answer)
}

// redeemCode is the authorization code grant: the code is single use, and checked against
// its client, redirect URI, PKCE verifier (RFC 7636 S256), expiry and resources.
func (i *Issuer) redeemCode(c *client, form url.Values) (map[string]any, *oauthError) {
	code := form.Get("code")
	i.as.mu.Lock()
	ac := i.as.codes[code]
	delete(i.as.codes, code)
	i.as.mu.Unlock()
	sum := sha256.Sum256([]byte(form.Get("code_verifier")))
	switch {
	case code == "" || form.Get("code_verifier") == "":
		return nil, fail(http.StatusBadRequest, "invalid_request", "code and code_verifier are required")
	case ac == nil:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "unknown or already used code")
	case ac.clientID != c.id:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the code was issued to another client")
	case i.now().After(ac.expires):
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the code expired")
	case form.Get("redirect_uri") != ac.redirectURI:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "redirect_uri differs from the authorization request's")
	case base64.RawURLEncoding.EncodeToString(sum[:]) != ac.challenge:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the code_verifier does not match the code_challenge")
	}
	resources, oe := narrowResources(ac.resources, form["resource"])
	if oe != nil {
		return nil, oe
	}
	g := &grant{clientID: c.id, user: ac.user, scope: ac.scope, resources: resources}
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	i.as.grants = append(i.as.grants, g)
	return i.issueLocked(g, resources, g.scope, ac.nonce)
}

// redeemRefresh is the refresh token grant, rotating the refresh token: the one presented
// is refused from now on.
func (i *Issuer) redeemRefresh(c *client, form url.Values) (map[string]any, *oauthError) {
	rt := form.Get("refresh_token")
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	old := i.as.refresh[rt]
	switch {
	case rt == "":
		return nil, fail(http.StatusBadRequest, "invalid_request", "no refresh_token")
	case old == nil:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "unknown refresh token")
	case old.grant.clientID != c.id:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the refresh token was issued to another client")
	case old.used:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the refresh token was already used (rotated)")
	case old.grant.revoked:
		return nil, fail(http.StatusBadRequest, "invalid_grant", "the refresh token was revoked")
	}
	g := old.grant
	scope := g.scope
	if s := form.Get("scope"); s != "" {
		for _, one := range strings.Fields(s) {
			if !slices.Contains(strings.Fields(g.scope), one) {
				return nil, fail(http.StatusBadRequest, "invalid_scope", fmt.Sprintf("scope %q was not granted", one))
			}
		}
		scope = s
	}
	resources, oe := narrowResources(g.resources, form["resource"])
	if oe != nil {
		return nil, oe
	}
	old.used = true
	return i.issueLocked(g, resources, scope, "")
}

// clientCredentials is the client credentials grant, for confidential clients only; the
// token's sub is the client id, and it has no refresh token.
func (i *Issuer) clientCredentials(c *client, form url.Values) (map[string]any, *oauthError) {
	if c.secret == "" {
		return nil, fail(http.StatusBadRequest, "unauthorized_client", "a public client cannot use client_credentials")
	}
	scope := form.Get("scope")
	g := &grant{clientID: c.id, user: c.id, scope: scope, resources: form["resource"], clientCredentials: true}
	return i.issue(g, g.resources, scope, "")
}

// narrowResources returns the resources of a token request: those asked for, which must
// have been granted when the authorization named any, or all the granted ones (RFC 8707
// §2.2).
func narrowResources(granted, asked []string) ([]string, *oauthError) {
	if oe := checkResources(asked); oe != nil {
		return nil, oe
	}
	if len(granted) == 0 {
		return asked, nil
	}
	for _, r := range asked {
		if !slices.Contains(granted, r) {
			return nil, fail(http.StatusBadRequest, "invalid_target", fmt.Sprintf("resource %q was not authorized", r))
		}
	}
	if len(asked) > 0 {
		return asked, nil
	}
	return granted, nil
}

// checkResources refuses a resource that is no absolute URI without fragment (RFC 8707 §2).
func checkResources(resources []string) *oauthError {
	for _, r := range resources {
		if u, err := url.Parse(r); err != nil || !u.IsAbs() || u.Fragment != "" {
			return fail(http.StatusBadRequest, "invalid_target", fmt.Sprintf("resource %q is no absolute URI without fragment", r))
		}
	}
	return nil
}

// issue makes the token response of grant g: an access token for resources (else for the
// client), a refresh token unless g is a client credentials grant, and an id_token when
// scope has openid.
func (i *Issuer) issue(g *grant, resources []string, scope, nonce string) (map[string]any, *oauthError) {
	i.as.mu.Lock()
	defer i.as.mu.Unlock()
	return i.issueLocked(g, resources, scope, nonce)
}

// issueLocked is issue with i.as.mu held.
func (i *Issuer) issueLocked(g *grant, resources []string, scope, nonce string) (map[string]any, *oauthError) {
	now := i.now()
	ttl := i.accessTTL()
	jti := randomString()
	var aud any = g.clientID
	switch len(resources) {
	case 0:
	case 1:
		aud = resources[0]
	default:
		aud = resources
	}
	claims := map[string]any{"iss": i.URL, "sub": g.user, "aud": aud, "client_id": g.clientID, "jti": jti,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix()}
	if scope != "" {
		claims["scope"] = scope
	}
	at, err := i.sign("at+jwt", claims)
	if err != nil {
		return nil, fail(http.StatusInternalServerError, "server_error", err.Error())
	}
	answer := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int64(ttl / time.Second)}
	if scope != "" {
		answer["scope"] = scope
	}
	if slices.Contains(strings.Fields(scope), "openid") && !g.clientCredentials {
		idClaims := map[string]any{"iss": i.URL, "sub": g.user, "aud": g.clientID, "iat": now.Unix(),
			"exp": now.Add(ttl).Unix(), "auth_time": now.Unix()}
		if nonce != "" {
			idClaims["nonce"] = nonce
		}
		idt, err := i.sign("JWT", idClaims)
		if err != nil {
			return nil, fail(http.StatusInternalServerError, "server_error", err.Error())
		}
		answer["id_token"] = idt
	}
	i.as.access[jti] = g
	if g.clientCredentials {
		return answer, nil
	}
	rt := randomString()
	i.as.refresh[rt] = &refreshToken{grant: g}
	answer["refresh_token"] = rt
	return answer, nil
}

// serveRevoke is the revocation endpoint (RFC 7009): a refresh token revokes its grant, and
// so the access tokens issued from it; an access token is revoked alone. It answers 200 for
// any token, known or not, once the client is authenticated.
func (i *Issuer) serveRevoke(w http.ResponseWriter, r *http.Request) {
	i.as.mu.Lock()
	i.as.revocations++
	i.as.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		writeError(w, r, fail(http.StatusBadRequest, "invalid_request", "unreadable form"))
		return
	}
	c, oe := i.authenticateClient(r.Context(), r)
	if oe != nil {
		writeError(w, r, oe)
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		writeError(w, r, fail(http.StatusBadRequest, "invalid_request", "no token"))
		return
	}
	i.as.mu.Lock()
	if rt := i.as.refresh[token]; rt != nil && rt.grant.clientID == c.id {
		rt.grant.revoked = true
	}
	i.as.mu.Unlock()
	if _, jti, err := i.verify(token); err == nil && jti != "" {
		i.as.mu.Lock()
		if g := i.as.access[jti]; g != nil && g.clientID == c.id {
			i.as.revokedJTI[jti] = true
		}
		i.as.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

// serveRegister is dynamic client registration (RFC 7591 §3): a public client when
// token_endpoint_auth_method is "none", else a confidential one with a secret.
func (i *Issuer) serveRegister(w http.ResponseWriter, r *http.Request) {
	if i.NoDynamicRegistration {
		http.NotFound(w, r)
		return
	}
	var md struct {
		RedirectURIs            []string `json:"redirect_uris"`
		TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
		ClientName              string   `json:"client_name"`
		GrantTypes              []string `json:"grant_types"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&md); err != nil {
		writeError(w, r, fail(http.StatusBadRequest, "invalid_client_metadata", "the body is no JSON client metadata"))
		return
	}
	if len(md.RedirectURIs) == 0 {
		writeError(w, r, fail(http.StatusBadRequest, "invalid_redirect_uri", "redirect_uris is required"))
		return
	}
	for _, u := range md.RedirectURIs {
		if p, err := url.Parse(u); err != nil || !p.IsAbs() || p.Fragment != "" {
			writeError(w, r, fail(http.StatusBadRequest, "invalid_redirect_uri", fmt.Sprintf("%q is no absolute URI without fragment", u)))
			return
		}
	}
	method := md.TokenEndpointAuthMethod
	switch method {
	case "":
		method = "client_secret_basic" // RFC 7591 §2
	case "none", "client_secret_basic", "client_secret_post":
	default:
		writeError(w, r, fail(http.StatusBadRequest, "invalid_client_metadata", fmt.Sprintf("token_endpoint_auth_method %q is not supported", method)))
		return
	}
	c := &client{id: "dyn-" + randomString(), redirectURIs: md.RedirectURIs}
	if method != "none" {
		c.secret = randomString()
	}
	i.as.mu.Lock()
	i.as.clients[c.id] = c
	i.as.mu.Unlock()
	answer := map[string]any{"client_id": c.id, "client_id_issued_at": i.now().Unix(), "redirect_uris": c.redirectURIs,
		"token_endpoint_auth_method": method, "client_name": md.ClientName, "grant_types": md.GrantTypes,
		"response_types": []string{"code"}}
	if c.secret != "" {
		answer["client_secret"] = c.secret
		answer["client_secret_expires_at"] = 0
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(answer)
}

// randomString is 24 random bytes, base64url without padding.
func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

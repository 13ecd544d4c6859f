// Package testissuer is a local OpenID Connect issuer for tests: an httptest server that
// serves a discovery document and a JWKS, and signs access tokens with keys it makes per test.
// It also signs attack tokens (alg none, HMAC keyed with the public key, unknown kid, a
// foreign key) so tests can check that they are refused.
//
// The same server is an OAuth 2.1 authorization server (see authserver.go): authorization
// code with PKCE, refresh with rotation, client credentials, revocation (RFC 7009), dynamic
// registration (RFC 7591), Client ID Metadata Documents and OIDC id_tokens. Its signed-in
// user is a cookie that the test puts in its HTTP client's jar (SignIn), so a flow runs with
// no browser:
//
//	iss.RegisterClient("app", "", "http://127.0.0.1:9/callback")
//	iss.SignIn(browser, "alice")              // browser is the test's *http.Client
//	resp, _ := browser.Get(authorizationURL)  // 302 to the redirect URI with code, state, iss
//	sub, scopes, aud, err := iss.Check(accessToken)
//
//	iss := testissuer.New(t)                 // one RSA key, kid "k1"
//	iss.Now = clock.Now                      // optional: token times from a fake clock
//	tok := iss.Token(t, map[string]any{"sub": "alice", "aud": "https://gw.example.com/mcp"})
//	kid := iss.Rotate(t)                     // new key; Token signs with it from now on
//	iss.DropOldKeys()                        // only the newest key stays published
//	n := iss.JWKSFetches()
package testissuer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Issuer is a running test issuer. Its methods are safe for concurrent use; set Now before
// the first token is made.
type Issuer struct {
	// URL is the issuer identifier (the iss of its tokens), the base URL of its server.
	URL string
	// Now gives the time for the default iat, nbf and exp of tokens, and of the codes and
	// tokens the authorization server issues and checks. If nil, time.Now.
	Now func() time.Time

	// The authorization server's settings; set them before its first request.

	// AccessTTL is the lifetime of the access tokens the token endpoint issues. If zero,
	// one hour.
	AccessTTL time.Duration
	// ScopesSupported is the metadata's scopes_supported, and the scopes /authorize accepts.
	// If nil, DefaultScopes.
	ScopesSupported []string
	// NoDynamicRegistration turns off /register and leaves registration_endpoint out of the
	// metadata.
	NoDynamicRegistration bool
	// NoMetadataDocuments turns off Client ID Metadata Documents: a URL client_id is then
	// unknown, and the metadata does not advertise client_id_metadata_document_supported.
	NoMetadataDocuments bool

	srv *httptest.Server

	// Hot counters; Issuer must not be copied.
	jwksFetches      atomic.Int64
	discoveryFetches atomic.Int64
	down             atomic.Bool

	// mu guards keys. Invariant: keys is never empty; the last key is the current one.
	mu   sync.Mutex
	keys []signingKey
	next int // number of the next kid ("k<next>")

	// as is the authorization server's state, under its own lock.
	as authState
}

type signingKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

// New starts an issuer with one RSA key (RS256, kid "k1"), serving discovery, JWKS and the
// authorization server's endpoints. Its server is closed when the test ends.
func New(t testing.TB) *Issuer {
	t.Helper()
	i := &Issuer{next: 1}
	i.as.init()
	i.addKey(t, jose.RS256)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.serveDiscovery)
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", i.serveDiscovery)
	mux.HandleFunc("GET /jwks", i.serveJWKS)
	i.handleAuthServer(mux)
	i.srv = httptest.NewServer(mux)
	i.URL = i.srv.URL
	t.Cleanup(i.srv.Close)
	return i
}

// Rotate adds a new RSA key (RS256) with a new kid and returns the kid; Token signs with it
// from now on. The older keys stay published until DropOldKeys.
func (i *Issuer) Rotate(t testing.TB) (kid string) {
	t.Helper()
	return i.addKey(t, jose.RS256)
}

// RotateAlg is Rotate with a key for alg: "RS256", "PS256", "ES256" or "EdDSA".
func (i *Issuer) RotateAlg(t testing.TB, alg string) (kid string) {
	t.Helper()
	return i.addKey(t, jose.SignatureAlgorithm(alg))
}

// DropOldKeys stops publishing every key but the current one.
func (i *Issuer) DropOldKeys() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = i.keys[len(i.keys)-1:]
}

// JWKSFetches reports how many times /jwks was served (including failed ones while down).
func (i *Issuer) JWKSFetches() int { return int(i.jwksFetches.Load()) }

// DiscoveryFetches reports how many times the metadata was asked for, at either of its
// well-known URIs (OpenID Connect discovery and RFC 8414).
func (i *Issuer) DiscoveryFetches() int { return int(i.discoveryFetches.Load()) }

// SetDown makes the issuer answer metadata and JWKS requests with 503 (down) or serve them
// again (!down). The authorization server's endpoints keep answering.
func (i *Issuer) SetDown(down bool) { i.down.Store(down) }

// PublicKeyPEM returns the current key's public key, PKIX in a "PUBLIC KEY" PEM block: the
// secret an HMAC key-confusion attack would use.
func (i *Issuer) PublicKeyPEM() []byte {
	k := i.current()
	der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
	if err != nil {
		panic(fmt.Sprintf("testissuer: marshal public key: %v", err)) // our own key: cannot fail
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// PrivateKey returns the current signing key, for SignWith: an *rsa.PrivateKey, an
// *ecdsa.PrivateKey or an ed25519.PrivateKey.
func (i *Issuer) PrivateKey() crypto.Signer { return i.current().priv }

// Token returns a JWT signed with the current key, with its kid and typ "at+jwt" in the
// header. The claims default to iss = URL, iat = nbf = now and exp = now + 1h; claims
// override them, and a nil value deletes a claim.
func (i *Issuer) Token(t testing.TB, claims map[string]any) string {
	t.Helper()
	tok, err := i.sign("at+jwt", i.withDefaults(claims))
	if err != nil {
		t.Fatalf("testissuer: %v", err)
	}
	return tok
}

// sign returns a compact JWS of claims signed with the current key, with its kid and typ in
// the header.
func (i *Issuer) sign(typ string, claims map[string]any) (string, error) {
	k := i.current()
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("marshal claims: %w", err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{
		Algorithm: k.alg,
		Key:       jose.JSONWebKey{Key: k.priv, KeyID: k.kid, Algorithm: string(k.alg)},
	}, (&jose.SignerOptions{}).WithType(jose.ContentType(typ)))
	if err != nil {
		return "", fmt.Errorf("new signer: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return jws.CompactSerialize()
}

// SignWith builds a compact JWS by hand, for attack tokens. The header is used as given, with
// "alg" set to alg unless the header names one. The claims get the same defaults as Token.
// key is nil for alg "none", a []byte secret for HS256/384/512, an *rsa.PrivateKey for RS*
// and PS*, an *ecdsa.PrivateKey for ES* and an ed25519.PrivateKey for EdDSA.
func (i *Issuer) SignWith(t testing.TB, header map[string]any, claims map[string]any, alg string, key any) string {
	t.Helper()
	h := map[string]any{"alg": alg}
	for k, v := range header {
		h[k] = v
	}
	hb, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("testissuer: marshal header: %v", err)
	}
	cb, err := json.Marshal(i.withDefaults(claims))
	if err != nil {
		t.Fatalf("testissuer: marshal claims: %v", err)
	}
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(hb) + "." + enc.EncodeToString(cb)
	sig, err := rawSign(alg, key, []byte(input))
	if err != nil {
		t.Fatalf("testissuer: sign %s: %v", alg, err)
	}
	return input + "." + enc.EncodeToString(sig)
}

// NewRSAKey returns a fresh 2048-bit RSA key, e.g. a foreign key for SignWith.
func NewRSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("testissuer: generate RSA key: %v", err)
	}
	return k
}

func (i *Issuer) current() signingKey {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[len(i.keys)-1]
}

func (i *Issuer) addKey(t testing.TB, alg jose.SignatureAlgorithm) string {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256, jose.PS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("testissuer: unsupported key algorithm %q", alg)
	}
	if err != nil {
		t.Fatalf("testissuer: generate %s key: %v", alg, err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	kid := "k" + strconv.Itoa(i.next)
	i.next++
	i.keys = append(i.keys, signingKey{kid: kid, alg: alg, priv: priv})
	return kid
}

// now is the issuer's clock: Now, else time.Now.
func (i *Issuer) now() time.Time {
	if i.Now != nil {
		return i.Now()
	}
	return time.Now()
}

func (i *Issuer) withDefaults(claims map[string]any) map[string]any {
	n := i.now().Unix()
	out := map[string]any{
		"iss": i.URL,
		"iat": n,
		"nbf": n,
		"exp": n + 3600,
	}
	for k, v := range claims {
		if v == nil {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

func (i *Issuer) serveDiscovery(w http.ResponseWriter, r *http.Request) {
	i.discoveryFetches.Add(1)
	if i.down.Load() {
		http.Error(w, "issuer down", http.StatusServiceUnavailable)
		return
	}
	md := map[string]any{
		"issuer":                                         i.URL,
		"authorization_endpoint":                         i.URL + "/authorize",
		"token_endpoint":                                 i.URL + "/token",
		"revocation_endpoint":                            i.URL + "/revoke",
		"jwks_uri":                                       i.URL + "/jwks",
		"response_types_supported":                       []string{"code"},
		"subject_types_supported":                        []string{"public"},
		"id_token_signing_alg_values_supported":          []string{"RS256", "PS256", "ES256", "EdDSA"},
		"code_challenge_methods_supported":               []string{"S256"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token", "client_credentials"},
		"scopes_supported":                               i.scopesSupported(),
		"token_endpoint_auth_methods_supported":          []string{"none", "client_secret_basic", "client_secret_post"},
		"revocation_endpoint_auth_methods_supported":     []string{"none", "client_secret_basic", "client_secret_post"},
		"authorization_response_iss_parameter_supported": true,
	}
	if !i.NoDynamicRegistration {
		md["registration_endpoint"] = i.URL + "/register"
	}
	if !i.NoMetadataDocuments {
		md["client_id_metadata_document_supported"] = true
	}
	writeJSON(w, md)
}

func (i *Issuer) serveJWKS(w http.ResponseWriter, r *http.Request) {
	i.jwksFetches.Add(1)
	if i.down.Load() {
		http.Error(w, "issuer down", http.StatusServiceUnavailable)
		return
	}
	i.mu.Lock()
	var set jose.JSONWebKeySet
	for _, k := range i.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{
			Key:       k.priv.Public(),
			KeyID:     k.kid,
			Algorithm: string(k.alg),
			Use:       "sig",
		})
	}
	i.mu.Unlock()
	writeJSON(w, set)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// rawSign signs input as JWS alg does, with no checks on the pairing beyond the key's type.
func rawSign(alg string, key any, input []byte) ([]byte, error) {
	switch alg {
	case "none":
		return nil, nil
	case "HS256", "HS384", "HS512":
		secret, ok := key.([]byte)
		if !ok {
			return nil, fmt.Errorf("key is %T, want []byte", key)
		}
		m := hmac.New(shaFor(alg), secret)
		m.Write(input)
		return m.Sum(nil), nil
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		k, ok := key.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, want *rsa.PrivateKey", key)
		}
		h, sum := digest(alg, input)
		if alg[0] == 'P' {
			return rsa.SignPSS(rand.Reader, k, h, sum, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		}
		return rsa.SignPKCS1v15(rand.Reader, k, h, sum)
	case "ES256", "ES384", "ES512":
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, want *ecdsa.PrivateKey", key)
		}
		_, sum := digest(alg, input)
		r, s, err := ecdsa.Sign(rand.Reader, k, sum)
		if err != nil {
			return nil, err
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		out := make([]byte, 2*size)
		r.FillBytes(out[:size])
		s.FillBytes(out[size:])
		return out, nil
	case "EdDSA":
		k, ok := key.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, want ed25519.PrivateKey", key)
		}
		return ed25519.Sign(k, input), nil
	}
	return nil, fmt.Errorf("unsupported algorithm %q", alg)
}

func shaFor(alg string) func() hash.Hash {
	switch alg[len(alg)-3:] {
	case "384":
		return sha512.New384
	case "512":
		return sha512.New
	}
	return sha256.New
}

func digest(alg string, input []byte) (crypto.Hash, []byte) {
	h := crypto.SHA256
	switch alg[len(alg)-3:] {
	case "384":
		h = crypto.SHA384
	case "512":
		h = crypto.SHA512
	}
	d := h.New()
	d.Write(input)
	return h, d.Sum(nil)
}

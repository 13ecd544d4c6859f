// Package auth says who a client of the gateway is. An Authenticator takes the bearer
// credential of an HTTP request and returns the session.Principal it stands for, or an error
// the face turns into a 400 or 401 with a WWW-Authenticate challenge (RFC 6750 §3):
//
//   - an OpenID Connect access token (a JWT) of a trusted issuer, verified with
//     github.com/coreos/go-oidc against the issuer's published keys: signature (asymmetric
//     algorithms only), iss, aud (the gateway's resource URI, RFC 8707 / RFC 9068 §4), exp,
//     nbf and iat with a clock skew; the principal's claims are read from configurable
//     claim names;
//   - an API key ("mfk_…"), compared by its SHA-256 hash with the configured ones.
//
// Discovery and key fetches happen lazily, on an issuer's first token, and after that only
// when a token names a key the cache does not hold, at most once per refresh interval.
// The package also serves the RFC 9728 protected resource metadata document
// (MetadataHandler) and writes WWW-Authenticate challenges (Challenge, InsufficientScope).
//
//	a, err := auth.New(auth.Config{
//		Resource: "https://gw.example.com/mcp",
//		Issuers:  []auth.Issuer{{URL: "https://idp.example.com"}},
//		APIKeys:  keys, // from auth.LoadAPIKeys
//	})
//	defer a.Close()
//	who, err := a.Authenticate(r.Context(), r)
//	if err != nil {
//		status, challenge := auth.Challenge(err, metadataURL, scopes)
//		w.Header().Set("WWW-Authenticate", challenge)
//		w.WriteHeader(status)
//		return
//	}
//	// who.Principal is the caller.
//
// The package does not log verification failures: it returns them, and the face logs them.
// It logs (as warnings) only the failures of background fetches of an issuer's keys.
package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/manifold-mcp/manifold/internal/session"
)

// Config configures an Authenticator. New copies what it needs; the Config is not kept.
type Config struct {
	// Resource is the gateway's canonical resource URI (RFC 8707), e.g.
	// https://gw.example.com/mcp: the audience tokens must carry unless an Issuer says
	// otherwise. Required when an Issuer has no Audiences.
	Resource string
	// Issuers are the trusted token issuers. Empty: only API keys are accepted.
	Issuers []Issuer
	// APIKeys are the accepted API keys. Empty: no API key is accepted.
	APIKeys []APIKey
	// HTTPClient fetches discovery documents and JWKS. If nil, a client with a 10s timeout
	// that follows at most 5 redirects and none from https to http. Each refresh is also
	// bounded to 10s by its context.
	HTTPClient *http.Client
	// Now gives the time for token times (exp, nbf, iat) and for the refresh interval. If
	// nil, time.Now. Tests use a fake clock.
	Now func() time.Time
	// Logger receives warnings about failed key fetches. If nil, nothing is logged.
	Logger *slog.Logger
}

// Issuer is one trusted token issuer.
type Issuer struct {
	// URL is the issuer identifier: tokens must carry it as iss, byte for byte, and its
	// discovery document must name it. Discovery is at URL + "/.well-known/openid-configuration".
	// It must be https, or http on a loopback host (or anywhere with AllowHTTP).
	URL string
	// Audiences are the accepted aud values: a token is accepted if any of its aud values
	// matches one. Resource URIs match whatever their scheme and host case and with or
	// without one trailing slash; other values (client ids) must be equal. If empty,
	// [Config.Resource]. Set it when the issuer cannot put the resource URI in aud (it puts
	// its own client id there, say); note that then the issuer's ID tokens for that client
	// are accepted as well.
	Audiences []string
	// Claims name the claims the Principal is read from. Zero fields take defaults.
	Claims ClaimNames
	// ClockSkew is the leeway for exp, nbf and iat. If zero, 30s.
	ClockSkew time.Duration
	// JWKSRefreshInterval bounds refreshes of the issuer's keys (and retries of a failed
	// discovery): after the first, at most one per interval. A token whose kid is unknown
	// within the interval is refused at once. If zero, 1 minute.
	JWKSRefreshInterval time.Duration
	// AllowHTTP lets URL, and the jwks_uri its discovery names, be plain http on a host that
	// is not loopback. Anyone on the network path could then substitute signing keys and
	// forge tokens: it is safe only where that path is trusted (a sidecar, a private link).
	// New logs a warning when it is set.
	AllowHTTP bool
}

const (
	defaultClockSkew       = 30 * time.Second
	defaultRefreshInterval = time.Minute
	defaultHTTPTimeout     = 10 * time.Second
	// maxTokenBytes bounds a bearer token, ahead of any decoding.
	maxTokenBytes = 32 << 10
)

// Authenticated is the outcome of a successful authentication.
type Authenticated struct {
	// Principal is the caller. Its slices belong to the caller of Authenticate.
	Principal session.Principal
	// Token is the bearer token as presented: the OIDC access token, or "" for an API key.
	// The gateway may need it for RFC 8693 token exchange; it must never be forwarded as is.
	Token string
	// Expiry is the token's exp; zero for API keys.
	Expiry time.Time
}

// Authenticator verifies the credentials of requests. It is safe for concurrent use. Close
// stops its background fetches.
type Authenticator struct {
	issuers    map[string]*issuer // by URL (the iss of their tokens)
	issuerURLs []string           // in configuration order
	// apiKeys are the accepted API keys, replaced whole by SetAPIKeys.
	apiKeys atomic.Pointer[[]apiKey]
	now     func() time.Time
	group   *fetchGroup
	// verified remembers the tokens verified lately (see verifiedTokens).
	verified verifiedTokens
}

// issuer is a configured Issuer, ready to verify its tokens.
type issuer struct {
	url       string
	audiences []string // canonicalResource of each accepted aud value
	claims    ClaimNames
	skew      time.Duration
	keys      *keySet
	verifier  *oidc.IDTokenVerifier
}

// New checks cfg and returns an Authenticator. It does no network I/O: an issuer's discovery
// happens on its first token. The error lists every problem found in cfg.
func New(cfg Config) (*Authenticator, error) {
	var errs []error
	if cfg.Resource != "" {
		if err := checkResource(cfg.Resource); err != nil {
			errs = append(errs, fmt.Errorf("Resource: %w", err))
		}
	}
	apiKeys, err := buildAPIKeys(cfg.APIKeys, func(i int) string { return fmt.Sprintf("APIKeys[%d]", i) })
	if err != nil {
		errs = append(errs, err)
	}

	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: defaultHTTPTimeout, CheckRedirect: noDowngrade}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "auth")

	a := &Authenticator{
		issuers: make(map[string]*issuer, len(cfg.Issuers)),
		now:     now,
		group:   newFetchGroup(),
	}
	a.apiKeys.Store(&apiKeys)
	for i, ic := range cfg.Issuers {
		where := fmt.Sprintf("Issuers[%d]", i)
		if ic.URL != "" {
			where += fmt.Sprintf(" (%s)", ic.URL)
		}
		iss, ierrs := buildIssuer(ic, cfg.Resource, where)
		errs = append(errs, ierrs...)
		if iss == nil {
			continue
		}
		if _, dup := a.issuers[iss.url]; dup {
			errs = append(errs, fmt.Errorf("%s: URL: the issuer is listed twice; merge the entries", where))
			continue
		}
		iss.keys = &keySet{
			issuer:    iss.url,
			client:    client,
			now:       now,
			interval:  cmpOr(ic.JWKSRefreshInterval, defaultRefreshInterval),
			allowHTTP: ic.AllowHTTP,
			logger:    logger,
			group:     a.group,
		}
		iss.verifier = oidc.NewVerifier(iss.url, iss.keys, &oidc.Config{
			// The audience is checked by verifyJWT, leniently about resource URI forms.
			SkipClientIDCheck:    true,
			SupportedSigningAlgs: algNames(),
			// go-oidc checks exp with no leeway and nbf with a fixed 5 minutes; verifyJWT
			// checks exp, nbf and iat with the issuer's ClockSkew instead.
			SkipExpiryCheck: true,
			Now:             now,
		})
		a.issuers[iss.url] = iss
		a.issuerURLs = append(a.issuerURLs, iss.url)
		if ic.AllowHTTP {
			logger.Warn("token issuer may be reached over plain http (AllowHTTP): anyone on the network path could forge its tokens",
				"issuer", iss.url)
		}
	}
	if len(errs) > 0 {
		a.Close()
		return nil, fmt.Errorf("auth config: %w", errors.Join(errs...))
	}
	return a, nil
}

func buildIssuer(ic Issuer, resource, where string) (*issuer, []error) {
	var errs []error
	if ic.URL == "" {
		errs = append(errs, fmt.Errorf("%s: URL: must not be empty; set the issuer identifier (the iss of its tokens)", where))
	} else if u, err := url.Parse(ic.URL); err != nil {
		errs = append(errs, fmt.Errorf("%s: URL: %w", where, err))
	} else if err := checkIssuerURL(u, ic.AllowHTTP); err != nil {
		errs = append(errs, fmt.Errorf("%s: URL: %w", where, err))
	}
	auds := ic.Audiences
	if len(auds) == 0 {
		if resource == "" {
			errs = append(errs, fmt.Errorf("%s: Audiences: empty and Resource is not set; set one of them", where))
		}
		auds = []string{resource}
	}
	for j, aud := range ic.Audiences {
		if strings.TrimSpace(aud) == "" {
			errs = append(errs, fmt.Errorf("%s: Audiences[%d]: must not be empty", where, j))
		}
	}
	if ic.ClockSkew < 0 {
		errs = append(errs, fmt.Errorf("%s: ClockSkew: %v is negative", where, ic.ClockSkew))
	}
	if ic.JWKSRefreshInterval < 0 {
		errs = append(errs, fmt.Errorf("%s: JWKSRefreshInterval: %v is negative", where, ic.JWKSRefreshInterval))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	canon := make([]string, len(auds))
	for j, aud := range auds {
		canon[j] = canonicalResource(aud)
	}
	return &issuer{
		url:       ic.URL,
		audiences: canon,
		claims:    ic.Claims.withDefaults(),
		skew:      cmpOr(ic.ClockSkew, defaultClockSkew),
	}, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func algNames() []string {
	out := make([]string, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = string(a)
	}
	return out
}

// checkResource checks a resource URI: absolute, http(s), no fragment (RFC 8707 §2).
func checkResource(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URI", s)
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return fmt.Errorf("%q has a fragment; a resource URI must not", s)
	}
	return nil
}

// checkIssuerURL checks an issuer identifier (OpenID Connect Discovery §2: https, no query or
// fragment).
func checkIssuerURL(u *url.URL, allowHTTP bool) error {
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return errors.New("an issuer identifier has no query or fragment")
	}
	return checkFetchURL(u, allowHTTP)
}

// checkFetchURL checks a URL the gateway fetches keys from: https, or http on loopback (or
// anywhere with allowHTTP).
func checkFetchURL(u *url.URL, allowHTTP bool) error {
	if u.Host == "" {
		return errors.New("not an absolute URL")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowHTTP || isLoopback(u.Hostname()) {
			return nil
		}
		return errors.New("plain http is allowed only on a loopback host; use https (or set AllowHTTP)")
	}
	return fmt.Errorf("scheme %q: want https", u.Scheme)
}

// noDowngrade is the redirect policy of the default HTTP client: at most 5 redirects, and
// none from https to plain http, which would let the network path substitute keys.
func noDowngrade(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("stopped after 5 redirects")
	}
	if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("refused redirect from https to %s", req.URL.Scheme)
	}
	return nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Issuers returns the URLs of the trusted issuers in configuration order, for the
// authorization_servers of the resource metadata. The slice is the caller's.
func (a *Authenticator) Issuers() []string { return slices.Clone(a.issuerURLs) }

// Close stops the key fetches in flight and waits for them to end. Tokens that would need a
// fetch are refused afterwards; cached keys still verify. Close may be called more than once.
func (a *Authenticator) Close() { a.group.close() }

// SetAPIKeys replaces the accepted API keys by keys, at once: a request is checked against
// the old keys or the new ones. Keys that are not valid are refused, with every problem, and
// the old ones stay. Safe for concurrent use.
func (a *Authenticator) SetAPIKeys(keys []APIKey) error {
	built, err := buildAPIKeys(keys, func(i int) string { return fmt.Sprintf("APIKeys[%d]", i) })
	if err != nil {
		return err
	}
	a.apiKeys.Store(&built)
	return nil
}

// CheckAPIKeys reports what SetAPIKeys would refuse of keys, and sets nothing: to check
// several sets before putting any in force.
func CheckAPIKeys(keys []APIKey) error {
	_, err := buildAPIKeys(keys, func(i int) string { return fmt.Sprintf("APIKeys[%d]", i) })
	return err
}

// Authenticate returns who made r, from its Authorization header. It fails with
// ErrNoCredentials when r has none, and otherwise with an *Error: invalid_request (400) for a
// header that is not one "Bearer <token>", or for a token in the query string (RFC 6750 §2.3
// and MCP forbid it); invalid_token (401) for a credential that is not accepted. ctx bounds
// only this call's wait for an issuer's keys.
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (*Authenticated, error) {
	tok, err := bearerToken(r)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(tok, APIKeyPrefix) {
		k := lookupAPIKey(*a.apiKeys.Load(), tok)
		if k == nil {
			return nil, invalidToken(descUnknownAPIKey, nil)
		}
		return &Authenticated{Principal: clonePrincipal(k.principal)}, nil
	}
	return a.verifyJWT(ctx, tok)
}

// bearerToken returns the token of r's one "Authorization: Bearer" header (RFC 6750 §2.1).
func bearerToken(r *http.Request) (string, error) {
	if r.URL != nil && strings.Contains(r.URL.RawQuery, "access_token") && r.URL.Query().Has("access_token") {
		return "", invalidRequest(descQueryToken)
	}
	vals := r.Header.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", ErrNoCredentials
	case 1:
	default:
		return "", invalidRequest(descTwoHeaders)
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", invalidRequest(descNotBearer)
	}
	tok = strings.Trim(tok, " \t")
	if tok == "" {
		return "", invalidRequest(descNotBearer)
	}
	if len(tok) > maxTokenBytes {
		return "", invalidToken(descTooLong, fmt.Errorf("token of %d bytes, limit %d", len(tok), maxTokenBytes))
	}
	if !isB64Token(tok) {
		return "", invalidRequest(descTokenSyntax)
	}
	return tok, nil
}

// isB64Token reports whether s has the b64token syntax of RFC 6750 §2.1:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

func clonePrincipal(p session.Principal) session.Principal {
	p.Groups = slices.Clone(p.Groups)
	p.Roles = slices.Clone(p.Roles)
	p.Scopes = slices.Clone(p.Scopes)
	return p
}

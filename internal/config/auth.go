package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file holds who may connect: the top-level `auth` and `public_url`, the session caps per
// principal and per address, and each upstream's `credentials`.

// Defaults of authentication and the session caps.
const (
	defaultClockSkew             = 30 * time.Second
	defaultJWKSRefreshInterval   = time.Minute
	defaultMaxSessionsPerOwner   = 64
	defaultMaxSessionsPerAddress = 512
	defaultIssuerClaimSubject    = "sub"
	defaultIssuerClaimEmail      = "email"
	defaultIssuerClaimGroups     = "groups"
	defaultIssuerClaimRoles      = "roles"
	defaultIssuerClaimScopes     = "scope"
	minJWKSRefreshInterval       = time.Second
	// defaultLoginScope is the scope of an OpenID Connect sign-in, which auth.login's scopes
	// must include (OpenID Connect Core 1.0, section 3.1.2.1).
	defaultLoginScope = "openid"
)

// Auth says how clients prove who they are (key `auth`). With neither OIDC issuers nor API
// keys, authentication is off: every client is anonymous, and the gateway listens on loopback
// only unless AllowUnauthenticated is set.
type Auth struct {
	// Resource is the gateway's canonical resource URI (RFC 8707) that tokens must be issued
	// for (key `resource`), advertised in the protected resource metadata. Defaults to
	// PublicURL + "/mcp" (or http://LISTEN/mcp without a public URL).
	Resource string

	// Scopes are the scopes every request needs (key `scopes`): a token without one of them
	// is refused with 403 insufficient_scope naming them. They are advertised as
	// scopes_supported. Nil: none needed.
	Scopes []string

	// OIDC lists the trusted token issuers (key `oidc`).
	OIDC []Issuer

	// APIKeys are keys of service accounts, by hash (key `api_keys`); APIKeysFile names a
	// file of more (key `api_keys_file`, YAML or JSON: a list of the same entries), read at
	// start.
	APIKeys     []APIKey
	APIKeysFile string

	// AllowUnauthenticated lets the gateway listen beyond loopback with authentication off
	// (key `allow_unauthenticated`). Off by default: a gateway reachable from the network
	// without auth would hand its upstreams' tools to anyone who can reach it.
	AllowUnauthenticated bool

	// MaxSessionsPerPrincipal caps the live sessions of one authenticated principal (key
	// `max_sessions_per_principal`), across replicas sharing a Redis store; greater than 0.
	// Defaults to 64.
	MaxSessionsPerPrincipal int

	// MaxSessionsPerAddress caps the live anonymous sessions (authentication off) from one
	// client address (key `max_sessions_per_address`); greater than 0. Defaults to an eighth
	// of max_sessions (at least 1, at most 512), so that a few addresses cannot fill the
	// gateway.
	MaxSessionsPerAddress int

	// Login signs a browser's user in through one of the OIDC issuers (key `login`): the
	// pages where users connect their accounts at upstreams (user_oauth) and see their grants.
	Login *Login
}

// Login is how a user signs in, in a browser, on the gateway's own pages: the OpenID Connect
// authorization code flow with PKCE at one of auth.oidc's issuers, with the gateway as the
// client. Nil when the key is absent: there are no such pages.
type Login struct {
	// Issuer is the issuer users sign in at (key `issuer`): exactly the URL of one of
	// auth.oidc's issuers. Defaults to the first of them.
	Issuer string

	// ClientID is the gateway's client id at that issuer (key `client_id`); required.
	ClientID string

	// ClientSecret is that client's secret (key `client_secret`; write the secret as
	// ${ENV}). Empty: a public client, which proves itself with PKCE alone.
	ClientSecret string

	// Scopes are asked for at sign-in (key `scopes`); they must include openid. Defaults
	// to [openid].
	Scopes []string
}

// Enabled reports whether clients must authenticate.
func (a *Auth) Enabled() bool { return len(a.OIDC) > 0 || len(a.APIKeys) > 0 || a.APIKeysFile != "" }

// Issuer is one trusted OIDC issuer of access tokens.
type Issuer struct {
	// URL is the issuer identifier, the tokens' `iss` (key `issuer`); its discovery document is
	// at URL/.well-known/openid-configuration.
	URL string

	// Audiences are the `aud` values accepted (key `audiences`). Nil: Auth.Resource only. Set
	// them for identity providers that put their own identifier for the API in `aud`.
	Audiences []string

	// Claim names (key `claims`, a mapping of subject, email, groups, roles, scopes); dotted
	// paths reach into nested claims, like realm_access.roles. Defaults: sub, email, groups,
	// roles, scope.
	SubjectClaim, EmailClaim, GroupsClaim, RolesClaim, ScopesClaim string

	// ClockSkew is the leeway on exp and nbf (key `clock_skew`); 0 or more. Defaults to 30s.
	ClockSkew time.Duration

	// JWKSRefreshInterval bounds how often the issuer's keys are fetched again for a token
	// signed with a key not seen yet (key `jwks_refresh_interval`); at least 1s. Defaults to
	// 1 minute. Between fetches such tokens are refused.
	JWKSRefreshInterval time.Duration

	// AllowHTTP lets the issuer and its keys be fetched over plain http beyond loopback (key
	// `allow_http`), for a test identity provider on a private network. Off: https, or http
	// on loopback only.
	AllowHTTP bool
}

// APIKey is one service account's key, by its hash.
type APIKey struct {
	// Name is the principal's subject (key `name`), unique.
	Name string
	// Hash is "sha256:" and the hex SHA-256 of the key (key `hash`); `gateway apikey` makes a
	// key and its hash.
	Hash string
	// Email, Groups, Roles and Scopes are what policy reads of the principal (keys `email`,
	// `groups`, `roles`, `scopes`).
	Email                 string
	Groups, Roles, Scopes []string
}

// Credentials are what the gateway presents to an HTTP upstream (key `credentials` of an
// upstream), besides its static Headers. The client's own token never reaches an upstream.
// At most one of TokenExchange and UserOAuth is set, and ClientCredentials not beside
// UserOAuth (it goes in UserOAuth.CatalogCredentials instead).
type Credentials struct {
	// HeaderFiles set headers whose values are read from files, such as mounted secrets (key
	// `header_files`, a list of {name, path, prefix}); a changed file is read again.
	HeaderFiles []HeaderFile

	// ClientCredentials gets the gateway's own token for the upstream with the OAuth 2.0
	// client credentials grant (key `client_credentials`).
	ClientCredentials *TokenRequest

	// TokenExchange trades each caller's token for one for the upstream (RFC 8693; key
	// `token_exchange`), cached per principal until it expires. Needs isolation: principal, so
	// that each principal's calls travel on a connection carrying its own token.
	TokenExchange *TokenRequest

	// UserOAuth has each user connect their own account at the upstream (key `user_oauth`):
	// the gateway is an OAuth 2.1 client of the upstream's authorization server and calls
	// the upstream, on each user's own connection (isolation: principal), with that user's
	// token.
	UserOAuth *UserOAuth
}

// HeaderFile is a header whose value is read from a file.
type HeaderFile struct {
	Name, Path, Prefix string
}

// TokenRequest is how to get a token from an authorization server's token endpoint.
type TokenRequest struct {
	// TokenURL is the token endpoint (key `token_url`).
	TokenURL string
	// ClientID and ClientSecret authenticate the gateway there (keys `client_id`,
	// `client_secret`; write the secret as ${ENV}).
	ClientID, ClientSecret string
	// Scopes are requested (key `scopes`).
	Scopes []string
	// Resource is sent as `resource` (key `resource`). Defaults to the upstream's URL.
	Resource string
	// Audience is sent as `audience` when set (key `audience`).
	Audience string
}

// auth decodes the top-level `auth` mapping.
func authSettings(a *Auth) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with oidc:, api_keys: and/or api_keys_file:", []field{
			{key: "resource", decode: str(&a.Resource)},
			{key: "scopes", decode: strList(&a.Scopes)},
			{key: "oidc", decode: listOf(&a.OIDC, "a list of issuers (lines starting with `- issuer:`)", issuer)},
			{key: "api_keys", decode: listOf(&a.APIKeys, "a list of API keys (lines starting with `- name:`)", apiKey)},
			{key: "api_keys_file", decode: str(&a.APIKeysFile)},
			{key: "allow_unauthenticated", decode: boolean(&a.AllowUnauthenticated)},
			{key: "max_sessions_per_principal", decode: integer(&a.MaxSessionsPerPrincipal)},
			{key: "max_sessions_per_address", decode: integer(&a.MaxSessionsPerAddress)},
			{key: "login", decode: login(&a.Login)},
		})
	}
}

// login decodes `auth.login`.
func login(dst **Login) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		l := new(Login)
		*dst = l
		return d.mapping(n, path, "a mapping with `client_id:`, the gateway's client at an auth.oidc issuer", []field{
			{key: "issuer", decode: str(&l.Issuer)},
			{key: "client_id", decode: str(&l.ClientID)},
			{key: "client_secret", decode: str(&l.ClientSecret)},
			{key: "scopes", decode: strList(&l.Scopes)},
		})
	}
}

func issuer(is *Issuer) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with `issuer:` (the tokens' iss)", []field{
			{key: "issuer", decode: str(&is.URL)},
			{key: "audiences", decode: strList(&is.Audiences)},
			{key: "claims", decode: func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, "a mapping of claim names: subject, email, groups, roles, scopes", []field{
					{key: "subject", decode: str(&is.SubjectClaim)},
					{key: "email", decode: str(&is.EmailClaim)},
					{key: "groups", decode: str(&is.GroupsClaim)},
					{key: "roles", decode: str(&is.RolesClaim)},
					{key: "scopes", decode: str(&is.ScopesClaim)},
				})
			}},
			{key: "clock_skew", decode: duration(&is.ClockSkew)},
			{key: "jwks_refresh_interval", decode: duration(&is.JWKSRefreshInterval)},
			{key: "allow_http", decode: boolean(&is.AllowHTTP)},
		})
	}
}

func apiKey(k *APIKey) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with `name:` and `hash:` (sha256:HEX; `gateway apikey` makes one)", []field{
			{key: "name", decode: str(&k.Name)},
			{key: "hash", decode: str(&k.Hash)},
			{key: "email", decode: str(&k.Email)},
			{key: "groups", decode: strList(&k.Groups)},
			{key: "roles", decode: strList(&k.Roles)},
			{key: "scopes", decode: strList(&k.Scopes)},
		})
	}
}

// credentials decodes an upstream's `credentials` mapping.
func credentials(c *Credentials) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		*c = Credentials{}
		return d.mapping(n, path, "a mapping with header_files:, client_credentials:, token_exchange: or user_oauth:", []field{
			{key: "header_files", decode: headerFiles(&c.HeaderFiles)},
			{key: "client_credentials", decode: tokenRequest(&c.ClientCredentials)},
			{key: "token_exchange", decode: tokenRequest(&c.TokenExchange)},
			{key: "user_oauth", decode: userOAuth(&c.UserOAuth)},
		})
	}
}

// headerFiles decodes `header_files`, a list of {name, path, prefix}.
func headerFiles(dst *[]HeaderFile) decodeFunc {
	return listOf(dst, "a list of {name, path, prefix}", func(h *HeaderFile) decodeFunc {
		return func(d *decoder, n *yaml.Node, path string) bool {
			return d.mapping(n, path, "a mapping with `name:` (the header) and `path:` (the file holding its value)", []field{
				{key: "name", decode: str(&h.Name)},
				{key: "path", decode: str(&h.Path)},
				{key: "prefix", decode: str(&h.Prefix)},
			})
		}
	})
}

func tokenRequest(dst **TokenRequest) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		t := new(TokenRequest)
		*dst = t
		return d.mapping(n, path, "a mapping with token_url:, client_id: and client_secret:", []field{
			{key: "token_url", decode: str(&t.TokenURL)},
			{key: "client_id", decode: str(&t.ClientID)},
			{key: "client_secret", decode: str(&t.ClientSecret)},
			{key: "scopes", decode: strList(&t.Scopes)},
			{key: "resource", decode: str(&t.Resource)},
			{key: "audience", decode: str(&t.Audience)},
		})
	}
}

// listOf decodes a list whose entries item decodes. No value leaves it nil.
func listOf[T any](dst *[]T, want string, item func(*T) decodeFunc) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, "want %s, got %s", want, describe(v))
			return false
		}
		*dst = make([]T, len(v.Content))
		for i, e := range v.Content {
			d.decodeField(fmt.Sprintf("%s[%d]", path, i), e.Line, e, item(&(*dst)[i]))
		}
		return true
	}
}

// applyAuthDefaults fills the auth settings the file leaves out.
func applyAuthDefaults(c *Config, ix *index) {
	a := &c.Auth
	if !ix.has("auth.max_sessions_per_principal") {
		a.MaxSessionsPerPrincipal = defaultMaxSessionsPerOwner
	}
	if !ix.has("auth.max_sessions_per_address") {
		a.MaxSessionsPerAddress = min(defaultMaxSessionsPerAddress, max(1, c.MaxSessions/8))
	}
	if !ix.has("auth.resource") {
		a.Resource = c.BaseURL() + "/mcp"
	}
	if l := a.Login; l != nil {
		if !ix.has("auth.login.issuer") && len(a.OIDC) > 0 {
			l.Issuer = a.OIDC[0].URL
		}
		if !ix.has("auth.login.scopes") {
			l.Scopes = []string{defaultLoginScope}
		}
	}
	for i := range a.OIDC {
		is, p := &a.OIDC[i], fmt.Sprintf("auth.oidc[%d]", i)
		def := func(dst *string, key, value string) {
			if !ix.has(p + ".claims." + key) {
				*dst = value
			}
		}
		def(&is.SubjectClaim, "subject", defaultIssuerClaimSubject)
		def(&is.EmailClaim, "email", defaultIssuerClaimEmail)
		def(&is.GroupsClaim, "groups", defaultIssuerClaimGroups)
		def(&is.RolesClaim, "roles", defaultIssuerClaimRoles)
		def(&is.ScopesClaim, "scopes", defaultIssuerClaimScopes)
		if !ix.has(p + ".clock_skew") {
			is.ClockSkew = defaultClockSkew
		}
		if !ix.has(p + ".jwks_refresh_interval") {
			is.JWKSRefreshInterval = defaultJWKSRefreshInterval
		}
	}
}

// BaseURL is the gateway's URL as clients reach it, without a trailing slash: PublicURL, or
// http://LISTEN (with 127.0.0.1 for an empty host) without one. Every URL the gateway
// advertises is built on it; the Host header of a request is never trusted for that.
func (c *Config) BaseURL() string {
	if c.PublicURL != "" {
		return strings.TrimRight(c.PublicURL, "/")
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return "http://" + c.Listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// claimKeys are the keys of an issuer's `claims`, in the order of Issuer's claim fields.
var claimKeys = []string{"subject", "email", "groups", "roles", "scopes"}

// sha256Hash is the form of an API key's hash.
var sha256Hash = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// authSettings checks the auth settings and the listener they allow.
func (v *validator) authSettings(c *Config, w where) {
	a := &c.Auth
	if c.PublicURL != "" {
		v.check(w, "public_url", checkPublicURL(c.PublicURL))
	}
	if w.ix.present("auth.resource") {
		v.check(w, "auth.resource", checkPublicURL(a.Resource))
	}
	if checkListen(c.Listen) == "" {
		v.check(w, "listen", CheckExposure(c, w.ix.present("auth.resource")))
	}
	if a.MaxSessionsPerPrincipal <= 0 {
		v.check(w, "auth.max_sessions_per_principal", "must be greater than 0, like 64: the most sessions one user may hold at once")
	}
	if a.MaxSessionsPerAddress <= 0 {
		v.check(w, "auth.max_sessions_per_address", "must be greater than 0, like 125: the most anonymous sessions one client address may hold at once")
	}
	issuers := map[string]bool{}
	for i := range a.OIDC {
		is, p := &a.OIDC[i], fmt.Sprintf("auth.oidc[%d]", i)
		switch msg := checkPublicURL(is.URL); {
		case is.URL == "":
			v.check(w, p+".issuer", "required: the issuer's URL, exactly as its tokens' iss claim, like https://login.example.com/realms/acme")
		case msg != "":
			v.check(w, p+".issuer", msg)
		case issuers[is.URL]:
			v.check(w, p+".issuer", "the same issuer is listed twice: keep one")
		}
		issuers[is.URL] = true
		if is.ClockSkew < 0 {
			v.check(w, p+".clock_skew", "must be 0 or more, like 30s")
		}
		if is.JWKSRefreshInterval < minJWKSRefreshInterval {
			v.check(w, p+".jwks_refresh_interval", fmt.Sprintf("must be at least %s, like 1m: tokens with unknown keys make the gateway fetch the issuer's keys at most this often", minJWKSRefreshInterval))
		}
		for j, aud := range is.Audiences {
			if aud == "" {
				v.check(w, fmt.Sprintf("%s.audiences[%d]", p, j), "empty: write the aud value your identity provider puts in tokens for this gateway")
			}
		}
		for i, claim := range []string{is.SubjectClaim, is.EmailClaim, is.GroupsClaim, is.RolesClaim, is.ScopesClaim} {
			if claim == "" {
				v.check(w, p+".claims."+claimKeys[i], "empty: name the claim, or remove the key for the default")
			}
		}
	}
	v.apiKeys(w, "auth.api_keys", a.APIKeys, "the service account's name, which policy and the audit trail show")
	v.login(a, w)
}

// apiKeys checks the API keys of a section (path, like auth.api_keys): each named, by a name
// of its own (whose meaning `named` says), and given by its hash.
func (v *validator) apiKeys(w where, path string, keys []APIKey, named string) {
	names := map[string]bool{}
	for i := range keys {
		k, p := &keys[i], fmt.Sprintf("%s[%d]", path, i)
		switch {
		case k.Name == "":
			v.check(w, p+".name", "required: "+named)
		case names[k.Name]:
			v.check(w, p+".name", fmt.Sprintf("%s names another API key too: names must be unique", quote(k.Name)))
		}
		names[k.Name] = true
		if !sha256Hash.MatchString(k.Hash) {
			v.check(w, p+".hash", "not a key hash: want sha256: and 64 lower-case hex digits; `gateway apikey` makes a key and its hash (never put the key itself here)")
		}
	}
}

// CheckExposure says what is wrong when c's listener is reachable beyond this machine: with
// authentication off and no explicit opt-out, or with token issuers but no URL to advertise
// (resourceSet: auth.resource is set explicitly); "" when nothing is.
func CheckExposure(c *Config, resourceSet bool) string {
	switch {
	case listensOnLoopbackOnly(c.Listen):
		return ""
	case !c.Auth.Enabled() && !c.Auth.AllowUnauthenticated:
		return fmt.Sprintf("%s is reachable beyond this machine and no authentication is configured: configure auth (oidc or api_keys), listen on 127.0.0.1, or set auth.allow_unauthenticated: true to serve anyone who can reach it", quote(c.Listen))
	case len(c.Auth.OIDC) > 0 && c.PublicURL == "" && !resourceSet:
		return "clients beyond this machine get tokens for the URL they reach the gateway at: set public_url, like https://mcp.example.com (or auth.resource)"
	}
	return ""
}

// checkPublicURL checks a URL the gateway advertises.
func checkPublicURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Sprintf("%s is not an absolute http(s) URL, like https://mcp.example.com", quote(s))
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Sprintf("%s must not have a query or fragment", quote(s))
	}
	return ""
}

// listensOnLoopbackOnly reports whether the listen address accepts connections from this
// machine only.
func listensOnLoopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// credentials checks an upstream's credentials; have says what the top-level settings
// provide that they may need.
func (v *validator) credentials(u *Upstream, s *site, have provided) {
	if !s.present("credentials") {
		return
	}
	w, path := s.locate("credentials")
	c := &u.Credentials
	if u.URL == "" {
		v.check(w, path, "only for an HTTP upstream (with url): a stdio upstream takes its credentials from env")
		return
	}
	v.presented(w, path, c)
	if c.TokenExchange != nil {
		p := path + ".token_exchange"
		v.tokenRequest(w, p, c.TokenExchange)
		if u.Isolation != IsolationPrincipal {
			v.check(w, p, "needs isolation: principal, so that each user's calls travel on a connection carrying that user's token")
		}
		if !have.issuers {
			v.check(w, p, "needs auth.oidc: the tokens exchanged are the users' own access tokens (an API key or an anonymous client has none)")
		}
	}
	if c.UserOAuth != nil {
		v.userOAuth(u, w, path, have)
	}
}

// presented checks the credentials at path in w that present no user's token: header_files
// and client_credentials.
func (v *validator) presented(w where, path string, c *Credentials) {
	for i, h := range c.HeaderFiles {
		p := fmt.Sprintf("%s.header_files[%d]", path, i)
		switch {
		case !validToken(h.Name):
			v.check(w, p+".name", fmt.Sprintf("%s is not a valid header name", quote(h.Name)))
		case isTransportHeader(strings.ToLower(h.Name)):
			v.check(w, p+".name", fmt.Sprintf("%s is set by the gateway's transport: remove it", quote(h.Name)))
		}
		if h.Path == "" {
			v.check(w, p+".path", "required: the file holding the header's value, like /run/secrets/token")
		}
	}
	if c.ClientCredentials != nil {
		v.tokenRequest(w, path+".client_credentials", c.ClientCredentials)
	}
}

// tokenRequest checks the token request at path in w.
func (v *validator) tokenRequest(w where, path string, t *TokenRequest) {
	if msg := checkPublicURL(t.TokenURL); t.TokenURL == "" {
		v.check(w, path+".token_url", "required: the authorization server's token endpoint")
	} else {
		v.check(w, path+".token_url", msg)
	}
	if t.ClientID == "" {
		v.check(w, path+".client_id", "required: the gateway's client id at that authorization server")
	}
}

package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file holds per-user upstream authorization: an upstream's `credentials.user_oauth`,
// with which each user connects their own account at the upstream, and the checks of what
// it needs of the rest of the config (auth.oidc and auth.login to sign users in, public_url
// for redirect URIs, keys to seal grants, and a place where grants outlive a restart).

// Defaults and bounds of user_oauth.
const (
	defaultConnectWait = 60 * time.Second
	maxConnectWait     = 10 * time.Minute // the messages say 10m
)

// UserOAuth is how the gateway obtains each user's token for an upstream (key `user_oauth`
// of its credentials): the gateway is an OAuth 2.1 client of the authorization server the
// upstream names, each user connects their own account there through the gateway's pages
// (signed in with auth.login), and calls to the upstream carry that user's token.
type UserOAuth struct {
	// ClientID is the gateway's client id, registered at the authorization server
	// beforehand (key `client_id`). Empty: none; the gateway then identifies itself with
	// its Client ID Metadata Document or registers dynamically, as client_metadata_document and dynamic_registration allow.
	ClientID string

	// ClientSecret is that client's secret (key `client_secret`; write the secret as
	// ${ENV}); it goes with client_id only. Empty: a public client, which proves itself with
	// PKCE alone.
	ClientSecret string

	// ClientMetadataDocument identifies the gateway with its Client ID Metadata Document,
	// an https URL under public_url, where the authorization server supports that (key
	// `client_metadata_document`). Defaults to true.
	ClientMetadataDocument bool

	// DynamicRegistration registers the gateway as a client (RFC 7591) where the
	// authorization server offers that (key `dynamic_registration`). Defaults to true.
	DynamicRegistration bool

	// Scopes are the scopes asked for (key `scopes`). Nil: those the upstream's challenge
	// (its WWW-Authenticate header) or its protected resource metadata names.
	Scopes []string

	// AllowPrivateNetwork lets the metadata, authorization and token URLs be on loopback or
	// private addresses (key `allow_private_network`). Off by default: those URLs come from
	// the upstream and its authorization server, and could otherwise make the gateway
	// reach into its own network. Safe only for an authorization server on premises, or in
	// tests; the gateway logs a warning at start when it is on.
	AllowPrivateNetwork bool

	// ConnectWait is how long a 2026-07-28 client's retry waits for its user to finish
	// connecting (key `connect_wait`, a duration); greater than 0 and at most 10m. Defaults
	// to 60s.
	ConnectWait time.Duration

	// CatalogCredentials is what the upstream's shared (catalog) connection presents (key
	// `catalog_credentials`: header_files and/or client_credentials, as in `credentials`);
	// nil: that connection presents no user's token, and the catalog comes from the first
	// connected user's listing.
	CatalogCredentials *Credentials
}

// userOAuth decodes an upstream's `credentials.user_oauth`.
func userOAuth(dst **UserOAuth) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		o := new(UserOAuth)
		*dst = o
		return d.mapping(n, path, "a mapping with client_id:, scopes: and the like, or {} for the defaults", []field{
			{key: "client_id", decode: str(&o.ClientID)},
			{key: "client_secret", decode: str(&o.ClientSecret)},
			{key: "client_metadata_document", decode: boolean(&o.ClientMetadataDocument)},
			{key: "dynamic_registration", decode: boolean(&o.DynamicRegistration)},
			{key: "scopes", decode: strList(&o.Scopes)},
			{key: "allow_private_network", decode: boolean(&o.AllowPrivateNetwork)},
			{key: "connect_wait", decode: duration(&o.ConnectWait)},
			{key: "catalog_credentials", decode: catalogCredentials(&o.CatalogCredentials)},
		})
	}
}

// catalogCredentials decodes `user_oauth.catalog_credentials`: the keys of `credentials`
// that present no user's token.
func catalogCredentials(dst **Credentials) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		c := new(Credentials)
		*dst = c
		return d.mapping(n, path, "a mapping with header_files: and/or client_credentials:", []field{
			{key: "header_files", decode: headerFiles(&c.HeaderFiles)},
			{key: "client_credentials", decode: tokenRequest(&c.ClientCredentials)},
			{key: "token_exchange", unlisted: true, decode: refuseInCatalog},
			{key: "user_oauth", unlisted: true, decode: refuseInCatalog},
		})
	}
}

// refuseInCatalog reports a key of `credentials` that gets a user's token, written in
// catalog_credentials.
func refuseInCatalog(d *decoder, _ *yaml.Node, path string) bool {
	key := path[strings.LastIndexByte(path, '.')+1:]
	d.problemf(d.lines[path], path, "%s gets a user's token, and the catalog connection acts for no user: give it header_files or client_credentials, or remove catalog_credentials", key)
	return false
}

// applyCredentialDefaults fills what u's credentials leave out, once the overrides are
// applied (s says where they were written): the resource of each token request, and the
// settings of user_oauth.
func applyCredentialDefaults(u *Upstream, s *site) {
	c := &u.Credentials
	var catalog *Credentials
	if o := c.UserOAuth; o != nil {
		catalog = o.CatalogCredentials
		w, p := s.locate("credentials")
		has := func(key string) bool { return w.ix.has(p + ".user_oauth." + key) }
		if !has("client_metadata_document") {
			o.ClientMetadataDocument = true
		}
		if !has("dynamic_registration") {
			o.DynamicRegistration = true
		}
		if !has("connect_wait") {
			o.ConnectWait = defaultConnectWait
		}
	}
	reqs := []*TokenRequest{c.ClientCredentials, c.TokenExchange}
	if catalog != nil {
		reqs = append(reqs, catalog.ClientCredentials)
	}
	for _, t := range reqs {
		if t != nil && t.Resource == "" {
			t.Resource = u.URL
		}
	}
}

// provided says which of the top-level settings that an upstream's credentials may need
// the config has. A setting written with a problem of its own counts as had, so that the
// one mistake is reported once.
type provided struct {
	issuers   bool // auth.oidc lists issuers
	login     bool // auth.login is set
	publicURL bool // public_url is set
	keys      bool // keys lists keys
	durable   bool // session_store type redis or state_dir: what is kept outlives a restart
}

// provisions returns what c's top-level settings provide; top says where they were read
// (nil: nowhere, all are defaults).
func provisions(c *Config, top *where) provided {
	bad := func(string) bool { return false }
	if top != nil {
		bad = func(path string) bool { return !top.ix.usable(path) }
	}
	return provided{
		issuers:   len(c.Auth.OIDC) > 0 || bad("auth.oidc"),
		login:     c.Auth.Login != nil || bad("auth.login"),
		publicURL: c.PublicURL != "" || bad("public_url"),
		keys:      len(c.Keys) > 0 || bad("keys"),
		durable:   c.SessionStore.Type == StoreRedis || c.StateDir != "" || bad("session_store.type") || bad("state_dir"),
	}
}

// userOAuth checks u's credentials.user_oauth, written in w at path (the credentials' path),
// and what it needs of the rest of the config (have).
func (v *validator) userOAuth(u *Upstream, w where, path string, have provided) {
	c := &u.Credentials
	o, p := c.UserOAuth, path+".user_oauth"
	if c.TokenExchange != nil {
		v.check(w, path+".token_exchange", "token_exchange and user_oauth are two ways to get each user's token for this upstream: keep one (user_oauth to have users connect their accounts at the upstream, token_exchange to trade their tokens from auth.oidc)")
	}
	if c.ClientCredentials != nil {
		v.check(w, path+".client_credentials", "beside user_oauth, calls carry each user's own token: put client_credentials under user_oauth.catalog_credentials, for the shared connection that lists the upstream's catalog")
	}
	if u.Isolation != IsolationPrincipal {
		v.check(w, p, "needs isolation: principal, so that each user's calls travel on a connection carrying that user's token")
	}
	for _, need := range []struct {
		ok  bool
		msg string
	}{
		{have.issuers, "needs auth.oidc with an issuer: users sign in at it (auth.login) before they connect their accounts"},
		{have.login, "needs auth.login: users sign in on the gateway's pages to connect their accounts there; add login: {client_id: ...} under auth, the gateway's client at an auth.oidc issuer"},
		{have.publicURL, "needs public_url, like https://mcp.example.com: the authorization server sends users back to a redirect URI, which must be absolute"},
		{have.keys, "needs keys: users' grants are sealed with them; add `keys: [{id: k1, secret: ${MANIFOLD_KEY_1}}]` and " + makeKeyHint},
		{have.durable, "needs state_dir or session_store type redis: users' grants must outlive a restart; set state_dir, like /var/lib/manifold, or use a Redis session store"},
	} {
		if !need.ok {
			v.check(w, p, need.msg)
		}
	}
	if o.ClientSecret != "" && o.ClientID == "" {
		v.check(w, p+".client_secret", "needs client_id: a secret goes with a client registered at the authorization server beforehand; set client_id, or remove client_secret")
	}
	if o.ClientID == "" && !o.ClientMetadataDocument && !o.DynamicRegistration {
		v.check(w, p, "the gateway has no way to identify itself at the authorization server: set client_id (registered there beforehand), or leave client_metadata_document or dynamic_registration on")
	}
	for i, s := range o.Scopes {
		if s == "" {
			v.check(w, fmt.Sprintf("%s.scopes[%d]", p, i), "empty: name the scope, or remove the entry")
		}
	}
	if o.ConnectWait <= 0 || o.ConnectWait > maxConnectWait {
		v.check(w, p+".connect_wait", "must be greater than 0 and at most 10m, like 60s: a 2026-07-28 client's retry waits this long for its user to finish connecting")
	}
	if o.CatalogCredentials != nil {
		v.presented(w, p+".catalog_credentials", o.CatalogCredentials)
	}
}

// login checks auth.login against the issuers it signs users in at.
func (v *validator) login(a *Auth, w where) {
	l := a.Login
	if l == nil {
		return
	}
	switch {
	case len(a.OIDC) == 0:
		v.check(w, "auth.login", "needs auth.oidc: users sign in at one of its issuers; add the issuer under auth.oidc")
	case !slices.ContainsFunc(a.OIDC, func(is Issuer) bool { return is.URL == l.Issuer }):
		urls := make([]string, len(a.OIDC))
		for i, is := range a.OIDC {
			urls[i] = is.URL
		}
		v.check(w, "auth.login.issuer", fmt.Sprintf("%s is not one of auth.oidc's issuers: write one of them exactly (%s), or remove the key for the first", quote(l.Issuer), strings.Join(urls, ", ")))
	}
	if l.ClientID == "" {
		v.check(w, "auth.login.client_id", "required: the gateway's client id at the issuer users sign in at")
	}
	if !slices.Contains(l.Scopes, defaultLoginScope) {
		v.check(w, "auth.login.scopes", "must include openid: signing in is OpenID Connect; add it, or remove the key for [openid]")
	}
}

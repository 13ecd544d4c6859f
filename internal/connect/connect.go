// Package connect owns the pages where users connect their own accounts at upstreams whose
// tools act on the user's behalf (per-user upstream authorization), and the tokens those
// connections yield.
//
// When a user's call needs an upstream they have not connected, the gateway asks the client
// to open a connect link (Ask; MCP 2025-11-25 URL-mode elicitation). The page behind it signs
// the browser's user in at the gateway's own OpenID Connect issuer, goes on only if that user
// is the principal that asked, shows what will be granted, and on consent runs the OAuth
// authorization code flow with PKCE at the upstream's authorization server, the gateway being
// the OAuth client (package oauthclient). The callback keeps the token in the grant vault
// (package grants), from which Token hands it, refreshed when due, to the upstream calls.
//
//	svc, err := connect.New(connect.Options{PublicURL: "https://mcp.example.com", Login: login,
//		Keys: keys, Store: connect.NewRedisStore(rdb, "manifold"), Vault: vault, Upstreams: ups})
//	defer svc.Close()
//	mux.Handle(connect.PathConnect, svc.Handler()) // and each other Path… constant
//	link, id, err := svc.Ask(ctx, connect.Request{Principal: p, Upstream: "github"})
//	tok, err := svc.Token(ctx, p, "github")
//	if connect.NeedsConnect(err) { ... ask the user to open a new link ... }
//
// Everything kept between two requests is sealed (seal.PurposeConnect). The sign-in in flight
// stays in the browser that started it, in a short-lived cookie, so that a visitor who has
// not signed in makes the gateway write nothing. The link and the authorization in flight go
// in a Store that every replica shares, so that any replica can serve any step; only a
// signed-in user (or the gateway, for its principals) writes there. Each record is single use
// where a replay would matter.
package connect

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// Paths the Handler serves; the gateway mounts the Handler on its mux at each of them (and at
// PathGrants + "/" for the revoke forms).
const (
	// PathConnect + id is a connect link: GET shows it, POST answers its form.
	PathConnect = "/connect/"
	// PathCallback is where the upstreams' authorization servers send the user back.
	PathCallback = "/oauth/callback"
	// PathLoginCallback is where the gateway's own issuer sends the user back after sign-in.
	PathLoginCallback = "/oauth/login/callback"
	// PathLogout (POST) signs the browser out, and in again as another user.
	PathLogout = "/oauth/logout"
	// PathClientMetadata serves the gateway's Client ID Metadata Document.
	PathClientMetadata = "/oauth/client-metadata.json"
	// PathGrants lists the signed-in user's grants (GET); POST PathGrants/{upstream}/revoke
	// revokes one.
	PathGrants = "/grants"
)

// Defaults of Options.
const (
	DefaultClientName = "Manifold"
	DefaultRequestTTL = 10 * time.Minute
	// MaxLinksPerPrincipal is the most connect links Ask keeps for one principal in a Store
	// that bounds them (OwnedPutter); beyond, Ask fails with an error wrapping ErrStoreFull.
	MaxLinksPerPrincipal = 20
)

// Login is how the pages sign users in: an OAuth client of the gateway's own OpenID Connect
// issuer, the one whose tokens the gateway accepts, so that the browser's user can be matched
// with the principal that asked.
type Login struct {
	// Issuer is the issuer identifier; its discovery document is fetched on the first sign-in.
	Issuer string
	// ClientID and ClientSecret identify the gateway at the issuer (a confidential client
	// whose redirect URI is PublicURL + PathLoginCallback); ClientSecret "" is a public client.
	ClientID, ClientSecret string
	// Scopes are asked at sign-in. If empty, just "openid"; "openid" is added if missing.
	Scopes []string
	// SubjectClaim is the claim of the id_token that names the user, dotted for a nested
	// one: the claim the gateway reads the subject of its access tokens from, so that the
	// user signed in is compared with the principal that asked. If empty, "sub".
	SubjectClaim string
}

// Upstream is one upstream whose users connect their own accounts
// (credentials.user_oauth), as configured.
type Upstream struct {
	// Name is the upstream's name in the configuration; URL its MCP endpoint, the resource
	// whose authorization server is discovered (RFC 9728).
	Name, URL string
	// ClientID and ClientSecret are credentials registered beforehand at the authorization
	// server; both may be empty.
	ClientID, ClientSecret string
	// ClientMetadataDocument lets the gateway identify itself by its Client ID Metadata
	// Document (PublicURL + PathClientMetadata) where the server supports it.
	ClientMetadataDocument bool
	// DynamicRegistration lets the gateway register itself (RFC 7591) where the server offers
	// it. Each registration is shared by the replicas through the Store.
	DynamicRegistration bool
	// Scopes are the scopes to ask for; nil means those the upstream advertises.
	Scopes []string
	// AllowPrivateNetwork lets the gateway reach the upstream's metadata and authorization
	// server at loopback and private addresses (and plain http to loopback). Safe only for
	// servers inside the operator's own network; it weakens the SSRF guard.
	AllowPrivateNetwork bool
}

// Options configure a Service. Keys, Store and Vault are required, and so are PublicURL and
// Login's Issuer and ClientID.
type Options struct {
	// PublicURL is the gateway's base URL as browsers reach it, without a trailing slash,
	// e.g. https://mcp.example.com. When it is https, cookies are Secure and __Host- named.
	PublicURL string
	// ClientName is the gateway's name shown at the authorization servers. If empty,
	// DefaultClientName.
	ClientName string
	// Login is the sign-in at the gateway's own issuer.
	Login Login
	// Keys seal what the Service stores and hands out (seal.PurposeConnect).
	Keys *seal.Keys
	// Store keeps the links, sign-ins and authorizations in flight, shared by replicas.
	Store Store
	// Vault keeps the grants.
	Vault *grants.Vault
	// Upstreams are those users may connect; SetUpstreams replaces them.
	Upstreams []Upstream
	// RequestTTL is the life of a connect link, and of an authorization once started. If
	// zero, DefaultRequestTTL.
	RequestTTL time.Duration
	// OnConnected, if set, is called after a grant is stored, on the callback's goroutine,
	// with the callback request's context.
	OnConnected func(ctx context.Context, r Request)
	// OnRevoked, if set, is called after Revoke deleted p's grant at upstream (from the
	// grants page or a caller of Revoke), on Revoke's goroutine, with its context; not when
	// there was no grant, nor when the deletion failed.
	OnRevoked func(ctx context.Context, p grants.Principal, upstream string)
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// Logger receives the Service's log. If nil, nothing is logged.
	Logger *slog.Logger
	// HTTPClient reaches the gateway's own issuer for the sign-in. If nil, a client with a
	// timeout of 10s.
	HTTPClient *http.Client
}

// Request is one ask to a user to connect an upstream.
type Request struct {
	// ID names the request in its link; set by Ask.
	ID string `json:"id"`
	// Principal is who asked: only this user may complete the connection.
	Principal grants.Principal `json:"principal"`
	// Upstream is the configured upstream's name.
	Upstream string `json:"upstream"`
	// Scopes are the scopes to ask for (a step-up); nil means the upstream's configured or
	// discovered ones.
	Scopes []string `json:"scopes,omitempty"`
	// SessionID is the MCP session to tell when the connection is done; "" for none.
	SessionID string `json:"session_id,omitempty"`
	// ElicitationID is the elicitation the client was given; "" for none.
	ElicitationID string `json:"elicitation_id,omitempty"`
	// Expires is when the link stops working; set by Ask.
	Expires time.Time `json:"expires"`
}

// ErrUnknownUpstream is wrapped by the refusals that name an upstream the Service does not
// have (not configured for user authorization, or removed by a reload).
var ErrUnknownUpstream = errors.New("the upstream is not one whose users connect their own accounts")

// ErrClosed is returned by a Service's methods after Close.
var ErrClosed = errors.New("the connect service is closed")

// ErrResourceChanged is wrapped by the errors of Token and TokenRejected for a grant made for
// another URL than the upstream's now (a reload changed its url, or a new upstream took a
// removed one's name): the grant is deleted, its tokens are handed to nobody, and the user
// must connect the upstream again (NeedsConnect reports it).
var ErrResourceChanged = errors.New("the grant was made for another URL of the upstream: connect the upstream again")

// NeedsConnect reports whether err says the user has no usable grant and must connect the
// upstream (again): none stored, the refresh token refused or missing, the stored grant
// unreadable, or made for another URL of the upstream.
func NeedsConnect(err error) bool {
	return errors.Is(err, grants.ErrNotFound) || errors.Is(err, grants.ErrInvalidGrant) ||
		errors.Is(err, grants.ErrNoRefreshToken) || errors.Is(err, grants.ErrUnreadable) ||
		errors.Is(err, ErrResourceChanged)
}

// Service serves the connect pages and hands out the grants' tokens. It is safe for
// concurrent use; Close stops the discoveries in flight.
type Service struct {
	// The Service is made of parts, each owning one concern: builds (the lifetime and the
	// discovery goroutines), records (the sealed records of the Store), flowCache (the
	// upstreams and their authorization flows), signIn (the sign-in at the gateway's own
	// issuer, its cookies and CSRF tokens), grantTokens (the grants' tokens, refreshed and
	// revoked) and pageWriter (the pages' answers). The Service itself keeps the connect
	// links and serves the pages that join them.

	// opts are the options as New completed them. Invariant: never modified after New.
	opts   Options
	logger *slog.Logger
	pages  pageWriter
	// records are the links and authorizations in flight, and the shared registrations.
	records *records
	// builds owns the discovery goroutines; flows and signIn start them.
	builds *builds
	flows  *flowCache
	signIn *signIn
	tokens *grantTokens
}

// New checks opts, applies its defaults, and returns a Service. It makes no request: the
// issuer and the upstreams' authorization servers are discovered when first needed.
func New(opts Options) (*Service, error) {
	var problems []string
	u, err := url.Parse(opts.PublicURL)
	switch {
	case opts.PublicURL == "":
		problems = append(problems, "PublicURL is required")
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.HasSuffix(opts.PublicURL, "/") || u.RawQuery != "" || u.Fragment != "":
		problems = append(problems, fmt.Sprintf("PublicURL %q must be an http(s) base URL without a trailing slash", opts.PublicURL))
	}
	if opts.Login.Issuer == "" || opts.Login.ClientID == "" {
		problems = append(problems, "Login needs an Issuer and a ClientID")
	}
	if opts.Keys == nil {
		problems = append(problems, "Keys are required")
	}
	if opts.Store == nil {
		problems = append(problems, "a Store is required")
	}
	if opts.Vault == nil {
		problems = append(problems, "a Vault is required")
	}
	ups, err := upstreamMap(opts.Upstreams)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("connect: %s", strings.Join(problems, "; "))
	}
	if opts.ClientName == "" {
		opts.ClientName = DefaultClientName
	}
	if opts.RequestTTL <= 0 {
		opts.RequestTTL = DefaultRequestTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	opts.Login.Scopes = loginScopes(opts.Login.Scopes)
	sealer := opts.Keys.Sealer(seal.PurposeConnect)
	logger := opts.Logger.With("component", "connect")
	pages := pageWriter{logger: logger}
	bs := newBuilds(opts.Now)
	recs := &records{store: opts.Store, sealer: sealer, logger: logger}
	flows := &flowCache{builds: bs, records: recs, publicURL: opts.PublicURL, clientName: opts.ClientName, now: opts.Now,
		upstreams: ups, flows: map[string]*flowEntry{}}
	s := &Service{
		opts:    opts,
		logger:  logger,
		pages:   pages,
		records: recs,
		builds:  bs,
		flows:   flows,
		signIn: &signIn{login: opts.Login, publicURL: opts.PublicURL, httpClient: opts.HTTPClient, sealer: sealer,
			secure: u.Scheme == "https", now: opts.Now, logger: logger, pages: pages, builds: bs},
		tokens: &grantTokens{vault: opts.Vault, flows: flows, logger: logger, onRevoked: opts.OnRevoked},
	}
	warnInsecure(logger, opts.Upstreams)
	s.opts.Upstreams = nil // the flow cache holds them; SetUpstreams replaces them there
	return s, nil
}

// warnInsecure logs a warning for each upstream of list that weakens the SSRF guard.
func warnInsecure(logger *slog.Logger, list []Upstream) {
	for _, up := range list {
		if up.AllowPrivateNetwork {
			logger.Warn("the authorization server of this upstream may be reached at loopback and private addresses, and over plain http to loopback: safe only for servers inside your own network",
				"upstream", up.Name)
		}
	}
}

// loginScopes returns scopes with "openid" in it, or just "openid".
func loginScopes(scopes []string) []string {
	scopes = slices.Clone(scopes)
	if !slices.Contains(scopes, "openid") {
		scopes = append([]string{"openid"}, scopes...)
	}
	return scopes
}

// upstreamMap indexes list by name, refusing a nameless, URL-less or twice-named upstream.
func upstreamMap(list []Upstream) (map[string]Upstream, error) {
	m := make(map[string]Upstream, len(list))
	for i, up := range list {
		if up.Name == "" || up.URL == "" {
			return nil, fmt.Errorf("upstream %d needs a Name and a URL", i)
		}
		if _, dup := m[up.Name]; dup {
			return nil, fmt.Errorf("upstream %q is listed twice", up.Name)
		}
		up.Scopes = slices.Clone(up.Scopes)
		m[up.Name] = up
	}
	return m, nil
}

// Ask keeps r for a single use during RequestTTL and returns its connect link, PublicURL +
// PathConnect + id, with id the request's new ID. r needs a principal (issuer and subject)
// and a configured upstream. A principal holds at most MaxLinksPerPrincipal links where the
// Store bounds them (OwnedPutter): beyond, and when the Store is full, the error wraps
// ErrStoreFull.
func (s *Service) Ask(ctx context.Context, r Request) (link string, id string, err error) {
	if r.Principal.Issuer == "" || r.Principal.Subject == "" {
		return "", "", errors.New("ask to connect: the request needs a principal (issuer and subject)")
	}
	if _, ok := s.flows.upstream(r.Upstream); !ok {
		return "", "", fmt.Errorf("ask to connect %q: %w", r.Upstream, ErrUnknownUpstream)
	}
	r.ID = randomString()
	r.Expires = s.opts.Now().Add(s.opts.RequestTTL)
	r.Scopes = slices.Clone(r.Scopes)
	if err := s.records.putOwned(ctx, r.Principal.Hash(), requestKey(r.ID), r, s.opts.RequestTTL); err != nil {
		return "", "", fmt.Errorf("ask to connect %q: %w", r.Upstream, err)
	}
	return s.opts.PublicURL + PathConnect + r.ID, r.ID, nil
}

// SetUpstreams replaces the upstreams (a configuration reload). The discovered flows of the
// upstreams removed or changed are dropped; links already handed out for a removed upstream
// then find it gone.
func (s *Service) SetUpstreams(list []Upstream) {
	m, err := upstreamMap(list)
	if err != nil {
		s.logger.Error("connect upstreams not replaced: the list is invalid; fix the configuration", "error", err)
		return
	}
	warnInsecure(s.logger, list)
	s.flows.set(m)
}

// Close stops the discoveries in flight, waits for them, and closes idle connections. It does
// not close the Store or the Vault. It may be called more than once.
func (s *Service) Close() error {
	dropped, first := s.flows.close()
	if !first {
		return nil
	}
	s.builds.close()
	for _, f := range dropped {
		f.CloseIdleConnections()
	}
	s.opts.HTTPClient.CloseIdleConnections()
	return nil
}

// ownerOf is the stable name of p given to the authorization flows as their owner.
func ownerOf(p grants.Principal) string {
	return strconv.Quote(p.Issuer) + " " + strconv.Quote(p.Subject)
}

// randomString is 32 random bytes, base64url without padding.
func randomString() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

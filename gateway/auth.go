package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/auth/credential"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/tracing"
	"github.com/manifold-mcp/manifold/upstream"
)

// metadataPath is where the gateway serves its protected resource metadata (RFC 9728); an
// endpoint's own document is at this path followed by the endpoint's path.
const metadataPath = "/.well-known/oauth-protected-resource"

// authn is the first stage of the pipeline at the HTTP face: who the caller is (design
// decision 7). Nil when authentication is off.
type authn struct {
	verifier *auth.Authenticator
	// scopes are needed by every request; base is the gateway's URL as clients reach it.
	scopes []string
	base   string
	// apiKeys tells whether any API key is configured, for the refusal's message.
	apiKeys bool
	// exchangers trade callers' tokens for upstream tokens (token_exchange): each is told
	// of every caller's current token.
	exchangers []*credential.Exchanger
}

// newAuthn builds the authentication of cfg; nil, nil when it is off.
func newAuthn(cfg *config.Config, opts *Options) (*authn, error) {
	a := cfg.Auth
	if !a.Enabled() {
		return nil, nil
	}
	keys, err := APIKeys(cfg)
	if err != nil {
		return nil, err
	}
	v, err := auth.New(auth.Config{Resource: a.Resource, Issuers: issuersOf(cfg), APIKeys: keys, HTTPClient: opts.AuthHTTPClient, Now: opts.Now, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &authn{verifier: v, scopes: a.Scopes, base: cfg.BaseURL(), apiKeys: len(keys) > 0}, nil
}

// APIKeys returns the API keys clients authenticate with under cfg: auth.api_keys, then the
// entries of auth.api_keys_file (read now), as the gateway builds its authentication from
// them. The principal each stands for is its Principal. `gateway explain` resolves -api-key
// names with it, so that it decides for the principal the gateway would.
func APIKeys(cfg *config.Config) ([]auth.APIKey, error) {
	return apiKeysOf(cfg.Auth.APIKeys, cfg.Auth.APIKeysFile, "auth")
}

// apiKeysOf returns the configured API keys and those of file, if set, for the auth package;
// section names the config section, for errors.
func apiKeysOf(configured []config.APIKey, file, section string) ([]auth.APIKey, error) {
	keys := make([]auth.APIKey, 0, len(configured))
	for _, k := range configured {
		keys = append(keys, auth.APIKey{Name: k.Name, Hash: k.Hash, Email: k.Email, Groups: k.Groups, Roles: k.Roles, Scopes: k.Scopes})
	}
	if file != "" {
		more, err := auth.LoadAPIKeys(file)
		if err != nil {
			return nil, fmt.Errorf("%s.api_keys_file: %w", section, err)
		}
		keys = append(keys, more...)
	}
	return keys, nil
}

// issuersOf returns cfg's token issuers for the auth package. Every endpoint's metadata names
// a resource of its own (RFC 9728 §3.3): a client may ask for a token for any of them, and
// each is the gateway's.
func issuersOf(cfg *config.Config) []auth.Issuer {
	a := cfg.Auth
	resources := []string{a.Resource, cfg.BaseURL()}
	for _, p := range cfg.Profiles {
		resources = append(resources, profileResource(a.Resource, p.Name))
	}
	issuers := make([]auth.Issuer, len(a.OIDC))
	for i, is := range a.OIDC {
		audiences := is.Audiences
		if len(audiences) == 0 {
			audiences = resources
		}
		issuers[i] = auth.Issuer{
			URL:       is.URL,
			Audiences: audiences,
			Claims: auth.ClaimNames{Subject: is.SubjectClaim, Email: is.EmailClaim, Groups: is.GroupsClaim,
				Roles: is.RolesClaim, Scopes: is.ScopesClaim},
			ClockSkew:           is.ClockSkew,
			JWKSRefreshInterval: is.JWKSRefreshInterval,
			AllowHTTP:           is.AllowHTTP,
		}
	}
	return issuers
}

// metadataURL is the URL of the protected resource metadata of the endpoint at path; "" when
// there is none to point to (API keys only: no authorization server to discover).
func (a *authn) metadataURL(path string) string {
	if len(a.verifier.Issuers()) == 0 {
		return ""
	}
	return a.base + metadataPath + path
}

// credentialsNeeded is the message of a request refused for want of a credential: it says
// what to send. With API keys only, the challenge names no authorization server, so the
// message asks for a key rather than pointing at the challenge.
func (a *authn) credentialsNeeded(resource string) string {
	if len(a.verifier.Issuers()) == 0 {
		return "authentication required: send an API key of this gateway as Authorization: Bearer mfk_… (an operator creates one with `gateway apikey`)"
	}
	msg := "authentication required: send Authorization: Bearer with a token for " + resource + " (the WWW-Authenticate header says where to get one)"
	if a.apiKeys {
		msg += ", or an API key of this gateway"
	}
	return msg
}

// profileResource is the resource identifier of a profile's endpoint.
func profileResource(resource, profile string) string {
	return strings.TrimRight(resource, "/") + "/" + profile
}

// principalKey carries the authenticated principal in a request's context.
type principalKey struct{}

// principalOf returns the principal that authenticated the request of ctx; anonymous when
// authentication is off.
func principalOf(ctx context.Context) session.Principal {
	p, _ := ctx.Value(principalKey{}).(session.Principal)
	return p
}

// authenticate lets a request reach next once it proves who it is, with its principal in its
// context; otherwise it answers 401 (no or a bad credential), 400 (a malformed one) or 403
// (a scope missing), with the challenge that tells the client where to get a token. The
// credential is checked on every request, within a session too: a session is not a
// credential.
func (g *streamableServer) authenticate(next http.Handler) http.Handler {
	if g.auth == nil {
		return next
	}
	a := g.auth
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		metadata := a.metadataURL(r.URL.Path)
		var verified *tracing.Verification
		if g.tracer != nil {
			verified = &tracing.Verification{Start: time.Now()}
		}
		who, err := a.verifier.Authenticate(r.Context(), r)
		if verified != nil {
			verified.End = time.Now()
		}
		if err != nil {
			status, challenge := auth.Challenge(err, metadata, a.scopes)
			w.Header().Set("WWW-Authenticate", challenge)
			msg := a.credentialsNeeded(g.cfg.Auth.Resource)
			var authErr *auth.Error
			if errors.As(err, &authErr) {
				msg = "authentication failed: " + authErr.Description
				g.logger.Info("request refused: authentication failed", "path", r.URL.Path, "reason", authErr.Description, "remote", clientAddr(r))
			}
			writeHTTPError(w, status, nil, protocol.Errorf(protocol.CodeRequestRejected, "%s", msg))
			return
		}
		if missing := missingScopes(who.Principal, a.scopes); len(missing) > 0 {
			status, challenge := auth.InsufficientScope(a.scopes, metadata)
			w.Header().Set("WWW-Authenticate", challenge)
			writeHTTPError(w, status, nil, protocol.Errorf(protocol.CodeRequestRejected,
				"insufficient scope: this gateway needs a token with the scopes %s", strings.Join(missing, " ")))
			return
		}
		if who.Token != "" {
			for _, e := range a.exchangers {
				e.Remember(who.Principal, who.Token, who.Expiry)
			}
		}
		ctx := context.WithValue(r.Context(), principalKey{}, who.Principal)
		if verified != nil {
			ctx = context.WithValue(ctx, verifiedKey{}, verified) // for the request's span
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// verifiedKey carries, with tracing on, when the request's credential was checked
// (*tracing.Verification), for the request's span.
type verifiedKey struct{}

// identityOf is p less its claims: what a session record keeps of its principal.
func identityOf(p session.Principal) session.Principal {
	return session.Principal{Issuer: p.Issuer, Subject: p.Subject}
}

// missingScopes returns the scopes of need that p was not granted.
func missingScopes(p session.Principal, need []string) []string {
	var missing []string
	for _, s := range need {
		if !p.HasScope(s) {
			missing = append(missing, s)
		}
	}
	return missing
}

// serveMetadata registers the protected resource metadata documents: at the root, and
// path-suffixed for /mcp and each profile. Every endpoint names the gateway's one resource,
// which all of them accept tokens for.
//
// Each document names the resource whose URL the well-known path was inserted into (RFC 9728
// §3.3): the gateway's base URL at the root, the resource of /mcp, and a profile's own. Tokens
// for any of them are accepted everywhere. With API keys only there is no authorization
// server to name, and no document.
func (g *streamableServer) serveMetadata(mux *http.ServeMux) {
	if g.auth == nil || len(g.auth.verifier.Issuers()) == 0 {
		return
	}
	document := func(resource string) http.Handler {
		return auth.MetadataHandler(auth.ResourceMetadata{
			Resource:               resource,
			AuthorizationServers:   g.auth.verifier.Issuers(),
			ScopesSupported:        g.cfg.Auth.Scopes,
			BearerMethodsSupported: []string{"header"},
			ResourceName:           "Manifold MCP gateway",
		})
	}
	mux.Handle(metadataPath, document(g.cfg.BaseURL()))
	mux.Handle(metadataPath+"/mcp", document(g.cfg.Auth.Resource))
	for _, p := range g.cfg.Profiles {
		mux.Handle(metadataPath+"/mcp/"+p.Name, document(profileResource(g.cfg.Auth.Resource, p.Name)))
	}
}

// upstreamAuth is what a gateway presents to one HTTP upstream: never the client's token
// (design decision 8).
type upstreamAuth struct {
	// shared is the HTTP client of the upstream's shared connection, with the header files
	// and client credentials configured; nil when none are.
	shared *http.Client
	// perPrincipal gives the HTTP client of a principal's own connection: the header files
	// and the principal's exchanged token; nil when the upstream has no token exchange.
	perPrincipal func(session.Principal) *http.Client
	// exchanger trades principals' tokens for the upstream's; nil without token exchange.
	exchanger *credential.Exchanger
	// userOAuth is set when each principal's connection carries the token its user granted
	// the gateway at the upstream (credentials.user_oauth, useroauth.go).
	userOAuth bool
}

// upstreamCredentials builds the credentials of u on top of base, the upstream's HTTP client
// (nil: the upstream package's default transport).
func (g *Gateway) upstreamCredentials(u *config.Upstream, base *http.Client) upstreamAuth {
	c := u.Credentials
	if u.URL == "" || (len(c.HeaderFiles) == 0 && c.ClientCredentials == nil && c.TokenExchange == nil && c.UserOAuth == nil) {
		return upstreamAuth{}
	}
	transport := http.RoundTripper(upstream.NewHTTPTransport())
	if base != nil && base.Transport != nil {
		transport = base.Transport
	}
	var files []credential.Source
	for _, h := range c.HeaderFiles {
		files = append(files, credential.FileHeader(h.Name, h.Path, h.Prefix))
	}
	if uo := c.UserOAuth; uo != nil && g.userAuth != nil {
		return g.userAuth.credentials(u.Name, uo, transport, files, func(t *config.TokenRequest) credential.Source {
			return clientCredentialsSource(t, g.opts.AuthHTTPClient, g.ctx)
		})
	}
	sources := files
	if cc := c.ClientCredentials; cc != nil {
		sources = append(sources[:len(files):len(files)], clientCredentialsSource(cc, g.opts.AuthHTTPClient, g.ctx))
	}
	var out upstreamAuth
	if len(sources) > 0 {
		out.shared = credentialedClient(transport, sources)
	}
	if te := c.TokenExchange; te != nil && g.auth != nil {
		ex := credential.NewExchanger(credential.ExchangeConfig{
			TokenURL: te.TokenURL, ClientID: te.ClientID, ClientSecret: te.ClientSecret,
			Resource: te.Resource, Audience: te.Audience, Scopes: te.Scopes,
			HTTPClient: g.opts.AuthHTTPClient, Now: g.opts.Now, Lifetime: g.ctx,
		})
		g.auth.exchangers = append(g.auth.exchangers, ex)
		out.exchanger = ex
		// The header files still go with every request; the principal's exchanged token is
		// its Authorization (the gateway's own client-credentials token is not asked for).
		out.perPrincipal = func(p session.Principal) *http.Client {
			return credentialedClient(transport, append(files[:len(files):len(files)], ex.For(p)))
		}
	}
	return out
}

// clientCredentialsSource is the gateway's own token by the client credentials grant t,
// requested with client and kept no longer than lifetime.
func clientCredentialsSource(t *config.TokenRequest, client *http.Client, lifetime context.Context) credential.Source {
	return credential.ClientCredentials(credential.ClientCredentialsConfig{
		TokenURL: t.TokenURL, ClientID: t.ClientID, ClientSecret: t.ClientSecret,
		Scopes: t.Scopes, Resource: t.Resource, Audience: t.Audience, HTTPClient: client,
		Lifetime: lifetime,
	})
}

// credentialedClient is an HTTP client that adds the sources' headers to every request it
// sends through transport, and follows a redirect only within the same host: credentials
// meant for the upstream must not travel to wherever it redirects.
func credentialedClient(transport http.RoundTripper, sources []credential.Source) *http.Client {
	return &http.Client{Transport: credential.Transport(transport, sources...), CheckRedirect: upstream.SameHostRedirects}
}

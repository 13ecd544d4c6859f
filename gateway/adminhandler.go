package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/admin/backend"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/session"
)

// AdminHandler returns the admin API and page (config key `admin`), to serve on the admin
// listener; nil when there is none.
func (g *Gateway) AdminHandler() (http.Handler, error) {
	if !g.cfg.Admin.Enabled() {
		return nil, nil
	}
	authz, err := newAdminAuthorizer(g.cfg, &g.opts)
	if err != nil {
		return nil, err
	}
	g.reloads.followAdminKeys(authz.verifier)
	opts := admin.Options{
		OriginAllowed: func(origin string) bool { return config.OriginAllowed(g.cfg.Admin.AllowedOrigins, origin) },
		LoopbackOnly:  isLoopbackListen(g.cfg.Admin.Listen),
		Logger:        g.logger,
	}
	if g.cfg.Metrics.OnAdmin() {
		opts.Metrics = g.MetricsHandler() // nil when the gateway was given no metrics to record
	}
	return admin.NewHandler(g.adminBackend(), authz, opts), nil
}

// adminAuthorizer admits an admin API key, or a token of auth.oidc's issuers with one of the
// admin roles.
type adminAuthorizer struct {
	verifier *auth.Authenticator
	roles    []string
}

func newAdminAuthorizer(cfg *config.Config, opts *Options) (*adminAuthorizer, error) {
	a := cfg.Admin
	keys, err := apiKeysOf(a.APIKeys, a.APIKeysFile, "admin")
	if err != nil {
		return nil, err
	}
	var issuers []auth.Issuer
	if len(a.Roles) > 0 {
		issuers = issuersOf(cfg)
	}
	v, err := auth.New(auth.Config{Resource: cfg.Auth.Resource, Issuers: issuers, APIKeys: keys, HTTPClient: opts.AuthHTTPClient, Now: opts.Now, Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return &adminAuthorizer{verifier: v, roles: a.Roles}, nil
}

// Admin implements admin.Authorizer. The operator's Principal is the principal's Key, as a
// client's: an admin API key is the same principal as a client API key of the same name, a
// token the same as a client's token of the same issuer and subject.
func (a *adminAuthorizer) Admin(r *http.Request) (admin.Operator, error) {
	who, err := a.verifier.Authenticate(r.Context(), r)
	if err != nil {
		return admin.Operator{}, fmt.Errorf("%w: %v; sign in with an admin API key (admin.api_keys) or a token with an admin role", admin.ErrUnauthorized, err)
	}
	p := who.Principal
	op := admin.Operator{Name: p.String(), Principal: p.Key()}
	if p.Issuer == session.APIKeyIssuer {
		return op, nil
	}
	for _, role := range p.Roles {
		if slices.Contains(a.roles, role) {
			return op, nil
		}
	}
	return op, fmt.Errorf("%w: %s has none of the admin roles (admin.roles)", admin.ErrForbidden, p)
}

// adminBackend is what the admin API shows of the gateway and acts on.
func (g *Gateway) adminBackend() *backend.Backend {
	src := backend.Sources{
		Catalog: g.snapshot.Load,
		Rebuild: g.rebuild,
		Audit:   g.audit,
		Now:     g.opts.Now,
		Logger:  g.logger,
	}
	src.Upstreams = func() []backend.Upstream {
		var out []backend.Upstream
		for _, u := range g.upstreamList() {
			out = append(out, backend.Upstream{Name: u.ns.Name, Transport: u.transport, Isolation: u.isolation, Conn: u})
		}
		return out
	}
	src.Config, src.Reload = g.reloads.configStatus, g.reloads.reloadEverywhere
	src.Sessions = g.store
	if g.held != nil {
		src.Held = g.held.Holder
	}
	if g.pinning != nil {
		src.Pinning = pinsForAdmin{g.pinning}
	}
	if g.replicas != nil {
		src.PinsDecided = g.replicas.PinsDecided
	}
	if g.userAuth != nil {
		src.Grants = g.userAuth
	}
	return backend.New(src)
}

// pinsForAdmin is what the admin API reads of the pins and decides on.
type pinsForAdmin struct{ p *pinning }

// Interface guards.
var (
	_ backend.Pinning = pinsForAdmin{}
	_ backend.Conn    = (*upstreamEntry)(nil)
)

func (a pinsForAdmin) Reload(ctx context.Context) error { return a.p.reload(ctx) }

func (a pinsForAdmin) Resolve(ctx context.Context, upstreamName, tool, hash string, accept bool, by string) (pin.Pin, error) {
	return a.p.resolve(ctx, upstreamName, tool, hash, accept, by)
}

func (a pinsForAdmin) Pinned() []backend.Pinned {
	pins, listed := a.p.snapshot()
	out := make([]backend.Pinned, 0, len(pins))
	for k, pn := range pins {
		lt, isListed := listed[k]
		out = append(out, backend.Pinned{Pin: pn, Withheld: isListed && a.p.hides(k, pn, true, lt)})
	}
	return out
}

func (a pinsForAdmin) Hides(pn pin.Pin) bool {
	_, listed := a.p.snapshot()
	k := pinKey{pn.Upstream, pn.Tool}
	lt, isListed := listed[k]
	return isListed && a.p.hides(k, pn, true, lt)
}

func (a pinsForAdmin) Withheld() []backend.Withheld {
	pins, listed := a.p.snapshot()
	var out []backend.Withheld
	for k, lt := range listed {
		pn, ok := pins[k]
		if !a.p.hides(k, pn, ok, lt) {
			continue
		}
		w := backend.Withheld{Upstream: k.upstream, Tool: k.tool}
		if ok {
			w.Pin = &pn
		}
		out = append(out, w)
	}
	return out
}

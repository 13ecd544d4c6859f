package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// adminSessionsShown bounds the sessions the admin API lists.
const adminSessionsShown = 500

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
	return admin.NewHandler(adminBackend{g}, authz, admin.Options{
		OriginAllowed: func(origin string) bool { return config.OriginAllowed(g.cfg.Admin.AllowedOrigins, origin) },
		LoopbackOnly:  isLoopbackListen(g.cfg.Admin.Listen),
		Logger:        g.logger,
	}), nil
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
type adminBackend struct{ g *Gateway }

func (b adminBackend) Upstreams(context.Context) []admin.Upstream {
	g := b.g
	withheld := map[string]int{}
	for _, t := range b.withheldTools() {
		withheld[t.Upstream]++
	}
	out := make([]admin.Upstream, 0, len(g.upstreams))
	enabled := g.cfg.EnabledUpstreams()
	for i, u := range g.upstreams {
		st := u.Status()
		cat := u.Catalog()
		out = append(out, admin.Upstream{Name: u.ns.Name, Transport: enabled[i].Transport, Isolation: enabled[i].Isolation,
			State: string(st.State), Error: st.Error,
			Tools: len(cat.List(upstream.Tools)), Prompts: len(cat.List(upstream.Prompts)), Resources: len(cat.List(upstream.Resources)),
			Withheld: withheld[u.ns.Name]})
	}
	return out
}

func (b adminBackend) Catalog(context.Context) []admin.Tool {
	snap := b.g.snapshot.Load()
	var out []admin.Tool
	for _, e := range snap.Entries(upstream.Tools) {
		var def struct {
			Title       string `json:"title"`
			Description string `json:"description"`
		}
		_ = json.Unmarshal(e.Raw(), &def)
		out = append(out, admin.Tool{Name: e.Exposed, Upstream: e.Namespace.Name, Original: e.Original, Title: def.Title, Description: def.Description, Annotations: e.Annotations()})
	}
	return append(out, b.withheldTools()...)
}

// withheldTools returns the tools the pinned upstreams list whose definition is not the
// pinned one, in withhold mode.
func (b adminBackend) withheldTools() []admin.Tool {
	p := b.g.pinning
	if p == nil {
		return nil
	}
	pins, listed := p.snapshot()
	var out []admin.Tool
	for k, lt := range listed {
		pn, ok := pins[k]
		if !p.hides(k, pn, ok, lt) {
			continue
		}
		t := admin.Tool{Upstream: k.upstream, Original: k.tool, Withheld: true}
		if ok && pn.Change != nil {
			var def struct {
				Title       string          `json:"title"`
				Description string          `json:"description"`
				Annotations json.RawMessage `json:"annotations"`
			}
			_ = json.Unmarshal(pn.Change.Definition, &def)
			t.Title, t.Description, t.Annotations = def.Title, def.Description, def.Annotations
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b admin.Tool) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Original, b.Original))
	})
	return out
}

// sessionLister lists the sessions of every replica (session.MemoryStore, RedisStore).
type sessionLister interface {
	List(ctx context.Context, limit int) ([]session.Listed, error)
}

func (b adminBackend) Sessions(ctx context.Context) ([]admin.Session, error) {
	l, ok := b.g.store.(sessionLister)
	if !ok {
		return nil, errors.New("this session store cannot list its sessions")
	}
	listed, err := l.List(ctx, adminSessionsShown)
	if err != nil {
		return nil, err
	}
	now := b.g.opts.Now()
	out := make([]admin.Session, 0, len(listed))
	for _, s := range listed {
		var client struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		}
		_ = json.Unmarshal(s.Record.ClientInfo, &client)
		name := client.Name
		if client.Version != "" {
			name += " " + client.Version
		}
		out = append(out, admin.Session{Fingerprint: fingerprintOfDigest(s.Digest), Principal: s.Record.Principal.String(), Profile: s.Record.Profile,
			ProtocolVersion: s.Record.ProtocolVersion, Client: name, Created: s.Record.CreatedAt, AgeSeconds: now.Sub(s.Record.CreatedAt).Round(time.Second).Seconds()})
	}
	return out, nil
}

func (b adminBackend) Approvals(ctx context.Context) ([]admin.Approval, error) {
	if b.g.held == nil {
		return nil, nil
	}
	calls, err := b.g.held.Pending(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]admin.Approval, len(calls))
	for i, c := range calls {
		out[i] = approvalOf(c)
	}
	return out, nil
}

func (b adminBackend) Decide(ctx context.Context, id, decision string, by admin.Operator) (admin.Approval, error) {
	c, err := b.g.held.decide(ctx, id, decision, by)
	if err != nil {
		return admin.Approval{}, err
	}
	return approvalOf(c), nil
}

func (b adminBackend) Pins(ctx context.Context) ([]admin.Pin, error) {
	p := b.g.pinning
	if p == nil {
		return nil, nil
	}
	// The store's pins, not only what this replica last read: another replica's decision
	// may not have reached this one.
	if err := p.reload(ctx); err != nil {
		return nil, err
	}
	pins, listed := p.snapshot()
	out := make([]admin.Pin, 0, len(pins))
	for k, pn := range pins {
		lt, isListed := listed[k]
		out = append(out, pinOf(pn, isListed && p.hides(k, pn, true, lt)))
	}
	slices.SortFunc(out, func(a, b admin.Pin) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Tool, b.Tool))
	})
	return out, nil
}

func (b adminBackend) Resolve(ctx context.Context, upstreamName, tool, hash, decision, by string) (admin.Pin, error) {
	g := b.g
	if g.pinning == nil {
		return admin.Pin{}, fmt.Errorf("%w: no upstream is pinned (pinning: withhold or log)", admin.ErrNotFound)
	}
	pn, err := g.pinning.resolve(ctx, upstreamName, tool, hash, decision == admin.Accept, by)
	switch {
	case errors.Is(err, pin.ErrNotFound):
		return admin.Pin{}, fmt.Errorf("%w: no pin of %s's tool %q", admin.ErrNotFound, upstreamName, tool)
	case errors.Is(err, pin.ErrStale):
		_ = g.pinning.reload(ctx) // what this replica knew was out of date
		g.rebuild()
		return admin.Pin{}, fmt.Errorf("%w: %v", admin.ErrConflict, err)
	case err != nil:
		return admin.Pin{}, err
	}
	g.logger.Info("an operator decided on a changed tool definition", "upstream", upstreamName, "tool", tool, "decision", decision, "by", by, "hash", hash)
	if g.replicas != nil {
		g.replicas.PinsDecided()
	}
	g.rebuild()
	_, listed := g.pinning.snapshot()
	k := pinKey{upstreamName, tool}
	lt, isListed := listed[k]
	return pinOf(pn, isListed && g.pinning.hides(k, pn, true, lt)), nil
}

// Audit records an admin's action in the audit trail, as a request of method "admin/<action>".
func (b adminBackend) Audit(who, action, target, outcome string, status int) {
	if b.g.opts.Audit == nil {
		return
	}
	if who == "" {
		who = "unauthenticated"
	}
	rec := audit.Record{Time: b.g.opts.Now(), Principal: who, Method: "admin/" + action, Target: target, Outcome: audit.OutcomeOK}
	if outcome != "ok" {
		rec.Outcome, rec.Reason = audit.OutcomeRefused, fmt.Sprintf("%s_%d", outcome, status)
	}
	b.g.opts.Audit.Record(rec)
}

// pinOf returns a pin as the admin API shows it.
func pinOf(p pin.Pin, withheld bool) admin.Pin {
	out := admin.Pin{Upstream: p.Upstream, Tool: p.Tool, Hash: p.Hash, Definition: p.Definition, Pinned: p.Pinned, Missing: p.Missing, Withheld: withheld}
	if c := p.Change; c != nil {
		ch := &admin.Change{Hash: c.Hash, Definition: c.Definition, Seen: c.Seen, Rejected: c.Rejected, By: c.By, Diff: []admin.FieldChange{}}
		for _, d := range p.Diff() {
			ch.Diff = append(ch.Diff, admin.FieldChange{Field: d.Field, Before: d.Before, After: d.After})
		}
		out.Change = ch
	}
	return out
}

// fingerprintOfDigest returns the fingerprint of the session whose Digest is digest: both
// are prefixes of the hex SHA-256 of its id.
func fingerprintOfDigest(digest string) string {
	if len(digest) < 12 {
		return digest
	}
	return digest[:12]
}

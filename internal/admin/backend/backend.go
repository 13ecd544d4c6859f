// Package backend is what the admin API (package admin) shows of a gateway and acts on: its
// upstreams and catalog, the sessions of every replica, the calls held for an operator, the
// pinned tool definitions, and the audit of operators' actions. It reads them through small
// interfaces the gateway fills, so that an admin feature grows here, not in the gateway.
//
//	b := &backend.Backend{Upstreams: ups, Catalog: snapshot, Sessions: store, Held: holder, Now: time.Now}
//	h := admin.NewHandler(b, authz, admin.Options{})
package backend

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// SessionsShown bounds the sessions the admin API lists.
const SessionsShown = 500

// Upstream is an enabled upstream as configured, with its shared connection.
type Upstream struct {
	Name, Transport, Isolation string
	Conn                       Conn
}

// Conn is an upstream's shared connection: its state and what it lists now.
type Conn interface {
	Status() upstream.Status
	Catalog() *upstream.Catalog
}

// SessionLister lists the sessions of every replica (session.MemoryStore, RedisStore).
type SessionLister interface {
	List(ctx context.Context, limit int) ([]session.Listed, error)
}

// Held is the calls held for an operator's decision (approval.Holder).
type Held interface {
	Pending(ctx context.Context) ([]approval.HeldCall, error)
	Decide(ctx context.Context, id, decision, principal, name string) (approval.HeldCall, error)
}

var _ Held = (*approval.Holder)(nil)

// Pinning is the gateway's guard of pinned tool definitions.
type Pinning interface {
	// Reload reads every pin anew from the store.
	Reload(ctx context.Context) error
	// Resolve accepts or rejects the pending change of hash of a pinned tool.
	Resolve(ctx context.Context, upstream, tool, hash string, accept bool, by string) (pin.Pin, error)
	// Pinned returns the pins as last read, each with whether its tool is withheld now.
	Pinned() []Pinned
	// Hides reports whether the tool of pinned is withheld from clients now.
	Hides(pinned pin.Pin) bool
	// Withheld returns the tools listed now that are withheld, with the pin of each when
	// there is one.
	Withheld() []Withheld
}

// Pinned is a pin, and whether its tool is withheld from clients now.
type Pinned struct {
	Pin      pin.Pin
	Withheld bool
}

// Withheld is a tool withheld from clients: its definition is not the pinned one.
type Withheld struct {
	Upstream, Tool string
	// Pin is the tool's pin, nil when none could be recorded.
	Pin *pin.Pin
}

// Sources are what a Backend reads and acts on. Nil fields are features the gateway does not
// have (no held calls without the admin API, no pins when no upstream is pinned).
type Sources struct {
	// Upstreams returns the enabled upstreams of the running config, in its order.
	Upstreams func() []Upstream
	// Config returns the configuration each replica runs; nil: the version is unknown.
	Config func(ctx context.Context) (admin.ConfigStatus, error)
	// Reload reads the configuration files again and applies them on every replica; nil:
	// the gateway cannot reload.
	Reload func(ctx context.Context) (admin.ConfigStatus, error)
	// Catalog returns the merged catalog clients see.
	Catalog func() *catalog.Snapshot
	// Sessions lists the sessions; nil: the store cannot.
	Sessions SessionLister
	// Held are the held calls; nil when there are none.
	Held Held
	// Pinning guards the pinned tools; nil when no upstream is pinned.
	Pinning Pinning
	// Rebuild merges the catalog anew, after an operator's decision on a pinned tool, or
	// when what this replica knew of the pins was out of date.
	Rebuild func()
	// PinsDecided tells the other replicas of an operator's decision on a pinned tool; nil
	// for a single gateway.
	PinsDecided func()
	// Grants keeps the users' grants at upstreams; nil when no upstream uses them.
	Grants GrantKeeper
	// Audit receives operators' actions; nil: no audit trail.
	Audit Recorder
	// Now returns the current time. If nil, time.Now.
	Now func() time.Time
	// Logger receives operators' decisions. If nil, discarded.
	Logger *slog.Logger
}

// GrantKeeper lists and revokes the grants users gave the gateway at upstreams.
type GrantKeeper interface {
	ListGrants(ctx context.Context, cursor string, limit int) ([]grants.GrantInfo, string, error)
	// Revoke revokes the grant at its authorization server (where supported) and deletes
	// it; it fails with an error wrapping grants.ErrNotFound when there is none.
	Revoke(ctx context.Context, p grants.Principal, upstream string) error
}

// GrantsShown bounds the grants one page of the admin API lists.
const GrantsShown = 200

// Backend implements admin.Backend over what a gateway gives it. It is safe for concurrent
// use, as its sources are.
type Backend struct{ src Sources }

var _ admin.Backend = (*Backend)(nil)

// New returns the backend over src.
func New(src Sources) *Backend {
	if src.Now == nil {
		src.Now = time.Now
	}
	if src.Logger == nil {
		src.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{src: src}
}

// Upstreams implements admin.Backend.
func (b *Backend) Upstreams(context.Context) []admin.Upstream {
	withheld := map[string]int{}
	for _, t := range b.withheldTools() {
		withheld[t.Upstream]++
	}
	var ups []Upstream
	if b.src.Upstreams != nil {
		ups = b.src.Upstreams()
	}
	out := make([]admin.Upstream, 0, len(ups))
	for _, u := range ups {
		st := u.Conn.Status()
		cat := u.Conn.Catalog()
		out = append(out, admin.Upstream{Name: u.Name, Transport: u.Transport, Isolation: u.Isolation,
			State: string(st.State), Error: st.Error,
			Tools: len(cat.List(upstream.Tools)), Prompts: len(cat.List(upstream.Prompts)), Resources: len(cat.List(upstream.Resources)),
			Withheld: withheld[u.Name]})
	}
	return out
}

// Catalog implements admin.Backend.
func (b *Backend) Catalog(context.Context) []admin.Tool {
	snap := b.src.Catalog()
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
func (b *Backend) withheldTools() []admin.Tool {
	p := b.src.Pinning
	if p == nil {
		return nil
	}
	var out []admin.Tool
	for _, w := range p.Withheld() {
		t := admin.Tool{Upstream: w.Upstream, Original: w.Tool, Withheld: true}
		if w.Pin != nil && w.Pin.Change != nil {
			var def struct {
				Title       string          `json:"title"`
				Description string          `json:"description"`
				Annotations json.RawMessage `json:"annotations"`
			}
			_ = json.Unmarshal(w.Pin.Change.Definition, &def)
			t.Title, t.Description, t.Annotations = def.Title, def.Description, def.Annotations
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b admin.Tool) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Original, b.Original))
	})
	return out
}

// Sessions implements admin.Backend.
func (b *Backend) Sessions(ctx context.Context) ([]admin.Session, error) {
	l := b.src.Sessions
	if l == nil {
		return nil, errors.New("this session store cannot list its sessions")
	}
	listed, err := l.List(ctx, SessionsShown)
	if err != nil {
		return nil, err
	}
	now := b.src.Now()
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

// Approvals implements admin.Backend.
func (b *Backend) Approvals(ctx context.Context) ([]admin.Approval, error) {
	if b.src.Held == nil {
		return nil, nil
	}
	calls, err := b.src.Held.Pending(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]admin.Approval, len(calls))
	for i, c := range calls {
		out[i] = ApprovalOf(c)
	}
	return out, nil
}

// Decide implements admin.Backend: it records an operator's decision on a held call, with the
// admin API's errors for what it refuses.
func (b *Backend) Decide(ctx context.Context, id, decision string, by admin.Operator) (admin.Approval, error) {
	if b.src.Held == nil {
		return admin.Approval{}, fmt.Errorf("%w: no call %q is held (it ran, was refused, or its client went away)", admin.ErrNotFound, id)
	}
	c, err := b.src.Held.Decide(ctx, id, decision, by.Principal, by.Name)
	switch {
	case errors.Is(err, approval.ErrSelfApproval):
		return admin.Approval{}, fmt.Errorf("%w: %s made this call, and may not approve a call of their own: another operator must decide it (or deny it yourself)", admin.ErrForbidden, by.Name)
	case errors.Is(err, approval.ErrNotFound):
		return admin.Approval{}, fmt.Errorf("%w: no call %q is held (it ran, was refused, or its client went away)", admin.ErrNotFound, id)
	case errors.Is(err, approval.ErrDecided):
		return admin.Approval{}, fmt.Errorf("%w: %s decided this call already (%s)", admin.ErrConflict, c.Approver, c.Decision)
	case errors.Is(err, approval.ErrExpired):
		return admin.Approval{}, fmt.Errorf("%w: the call waited its time out before this decision; it was refused", admin.ErrConflict)
	case err != nil:
		return admin.Approval{}, err
	}
	return ApprovalOf(c), nil
}

// Pins implements admin.Backend.
func (b *Backend) Pins(ctx context.Context) ([]admin.Pin, error) {
	p := b.src.Pinning
	if p == nil {
		return nil, nil
	}
	// The store's pins, not only what this replica last read: another replica's decision
	// may not have reached this one.
	if err := p.Reload(ctx); err != nil {
		return nil, err
	}
	pins := p.Pinned()
	out := make([]admin.Pin, 0, len(pins))
	for _, pn := range pins {
		out = append(out, pinOf(pn.Pin, pn.Withheld))
	}
	slices.SortFunc(out, func(a, b admin.Pin) int {
		return cmp.Or(cmp.Compare(a.Upstream, b.Upstream), cmp.Compare(a.Tool, b.Tool))
	})
	return out, nil
}

// Resolve implements admin.Backend.
func (b *Backend) Resolve(ctx context.Context, upstreamName, tool, hash, decision, by string) (admin.Pin, error) {
	p := b.src.Pinning
	if p == nil {
		return admin.Pin{}, fmt.Errorf("%w: no upstream is pinned (pinning: withhold or log)", admin.ErrNotFound)
	}
	pn, err := p.Resolve(ctx, upstreamName, tool, hash, decision == admin.Accept, by)
	switch {
	case errors.Is(err, pin.ErrNotFound):
		return admin.Pin{}, fmt.Errorf("%w: no pin of %s's tool %q", admin.ErrNotFound, upstreamName, tool)
	case errors.Is(err, pin.ErrStale):
		_ = p.Reload(ctx) // what this replica knew was out of date
		b.src.Rebuild()
		return admin.Pin{}, fmt.Errorf("%w: %v", admin.ErrConflict, err)
	case err != nil:
		return admin.Pin{}, err
	}
	b.src.Logger.Info("an operator decided on a changed tool definition", "upstream", upstreamName, "tool", tool, "decision", decision, "by", by, "hash", hash)
	if b.src.PinsDecided != nil {
		b.src.PinsDecided()
	}
	b.src.Rebuild()
	return pinOf(pn, p.Hides(pn)), nil
}

// Recorder takes audit records: an *audit.Log, or what holds the one in force.
type Recorder interface {
	Record(audit.Record)
}

// Audit records an admin's action in the audit trail, as a request of method "admin/<action>".
func (b *Backend) Audit(who, action, target, outcome string, status int) {
	if b.src.Audit == nil {
		return
	}
	if who == "" {
		who = "unauthenticated"
	}
	rec := audit.Record{Time: b.src.Now(), Principal: who, Method: "admin/" + action, Target: target, Outcome: audit.OutcomeOK}
	if outcome != "ok" {
		rec.Outcome, rec.Reason = audit.OutcomeRefused, fmt.Sprintf("%s_%d", outcome, status)
	}
	b.src.Audit.Record(rec)
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

// ApprovalOf returns a held call as the admin API (and the approval webhook) shows it.
func ApprovalOf(c approval.HeldCall) admin.Approval {
	a := admin.Approval{ID: c.ID, Session: c.Session, Principal: c.Principal, Upstream: c.Upstream, Tool: c.Tool, Original: c.Original,
		Arguments: c.Arguments, Annotations: c.Annotations, Rule: c.Rule, Held: c.Held, Deadline: c.Deadline, Decision: c.Decision, Approver: c.Approver}
	var text bytes.Buffer
	if len(c.Arguments) > 0 && json.Indent(&text, c.Arguments, "", "  ") == nil {
		a.ArgumentsText = text.String()
	}
	return a
}

// fingerprintOfDigest returns the fingerprint of the session whose Digest is digest: both
// are prefixes of the hex SHA-256 of its id.
func fingerprintOfDigest(digest string) string {
	if len(digest) < 12 {
		return digest
	}
	return digest[:12]
}

// errNoReload answers a reload asked of a gateway that was not given how to read its files.
var errNoReload = errors.New("this gateway cannot reload: it was not started from configuration files")

// errNoGrants answers a revocation on a gateway where no upstream uses users' grants.
var errNoGrants = fmt.Errorf("%w: no upstream of this gateway is called with users' grants (credentials.user_oauth)", admin.ErrNotFound)

// Grants implements admin.Backend.
func (b *Backend) Grants(ctx context.Context, cursor string) ([]grants.GrantInfo, string, error) {
	if b.src.Grants == nil {
		return nil, "", nil
	}
	return b.src.Grants.ListGrants(ctx, cursor, GrantsShown)
}

// RevokeGrant implements admin.Backend.
func (b *Backend) RevokeGrant(ctx context.Context, user grants.Principal, upstream string) error {
	if b.src.Grants == nil {
		return errNoGrants
	}
	err := b.src.Grants.Revoke(ctx, user, upstream)
	if errors.Is(err, grants.ErrNotFound) {
		return fmt.Errorf("%w: %s has no grant at upstream %s", admin.ErrNotFound, user, upstream)
	}
	if err == nil {
		b.src.Logger.Info("an operator revoked a user's grant at an upstream", "user", user.String(), "upstream", upstream)
	}
	return err
}

// Config implements admin.Backend.
func (b *Backend) Config(ctx context.Context) (admin.ConfigStatus, error) {
	if b.src.Config == nil {
		return admin.ConfigStatus{Replicas: []admin.ReplicaConfig{}, Agree: true}, nil
	}
	return b.src.Config(ctx)
}

// Reload implements admin.Backend.
func (b *Backend) Reload(ctx context.Context) (admin.ConfigStatus, error) {
	if b.src.Reload == nil {
		st, _ := b.Config(ctx)
		return st, errNoReload
	}
	return b.src.Reload(ctx)
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
	"github.com/manifold-mcp/manifold/policy"
)

// A reload replaces the running configuration by another without a restart: the upstreams
// added are started, those removed are drained (their calls in flight finish, within
// drain_timeout) and stopped, those changed are replaced the same way; the policy's rules,
// rate limits and approval settings, the clients' and admins' API keys and the log level are
// swapped at once; a new audit trail is opened, put in force, and the old one closed once it
// has written its records; new policy plugins are started, put in force, and the old ones
// stopped once the requests that took them have ended. A change to a key it cannot apply while the gateway runs is
// refused, with the reason, and the running configuration stays (ReloadError).
// docs/operations.md lists both.

// reloadableKeys are the top-level keys a reload applies; a change to any other is refused.
// Of auth and admin, only the API keys; of profiles under OIDC, what they include
// (unreloadable tells).
var reloadableKeys = map[string]bool{"upstreams": true, "policy": true, "auth": true, "admin": true, "log_level": true, "profiles": true, "audit": true, "plugins": true}

// ReloadError is a reload refused: why, each reason a sentence an operator can act on. The
// running configuration stays.
type ReloadError struct {
	Reasons []string
}

func (e *ReloadError) Error() string {
	return "reload refused, the running configuration stays: " + strings.Join(e.Reasons, "; ")
}

// ErrClosed is the refusal of a reload asked once the gateway began to close.
var ErrClosed = errors.New("the gateway is closing: no reload begins any more")

// ErrCannotReread is the refusal of a reload asked through the admin API or by another
// replica of a gateway given no Options.ReadConfig.
var ErrCannotReread = errors.New("this gateway cannot read its configuration again: it was not started from configuration files")

// ConfigStatus is the configuration a gateway runs, and how its last reload went.
type ConfigStatus struct {
	// Version is config.Config.Version of the running configuration.
	Version string
	// Since is when the gateway began to run it.
	Since time.Time
	// LastReload is when a reload was last asked (zero: never); LastError why it was
	// refused, "" when it applied.
	LastReload time.Time
	LastError  string
}

// reloadState is the running configuration and what became of the reloads; its methods plan
// and apply each reload to the gateway g.
type reloadState struct {
	// mu serializes reloads, and guards clients and admins.
	mu sync.Mutex
	// running is the configuration in force: the one New was given, then each reload's.
	running atomic.Pointer[config.Config]
	status  atomic.Pointer[ConfigStatus]
	// clients and admins are the API keys in force of clients (auth) and of admins (admin,
	// once the admin API is made). Guarded by mu.
	clients, admins keySet
	// g is the gateway whose configuration this is.
	g *Gateway
	// closed is set when the gateway begins to close: no reload begins after. Guarded by mu.
	closed bool
}

// keySet is a set of API keys that a reload reads again (their file may have changed even
// when the configuration did not) and swaps.
type keySet struct {
	// section is the config key ("auth", "admin"); verifier checks the keys, nil when the
	// section is off.
	section  string
	verifier *auth.Authenticator
	keys     []auth.APIKey
}

// reread returns the keys of the section in cfg, and whether they differ from those in force;
// nil, false for a section that is off.
func (k *keySet) reread(cfg *config.Config) ([]auth.APIKey, bool, error) {
	if k.verifier == nil {
		return nil, false, nil
	}
	configured, file := cfg.Auth.APIKeys, cfg.Auth.APIKeysFile
	if k.section == "admin" {
		configured, file = cfg.Admin.APIKeys, cfg.Admin.APIKeysFile
	}
	keys, err := apiKeysOf(configured, file, k.section)
	if err != nil {
		return nil, false, err
	}
	return keys, !reflect.DeepEqual(keys, k.keys), nil
}

// set puts keys in force.
func (k *keySet) set(keys []auth.APIKey) error {
	if err := k.verifier.SetAPIKeys(keys); err != nil {
		return fmt.Errorf("%s.api_keys: %w", k.section, err)
	}
	k.keys = keys
	return nil
}

// keysChanged is what a reload does to one keySet.
type keysChanged struct {
	set  *keySet
	keys []auth.APIKey
}

// init records cfg as the configuration g runs since now.
func (r *reloadState) init(g *Gateway, cfg *config.Config) {
	r.g = g
	r.clients.section, r.admins.section = "auth", "admin"
	if g.auth != nil {
		r.clients.verifier = g.auth.verifier
		r.clients.keys, _ = APIKeys(cfg) // read by newAuthn a moment ago
	}
	r.running.Store(cfg)
	r.status.Store(&ConfigStatus{Version: cfg.Version(), Since: g.opts.Now()})
}

// runningConfig is RunningConfig, and the configuration New was given until it records it.
func (g *Gateway) runningConfig() *config.Config {
	if cfg := g.reloads.running.Load(); cfg != nil {
		return cfg
	}
	return g.cfg
}

// RunningConfig returns the configuration the gateway runs now: the one New was given, or the
// last reload's. The caller must not modify it.
func (g *Gateway) RunningConfig() *config.Config { return g.reloads.running.Load() }

// ConfigStatus returns the configuration the gateway runs and how its last reload went.
func (g *Gateway) ConfigStatus() ConfigStatus { return *g.reloads.status.Load() }

// Reload applies next, a configuration that passed validation (as `gateway validate` checks
// it), in place of the running one, without dropping sessions: see the top of reload.go. A
// configuration that changes a key that cannot change while the gateway runs, or that cannot
// be built, is refused with a *ReloadError and changes nothing. Reloads are serialized; each
// one, applied or refused, is logged, and told to the other replicas (the admin API shows
// what each runs). Safe for concurrent use.
func (g *Gateway) Reload(ctx context.Context, next *config.Config) error {
	g.reloads.mu.Lock()
	defer g.reloads.mu.Unlock()
	if g.reloads.closed {
		// What a reload would start (plugins, a trail, upstreams) would outlive Close.
		return ErrClosed
	}
	defer g.reloads.announceConfig() // the other replicas learn what this one runs now
	prev := g.reloads.status.Load()
	st := &ConfigStatus{Version: prev.Version, Since: prev.Since, LastReload: g.opts.Now()}
	changed, err := g.reloads.reload(ctx, next)
	switch {
	case err != nil:
		st.LastError = err.Error()
		g.logger.Warn("configuration reload refused: the running configuration stays", "error", err.Error(), "version", prev.Version)
	case len(changed) == 0:
		// Only where settings are written moved (comments, order of lines): the version,
		// which counts them, follows the files.
		st.Version = next.Version()
		g.logger.Info("configuration reloaded: no setting changed", "version", st.Version)
	default:
		st.Version, st.Since = next.Version(), st.LastReload
		g.logger.Info("configuration reloaded", "changed", strings.Join(changed, ","), "version", st.Version, "previous_version", prev.Version)
	}
	g.reloads.status.Store(st)
	if g.metrics.set != nil {
		// manifold_config_info follows, and an upstream added counts under its own name.
		g.metrics.set.SetConfigVersion(st.Version)
		var names []string
		for _, u := range g.upstreamList() {
			names = append(names, u.ns.Name)
		}
		g.metrics.set.SetUpstreams(names)
		names = names[:0]
		for _, p := range g.runningConfig().Plugins {
			names = append(names, p.Name)
		}
		g.metrics.set.SetPlugins(names)
	}
	return err
}

// reload checks next against the running configuration, builds what it needs and applies it;
// it returns the keys that changed.
func (r *reloadState) reload(ctx context.Context, next *config.Config) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	cur := r.running.Load()
	changed := cur.ChangedKeys(next)
	if reasons := r.unreloadable(cur, next, changed); len(reasons) > 0 {
		return nil, &ReloadError{Reasons: reasons}
	}
	// The API keys are read again whatever changed: a file of keys may have.
	var keys []keysChanged
	for _, set := range []*keySet{&r.clients, &r.admins} {
		read, differ, err := set.reread(next)
		if err != nil {
			return nil, &ReloadError{Reasons: []string{err.Error()}}
		}
		if differ {
			keys = append(keys, keysChanged{set, read})
			if !slices.Contains(changed, set.section) {
				changed = append(changed, set.section)
			}
		}
	}
	if len(changed) == 0 {
		r.running.Store(next)
		return nil, nil
	}
	plan, err := r.prepare(ctx, next, changed, keys)
	if err != nil {
		return nil, err
	}
	if err := r.apply(cur, next, plan); err != nil {
		r.g.plugins.discard(plan.plugins)
		r.g.audit.discard(plan.trail)
		return nil, err
	}
	r.running.Store(next)
	return changed, nil
}

// reloadPlan is what a reload built before it changes anything: each part nil or empty when
// what it stands for did not change.
type reloadPlan struct {
	changed   []string
	keys      []keysChanged
	rules     *gateRules
	upstreams *upstreamPlan
	profiles  []*catalog.Profile
	// plugins are started and trail is open, not yet in force: a reload that does not
	// apply discards them.
	plugins *pluginsInForce
	trail   *trailInForce
}

// prepare builds what next needs of what changed: a configuration that cannot be built
// changes nothing (the plugins it started stop, the trail it opened closes).
func (r *reloadState) prepare(ctx context.Context, next *config.Config, changed []string, keys []keysChanged) (_ *reloadPlan, err error) {
	g := r.g
	p := &reloadPlan{changed: changed, keys: keys}
	if g.gate != nil && (slices.Contains(changed, "policy") || slices.Contains(changed, "upstreams")) {
		// The rules read the upstreams' trust_annotations too.
		if p.rules, err = compileGateRules(next, g.gate.current(), g.backends.Limits, g.opts.Now, g.logger); err != nil {
			return nil, &ReloadError{Reasons: []string{err.Error()}}
		}
	}
	if g.userAuth == nil && usesUserOAuth(next) {
		// The connect pages, the vault and the sign-in are set up at start.
		return nil, &ReloadError{Reasons: []string{"credentials.user_oauth on an upstream of a gateway started without any: restart the gateway to serve per-user grants"}}
	}
	if p.upstreams, err = r.planUpstreams(r.running.Load(), next); err != nil {
		return nil, &ReloadError{Reasons: []string{err.Error()}}
	}
	if slices.Contains(changed, "profiles") {
		if p.profiles, err = profilesOf(next.Profiles); err != nil {
			return nil, &ReloadError{Reasons: []string{err.Error()}}
		}
	}
	// Every set of keys checked before any is in force, so that a refusal leaves all of
	// them as they were (they passed the config's checks already).
	for _, k := range keys {
		if err := auth.CheckAPIKeys(k.keys); err != nil {
			return nil, &ReloadError{Reasons: []string{fmt.Sprintf("%s.api_keys: %v", k.set.section, err)}}
		}
	}
	// The plugins started before they are in force: one that cannot start refuses the
	// reload, and those started stop.
	if slices.Contains(changed, "plugins") {
		if p.plugins, err = g.plugins.prepare(ctx, next); err != nil {
			return nil, &ReloadError{Reasons: []string{err.Error()}}
		}
	}
	// The audit trail last of what is built: the new one is open before the old one goes.
	if slices.Contains(changed, "audit") {
		if p.trail, err = g.audit.prepare(next); err != nil {
			g.plugins.discard(p.plugins)
			return nil, &ReloadError{Reasons: []string{err.Error()}}
		}
	}
	return p, nil
}

// apply puts in force what prepare built for next, in place of cur. Only the keys can fail,
// first, before anything else changed.
func (r *reloadState) apply(cur, next *config.Config, p *reloadPlan) error {
	g := r.g
	for _, k := range p.keys {
		if err := k.set.set(k.keys); err != nil {
			return &ReloadError{Reasons: []string{err.Error()}}
		}
	}
	if p.trail != nil {
		r.swapAuditTrail(cur, p.trail)
	}
	if slices.Contains(p.changed, "log_level") {
		var l slog.Level
		if err := l.UnmarshalText([]byte(next.LogLevel)); err == nil { // validated
			g.opts.LogLevel.Set(l)
		}
	}
	// The upstreams before the rules: those removed or replaced leave the catalog, and their
	// calls not begun yet are refused, before any rule that came with their removal is in
	// force; those added start after the rules, so that their items are listed only under
	// the new ones. Either way a request is never decided by new rules on what they no
	// longer cover, nor by old rules on what only the new ones cover.
	if p.profiles != nil {
		g.builder.SetProfiles(p.profiles)
	}
	g.userAuth.reconfigure(next)
	rebuilt := r.applyUpstreams(p.upstreams)
	if p.rules != nil {
		ap := next.Policy.Approval
		g.gate.approvals.settings.Store(approvalSettingsOf(ap))
		g.gate.approvals.Retune(ap.Remember, ap.RememberAnyArguments)
		if g.held != nil {
			g.held.SetAllowSelf(ap.AllowSelfApproval)
			if ap.AllowSelfApproval && !cur.Policy.Approval.AllowSelfApproval {
				g.logger.Warn(selfApprovalWarning)
			}
		}
	}
	if p.rules != nil || p.plugins != nil {
		// The rules and the plugins at once: a request begun from here on is decided by the
		// new ones, one begun before by the old ones, never by one of each.
		r.swapPolicy(p.rules, p.plugins)
	}
	r.startAdded(p.upstreams)
	if !rebuilt && p.profiles != nil {
		g.rebuild() // the profiles' clients hear list_changed of what their profile gained or lost
	}
	if p.profiles != nil {
		// The endpoint of a profile removed is gone from the catalog just merged: its
		// sessions end, as a DELETE would end them.
		endProfiles(g, removedProfiles(cur, next))
	}
	return nil
}

// swapAuditTrail puts trail in force for the records written from now on; the trail it
// replaces writes what it took and closes, off the reload's path.
func (r *reloadState) swapAuditTrail(cur *config.Config, trail *trailInForce) {
	g := r.g
	if a := trail.settings; a.Arguments && a.SkipRedactDefaults && !(cur.Audit.Arguments && cur.Audit.SkipRedactDefaults) {
		g.logger.Warn(KeepsSecretsWarning)
	}
	closeOld := g.audit.swap(trail)
	if closeOld == nil {
		return
	}
	g.logger.Info("audit trail replaced by a reload: the previous one closes once it has written its records", "sink", trail.settings.Sink)
	if !g.goWorker(closeOld) {
		closeOld() // the gateway is closing: it waits for no worker any more
	}
}

// KeepsSecretsWarning is logged when the audit trail starts to keep arguments named like
// secrets (audit.redact_defaults: false with audit.arguments), at start or by a reload.
const KeepsSecretsWarning = "the audit trail keeps arguments named like secrets (audit.redact_defaults: false): passwords, tokens and keys that clients pass reach its records"

// unreloadable returns why next cannot replace cur while the gateway runs: a reason for each
// changed key (or part of one) that only a restart applies.
func (r *reloadState) unreloadable(cur, next *config.Config, changed []string) []string {
	g := r.g
	var reasons []string
	for _, k := range changed {
		if !reloadableKeys[k] {
			reasons = append(reasons, fmt.Sprintf("%s cannot change while the gateway runs: restart it to change %s", k, k))
		}
	}
	if slices.Contains(changed, "audit") {
		if why := g.audit.unreloadable(next); why != "" {
			reasons = append(reasons, why)
		}
	}
	if slices.Contains(changed, "plugins") {
		if why := g.plugins.unreloadable(next, g.gate != nil); why != "" {
			reasons = append(reasons, why)
		}
	}
	if slices.Contains(changed, "log_level") && g.opts.LogLevel == nil {
		reasons = append(reasons, "log_level cannot change while this gateway runs (it was given a logger of a fixed level): restart it to change log_level")
	}
	if slices.Contains(changed, "auth") {
		a, b := cur.Auth, next.Auth
		a.APIKeys, a.APIKeysFile, b.APIKeys, b.APIKeysFile = nil, "", nil, ""
		switch {
		case g.auth == nil || !next.Auth.Enabled():
			reasons = append(reasons, "auth: authentication cannot be turned on or off while the gateway runs: restart it to change that")
		case !config.SameSettings(a, b):
			reasons = append(reasons, "auth: only api_keys and api_keys_file can change while the gateway runs: restart it to change the rest of auth")
		}
	}
	if slices.Contains(changed, "admin") {
		a, b := cur.Admin, next.Admin
		a.APIKeys, a.APIKeysFile, b.APIKeys, b.APIKeysFile = nil, "", nil, ""
		switch {
		case r.admins.verifier == nil:
			reasons = append(reasons, "admin: the admin API is not running: restart the gateway to change admin")
		case !config.SameSettings(a, b):
			reasons = append(reasons, "admin: only api_keys and api_keys_file can change while the gateway runs: restart it to change the rest of admin")
		}
	}
	if slices.Contains(changed, "profiles") && !slices.Equal(profileNames(cur), profileNames(next)) && g.auth != nil && len(g.auth.verifier.Issuers()) > 0 {
		// Each profile's endpoint is a resource the issuers' tokens are for, and every
		// endpoint accepts them: the audiences and metadata documents are fixed at start.
		reasons = append(reasons, "profiles: with OIDC issuers (auth.oidc), a profile cannot be added, removed or renamed while the gateway runs, since the tokens each endpoint accepts are fixed at start (what one includes can change): restart it to change which profiles there are")
	}
	if slices.Contains(changed, "policy") {
		if g.gate == nil {
			reasons = append(reasons, "policy: the gateway started without a policy or plugins: restart it to add one")
		}
	}
	if slices.Contains(changed, "upstreams") && !maps2Equal(pinModes(cur), pinModes(next)) {
		reasons = append(reasons, "upstreams[].pinning cannot change while the gateway runs (nor can a pinned upstream be added or removed): restart it to change them")
	}
	return reasons
}

// profileNames are the names of cfg's profiles, in order.
func profileNames(cfg *config.Config) []string {
	names := make([]string, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		names[i] = p.Name
	}
	return names
}

// removedProfiles are the names of cur's profiles that next has not.
func removedProfiles(cur, next *config.Config) []string {
	var gone []string
	for _, name := range profileNames(cur) {
		if !slices.Contains(profileNames(next), name) {
			gone = append(gone, name)
		}
	}
	return gone
}

// endProfiles ends the sessions here of the profiles named: their records are deleted and
// what is live of them ends (their streams close), so that their clients' next request gets
// 404, as for a session that ended (2025-11-25 transports, "Session Management"); the listen
// streams of 2026-07-28 clients there complete, as at a drain. Each replica ends its own as
// it applies the reload.
func endProfiles(g *Gateway, profiles []string) {
	if len(profiles) == 0 {
		return
	}
	for _, p := range profiles {
		g.streamable.stateless.listens.endProfile(p) // 2026-07-28 listens complete
	}
	ctx, cancel := context.WithTimeout(g.ctx, reloadTimeout)
	defer cancel()
	for _, s := range g.hub.Sessions() {
		if !slices.Contains(profiles, s.Group()) {
			continue
		}
		if err := g.store.Delete(ctx, s.ID()); err != nil {
			// Its endpoint answers 404 already; the record expires in time.
			g.logger.Warn("deleting a session of a profile a reload removed failed", "session", fingerprint(s.ID()), "error", err.Error())
		}
		g.endLocal(s.ID())
		g.logger.Info("session ended: a reload removed its profile", "session", fingerprint(s.ID()), "profile", s.Group())
	}
}

// pinModes are the pinning modes of cfg's pinned upstreams, by name.
func pinModes(cfg *config.Config) map[string]string {
	modes := map[string]string{}
	for _, u := range cfg.EnabledUpstreams() {
		if u.Pinning == config.PinningWithhold || u.Pinning == config.PinningLog {
			modes[u.Name] = u.Pinning
		}
	}
	return modes
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// swapPolicy puts rules and plugins in force at once (either may be nil: it stays), and tells
// each session here whose view of the catalog the rules change: the list_changed of what it
// sees.
func (r *reloadState) swapPolicy(rules *gateRules, plugins *pluginsInForce) {
	g := r.g
	// Under the rebuild's lock: these notices and a rebuild's go out in order.
	g.rebuildMu.Lock()
	defer g.rebuildMu.Unlock()
	var old *gateRules
	g.plugins.replace(plugins, func() {
		if rules != nil {
			old = g.gate.rules.Swap(rules)
		}
	})
	if rules == nil {
		return
	}
	snap := g.snapshot.Load()
	memo := map[string][]string{}
	byMethod := map[string][]string{}
	for _, s := range g.hub.Sessions() {
		sv, ok := g.gate.seen.Load(s.ID())
		if !ok {
			continue // it has not listed: it will list under the new rules
		}
		who := sv.(sessionView).principal
		key := s.Group() + "\x00" + old.rules.ViewKey(who) + "\x00" + rules.rules.ViewKey(who)
		c, done := memo[key]
		if !done {
			view := profileOf(snap, s.Group())
			c = listsChanged(filterView(old.rules, view, who), filterView(rules.rules, view, who))
			memo[key] = c
		}
		for _, m := range c {
			byMethod[m] = append(byMethod[m], s.ID())
		}
	}
	for method, sessions := range byMethod {
		g.router.notifySessions(&protocol.Notification{Method: method}, sessions...)
	}
	tellListensRulesChanged(g, snap, old.rules, rules.rules)
}

// tellListensRulesChanged tells the listen streams here (2026-07-28 clients) what the rules
// going from old to next changed of what each one's principal sees of snap.
func tellListensRulesChanged(g *Gateway, snap *catalog.Snapshot, old, next *policy.Rules) {
	ls := g.streamable.stateless.listens
	ls.mu.Lock()
	streams := make([]*listenStream, 0, len(ls.open))
	for s := range ls.open {
		streams = append(streams, s)
	}
	ls.mu.Unlock()
	memo := map[string][]string{}
	for _, s := range streams {
		key := s.profile + "\x00" + old.ViewKey(s.principal) + "\x00" + next.ViewKey(s.principal)
		methods, done := memo[key]
		if !done {
			view := profileOf(snap, s.profile)
			methods = listsChanged(filterView(old, view, s.principal), filterView(next, view, s.principal))
			memo[key] = methods
		}
		if len(methods) > 0 {
			s.queue(methods)
		}
	}
}

// upstreamSet is the gateway's upstreams at one time. Immutable: a reload replaces it whole.
type upstreamSet struct {
	// all holds every entry made, in the order made: all[ns.Index] is the entry of namespace
	// ns, also once a reload removed it (a call resolved before still finds it).
	all []*upstreamEntry
	// live are the enabled upstreams of the running configuration, in its order.
	live []*upstreamEntry
}

// upstreamPlan is what a reload does to the upstreams.
type upstreamPlan struct {
	set *upstreamSet
	// added are the entries made for upstreams added or changed; retired those of upstreams
	// removed or changed, to drain and stop.
	added, retired []*upstreamEntry
}

// planUpstreams makes the entries of the upstreams next adds or changes (their clients not yet
// run) and the set the gateway will have. An upstream whose settings are the same keeps its
// entry, connection and sessions' state.
func (r *reloadState) planUpstreams(cur, next *config.Config) (*upstreamPlan, error) {
	g := r.g
	old := g.ups.Load()
	entries := map[string]*upstreamEntry{}
	for _, ue := range old.live {
		entries[ue.ns.Name] = ue
	}
	settings := map[string]config.Upstream{}
	for _, u := range cur.EnabledUpstreams() {
		settings[u.Name] = u
	}
	wanted := next.EnabledUpstreams()
	// Each upstream's URI scheme as a gateway started on next numbers it: a replica reloaded
	// and one restarted on the same files serve the same resource URIs.
	specs := make([]catalog.Namespace, len(wanted))
	for i := range wanted {
		spec, err := namespaceSpecOf(&wanted[i])
		if err != nil {
			return nil, err
		}
		specs[i] = spec
	}
	schemes := map[string]string{}
	for _, ns := range catalog.Namespaces(specs, nil) {
		schemes[ns.Name] = ns.Scheme
	}
	kept := map[string]bool{}
	for _, u := range wanted {
		if prev, ok := settings[u.Name]; ok && config.SameSettings(prev, u) && entries[u.Name].ns.Scheme == schemes[u.Name] {
			kept[u.Name] = true // a scheme that would be numbered otherwise now replaces it
		}
	}
	plan := &upstreamPlan{set: &upstreamSet{all: slices.Clone(old.all)}}
	for _, u := range wanted {
		if kept[u.Name] {
			plan.set.live = append(plan.set.live, entries[u.Name])
			continue
		}
		spec, err := namespaceSpecOf(&u)
		if err != nil {
			return nil, err
		}
		ns := spec
		ns.Index, ns.Scheme = len(plan.set.all), schemes[u.Name]
		ue, err := makeUpstream(g, &u, &ns)
		if err != nil {
			return nil, err
		}
		plan.set.all = append(plan.set.all, ue)
		plan.set.live = append(plan.set.live, ue)
		plan.added = append(plan.added, ue)
	}
	for _, ue := range old.live {
		if !kept[ue.ns.Name] {
			plan.retired = append(plan.retired, ue)
		}
	}
	return plan, nil
}

// applyUpstreams puts plan's set in place: the catalog is merged anew (clients hear
// list_changed of what they can see), the upstreams added start, and those retired are
// drained and stopped in the background. It reports whether it merged the catalog (it did
// not when no upstream was added or retired).
func (r *reloadState) applyUpstreams(plan *upstreamPlan) (rebuilt bool) {
	g := r.g
	if len(plan.added) == 0 && len(plan.retired) == 0 {
		g.ups.Store(plan.set)
		return false
	}
	for _, ue := range plan.added {
		g.conns.Store(ue.shared.client, ue.shared)
	}
	// The set first: a build that sees the new namespaces finds their entries.
	g.ups.Store(plan.set)
	sources := make([]catalog.Source, len(plan.set.live))
	for i, ue := range plan.set.live {
		sources[i] = ue
	}
	g.builder.SetSources(sources)
	for _, ue := range plan.retired {
		ue.retired.Store(true) // before the catalog drops it: calls not begun are refused
	}
	g.rebuild()
	for _, ue := range plan.retired {
		if !g.goWorker(func() { r.retire(ue) }) {
			break // the gateway is closing, and closes them
		}
	}
	return true
}

// startAdded starts the upstreams a reload added or replaced, once the gateway has started
// (Start starts them otherwise); their items reach the catalog once they list them.
func (r *reloadState) startAdded(plan *upstreamPlan) {
	g := r.g
	if g.startedAt.Load() == nil {
		return
	}
	for _, ue := range plan.added {
		g.runUpstream(ue)
		g.logger.Info("upstream added by a reload", "upstream", ue.ns.Name)
	}
}

// runUpstream runs the shared client of ue until the gateway closes or ue is retired; once.
func (g *Gateway) runUpstream(ue *upstreamEntry) {
	ue.runOnce.Do(func() {
		g.goWorker(func() { ue.shared.client.Run(g.ctx) })
	})
}

// retire drains an upstream a reload removed or replaced: its calls in flight may finish,
// for drain_timeout at most, then its connections close.
func (r *reloadState) retire(ue *upstreamEntry) {
	g := r.g
	ue.retired.Store(true) // calls not begun yet are refused (forward)
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.DrainTimeout)
	defer cancel()
	drained := ue.calls.wait(ctx)
	if ue.pool != nil {
		ue.pool.closeAll()
	}
	ue.runOnce.Do(func() {}) // never run after this
	_ = ue.shared.client.Close()
	g.conns.Delete(ue.shared.client)
	if drained {
		g.logger.Info("upstream stopped after a reload removed or replaced it; its calls had finished", "upstream", ue.ns.Name)
		return
	}
	g.logger.Warn("upstream stopped after a reload removed or replaced it, with calls still running past drain_timeout", "upstream", ue.ns.Name, "drain_timeout", g.cfg.DrainTimeout.String())
}

// inFlight counts an upstream's calls in flight, for a drain to wait for. The zero value is
// ready; it must not be copied.
type inFlight struct {
	mu sync.Mutex
	n  int
	// idle is closed, and set to nil, when n drops to zero while someone waits. Guarded by mu.
	idle chan struct{}
}

// enter counts a call; the func it returns ends it (once).
func (f *inFlight) enter() (leave func()) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return sync.OnceFunc(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n--; f.n == 0 && f.idle != nil {
			close(f.idle)
			f.idle = nil
		}
	})
}

// wait returns true once no call is in flight, false if ctx ends first.
func (f *inFlight) wait(ctx context.Context) bool {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return true
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// configStatus is the configuration each replica runs, for the admin API: this one's, and
// the others' as they last said.
func (r *reloadState) configStatus(context.Context) (admin.ConfigStatus, error) {
	return r.replicaConfigs(), nil
}

// reloadEverywhere reads the configuration files again and applies them here, and asks the
// other replicas to do the same with theirs.
func (r *reloadState) reloadEverywhere(ctx context.Context) (admin.ConfigStatus, error) {
	g := r.g
	if g.opts.ReadConfig == nil {
		return r.replicaConfigs(), ErrCannotReread
	}
	if g.replicas != nil {
		g.replicas.ReloadAll()
	}
	err := g.ReloadFiles(ctx)
	return r.replicaConfigs(), err
}

// ReloadFiles reads the configuration files again (Options.ReadConfig) and reloads them; a
// configuration that cannot be read is refused as Reload refuses one, logged, recorded in
// ConfigStatus and told to the other replicas. ErrCannotReread without Options.ReadConfig.
func (g *Gateway) ReloadFiles(ctx context.Context) error {
	if g.opts.ReadConfig == nil {
		return ErrCannotReread
	}
	next, err := g.opts.ReadConfig()
	if err != nil {
		defer g.reloads.announceConfig() // why this replica refused
		g.reloads.mu.Lock()
		defer g.reloads.mu.Unlock()
		prev := g.reloads.status.Load()
		g.reloads.status.Store(&ConfigStatus{Version: prev.Version, Since: prev.Since, LastReload: g.opts.Now(), LastError: err.Error()})
		g.logger.Warn("configuration reload refused: the running configuration stays", "error", err.Error(), "version", prev.Version)
		return &ReloadError{Reasons: []string{err.Error()}}
	}
	return g.Reload(ctx, next)
}

// replicaConfigs is the configuration this gateway runs, and each other replica's as it last
// said.
func (r *reloadState) replicaConfigs() admin.ConfigStatus {
	g := r.g
	st := g.ConfigStatus()
	this := admin.ReplicaConfig{This: true, Version: st.Version, Since: st.Since, LastReload: st.LastReload, LastError: st.LastError}
	out := admin.ConfigStatus{Replicas: []admin.ReplicaConfig{this}, Agree: true}
	if g.replicas != nil {
		out.Replicas[0].Replica = g.hub.Tag()
		for _, r := range g.replicas.Configs() {
			out.Replicas = append(out.Replicas, admin.ReplicaConfig{Replica: r.Replica, Version: r.Version, Since: r.Since, LastReload: r.LastReload, LastError: r.LastError})
			out.Agree = out.Agree && r.Version == st.Version
		}
	}
	return out
}

// announceConfig tells the other replicas what configuration this one runs.
func (r *reloadState) announceConfig() {
	g := r.g
	if g.replicas != nil {
		st := g.ConfigStatus()
		g.replicas.AnnounceConfig(replica.Config{Version: st.Version, Since: st.Since, LastReload: st.LastReload, LastError: st.LastError}, false)
	}
}

// ReloadConfig implements replica.Host: another replica's admin API asked for a reload.
func (h replicaHost) ReloadConfig() {
	if h.g.opts.ReadConfig == nil {
		h.g.logger.Warn("another replica asked for a configuration reload, which this one cannot do", "error", ErrCannotReread.Error())
		return
	}
	ctx, cancel := context.WithTimeout(h.g.ctx, reloadTimeout)
	defer cancel()
	_ = h.g.ReloadFiles(ctx) // logged, and announced with its outcome
}

// RunningConfig implements replica.Host.
func (h replicaHost) RunningConfig() replica.Config {
	st := h.g.ConfigStatus()
	return replica.Config{Version: st.Version, Since: st.Since, LastReload: st.LastReload, LastError: st.LastError}
}

// reloadTimeout bounds a reload another replica asked for.
const reloadTimeout = time.Minute

// followAdminKeys makes the admins' API keys, which verifier checks, follow reloads.
func (r *reloadState) followAdminKeys(verifier *auth.Authenticator) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.running.Load()
	keys, err := apiKeysOf(cfg.Admin.APIKeys, cfg.Admin.APIKeysFile, "admin")
	if err != nil || verifier.SetAPIKeys(keys) != nil {
		// Not read as the running configuration says: the next reload reads them again.
		r.admins.verifier, r.admins.keys = verifier, nil
		return
	}
	r.admins.verifier, r.admins.keys = verifier, keys
}

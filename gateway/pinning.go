package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/upstream"
)

// pinStoreTimeout bounds one round of pin bookkeeping against the store.
const pinStoreTimeout = 5 * time.Second

// pinning guards the tool definitions of the upstreams configured with `pinning`: each
// tool's definition is pinned at first sight; one that changes since is withheld from
// clients until an operator accepts the change (withhold), or only logged (log). The store
// is shared by the replicas when it is Redis; pins keeps what this replica last read of it,
// so that a catalog that did not change costs no round trip.
type pinning struct {
	store  pin.Store
	modes  map[string]string // upstream → config.PinningWithhold or config.PinningLog
	logger *slog.Logger
	now    func() time.Time
	// scheme is how definitions are hashed: the current version, and the _meta keys of
	// pins.meta.
	scheme pin.Scheme
	// forgetAfter is how long the pin of a tool no longer listed is kept (pins.forget_after).
	forgetAfter time.Duration

	mu sync.Mutex
	// pins are the store's pins as last read or written here. Guarded by mu.
	pins map[pinKey]pin.Pin
	// loaded is set once pins were read whole from the store (reload), so that the pins of
	// tools no upstream lists any more are known too. Guarded by mu.
	loaded bool
	// listed holds each pinned upstream's tools as it lists them now. Guarded by mu.
	listed map[pinKey]listedTool
	// wider holds the schemes of the pins seen that count more than scheme (Scheme.String),
	// each warned of once. Guarded by mu.
	wider map[string]bool
}

type pinKey struct{ upstream, tool string }

// listedTool is a tool as its upstream lists it now: its definition, and its hash with the
// pinning's scheme.
type listedTool struct {
	raw  json.RawMessage
	hash string
}

// newPinning returns the pinning of cfg's upstreams, nil when none is pinned. The pins live
// in shared, the backends' pins (Redis) when there are, else in memory, kept in a file in
// state_dir if set.
func newPinning(cfg *config.Config, shared pin.Store, now func() time.Time, logger *slog.Logger) (*pinning, error) {
	modes := map[string]string{}
	for _, u := range cfg.EnabledUpstreams() {
		if u.Pinning == config.PinningWithhold || u.Pinning == config.PinningLog {
			modes[u.Name] = u.Pinning
		}
	}
	if len(modes) == 0 {
		return nil, nil
	}
	p := &pinning{modes: modes, logger: logger, now: now, pins: map[pinKey]pin.Pin{}, listed: map[pinKey]listedTool{}, wider: map[string]bool{},
		scheme: pin.NewScheme(cfg.Pins.Meta), forgetAfter: cfg.Pins.KeepMissing()}
	if shared != nil {
		p.store = shared
	} else {
		file := ""
		if cfg.StateDir != "" {
			file = filepath.Join(cfg.StateDir, "pins.json")
		} else {
			logger.Warn("tool pinning keeps its pins in memory only: a definition changed across a restart is pinned anew; set state_dir to keep them in a file")
		}
		ms, err := pin.NewMemoryStore(file)
		if err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		p.store = ms
	}
	return p, nil
}

// observe records the definitions the pinned upstreams list now: what is new is pinned,
// what changed since its pin is recorded as a pending change and logged. A tool whose
// definition the pin as last read of the store already accounts for costs nothing.
func (p *pinning) observe(ctx context.Context, sources []*upstreamEntry) {
	ctx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
	defer cancel()
	p.mu.Lock()
	loaded := p.loaded
	p.mu.Unlock()
	if !loaded {
		// The first time: every pin, those of tools gone while the gateway was down too.
		if err := p.reload(ctx); err != nil {
			p.logger.Warn("reading the pins failed; each listed tool is looked up on its own, and pins of tools no longer listed wait for the next read", "error", err.Error())
		}
	}
	listed := map[pinKey]listedTool{}
	for _, u := range sources {
		mode, ok := p.modes[u.ns.Name]
		if !ok {
			continue
		}
		for _, it := range u.Catalog().List(upstream.Tools) {
			k := pinKey{u.ns.Name, it.Key}
			h, err := p.scheme.Hash(it.Raw)
			if err != nil {
				continue // the catalog leaves out what it cannot read either
			}
			listed[k] = listedTool{raw: it.Raw, hash: h}
			p.mu.Lock()
			known, seen := p.pins[k]
			p.mu.Unlock()
			if seen {
				p.noteWider(known.Scheme)
			}
			if seen && known.Current(it.Raw, p.scheme) {
				continue // the store has nothing to learn
			}
			pinned, changed, err := p.store.Observe(ctx, k.upstream, k.tool, it.Raw, p.scheme, p.now())
			if err != nil {
				p.logger.Warn("recording a tool's definition failed; with pinning: withhold, the tool is withheld until it can be checked", "upstream", k.upstream, "tool", k.tool, "error", err.Error())
				continue
			}
			p.mu.Lock()
			p.pins[k] = pinned
			p.mu.Unlock()
			if changed && seen && !known.Scheme.Equal(p.scheme) && pinned.Scheme.Equal(p.scheme) && known.Hash != pinned.Hash {
				p.logger.Info("a pinned tool's definition was re-pinned with the current hash version: what it pinned did not change", "upstream", k.upstream, "tool", k.tool, "from", known.Scheme.String(), "to", p.scheme.String())
			}
			p.noteWider(pinned.Scheme)
			if changed && !pinned.Admits(it.Raw, p.scheme, h) && pinned.Pending() {
				fields := []string{}
				for _, c := range pinned.Diff() {
					fields = append(fields, c.Field)
				}
				switch {
				case !p.scheme.Covers(pinned.Scheme):
					p.logger.Warn("a tool's definition no longer matches its pin, which counts more than this gateway hashes (or was made by a hash version it does not know): the change is recorded as hashed here, without what only the pin counts, and accepting it drops that from the pin; with pinning: withhold the tool is withheld until an operator decides",
						"upstream", k.upstream, "tool", k.tool, "pin", pinned.Scheme.String(), "here", p.scheme.String(), "changed", fields, "hash", h)
				case mode == config.PinningWithhold:
					p.logger.Warn("an upstream changed a tool's definition since it was pinned: the tool is withheld from clients until an operator accepts the change on the admin API", "upstream", k.upstream, "tool", k.tool, "changed", fields, "hash", h)
				default:
					p.logger.Warn("an upstream changed a tool's definition since it was pinned (pinning: log, so it is still served)", "upstream", k.upstream, "tool", k.tool, "changed", fields, "hash", h)
				}
			}
		}
	}
	p.mu.Lock()
	p.listed = listed
	p.mu.Unlock()
	p.sweep(ctx, sources)
}

// sweep tells the store which tools each pinned upstream lists now, so that the pins of the
// tools it no longer lists are removed after pins.forget_after; a tool listed again is no
// longer missing. An upstream that is not ready lists nothing, and is left alone: a tool is
// missing only from a list the upstream gave in full. It asks the store only when what was
// last read of it says something is to do: a tool newly missing or back, or a grace over.
func (p *pinning) sweep(ctx context.Context, sources []*upstreamEntry) {
	now := p.now()
	for _, u := range sources {
		if _, ok := p.modes[u.ns.Name]; !ok {
			continue
		}
		cat := u.Catalog()
		if cat == nil {
			continue // not ready: its tools are unknown, not gone
		}
		items := cat.List(upstream.Tools)
		listed := make(map[string]bool, len(items))
		names := make([]string, 0, len(items))
		for _, it := range items {
			listed[it.Key], names = true, append(names, it.Key)
		}
		if !p.sweepDue(u.ns.Name, listed, now) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
		removed, err := p.store.Sweep(sctx, u.ns.Name, names, now, p.forgetAfter)
		if err == nil {
			err = p.reload(sctx)
		}
		cancel()
		for _, pn := range removed {
			p.logger.Warn("a pinned tool its upstream no longer lists was forgotten: if it comes back, it is pinned anew as it is then, compared to nothing; an operator should review it then", "upstream", pn.Upstream, "tool", pn.Tool, "missing_since", pn.Missing.Format(time.RFC3339), "forget_after", p.forgetAfter.String())
		}
		if err != nil {
			p.logger.Warn("recording which pinned tools an upstream no longer lists failed; it is tried again later", "upstream", u.ns.Name, "error", err.Error())
		}
	}
}

// sweepDue reports whether the pins of upstream, as last read, need a sweep given the tools
// it lists now (listed): a pin of a tool not listed and not yet missing, or missing for the
// whole grace, or a missing one listed again.
func (p *pinning) sweepDue(upstreamName string, listed map[string]bool, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pn := range p.pins {
		if k.upstream != upstreamName {
			continue
		}
		missing := !pn.Missing.IsZero()
		switch {
		case listed[k.tool] && missing,
			!listed[k.tool] && !missing,
			!listed[k.tool] && !now.Before(pn.Missing.Add(p.forgetAfter)):
			return true
		}
	}
	return false
}

// sweepPins sweeps the pins (pinning.sweep) now, between two catalog rebuilds: the gateway's
// housekeeping, so that a grace ends on time without a catalog change.
func (g *Gateway) sweepPins() {
	if g.pinning == nil {
		return
	}
	// A rebuild observes the catalog and sweeps; a sweep of its own between two must not
	// forget a pin a rebuild under way is reading.
	g.rebuildMu.Lock()
	defer g.rebuildMu.Unlock()
	g.pinning.sweep(g.ctx, g.upstreamList())
}

// noteWider warns, once per scheme, of a pin that counts more than this gateway hashes: it
// is never re-pinned here with less, and each tool is checked against its pin's own hash.
func (p *pinning) noteWider(s pin.Scheme) {
	if p.scheme.Covers(s) {
		return
	}
	p.mu.Lock()
	warned := p.wider[s.String()]
	p.wider[s.String()] = true
	p.mu.Unlock()
	if !warned {
		p.logger.Warn("tool pins count more than this gateway hashes (_meta keys not named here: another replica's, or removed since): they are not re-pinned with less; each tool is checked against its pin as it was made, served while that holds, taken for changed when it does not (always, for a pin of a hash version this gateway does not know); replicas must share one pins.meta",
			"pin", s.String(), "here", p.scheme.String())
	}
}

// withheld reports whether a tool an upstream lists must not reach clients: its upstream
// withholds changes, and its definition, as the catalog is building it, is not the pinned
// one (or could not be checked). It hashes the item itself: the upstream may have listed
// another since observe ran.
func (p *pinning) withheld(ns *catalog.Namespace, it upstream.Item) bool {
	if p.modes[ns.Name] != config.PinningWithhold {
		return false
	}
	h, err := p.scheme.Hash(it.Raw)
	if err != nil {
		return true
	}
	k := pinKey{ns.Name, it.Key}
	p.mu.Lock()
	pinned, ok := p.pins[k]
	p.mu.Unlock()
	return p.hides(k, pinned, ok, listedTool{raw: it.Raw, hash: h})
}

// hides reports whether a tool an upstream lists as t is withheld from clients: its
// upstream withholds changes, and the tool has no pin (none could be recorded) or one that
// does not admit its definition (pin.Pin.Admits).
func (p *pinning) hides(k pinKey, pinned pin.Pin, isPinned bool, t listedTool) bool {
	return p.modes[k.upstream] == config.PinningWithhold && (!isPinned || !pinned.Admits(t.raw, p.scheme, t.hash))
}

// reload reads every pin anew from the store: another replica decided on a change.
func (p *pinning) reload(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, pinStoreTimeout)
	defer cancel()
	all, err := p.store.List(ctx)
	if err != nil {
		return fmt.Errorf("reading the pins: %w", err)
	}
	pins := make(map[pinKey]pin.Pin, len(all))
	for _, pn := range all {
		pins[pinKey{pn.Upstream, pn.Tool}] = pn
	}
	p.mu.Lock()
	p.pins, p.loaded = pins, true
	p.mu.Unlock()
	return nil
}

// resolve accepts or rejects the pending change of hash h of a pinned tool.
func (p *pinning) resolve(ctx context.Context, upstreamName, tool, h string, accept bool, by string) (pin.Pin, error) {
	var pinned pin.Pin
	var err error
	if accept {
		pinned, err = p.store.Accept(ctx, upstreamName, tool, h, by, p.now())
	} else {
		pinned, err = p.store.Reject(ctx, upstreamName, tool, h, by, p.now())
	}
	if err != nil {
		return pin.Pin{}, err
	}
	p.mu.Lock()
	p.pins[pinKey{upstreamName, tool}] = pinned
	p.mu.Unlock()
	return pinned, nil
}

// snapshot returns the pins as last read, and each tool as it is listed now.
func (p *pinning) snapshot() (map[pinKey]pin.Pin, map[pinKey]listedTool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pins := make(map[pinKey]pin.Pin, len(p.pins))
	for k, v := range p.pins {
		pins[k] = v
	}
	listed := make(map[pinKey]listedTool, len(p.listed))
	for k, v := range p.listed {
		listed[k] = v
	}
	return pins, listed
}

package gateway

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// catalogState is the merged catalog clients see, made of the upstreams' lists, and its
// rebuilds: one at a time, each waking the calls waiting for an upstream's items to be
// merged, and telling the sessions whose lists changed (changed).
type catalogState struct {
	// ups are the upstreams: those of the running config, and every one made, by
	// namespace (reload.go). Replaced whole by a reload.
	ups     atomic.Pointer[upstreamSet]
	builder *catalog.Builder
	// snapshot is the merged catalog clients see; replaced whole on every change.
	snapshot atomic.Pointer[catalog.Snapshot]
	// rebuildMu serializes catalog rebuilds and the list_changed broadcasts they cause.
	rebuildMu sync.Mutex
	// rebuilt is closed and replaced once each rebuild's snapshot is in place, to wake the
	// calls waiting for an upstream's catalog to be merged (awaitMerge). Guarded by
	// rebuiltMu.
	rebuiltMu sync.Mutex
	rebuilt   chan struct{}
	// observe runs as each rebuild begins, under rebuildMu (the pins see the lists); changed
	// runs once its snapshot is in place, still under it. Nil: nothing.
	observe func()
	changed func(prev, next *catalog.Snapshot)
	// Set by tests only, before Start: beforeRebuild runs as a rebuild begins, and
	// beforeMergeWait as a call begins to wait for its upstream's catalog to be merged.
	beforeRebuild, beforeMergeWait func()
	// Set by tests only, before Start: beforeFirstListWait runs as a list request begins to
	// wait for the upstreams' first attempts to start (awaitFirstStart).
	beforeFirstListWait func()

	// firstListWait is how long a list waits for the upstreams' first starts (first_list_wait).
	firstListWait time.Duration
	// startedAt is when Start was called (a time.Time); allReady is set once every upstream
	// has been ready at once, which is logged (to log).
	startedAt atomic.Value
	allReady  atomic.Bool
	log       *slog.Logger
	// firstStart is closed once no upstream is still making its first attempt to start (see
	// awaitFirstStart).
	firstStart     chan struct{}
	firstStartOnce sync.Once
}

// catalogOf returns the catalog a client of profile sees now: the whole one for "".
func (g *catalogState) catalogOf(profile string) *catalog.Snapshot {
	return profileOf(g.snapshot.Load(), profile)
}

// upstreamOf returns the upstream of a catalog namespace.
func (g *catalogState) upstreamOf(ns *catalog.Namespace) *upstreamEntry {
	return g.ups.Load().all[ns.Index]
}

// upstreamNamed returns the enabled upstream of that name; nil when there is none.
func (g *catalogState) upstreamNamed(name string) *upstreamEntry {
	for _, u := range g.upstreamList() {
		if u.ns.Name == name {
			return u
		}
	}
	return nil
}

// upstreamList returns the enabled upstreams of the running config, in its order. The
// caller must not modify it.
func (g *catalogState) upstreamList() []*upstreamEntry { return g.ups.Load().live }

// rebuiltSignal returns a channel closed once the next catalog rebuild's snapshot is in place.
func (g *catalogState) rebuiltSignal() <-chan struct{} {
	g.rebuiltMu.Lock()
	defer g.rebuiltMu.Unlock()
	return g.rebuilt
}

// awaitFirstStart holds a list request, at most first_list_wait, while an upstream is still
// making its first attempt to start: a client that connects right after the gateway started
// sees its items in its first list, even if it ignores list_changed.
//
// It waits for firstStart, which closes only after the catalog was merged with the last of
// those first attempts (OnChange), never on the upstreams' states alone: an upstream is ready
// a moment before its items are in the catalog.
func (g *catalogState) awaitFirstStart(ctx context.Context) {
	select {
	case <-g.firstStart:
		return
	default:
	}
	if len(g.upstreamList()) == 0 || g.firstListWait <= 0 {
		return
	}
	if g.beforeFirstListWait != nil {
		g.beforeFirstListWait()
	}
	t := time.NewTimer(g.firstListWait)
	defer t.Stop()
	select {
	case <-g.firstStart:
	case <-t.C:
	case <-ctx.Done():
	}
}

// firstStartSettled reports whether every upstream has made its first attempt to start (it is
// ready, or down); the first time it is, firstStart closes.
func (g *catalogState) firstStartSettled() bool {
	select {
	case <-g.firstStart:
		return true
	default:
	}
	for _, u := range g.upstreamList() {
		if u.shared.client.State() == upstream.StateStarting {
			return false
		}
	}
	g.firstStartOnce.Do(func() { close(g.firstStart) })
	return true
}

// noteAllReady logs, once, when every upstream has become ready since Start.
func (g *catalogState) noteAllReady() {
	for _, u := range g.upstreamList() {
		if u.shared.client.State() != upstream.StateReady {
			return
		}
	}
	if g.allReady.CompareAndSwap(false, true) {
		took := ""
		if at, ok := g.startedAt.Load().(time.Time); ok {
			took = time.Since(at).Round(time.Millisecond).String()
		}
		g.log.Info("all upstreams ready", "upstreams", len(g.upstreamList()), "took", took)
	}
}

// rebuild merges the catalog anew and tells every client whose lists changed: the clients of
// /mcp when the whole catalog's did, those of a profile when the profile's did.
func (g *catalogState) rebuild() {
	if g.beforeRebuild != nil {
		g.beforeRebuild()
	}
	g.rebuildMu.Lock()
	defer g.rebuildMu.Unlock()
	if g.observe != nil {
		g.observe()
	}
	next := g.builder.Build()
	prev := g.snapshot.Swap(next)
	g.rebuiltMu.Lock()
	close(g.rebuilt) // the calls waiting for a merge look again
	g.rebuilt = make(chan struct{})
	g.rebuiltMu.Unlock()
	if g.changed != nil {
		g.changed(prev, next)
	}
}

// tellListsChanged tells every client whose lists changed from prev to next: the clients of
// /mcp when the whole catalog's did, those of a profile when the profile's did. It runs under
// the rebuild's lock, so that the notices of one rebuild go before the next's.
func tellListsChanged(g *Gateway, prev, next *catalog.Snapshot) {
	changed := map[string][]string{}
	if c := listsChanged(prev, next); len(c) > 0 {
		changed[""] = c
	}
	for _, p := range g.runningConfig().Profiles {
		if c := listsChanged(profileOf(prev, p.Name), profileOf(next, p.Name)); len(c) > 0 {
			changed[p.Name] = c
		}
	}
	if len(changed) == 0 {
		return
	}
	tellListens(g, prev, next, changed)
	ids := map[string][]string{} // profile → its sessions live here
	// A session whose view the policy cuts hears only of changes to what it sees.
	byMethod := map[string][]string{} // method → sessions told of it by their own view
	memo := map[string][]string{}
	for _, s := range g.hub.Sessions() {
		if _, ok := changed[s.Group()]; !ok {
			continue
		}
		if own, ok := g.gate.changedFor(s.ID(), profileOf(prev, s.Group()), profileOf(next, s.Group()), memo); ok {
			for _, method := range own {
				byMethod[method] = append(byMethod[method], s.ID())
			}
			continue
		}
		ids[s.Group()] = append(ids[s.Group()], s.ID())
	}
	for profile, methods := range changed {
		if len(ids[profile]) == 0 {
			continue // no sessions: notifySessions would take that for all of them
		}
		for _, method := range methods {
			g.router.notifySessions(&protocol.Notification{Method: method}, ids[profile]...)
		}
	}
	for method, sessions := range byMethod {
		g.router.notifySessions(&protocol.Notification{Method: method}, sessions...)
	}
}

// listsChanged returns the list_changed notifications that tell a client of prev that its
// lists are now next's.
func listsChanged(prev, next *catalog.Snapshot) []string {
	var changed []string
	if prev.Version(upstream.Tools) != next.Version(upstream.Tools) {
		changed = append(changed, protocol.NotificationToolsChanged)
	}
	if prev.Version(upstream.Resources) != next.Version(upstream.Resources) ||
		prev.Version(upstream.ResourceTemplates) != next.Version(upstream.ResourceTemplates) {
		changed = append(changed, protocol.NotificationResourcesChanged)
	}
	if prev.Version(upstream.Prompts) != next.Version(upstream.Prompts) {
		changed = append(changed, protocol.NotificationPromptsChanged)
	}
	return changed
}

// Package catalog is Manifold's merged catalog: the upstreams' tools, resources, resource
// templates and prompts as one list per kind, each item under a name or URI a client can tell
// apart from every other upstream's (design decision 2), and the rewriting of the URIs inside
// results into that form.
//
// Each upstream is a [Namespace]: its name, the prefix of its tool and prompt names and the
// scheme prefix of its URIs. A [Builder] reads every upstream's current lists through a
// [Source] and merges them into an immutable [Snapshot], which serves lookups and pages:
//
//	namespaces := catalog.Namespaces(specs, logger) // unique URI schemes, in config order
//	b := catalog.NewBuilder(sources, "__", logger)  // one Source per namespace
//	snap := b.Build()                               // again whenever an upstream changes
//	e := snap.Tool("gh__search")                    // e.Namespace, e.Original
//	ns, original, ok := snap.ResolveURI("gh+file:///a")
//	page, err := snap.Page(upstream.Tools, cursor, 100)
//
// The package does no I/O and knows nothing of connections or sessions: what a Namespace is
// connected to is its caller's business.
package catalog

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// Namespace is one upstream as the catalog sees it. Namespaces are made by [Namespaces] and
// not modified afterwards; they are compared by pointer.
type Namespace struct {
	// Index is the upstream's place among the enabled upstreams in config order, from 0.
	Index int
	// Name is the upstream's name in the config.
	Name string
	// Prefix precedes the upstream's tool and prompt names; "" leaves them unprefixed.
	Prefix string
	// Scheme precedes the upstream's resource URIs and templates; "" leaves them unchanged.
	Scheme string
	// IncludeInstructions says whether the upstream's instructions reach clients.
	IncludeInstructions bool
	// Shaping filters and overrides the upstream's items; the zero value changes nothing.
	Shaping Shaping
}

// Namespaces returns the namespaces of the given upstreams, in their order: copies of them
// with Index set to their place and Scheme to [URIScheme] of their Prefix (what is set there
// is ignored). Prefixes are unique, but two may reduce to the same URI scheme ("a_b",
// "a-b"): the later ones get a number (2, 3, …) and a warning is logged for each. A nil
// logger discards.
func Namespaces(upstreams []Namespace, logger *slog.Logger) []*Namespace {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	out := make([]*Namespace, len(upstreams))
	owners := map[string]string{} // scheme → upstream name
	for i, u := range upstreams {
		ns := u
		ns.Index = i
		ns.Scheme = URIScheme(u.Prefix)
		if ns.Scheme != "" {
			base := ns.Scheme
			for n := 2; ; n++ {
				if _, taken := owners[ns.Scheme]; !taken {
					break
				}
				ns.Scheme = base + strconv.Itoa(n)
			}
			if ns.Scheme != base {
				logger.Warn("two upstream prefixes give the same URI scheme; this one is numbered", "upstream", ns.Name, "scheme", ns.Scheme, "other_upstream", owners[base])
			}
			owners[ns.Scheme] = ns.Name
		}
		out[i] = &ns
	}
	return out
}

// Source is what a Builder reads of one upstream at each build. Its methods are called from
// Build and must be safe for concurrent use with the upstream's own work.
type Source interface {
	// Namespace is the upstream's namespace; the same at every call.
	Namespace() *Namespace
	// Catalog is what the upstream lists now, or nil while it is not connected.
	Catalog() *upstream.Catalog
	// Server is the upstream's initialize result, or nil while it is not connected.
	Server() *protocol.InitializeResult
	// Status is the upstream's connection status.
	Status() upstream.Status
}

// Collision is an item left out of the merged catalog because an upstream listed earlier in
// the config exposes the same final name or URI.
type Collision struct {
	Kind            string `json:"kind"`
	Name            string `json:"name"`
	KeptUpstream    string `json:"keptUpstream"`
	DroppedUpstream string `json:"droppedUpstream"`
	DroppedOriginal string `json:"droppedOriginal"`
}

// Builder merges the upstreams' lists into snapshots. Build is called whenever an upstream
// changes. Its methods are safe for concurrent use; builds are serialized.
type Builder struct {
	sources  []Source
	sep      string
	logger   *slog.Logger
	profiles []*Profile

	mu sync.Mutex
	// warned holds the collisions of the last build, all logged, so that a collision is logged
	// once while it lasts. Invariant: it holds no collision that the last build did not see,
	// so an upstream that keeps inventing names cannot grow it. Guarded by mu.
	warned map[string]bool
	// former remembers each exposed tool and prompt as its upstream listed it, so that a call
	// to it while that upstream is down (restarting) fails as "unavailable", not "unknown".
	// Invariant: it holds the entries of the last build's catalog and those each down upstream
	// listed when it was last up; an upstream that is up keeps only what it lists now. Guarded
	// by mu.
	former map[string]*Entry
	// withhold, when set, leaves out the tools it reports: those whose definition changed
	// since it was pinned. Guarded by mu.
	withhold func(ns *Namespace, tool upstream.Item) bool
}

// NewBuilder returns a Builder over sources, one per namespace in config order (which decides
// collisions), joining prefixes and names with sep. A nil logger discards.
func NewBuilder(sources []Source, sep string, logger *slog.Logger) *Builder {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Builder{sources: sources, sep: sep, logger: logger, warned: map[string]bool{}, former: map[string]*Entry{}}
}

// SetSources replaces the sources, one per namespace in config order, from the next Build
// on (a reload added, removed or replaced upstreams). What the builder remembers of the
// namespaces no source has any more is forgotten by that build.
func (b *Builder) SetSources(sources []Source) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sources = sources
}

// SetProfiles sets the profiles each Build derives a snapshot for (Snapshot.Profile), from the
// next Build on.
func (b *Builder) SetProfiles(profiles []*Profile) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.profiles = profiles
}

// SetWithhold sets what leaves tools out of every build from now on: withhold reports, of
// an upstream's tool as the upstream lists it, whether clients must not see it. A withheld
// tool is absent like one never listed. Nil withholds nothing.
func (b *Builder) SetWithhold(withhold func(ns *Namespace, tool upstream.Item) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.withhold = withhold
}

// Build merges the upstreams' current lists. On a name collision config order wins and the
// loser is logged once while the collision lasts (design decision 2).
func (b *Builder) Build() *Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	// The per-name tables are rebuilt from this build's lists, so that they follow the
	// catalog instead of growing with every name an upstream ever listed.
	warned := map[string]bool{}
	former := map[string]*Entry{}
	down := map[*Namespace]bool{}
	s := &Snapshot{
		tools:           map[string]*Entry{},
		prompts:         map[string]*Entry{},
		resources:       map[string]*Entry{},
		templateEntries: map[string]*Entry{},
		schemes:         map[string]*Namespace{},
		statuses:        map[string]upstream.Status{},
	}
	templates := s.templateEntries
	reserved := map[string]bool{} // exposed names of withheld tools
	for _, src := range b.sources {
		ns := src.Namespace()
		if ns.Scheme == "" {
			s.unprefixed = ns
		} else {
			s.schemes[ns.Scheme] = ns
		}
		// The status first: an upstream ready by then has its catalog by now.
		s.statuses[ns.Name] = src.Status()
		cat := src.Catalog()
		if cat == nil {
			down[ns] = true
			continue
		}
		if ns.IncludeInstructions {
			if info := src.Server(); info != nil && info.Instructions != "" {
				s.instructions = append(s.instructions, nsText{ns, fmt.Sprintf("[%s] %s", ns.Name, info.Instructions)})
			}
		}
		for _, k := range upstream.Kinds {
			var seen map[string]*Entry
			switch k {
			case upstream.Tools:
				seen = s.tools
			case upstream.Prompts:
				seen = s.prompts
			case upstream.Resources:
				seen = s.resources
			case upstream.ResourceTemplates:
				seen = templates
			}
			list := cat.List(k)
			filter, overrides := ns.Shaping.Filters[k], ns.Shaping.Overrides[k]
			renamed := b.renamedLocked(ns, k, list)
			for _, it := range list {
				if !filter.Keeps(it.Key) {
					continue
				}
				withheld := k == upstream.Tools && b.withhold != nil && b.withhold(ns, it)
				var ov *Override
				if o, ok := overrides[it.Key]; ok {
					ov = &o
				}
				var exposed string
				switch k {
				case upstream.Tools, upstream.Prompts:
					name := it.Key
					if ov != nil && ov.Name != "" {
						name = ov.Name
					}
					exposed = ExposedName(ns.Prefix, b.sep, name)
				default:
					exposed = ExposeURI(ns.Scheme, it.Key)
				}
				if withheld {
					// Absent for clients, but its name stays its upstream's: a later
					// upstream's tool of the same exposed name must not answer for it.
					reserved[exposed] = true
					continue
				}
				if reserved[exposed] && k == upstream.Tools {
					continue
				}
				prev, dup := seen[exposed]
				if !dup && renamed[exposed] && (ov == nil || ov.Name == "") {
					// An item renamed in the config takes the name from the one the
					// upstream lists under it.
					prev, dup = &Entry{Namespace: ns}, true
				}
				if dup {
					b.warnCollisionLocked(warned, k, exposed, prev, ns, it.Key)
					s.collisions = append(s.collisions, Collision{Kind: kindLabels[k], Name: exposed, KeptUpstream: prev.Namespace.Name, DroppedUpstream: ns.Name, DroppedOriginal: it.Key})
					continue
				}
				raw, err := shapeItem(it.Raw, k, exposed, ns, b.sep, ov)
				if err != nil {
					b.logger.Warn("an upstream list entry could not be rewritten; it is left out", "upstream", ns.Name, "kind", k.String(), "key", it.Key, "error", err.Error())
					continue
				}
				e := &Entry{Namespace: ns, Original: it.Key, Exposed: exposed, raw: raw}
				seen[exposed] = e
				s.lists[k] = append(s.lists[k], e)
				if k == upstream.Tools || k == upstream.Prompts {
					former[k.String()+"\x00"+exposed] = e
				}
			}
		}
	}
	// A down upstream's names stay its own until it is back (and lists them or not), unless
	// an upstream that is up lists them now.
	for key, e := range b.former {
		if _, taken := former[key]; !taken && down[e.Namespace] {
			former[key] = e
		}
	}
	b.warned, b.former = warned, former
	s.seal()
	if len(b.profiles) > 0 {
		s.profiles = make(map[string]*Snapshot, len(b.profiles))
		for _, p := range b.profiles {
			s.profiles[p.Name] = s.restrict(p)
		}
	}
	return s
}

// renamedLocked returns the exposed names that list's items of kind k take from ns's
// overrides, nil when none is renamed. b.mu must be held.
func (b *Builder) renamedLocked(ns *Namespace, k upstream.Kind, list []upstream.Item) map[string]bool {
	overrides := ns.Shaping.Overrides[k]
	if len(overrides) == 0 {
		return nil
	}
	var renamed map[string]bool
	for _, it := range list {
		if ov, ok := overrides[it.Key]; ok && ov.Name != "" && ns.Shaping.Filters[k].Keeps(it.Key) {
			if renamed == nil {
				renamed = map[string]bool{}
			}
			renamed[ExposedName(ns.Prefix, b.sep, ov.Name)] = true
		}
	}
	return renamed
}

// warnCollisionLocked records a collision of this build in warned and logs it unless the last
// build saw it too. b.mu must be held.
func (b *Builder) warnCollisionLocked(warned map[string]bool, k upstream.Kind, exposed string, kept *Entry, lost *Namespace, original string) {
	key := k.String() + "\x00" + exposed + "\x00" + lost.Name
	warned[key] = true
	if b.warned[key] {
		return
	}
	b.logger.Warn("two upstreams expose the same name; the one listed first in the config wins",
		"kind", k.String(), "name", exposed, "kept_upstream", kept.Namespace.Name, "dropped_upstream", lost.Name, "dropped_original", original)
}

// FormerOwner returns the namespace that lists the exposed tool or prompt name (k is
// upstream.Tools or upstream.Prompts), or listed it when its upstream was last up; nil if
// none. A caller that finds the owner's upstream down can say "unavailable" rather than
// "unknown".
func (b *Builder) FormerOwner(k upstream.Kind, exposed string) *Namespace {
	if e := b.Former(k, exposed); e != nil {
		return e.Namespace
	}
	return nil
}

// Former returns the tool or prompt (k is upstream.Tools or upstream.Prompts) of the exposed
// name as its upstream lists it, or listed it when that upstream was last up; nil if none. It
// is the last known catalog of an upstream that is down (restarting), for routing: a call to
// one of its items can be told "unavailable", by the rules that decided who saw it.
func (b *Builder) Former(k upstream.Kind, exposed string) *Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.former[k.String()+"\x00"+exposed]
}

// rewriteField returns obj with its string field set to value; every other member keeps
// its bytes and place.
func rewriteField(obj json.RawMessage, field, value string) (json.RawMessage, error) {
	if current, ok, err := protocol.StringMember(obj, field); err != nil {
		return nil, err
	} else if ok && current == value {
		return obj, nil
	}
	return protocol.SetMember(obj, field, protocol.AppendString(nil, value))
}

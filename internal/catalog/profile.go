package catalog

import (
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/upstream"
)

// Profile is a named subset of the merged catalog, served at its own endpoint: the items one
// of its selectors selects. Every Build derives a snapshot per profile (Snapshot.Profile).
type Profile struct {
	Name      string
	Selectors []Selector
}

// Selector selects items by upstream and by glob over their exposed names and URIs.
type Selector struct {
	// Upstream is the name of the upstream whose items it selects; "" for every upstream.
	Upstream string
	// Patterns are the globs per kind; a nil Set selects nothing of its kind.
	Patterns [upstream.NumKinds]glob.Set
}

// Admits reports whether one of the profile's selectors selects the item of kind k that
// namespace ns exposes as exposed.
func (p *Profile) Admits(ns *Namespace, k upstream.Kind, exposed string) bool {
	for i := range p.Selectors {
		s := &p.Selectors[i]
		if (s.Upstream == "" || s.Upstream == ns.Name) && s.Patterns[k].Match(exposed) {
			return true
		}
	}
	return false
}

// reaches reports whether one of the profile's selectors has patterns for kind k of ns: its
// URIs may then be read through the profile, as far as the patterns allow.
func (p *Profile) reaches(ns *Namespace, k upstream.Kind) bool {
	for i := range p.Selectors {
		s := &p.Selectors[i]
		if (s.Upstream == "" || s.Upstream == ns.Name) && len(s.Patterns[k]) > 0 {
			return true
		}
	}
	return false
}

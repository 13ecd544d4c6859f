package gateway

import (
	"fmt"
	"strings"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/upstream"
)

// Catalog shaping (the config's per-upstream tools, prompts, resources and
// resource_templates keys) and profiles (/mcp/<profile>) are applied when a catalog snapshot
// is built: the call path stays a table lookup.

// shapingOf translates an upstream's shaping settings for the catalog. The config validated
// every pattern; an error here names the upstream all the same.
func shapingOf(u *config.Upstream) (catalog.Shaping, error) {
	var s catalog.Shaping
	filters := []struct {
		k upstream.Kind
		f config.Filter
	}{
		{upstream.Tools, u.Tools.Filter},
		{upstream.Prompts, u.Prompts.Filter},
		{upstream.Resources, u.Resources},
		{upstream.ResourceTemplates, u.ResourceTemplates},
	}
	for _, f := range filters {
		filter, err := catalog.NewFilter(f.f.Include, f.f.Exclude)
		if err != nil {
			return s, fmt.Errorf("upstream %s: %s filter: %w", u.Name, f.k, err)
		}
		s.Filters[f.k] = filter
	}
	for k, overrides := range map[upstream.Kind]map[string]config.ItemOverride{upstream.Tools: u.Tools.Overrides, upstream.Prompts: u.Prompts.Overrides} {
		if len(overrides) == 0 {
			continue
		}
		s.Overrides[k] = make(map[string]catalog.Override, len(overrides))
		for name, o := range overrides {
			s.Overrides[k][name] = catalog.Override{Name: o.Name, Title: o.Title, Description: o.Description, Annotations: o.Annotations}
		}
	}
	return s, nil
}

// profilesOf translates the config's profiles for the catalog.
func profilesOf(profiles []config.Profile) ([]*catalog.Profile, error) {
	out := make([]*catalog.Profile, 0, len(profiles))
	for _, p := range profiles {
		cp := &catalog.Profile{Name: p.Name}
		for i, sel := range p.Include {
			cs := catalog.Selector{Upstream: sel.Upstream}
			for k, patterns := range map[upstream.Kind][]string{
				upstream.Tools: sel.Tools, upstream.Prompts: sel.Prompts,
				upstream.Resources: sel.Resources, upstream.ResourceTemplates: sel.ResourceTemplates,
			} {
				set, err := glob.CompileSet(patterns)
				if err != nil {
					return nil, fmt.Errorf("profile %s: include[%d]: %s: %w", p.Name, i, k, err)
				}
				cs.Patterns[k] = set
			}
			cp.Selectors = append(cp.Selectors, cs)
		}
		out = append(out, cp)
	}
	return out, nil
}

// noProfile is the catalog of a profile that does not exist: empty.
var noProfile = catalog.NewBuilder(nil, "", nil).Build()

// profileOf returns snap's catalog of profile: snap itself for "".
func profileOf(snap *catalog.Snapshot, profile string) *catalog.Snapshot {
	if profile == "" {
		return snap
	}
	if ps := snap.Profile(profile); ps != nil {
		return ps
	}
	return noProfile
}

// profileList names the gateway's profile endpoints for messages.
func (g *Gateway) profileList() string {
	profiles := g.runningConfig().Profiles
	if len(profiles) == 0 {
		return "none configured"
	}
	var b strings.Builder
	for i, p := range profiles {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("/mcp/" + p.Name)
	}
	return b.String()
}

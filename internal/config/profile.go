package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds the top-level `profiles`: their decoding, defaults and checks.

// selectorKinds are the keys of a selector that list patterns, one per kind of item, in
// the order of Selector.lists.
var selectorKinds = []string{"tools", "prompts", "resources", "resource_templates"}

// lists returns the pattern lists of s, in the order of selectorKinds.
func (s *Selector) lists() []*[]string {
	return []*[]string{&s.Tools, &s.Prompts, &s.Resources, &s.ResourceTemplates}
}

// profiles decodes the top-level `profiles` list. No value means none (nil).
func profiles(dst *[]Profile) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, "want a list of profiles (lines starting with `- name:`), got %s", describe(v))
			return false
		}
		// One element per entry, even a broken one, so that indexes match the file's.
		*dst = make([]Profile, len(v.Content))
		for i, item := range v.Content {
			d.decodeField(fmt.Sprintf("%s[%d]", path, i), item.Line, item, profile(&(*dst)[i]))
		}
		return true
	}
}

func profile(p *Profile) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		p.File, p.Line = d.file, n.Line
		return d.mapping(n, path, "a mapping with `name:` and `include:`, a list of selectors like {upstream: github}", []field{
			{key: "name", decode: str(&p.Name)},
			{key: "include", decode: selectors(&p.Include)},
		})
	}
}

// selectors decodes a profile's `include` list. No value leaves it nil, which validation
// reports.
func selectors(dst *[]Selector) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, "want a list of selectors (lines starting with `- upstream:` or `- tools:`), got %s", describe(v))
			return false
		}
		*dst = make([]Selector, len(v.Content))
		for i, item := range v.Content {
			d.decodeField(fmt.Sprintf("%s[%d]", path, i), item.Line, item, selector(&(*dst)[i]))
		}
		return true
	}
}

func selector(s *Selector) decodeFunc {
	const hint = `write a list of patterns like ["github__*"], or remove the key`
	return func(d *decoder, n *yaml.Node, path string) bool {
		if m := resolve(n); m.Kind == yaml.MappingNode && len(m.Content) == 0 {
			d.problemf(n.Line, path, "an empty selector would select every item of every upstream: "+
				`set upstream: NAME to select all of one upstream's items, or list patterns of exposed names under tools, prompts, resources or resource_templates, like tools: ["github__*"]`)
			return false
		}
		fields := []field{{key: "upstream", decode: str(&s.Upstream)}}
		for i, list := range s.lists() {
			fields = append(fields, field{key: selectorKinds[i], decode: notNull(hint, strList(list))})
		}
		return d.mapping(n, path, `a mapping with upstream: and/or tools:, prompts:, resources:, resource_templates: (lists of patterns)`, fields)
	}
}

// applySelectorDefaults makes each selector that sets none of the kinds select every item
// of its upstream(s).
func applySelectorDefaults(ps []Profile, ix *index) {
	for i := range ps {
		for j := range ps[i].Include {
			path := fmt.Sprintf("profiles[%d].include[%d]", i, j)
			set := false
			for _, kind := range selectorKinds {
				set = set || ix.present(join(path, kind))
			}
			if !set {
				for _, list := range ps[i].Include[j].lists() {
					*list = []string{"*"}
				}
			}
		}
	}
}

// profiles checks the profiles of the config file at w; ups are the upstreams of every
// file, which selectors may name.
func (v *validator) profiles(ps []Profile, w where, ups []Upstream) {
	known := make(map[string]bool)
	var names []string
	for _, u := range ups {
		if u.Name != "" && !known[u.Name] {
			known[u.Name] = true
			names = append(names, u.Name)
		}
	}
	seen := make(map[string]int) // profile name → index of the first profile with it
	for i := range ps {
		p, path := &ps[i], fmt.Sprintf("profiles[%d]", i)
		if !w.ix.usable(path) {
			continue
		}
		namePath := join(path, "name")
		switch first, dup := seen[p.Name]; {
		case !w.ix.present(namePath):
			v.check(w, namePath, "required: a unique name for this profile, like dev; it is served at /mcp/<name>")
		case !validName(p.Name):
			v.check(w, namePath, fmt.Sprintf("%s is not a valid profile name: use 1 to %d characters from A-Z a-z 0-9 _ -", quote(p.Name), maxNameLen))
		case dup:
			v.check(w, namePath, fmt.Sprintf("%q is also the name of profiles[%d] (line %d): profile names must be unique", p.Name, first, w.ix.line(fmt.Sprintf("profiles[%d]", first))))
		default:
			seen[p.Name] = i
		}

		includePath := join(path, "include")
		if len(p.Include) == 0 {
			msg := "required: a list of selectors, like - upstream: github"
			if w.ix.present(includePath) {
				msg = "empty: list at least one selector, like - upstream: github"
			}
			v.check(w, includePath, msg)
		}
		for j := range p.Include {
			v.selector(&p.Include[j], w, fmt.Sprintf("%s[%d]", includePath, j), known, names)
		}
	}
}

// selector checks the selector s at path in w; known holds the names of all upstreams,
// names the same in file order.
func (v *validator) selector(s *Selector, w where, path string, known map[string]bool, names []string) {
	if !w.ix.usable(path) {
		return
	}
	if upath := join(path, "upstream"); w.ix.present(upath) && !known[s.Upstream] {
		msg := fmt.Sprintf("%s names no upstream, and there are none: add it to upstreams, or import the server list that has it", quote(s.Upstream))
		switch {
		case s.Upstream == "":
			msg = "empty: name an upstream, or remove the key to select from every upstream"
		case len(names) > 0:
			msg = fmt.Sprintf("%s names no upstream: use one of %s", quote(s.Upstream), strings.Join(names, ", "))
		}
		v.check(w, upath, msg)
	}
	for i, list := range s.lists() {
		if kpath := join(path, selectorKinds[i]); w.ix.present(kpath) {
			v.compileGlobs(w, kpath, *list)
		}
	}
}

package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifold-mcp/manifold/internal/glob"
)

// This file holds an upstream's shaping keys (tools, prompts, resources,
// resource_templates): their decoding and their checks.

// shaping decodes the `tools` or `prompts` mapping of an upstream into dst, replacing it
// whole; item is "tool" or "prompt", for messages.
func shaping(dst *Shaping, item string) decodeFunc {
	want := fmt.Sprintf("a mapping with include:, exclude: (lists of %s name patterns) and/or overrides:", item)
	return func(d *decoder, n *yaml.Node, path string) bool {
		var s Shaping
		ok := d.mapping(n, path, want, []field{
			{key: "include", decode: strList(&s.Include)},
			{key: "exclude", decode: strList(&s.Exclude)},
			{key: "overrides", decode: itemOverrides(&s.Overrides, item)},
		})
		if ok {
			*dst = s
		}
		return ok
	}
}

// filter decodes the `resources` or `resource_templates` mapping of an upstream into dst,
// replacing it whole.
func filter(dst *Filter, want string) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		var f Filter
		ok := d.mapping(n, path, want, []field{
			{key: "include", decode: strList(&f.Include)},
			{key: "exclude", decode: strList(&f.Exclude)},
		})
		if ok {
			*dst = f
		}
		return ok
	}
}

// itemOverrides decodes `overrides`, a mapping of item names to their ItemOverride. No
// value means none (nil). Keys are taken as written, without variable expansion.
func itemOverrides(dst *map[string]ItemOverride, item string) decodeFunc {
	want := fmt.Sprintf("a mapping of the upstream's own %s names to their overrides, like read_file: {name: read}", item)
	return func(d *decoder, n *yaml.Node, path string) bool {
		if isNull(resolve(n)) {
			*dst = nil
			return true
		}
		m := make(map[string]ItemOverride)
		ok := d.eachKey(n, path, want, func(key string, line int, v *yaml.Node) {
			o := ItemOverride{Line: line}
			if d.decodeField(join(path, key), line, v, itemOverride(&o, item)) {
				m[key] = o
			}
		})
		if ok {
			*dst = m
		}
		return ok
	}
}

// itemOverride decodes the override of one tool or prompt.
func itemOverride(o *ItemOverride, item string) decodeFunc {
	want := "a mapping with name, title, description or annotations, like {name: read}"
	annotations := field{key: "annotations", decode: hints(&o.Annotations)}
	if item != "tool" {
		want = "a mapping with name, title or description, like {name: summarize}"
		annotations = field{key: "annotations", unlisted: true, decode: func(d *decoder, _ *yaml.Node, path string) bool {
			d.problemf(d.lines[path], path, "only tools have annotations: remove it from this %s override", item)
			return false
		}}
	}
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, want, []field{
			{key: "name", decode: str(&o.Name)},
			{key: "title", decode: str(&o.Title)},
			{key: "description", decode: str(&o.Description)},
			annotations,
		})
	}
}

// hints decodes the annotation hints of a tool override: a mapping whose keys are among
// AnnotationHints, each true or false.
func hints(dst *map[string]bool) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		m := make(map[string]bool)
		fields := make([]field, len(AnnotationHints))
		for i, h := range AnnotationHints {
			fields[i] = field{key: h, decode: func(d *decoder, n *yaml.Node, path string) bool {
				var b bool
				if !boolean(&b)(d, n, path) {
					return false
				}
				m[h] = b
				return true
			}}
		}
		ok := d.mapping(n, path, "a mapping of hints to true or false, like {readOnlyHint: true}", fields)
		if ok {
			*dst = m
		}
		return ok
	}
}

// compileGlobs compiles patterns, the list at path in w, reporting each that does not
// compile at its own path. It returns the set, and false if a pattern was bad or could not
// be decoded: a filter with such a set cannot be relied on to say what it keeps.
func (v *validator) compileGlobs(w where, path string, patterns []string) (glob.Set, bool) {
	set := make(glob.Set, 0, len(patterns))
	ok := w.ix.usable(path)
	for i, text := range patterns {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if !w.ix.usable(ipath) {
			ok = false
			continue
		}
		p, err := glob.Compile(text)
		if err != nil {
			v.check(w, ipath, err.Error())
			ok = false
			continue
		}
		set = append(set, p)
	}
	if patterns == nil {
		set = nil
	}
	return set, ok
}

// compiledFilter is a Filter whose patterns compiled.
type compiledFilter struct {
	f                Filter
	include, exclude glob.Set
}

// filter checks the patterns of f, found at path in w. It returns f compiled, and false if
// any pattern is bad.
func (v *validator) filter(w where, path string, f *Filter) (compiledFilter, bool) {
	inc, incOK := v.compileGlobs(w, join(path, "include"), f.Include)
	exc, excOK := v.compileGlobs(w, join(path, "exclude"), f.Exclude)
	return compiledFilter{f: *f, include: inc, exclude: exc}, incOK && excOK
}

// upstreamFilter checks the patterns of f, the filter of the upstream at s under key
// (resources, resource_templates), where it was set.
func (v *validator) upstreamFilter(s *site, key string, f *Filter) {
	if w, p := s.locate(key); w.ix.present(p) {
		v.filter(w, p, f)
	}
}

// drops returns why cf drops name, or "" if it keeps it.
func (cf *compiledFilter) drops(name string) string {
	for i, p := range cf.exclude {
		if p.Match(name) {
			return fmt.Sprintf("exclude[%d] %s matches it", i, quote(cf.f.Exclude[i]))
		}
	}
	if cf.include != nil && !cf.include.Match(name) {
		if len(cf.include) == 0 {
			return "include is empty, which keeps nothing"
		}
		return "no pattern of include matches it"
	}
	return ""
}

// namedItem is a tool or prompt named in an upstream's overrides, for the checks that
// names clients see are unique.
type namedItem struct {
	up      int    // index of the upstream
	own     string // the upstream's own name of the item
	renamed bool   // whether the override sets a new name
	exposed string // the name clients see: prefix, separator and name, or the name alone
	w       where  // where the override was written
	path    string // the path of its new name if renamed, else of its key
	line    int
}

// shapingCheck is what the checks of one upstream's tools or prompts need to know of it.
type shapingCheck struct {
	up     int
	s      *site
	key    string // "tools" or "prompts"
	item   string // "tool" or "prompt"
	prefix string
	// exposedOK says whether prefix and separator are known and valid, so that the names
	// clients see can be told: the checks that need them are skipped otherwise.
	exposedOK bool
	sep       string
}

// shaping checks an upstream's tools or prompts: patterns, item overrides and the names
// they give within the upstream. It returns the items named in the overrides whose name
// clients see is known, for the check across upstreams.
func (v *validator) shaping(sh *Shaping, c shapingCheck) []namedItem {
	w, path := c.s.locate(c.key)
	if !w.ix.present(path) || !w.ix.usable(path) {
		return nil
	}
	cf, filterOK := v.filter(w, path, &sh.Filter)

	type entry struct {
		own string
		o   ItemOverride
	}
	var entries []entry
	for own, o := range sh.Overrides {
		entries = append(entries, entry{own, o})
	}
	// File order, for stable messages that name the first of two.
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.o.Line, b.o.Line), strings.Compare(a.own, b.own))
	})

	var items []namedItem
	newNames := make(map[string]entry) // new name → the first override that gives it
	keeps := make(map[string]entry)    // own name → its override, which sets no new name
	overridesPath := join(path, "overrides")
	for _, e := range entries {
		if !w.ix.present(join(join(overridesPath, e.own), "name")) {
			keeps[e.own] = e
		}
	}
	for _, e := range entries {
		opath := join(overridesPath, e.own)
		if !w.ix.usable(opath) {
			continue
		}
		if e.own == "" {
			v.check(w, opath, fmt.Sprintf("an empty name matches no %s: write the %s's name as the upstream lists it", c.item, c.item))
			continue
		}
		if filterOK {
			if why := cf.drops(e.own); why != "" {
				v.check(w, opath, fmt.Sprintf("this override never applies, the filter drops %s: %s; remove the override, or change the filter to keep the %s",
					quote(e.own), why, c.item))
				continue
			}
		}
		for _, kv := range [][2]string{{"title", e.o.Title}, {"description", e.o.Description}} {
			if p := join(opath, kv[0]); kv[1] == "" && w.ix.present(p) {
				v.check(w, p, fmt.Sprintf("empty: remove the key to keep the upstream's %s", kv[0]))
			}
		}

		namePath := join(opath, "name")
		renamed := w.ix.present(namePath)
		item := namedItem{up: c.up, own: e.own, renamed: renamed, w: w, path: opath, line: e.o.Line}
		if renamed {
			if !w.ix.usable(namePath) {
				continue
			}
			item.path = namePath
			if !validItemName(e.o.Name) {
				v.check(w, namePath, fmt.Sprintf("%s is not a valid %s name: use 1 to %d characters from A-Z a-z 0-9 _ . -", quote(e.o.Name), c.item, maxNameLen))
				continue
			}
			if first, dup := newNames[e.o.Name]; dup {
				v.check(w, namePath, fmt.Sprintf("%q is also the new name of %s %q (line %d): give each its own name", e.o.Name, c.item, first.own, first.o.Line))
				continue
			}
			newNames[e.o.Name] = e
			if other, ok := keeps[e.o.Name]; ok {
				v.check(w, namePath, fmt.Sprintf("%q is the name of another %s of this upstream, which keeps it (its override on line %d sets no new name): choose another name, or rename that %s too",
					e.o.Name, c.item, other.o.Line, c.item))
				continue
			}
		}
		if !c.exposedOK {
			continue
		}
		name := e.own
		if renamed {
			name = e.o.Name
		}
		item.exposed = name
		if c.prefix != "" {
			item.exposed = c.prefix + c.sep + name
		}
		if renamed && len(item.exposed) > maxNameLen {
			v.check(w, namePath, fmt.Sprintf("clients would see %s, %d characters, and hosts cap %s names at %d: choose a name of at most %d characters",
				quote(item.exposed), len(item.exposed), c.item, maxNameLen, maxNameLen-len(c.prefix)-len(c.sep)))
			continue
		}
		items = append(items, item)
	}
	return items
}

// exposedNames checks that no two items named in overrides, across all upstreams, show
// clients the same name when one of them is renamed; items is every upstream's, in order.
// item is "tool" or "prompt"; ups and sites name the other upstream in messages.
func (v *validator) exposedNames(items []namedItem, item string, ups []Upstream, sites []site) {
	seen := make(map[string]namedItem)
	for _, it := range items {
		first, dup := seen[it.exposed]
		if !dup {
			seen[it.exposed] = it
			continue
		}
		if first.up == it.up || !first.renamed && !it.renamed {
			// Within one upstream the checks of shaping apply; two names the upstreams
			// give themselves are not the config's doing.
			continue
		}
		at, other := it, first
		if !it.renamed {
			at, other = first, it
		}
		loc := fmt.Sprintf("line %d", other.line)
		if other.w.file != at.w.file {
			loc = fmt.Sprintf("%s:%d", other.w.file, other.line)
		}
		v.check(at.w, at.path, fmt.Sprintf("clients would see %s for this %s and for %s %q of %s %q (%s): choose another name",
			quote(at.exposed), item, item, other.own, sites[other.up].path, ups[other.up].Name, loc))
	}
}

// validItemName reports whether s may be the new name of a tool or prompt.
func validItemName(s string) bool {
	return len(s) >= 1 && len(s) <= maxNameLen && onlyChars(s, "_.-")
}

package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"
)

// This file lists the keys the decoder accepts, for the configuration reference
// (docs/configuration.md, written by TestConfigurationReference). The list comes from the
// decoder's own tables: it decodes small probe documents and records the known keys of
// every mapping of settings it meets, so that a key added to a table is listed without
// being written down twice.

//go:generate go test -run TestConfigurationReference -count=1 . -args -write-docs

// A Section is one mapping of settings: its path, as in "upstreams[].tools" (a list item
// is "[]", an entry keyed by a name is "<name>"), and its keys in the decoder's order.
type Section struct {
	Path string
	Keys []string
}

// probeName is the name under which a probe puts an entry of a mapping keyed by names.
const probeName = "example"

// Sections returns every mapping of settings the decoder accepts, each followed by those
// inside it, in the decoder's order of keys.
func Sections() []Section {
	var out []Section
	done := map[string]bool{"": true}
	// visit lists the section at path (the decoder's path, as in "upstreams[0]"), shown as
	// shown; wrap places the content of the section in a document.
	var visit func(path, shown string, wrap func(any) any)
	visit = func(path, shown string, wrap func(any) any) {
		keys := probe(wrap(map[string]any{}), path)
		out = append(out, Section{Path: shown, Keys: keys})
		for _, k := range keys {
			for _, shape := range []struct {
				suffix, shown string
				place         func(any) any
			}{
				{"", "", func(v any) any { return v }},
				{"[0]", "[]", func(v any) any { return []any{v} }},
				{"." + probeName, ".<name>", func(v any) any { return map[string]any{probeName: v} }},
			} {
				inner := join(path, k) + shape.suffix
				if done[inner] {
					continue
				}
				innerWrap := func(v any) any { return wrap(map[string]any{k: shape.place(v)}) }
				if probe(innerWrap(map[string]any{}), inner) == nil {
					continue
				}
				done[inner] = true
				visit(inner, join(shown, k)+shape.shown, innerWrap)
			}
		}
	}
	visit("", "", func(v any) any { return v })
	return out
}

// probe decodes doc and returns the known keys of the mapping at path, or nil if the
// decoder did not decode a mapping of settings there.
func probe(doc any, path string) []string {
	data, err := yaml.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("config reference: encoding a probe: %v", err))
	}
	root, _ := parseYAML("probe", data)
	if root == nil {
		return nil
	}
	d := newDecoder("probe", func(string) (string, bool) { return "", false })
	var keys []string
	d.seen = func(at string, fields []field) {
		if at != path || keys != nil {
			return
		}
		keys = []string{}
		for _, f := range fields {
			if !f.unlisted && !slices.Contains(keys, f.key) {
				keys = append(keys, f.key)
			}
		}
	}
	d.config(root)
	return keys
}

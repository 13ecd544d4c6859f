package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds the config file's top-level `overrides`: settings for an upstream of any
// file, above all for a server of an imported list, which cannot carry the gateway's keys.
//
// An entry is decoded twice. While the config file is decoded, into a scratch upstream, so
// that its problems are reported once, in file order, whatever it names. Once the upstreams
// of every file are known, again, silently, into the upstream it names: a key's decoder
// replaces its field whole, so the entry sets exactly the keys it has, and the upstream's
// own values and defaults stay for the others. Its field paths, overrides[i].KEY, are in the
// config file's index, and the upstream's site points there (site.locate), so that a problem
// of a value an override set is reported where the override set it.

// overrideEntry is one entry of the top-level `overrides` list.
type overrideEntry struct {
	path string     // "overrides[i]"
	node *yaml.Node // the entry, as written
	name string     // the upstream it names, once decoded
}

// overrideWant describes an override entry for messages.
const overrideWant = "a mapping with `name:`, the upstream to change, and the keys to set, like {name: filesystem, isolation: session}"

// overrideList decodes the top-level `overrides` list into dst. No value means none.
func overrideList(dst *[]overrideEntry) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, "want a list of overrides (lines starting with `- name:`, the upstream to change), got %s", describe(v))
			return false
		}
		*dst = make([]overrideEntry, len(v.Content))
		for i, item := range v.Content {
			e := &(*dst)[i]
			e.path, e.node = fmt.Sprintf("%s[%d]", path, i), item
			d.decodeField(e.path, item.Line, item, func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, overrideWant, overrideFields(new(Upstream), &e.name))
			})
		}
		return true
	}
}

// overrideFields returns the keys of an override entry: `name`, decoded into name, and
// every key of an upstream except those that say which server it is, decoded into u.
func overrideFields(u *Upstream, name *string) []field {
	fields := []field{{key: "name", decode: str(name)}}
	for _, f := range upstreamFields(u) {
		switch f.key {
		case "name":
		case "command", "url", "transport":
			fields = append(fields, field{key: f.key, unlisted: true, decode: refuseInOverride})
		default:
			fields = append(fields, f)
		}
	}
	return fields
}

// refuseInOverride reports a key that an override cannot set.
func refuseInOverride(d *decoder, _ *yaml.Node, path string) bool {
	key := path[strings.LastIndexByte(path, '.')+1:]
	d.problemf(d.lines[path], path, "an override cannot change which server an upstream is: remove %s here, and edit the server's own entry if it must change", key)
	return false
}

// applyOverrides applies the overrides d decoded from the config file to the upstreams of
// c, from every file, and records in sites where each override was written. It reports
// overrides that name no upstream, or the same one as an earlier override.
func (d *decoder) applyOverrides(c *Config, sites []site) {
	if len(d.overrides) == 0 {
		return
	}
	byName := make(map[string]int) // name → index of the first upstream with it
	var names []string
	for i, u := range c.Upstreams {
		if _, dup := byName[u.Name]; !dup && u.Name != "" {
			byName[u.Name] = i
			names = append(names, u.Name)
		}
	}
	applied := make(map[int]string) // index of an upstream → path of its override
	for _, e := range d.overrides {
		namePath := join(e.path, "name")
		switch {
		case !d.usable(e.path):
			continue
		case !d.present(namePath):
			d.problemf(d.line(e.path), namePath, "required: the name of the upstream to change, from upstreams or an imported server list, like filesystem")
			continue
		case !d.usable(namePath):
			continue
		}
		j, ok := byName[e.name]
		if !ok {
			msg := fmt.Sprintf("%s names no upstream, and there are none: add the upstream to upstreams, or import the server list that has it", quote(e.name))
			if len(names) > 0 {
				msg = fmt.Sprintf("%s names no upstream: use the name of one from upstreams or an imported server list (%s)", quote(e.name), strings.Join(names, ", "))
			}
			d.problemf(d.line(namePath), namePath, "%s", msg)
			continue
		}
		if first, dup := applied[j]; dup {
			d.problemf(d.line(namePath), namePath, "%q has an override already, %s (line %d): merge the two into one entry", e.name, first, d.line(first))
			continue
		}
		applied[j] = e.path

		n := len(d.problems)
		d.mapping(e.node, e.path, overrideWant, overrideFields(&c.Upstreams[j], new(string)))
		d.problems = d.problems[:n] // reported when the config file was decoded
		if d.present(join(e.path, "initialize_timeout")) {
			c.Upstreams[j].FirstInitializeTimeout = 0 // the timeout set here wins
		}
		sites[j].over = &where{file: d.file, ix: &d.index}
		sites[j].overPath = e.path
	}
}

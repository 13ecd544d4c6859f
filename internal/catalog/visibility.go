package catalog

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/upstream"
)

// Filter returns the snapshot as a caller sees it who may see only the items keep admits:
// the others are left out of the lists and of the lookups by name and URI, so that a hidden
// item is indistinguishable from a missing one. What decides how URIs resolve (schemes,
// templates) stays, so that a read the policy refuses is refused by the policy, not
// misrouted. The result's versions derive from its own content: they change only when what
// this caller sees changes. It returns s itself when keep admits everything.
func (s *Snapshot) Filter(keep func(e *Entry, k upstream.Kind) bool) *Snapshot {
	all := true
	for _, k := range upstream.Kinds {
		for _, e := range s.lists[k] {
			all = all && keep(e, k)
		}
	}
	if all {
		return s
	}
	fs := &Snapshot{
		tools:           map[string]*Entry{},
		prompts:         map[string]*Entry{},
		resources:       map[string]*Entry{},
		templateEntries: map[string]*Entry{},
		schemes:         s.schemes,
		unprefixed:      s.unprefixed,
		instructions:    s.instructions,
		profile:         s.profile,
		serves:          s.serves,
		statuses:        s.statuses,
	}
	for _, k := range upstream.Kinds {
		for _, e := range s.lists[k] {
			if keep(e, k) {
				fs.add(k, e)
			}
		}
	}
	for _, c := range s.collisions {
		if fs.listed(c.Kind, c.Name) {
			fs.collisions = append(fs.collisions, c)
		}
	}
	fs.seal()
	return fs
}

// Annotations returns a tool entry's annotations as the upstream declared them (raw JSON),
// nil when it has none.
func (e *Entry) Annotations() json.RawMessage {
	var t struct {
		Annotations json.RawMessage `json:"annotations"`
	}
	if json.Unmarshal(e.raw, &t) != nil || len(t.Annotations) == 0 || string(t.Annotations) == "null" {
		return nil
	}
	return t.Annotations
}

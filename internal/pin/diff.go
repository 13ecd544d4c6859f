package pin

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// FieldChange is how one member of a tool definition differs between two definitions.
type FieldChange struct {
	// Field is the member's name: name, title, description, inputSchema, outputSchema,
	// annotations, icons or execution; or a key of _meta, as _meta["key"].
	Field string `json:"field"`
	// Before is the member's value before, in canonical JSON (see Definition); nil when the
	// member was added.
	Before json.RawMessage `json:"before,omitempty"`
	// After is the member's value after, in canonical JSON; nil when the member was removed.
	After json.RawMessage `json:"after,omitempty"`
}

// Diff lists the members of the tool definitions before and after that differ, with the
// scheme of CurrentVersion that pins no _meta key (NewScheme(nil)). See Scheme.Diff.
func Diff(before, after json.RawMessage) []FieldChange { return NewScheme(nil).Diff(before, after) }

// Diff lists the members of the tool definitions before and after that differ, in the order
// name, title, description, inputSchema, outputSchema, annotations, icons, execution, then
// the _meta keys s names, each on its own; members equal on both sides are left out, as are
// members that do not count in s (see Scheme.Definition). Values are compared in canonical
// JSON, so member order and space make no difference. It returns nil when nothing that
// counts differs.
//
// Both are meant to be in Definition's form (what a Pin and its Change hold), but any tool
// definition will do; a side that Definition refuses (not a JSON object, say) is taken as
// having no members.
func (s Scheme) Diff(before, after json.RawMessage) []FieldChange {
	fields, err := s.fields()
	if err != nil {
		return nil
	}
	b, _ := s.parseDefinition(before)
	a, _ := s.parseDefinition(after)
	var out []FieldChange
	for _, f := range fields {
		bv, inBefore := b[f]
		av, inAfter := a[f]
		if inBefore == inAfter && bytes.Equal(bv, av) {
			continue
		}
		out = append(out, FieldChange{Field: f, Before: bv, After: av})
	}
	bm, am := metaKeys(b[metaMember]), metaKeys(a[metaMember])
	for _, k := range s.meta() {
		bv, inBefore := bm[k]
		av, inAfter := am[k]
		if inBefore == inAfter && bytes.Equal(bv, av) {
			continue
		}
		out = append(out, FieldChange{Field: fmt.Sprintf("%s[%q]", metaMember, k), Before: bv, After: av})
	}
	return out
}

// metaKeys splits a _meta member in canonical JSON (as parseDefinition keeps it) into its
// keys' values, which stay canonical.
func metaKeys(m []byte) map[string]json.RawMessage {
	var keys map[string]json.RawMessage
	if len(m) > 0 {
		_ = json.Unmarshal(m, &keys)
	}
	return keys
}

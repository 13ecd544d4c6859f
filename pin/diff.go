package pin

import (
	"bytes"
	"encoding/json"
)

// FieldChange is how one member of a tool definition differs between two definitions.
type FieldChange struct {
	// Field is the member's name: name, title, description, inputSchema, outputSchema or
	// annotations.
	Field string `json:"field"`
	// Before is the member's value before, in canonical JSON (see Definition); nil when the
	// member was added.
	Before json.RawMessage `json:"before,omitempty"`
	// After is the member's value after, in canonical JSON; nil when the member was removed.
	After json.RawMessage `json:"after,omitempty"`
}

// Diff lists the members of the tool definitions before and after that differ, in the order
// name, title, description, inputSchema, outputSchema, annotations; members equal on both
// sides are left out, as are members that do not count (see Definition). Values are compared
// in canonical JSON, so member order and space make no difference. It returns nil when
// nothing that counts differs.
//
// Both are meant to be in Definition's form (what a Pin and its Change hold), but any tool
// definition will do; a side that Definition refuses (not a JSON object, say) is taken as
// having no members.
func Diff(before, after json.RawMessage) []FieldChange {
	b, _ := parseDefinition(before)
	a, _ := parseDefinition(after)
	var out []FieldChange
	for _, f := range fields {
		bv, inBefore := b[f]
		av, inAfter := a[f]
		if inBefore == inAfter && bytes.Equal(bv, av) {
			continue
		}
		out = append(out, FieldChange{Field: f, Before: bv, After: av})
	}
	return out
}

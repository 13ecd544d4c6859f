package audit

import (
	"encoding/json"
	"strings"
)

// Redacted replaces a redacted value in an audit record.
const Redacted = "[redacted]"

// Redact returns args (a JSON value, typically a tools/call's arguments) with the value of
// every object member named one of names, at any depth and case-insensitively, replaced by
// Redacted. Arguments that are not valid JSON are replaced whole: a record must never carry
// what could not be inspected.
func Redact(args json.RawMessage, names []string) json.RawMessage {
	if len(args) == 0 {
		return nil
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(args)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		out, _ := json.Marshal(Redacted)
		return out
	}
	if len(names) == 0 {
		return args
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[strings.ToLower(n)] = true
	}
	out, err := json.Marshal(redactValue(v, set))
	if err != nil {
		out, _ = json.Marshal(Redacted)
	}
	return out
}

func redactValue(v any, names map[string]bool) any {
	switch v := v.(type) {
	case map[string]any:
		for k, member := range v {
			if names[strings.ToLower(k)] {
				v[k] = Redacted
			} else {
				v[k] = redactValue(member, names)
			}
		}
	case []any:
		for i, e := range v {
			v[i] = redactValue(e, names)
		}
	}
	return v
}

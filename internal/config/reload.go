package config

import (
	"encoding/json"
	"reflect"
	"unicode"
)

// ChangedKeys returns the top-level keys (as written in the file: "listen", "upstreams",
// "policy", …) whose settings differ between c and next, in the order of Config's fields.
// Where a setting was written (its file and line) is not a setting: a config whose lines only
// moved has no changed key. Both configs must have passed validation.
func (c *Config) ChangedKeys(next *Config) []string {
	a, b := reflect.ValueOf(c).Elem(), reflect.ValueOf(next).Elem()
	var changed []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if f.Name == "File" || !f.IsExported() {
			continue
		}
		if !SameSettings(a.Field(i).Interface(), b.Field(i).Interface()) {
			changed = append(changed, KeyOfField(f.Name))
		}
	}
	return changed
}

// SameSettings reports whether a and b, two values of the same config type (an Upstream, a
// Policy, …), hold the same settings, whatever file and line each was written at.
func SameSettings(a, b any) bool {
	return reflect.DeepEqual(placeless(a), placeless(b))
}

// placeless is v as plain JSON data without the File and Line members, which say where a
// setting was written, not what it is. Every field of the config encodes (see Version).
func placeless(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return err.Error()
	}
	return dropPlaces(out)
}

func dropPlaces(v any) any {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "File")
		delete(v, "Line")
		for k, e := range v {
			v[k] = dropPlaces(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropPlaces(e)
		}
	}
	return v
}

// KeyOfField is the top-level key of the Config field named field: its name in snake case,
// with initialisms kept whole ("HTTPIdleTimeout" is "http_idle_timeout").
func KeyOfField(field string) string {
	rs := []rune(field)
	var out []rune
	for i, r := range rs {
		if unicode.IsUpper(r) {
			// A new word begins at an upper-case letter after a lower-case one, or at the
			// last upper-case letter of an initialism followed by a lower-case one.
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))) {
				out = append(out, '_')
			}
			r = unicode.ToLower(r)
		}
		out = append(out, r)
	}
	return string(out)
}

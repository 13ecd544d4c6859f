package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// errNotObject is returned by the member functions for input that is not a JSON object.
var errNotObject = errors.New("not a JSON object")

// Member returns the raw value of the top-level member key of the JSON object obj, or
// ok=false when it is absent. obj must be valid JSON (every message Decode returns holds
// valid JSON). It reads only as far as it must and allocates nothing.
func Member(obj []byte, key string) (value []byte, ok bool, err error) {
	err = eachMember(obj, func(k []byte, escaped bool, start, end int) bool {
		if keyEquals(k, escaped, key) {
			value, ok = obj[start:end], true
			return false
		}
		return true
	})
	return value, ok, err
}

// SetMember returns a copy of obj with the top-level member key set to the raw JSON value;
// every other member keeps its bytes and place. An absent member is added at the end.
func SetMember(obj []byte, key string, value []byte) ([]byte, error) {
	vs, ve := -1, -1
	last := -1 // offset just after the last member's value
	err := eachMember(obj, func(k []byte, escaped bool, start, end int) bool {
		last = end
		if keyEquals(k, escaped, key) {
			vs, ve = start, end
			return false
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if vs >= 0 {
		out := make([]byte, 0, len(obj)-(ve-vs)+len(value))
		out = append(out, obj[:vs]...)
		out = append(out, value...)
		return append(out, obj[ve:]...), nil
	}
	closing := bytes.LastIndexByte(obj, '}')
	out := make([]byte, 0, len(obj)+len(key)+len(value)+4)
	if last < 0 {
		out = append(out, obj[:closing]...)
	} else {
		out = append(out, obj[:last]...)
		out = append(out, ',')
	}
	out = AppendString(out, key)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, obj[closing:]...), nil
}

// DeleteMember returns a copy of obj without its top-level member key; every other member
// keeps its bytes and place. obj is returned as it is when it has no such member.
func DeleteMember(obj []byte, key string) ([]byte, error) {
	from, to, prevEnd := -1, -1, -1
	err := eachMember(obj, func(k []byte, escaped bool, start, end int) bool {
		if !keyEquals(k, escaped, key) {
			prevEnd = end
			return true
		}
		if prevEnd >= 0 {
			// From the end of the member before (its comma included) to this value's end.
			from, to = prevEnd, end
			return false
		}
		// The first member: from after the brace to after its comma, if one follows.
		from, to = bytes.IndexByte(obj, '{')+1, end
		if i := skipSpace(obj, end); i < len(obj) && obj[i] == ',' {
			to = i + 1
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	if from < 0 {
		return obj, nil
	}
	out := make([]byte, 0, len(obj)-(to-from))
	out = append(out, obj[:from]...)
	return append(out, obj[to:]...), nil
}

// DeleteMembers returns a copy of obj without its top-level members named by keys, every
// one of them where a key is given more than once; every other member keeps its bytes and
// order (the whitespace between them may not be kept). It walks obj once. obj is returned as
// it is when it has none of them.
func DeleteMembers(obj []byte, keys ...string) ([]byte, error) {
	var out []byte
	prevEnd := -1 // the end of the member before, while none is deleted
	err := eachMemberAt(obj, func(keyStart int, k []byte, escaped bool, _, end int) bool {
		drop := slices.ContainsFunc(keys, func(key string) bool { return keyEquals(k, escaped, key) })
		switch {
		case out == nil && !drop:
			prevEnd = end
		case out == nil:
			// The first deleted: every member before it is kept as it is.
			out = append(make([]byte, 0, len(obj)), '{')
			if prevEnd >= 0 {
				open := bytes.IndexByte(obj, '{')
				out = append(out, bytes.TrimLeft(obj[open+1:prevEnd], " \t\r\n")...)
			}
		case !drop:
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, obj[keyStart:end]...)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return obj, nil
	}
	return append(out, '}'), nil
}

// EachMember calls f with the name and raw value of every top-level member of the JSON
// object obj, in order, until f returns false. A name with escapes is given unescaped; f must
// not keep name beyond its call. obj must be valid JSON. Only a name with escapes costs an
// allocation.
func EachMember(obj []byte, f func(name, value []byte) bool) error {
	return eachMember(obj, func(k []byte, escaped bool, start, end int) bool {
		if escaped {
			var s string
			quoted := make([]byte, 0, len(k)+2)
			quoted = append(append(append(quoted, '"'), k...), '"')
			if json.Unmarshal(quoted, &s) == nil {
				k = []byte(s)
			}
		}
		return f(k, obj[start:end])
	})
}

// StringMember returns the top-level member key of obj as a Go string; ok is false when it is
// absent or not a string.
func StringMember(obj []byte, key string) (s string, ok bool, err error) {
	raw, found, err := Member(obj, key)
	if err != nil || !found || len(raw) == 0 || raw[0] != '"' {
		return "", false, err
	}
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), true, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, err
	}
	return s, true, nil
}

func keyEquals(k []byte, escaped bool, key string) bool {
	if !escaped {
		return string(k) == key
	}
	var s string
	quoted := make([]byte, 0, len(k)+2)
	quoted = append(append(append(quoted, '"'), k...), '"')
	return json.Unmarshal(quoted, &s) == nil && s == key
}

// eachMember calls f for every top-level member of the object obj with its key (between the
// quotes, still escaped when escaped is set) and the span of its value, until f returns
// false. obj must be valid JSON.
func eachMember(obj []byte, f func(key []byte, escaped bool, start, end int) bool) error {
	return eachMemberAt(obj, func(_ int, key []byte, escaped bool, start, end int) bool {
		return f(key, escaped, start, end)
	})
}

// eachMemberAt is eachMember that also gives f the offset of the member's opening quote.
func eachMemberAt(obj []byte, f func(keyStart int, key []byte, escaped bool, start, end int) bool) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errNotObject
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return fmt.Errorf("%w: expected a member name at offset %d", errNotObject, i)
		}
		keyStart := i
		ke, escaped, err := skipString(obj, i)
		if err != nil {
			return err
		}
		key := obj[i+1 : ke-1]
		i = skipSpace(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return fmt.Errorf("%w: expected ':' at offset %d", errNotObject, i)
		}
		start := skipSpace(obj, i+1)
		end, err := skipValue(obj, start)
		if err != nil {
			return err
		}
		if !f(keyStart, key, escaped, start, end) {
			return nil
		}
		i = skipSpace(obj, end)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
			continue
		}
		if i < len(obj) && obj[i] == '}' {
			return nil
		}
		return fmt.Errorf("%w: expected ',' or '}' at offset %d", errNotObject, i)
	}
	return fmt.Errorf("%w: unexpected end", errNotObject)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool, error) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, nil
		}
	}
	return 0, false, fmt.Errorf("%w: unterminated string", errNotObject)
}

// skipValue returns the offset just after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: missing value", errNotObject)
	}
	switch b[i] {
	case '"':
		end, _, err := skipString(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("%w: unterminated value", errNotObject)
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("%w: missing value at offset %d", errNotObject, i)
	}
	return j, nil
}

package policy

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// This file resolves JSON pointers (RFC 6901) in raw JSON without decoding it: a rule's
// argument matchers run on every tools/call they reach, and decoding the arguments into
// values would allocate for each.
//
// The scanner assumes valid JSON: callers check the document with json.Valid first.

// pointer is a compiled JSON pointer.
type pointer struct {
	text   string
	tokens []token
}

// token is one reference token of a pointer, unescaped (~1 is /, ~0 is ~).
type token struct {
	name string
	// index is the token as an array index, or -1 when it is not one (RFC 6901 §4: digits
	// without a leading zero; "-", the element after the last, is never present).
	index int
}

// compilePointer parses text, a JSON pointer: "" (the whole document) or "/"-separated
// reference tokens.
func compilePointer(text string) (pointer, error) {
	p := pointer{text: text}
	if text == "" {
		return p, nil
	}
	if text[0] != '/' {
		return p, errors.New("a JSON pointer starts with /")
	}
	for _, raw := range strings.Split(text[1:], "/") {
		name, err := unescapeToken(raw)
		if err != nil {
			return p, err
		}
		p.tokens = append(p.tokens, token{name: name, index: arrayIndex(name)})
	}
	return p, nil
}

func unescapeToken(raw string) (string, error) {
	if !strings.Contains(raw, "~") {
		return raw, nil
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] != '~' {
			b.WriteByte(raw[i])
			continue
		}
		if i+1 == len(raw) || raw[i+1] != '0' && raw[i+1] != '1' {
			return "", errors.New("~ in a JSON pointer is written ~0, and / is written ~1")
		}
		i++
		if raw[i] == '0' {
			b.WriteByte('~')
		} else {
			b.WriteByte('/')
		}
	}
	return b.String(), nil
}

// arrayIndex returns name as an array index, or -1.
func arrayIndex(name string) int {
	if name == "" || len(name) > 1 && name[0] == '0' {
		return -1
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return -1
		}
	}
	n, err := strconv.Atoi(name)
	if err != nil {
		return -1
	}
	return n
}

// found says what a pointer found in a document.
type found uint8

const (
	missing   found = iota
	present         // one value
	ambiguous       // with fold, two members whose names differ in case only
)

// resolve returns the raw value p refers to in doc, a valid JSON document, and whether there
// is one. An object with a key twice resolves to its last value, as encoding/json and most
// other decoders do, so that a rule sees what the upstream will most likely see.
func (p *pointer) resolve(doc []byte) ([]byte, bool) {
	start, end, f := p.span(doc, false)
	return doc[start:end], f == present
}

// span returns where the value p refers to lies in doc, a valid JSON document: doc[start:end],
// when f is present. With fold, reference tokens match member names case-insensitively (as
// encoding/json matches struct fields); an object holding two members that the same token
// matches, which such a decoder may take either of, is ambiguous.
func (p *pointer) span(doc []byte, fold bool) (start, end int, f found) {
	start = skipSpace(doc, 0)
	end = valueEnd(doc, start)
	for i := range p.tokens {
		s, e, f := child(doc[start:end], &p.tokens[i], fold)
		if f != present {
			return 0, 0, f
		}
		start, end = start+s, start+e
	}
	return start, end, present
}

// child returns where, in v (an object or array without surrounding space), the member t
// names lies.
func child(v []byte, t *token, fold bool) (start, end int, f found) {
	switch v[0] {
	case '{':
		i := skipSpace(v, 1)
		for v[i] != '}' {
			keyEnd := stringEnd(v, i)
			key := v[i+1 : keyEnd-1]
			i = skipSpace(v, keyEnd) + 1 // past ':'
			i = skipSpace(v, i)
			e := valueEnd(v, i)
			switch {
			case keyEquals(key, t.name):
				if fold && f == present {
					return 0, 0, ambiguous
				}
				start, end, f = i, e, present
			case fold && keyFolds(key, t.name):
				if f == present {
					return 0, 0, ambiguous
				}
				start, end, f = i, e, present
			}
			i = skipSpace(v, e)
			if v[i] == ',' {
				i = skipSpace(v, i+1)
			}
		}
		return start, end, f
	case '[':
		if t.index < 0 {
			return 0, 0, missing
		}
		i := skipSpace(v, 1)
		for n := 0; v[i] != ']'; n++ {
			e := valueEnd(v, i)
			if n == t.index {
				return i, e, present
			}
			i = skipSpace(v, e)
			if v[i] == ',' {
				i = skipSpace(v, i+1)
			}
		}
	}
	return 0, 0, missing
}

// keyFolds reports whether key, the inside of a JSON string, decodes to name under Unicode
// simple case folding, as encoding/json compares a member's name with a field's.
func keyFolds(key []byte, name string) bool {
	if plain(key) {
		return strings.EqualFold(string(key), name)
	}
	s, ok := decodeString(key)
	return ok && strings.EqualFold(s, name)
}

// keyEquals reports whether key, the inside of a JSON string, decodes to name.
func keyEquals(key []byte, name string) bool {
	if plain(key) {
		return string(key) == name
	}
	s, ok := decodeString(key)
	return ok && s == name
}

// decodeString decodes the inside of a JSON string that has escapes.
func decodeString(inside []byte) (string, bool) {
	quoted := make([]byte, 0, len(inside)+2)
	quoted = append(append(append(quoted, '"'), inside...), '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return "", false
	}
	return s, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string that starts (with its quote) at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the index after the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// compactEquals reports whether v, a valid JSON value, is want once the space between its
// tokens is removed (as json.Compact would).
func compactEquals(v []byte, want string) bool {
	j := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			end := stringEnd(v, i)
			s := v[i:end]
			if len(want)-j < len(s) || string(s) != want[j:j+len(s)] {
				return false
			}
			j += len(s)
			i = end - 1
			continue
		}
		if j == len(want) || want[j] != c {
			return false
		}
		j++
	}
	return j == len(want)
}

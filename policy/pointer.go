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
	// each: the token is *, which reads every element of an array (an extension of RFC
	// 6901, where * would name a member "*"; such a member cannot be named).
	each bool
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
		p.tokens = append(p.tokens, token{name: name, index: arrayIndex(name), each: raw == "*"})
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

// names says how a pointer's reference tokens match an object's member names.
type names uint8

const (
	// exactNames: a token names the member of its name only; a member whose name differs
	// from it only in case is another member.
	exactNames names = iota
	// strictNames: as exactNames, but an object that gives, instead of the member a token
	// names, one member whose name differs from it only in case is ambiguous (caseOnly): a
	// decoder that matches names case-insensitively reads that member as the one named.
	strictNames
	// foldNames: a token names the member whose name is its in any case.
	foldNames
)

// found says what a pointer found in a document.
type found uint8

const (
	missing found = iota
	present       // one value
	// notArray: a * token met a value that is not an array.
	notArray
	// repeated: an object gives the member a token names twice, under the same name.
	repeated
	// caseVariant: an object gives members whose names differ from a token's only in case
	// (two or more), which a decoder that matches names case-insensitively (Go's
	// encoding/json) takes one of, the last.
	caseVariant
	// caseOnly: with strictNames, an object gives no member of a token's name, but one whose
	// name differs from it only in case, which such a decoder takes as the member.
	caseOnly
)

// walk calls fn for what p reaches in doc, a valid JSON document, in document order: a value
// (found present, with its span), or where the pointer cannot go on, missing or notArray (with
// the span of the value where it stopped, and the index of the token that could not go on). A * token goes on into every element of an array
// in turn; an array without elements calls fn for nothing. walk returns repeated or
// caseVariant at the first object on the way that gives a member twice (having called fn for
// the elements before it), or caseOnly (with strictNames) at the first that gives it only
// in a name that differs in case, and the index of the token that names that member;
// present otherwise. mode says how tokens match member names.
func (p *pointer) walk(doc []byte, mode names, fn func(start, end int, f found, at int)) (found, int) {
	start := skipSpace(doc, 0)
	return p.walkFrom(doc, start, valueEnd(doc, start), 0, mode, fn)
}

// walkFrom walks the tokens from i on, from the value doc[start:end].
func (p *pointer) walkFrom(doc []byte, start, end, i int, mode names, fn func(start, end int, f found, at int)) (found, int) {
	for ; i < len(p.tokens); i++ {
		t := &p.tokens[i]
		if t.each {
			if doc[start] != '[' {
				fn(start, end, notArray, i)
				return present, 0
			}
			j := skipSpace(doc, start+1)
			for doc[j] != ']' {
				e := valueEnd(doc, j)
				if f, at := p.walkFrom(doc, j, e, i+1, mode, fn); f != present {
					return f, at
				}
				j = skipSpace(doc, e)
				if doc[j] == ',' {
					j = skipSpace(doc, j+1)
				}
			}
			return present, 0
		}
		s, e, f := child(doc[start:end], t, mode)
		switch f {
		case present:
			start, end = start+s, start+e
		case missing:
			fn(start, end, missing, i)
			return present, 0
		default:
			return f, i
		}
	}
	fn(start, end, present, len(p.tokens))
	return present, 0
}

// prefix returns the pointer's text up to and including token i, as written; "" when i is
// -1.
func (p *pointer) prefix(i int) string {
	rest := p.text
	for n := 0; n <= i; n++ {
		next := strings.IndexByte(rest[1:], '/')
		if next < 0 {
			return p.text
		}
		rest = rest[next+1:]
	}
	return p.text[:len(p.text)-len(rest)]
}

// child returns where, in v (an object or array without surrounding space), the member t
// names lies. In an object, the member whose name is t's, or with foldNames the one whose
// name is t's in any case; repeated or caseVariant when the object has more than one member
// whose name is t's in any case (whatever the mode: a decoder that folds case would take
// one); with strictNames, caseOnly when its one such member's name is not t's exactly.
func child(v []byte, t *token, mode names) (start, end int, f found) {
	switch v[0] {
	case '{':
		exact, folded := 0, 0
		i := skipSpace(v, 1)
		for v[i] != '}' {
			keyEnd := stringEnd(v, i)
			key := v[i+1 : keyEnd-1]
			i = skipSpace(v, keyEnd) + 1 // past ':'
			i = skipSpace(v, i)
			e := valueEnd(v, i)
			switch isExact, isFolded := keyMatch(key, t.name); {
			case isExact:
				exact++
				start, end = i, e
			case isFolded:
				folded++
				if mode == foldNames {
					start, end = i, e
				}
			}
			i = skipSpace(v, e)
			if v[i] == ',' {
				i = skipSpace(v, i+1)
			}
		}
		switch {
		case exact+folded > 1 && folded == 0:
			return 0, 0, repeated
		case exact+folded > 1:
			return 0, 0, caseVariant
		case exact == 1 || mode == foldNames && folded == 1:
			return start, end, present
		case mode == strictNames && folded == 1:
			return 0, 0, caseOnly
		}
		return 0, 0, missing
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

// keyMatch reports whether key, the inside of a JSON string, decodes to name (exact), or to
// name under Unicode simple case folding but not exactly (folded), as encoding/json compares
// a member's name with a field's.
func keyMatch(key []byte, name string) (exact, folded bool) {
	if plain(key) {
		if string(key) == name {
			return true, false
		}
		return false, strings.EqualFold(string(key), name)
	}
	s, ok := decodeString(key)
	if !ok {
		return false, false
	}
	if s == name {
		return true, false
	}
	return false, strings.EqualFold(s, name)
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

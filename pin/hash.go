package pin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"
)

// fields are the members of a tool definition that count, in the order Diff lists them:
// what a client reads of a tool to decide whether and how to call it. The others (_meta,
// icons, execution, …) may change freely.
var fields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations"}

// counts reports whether the member name of a tool definition is one of fields.
func counts(name string) bool { return slices.Contains(fields, name) }

// Hash returns the hash of the tool definition def, one tool object as an upstream lists it
// in tools/list: "sha256:" and the lowercase hex SHA-256 of Definition(def).
//
// Member order and insignificant space do not change it; a change to any of its name, title, description, inputSchema,
// outputSchema or annotations does, and
// so does a change to how a number is written: numbers are kept as the upstream wrote them,
// so 1 and 1.0 (or 100 and 1e2) hash differently. An upstream that rewrites a number has
// changed the text clients read, and the operator is asked, rather than this package
// deciding which rewrites are harmless.
//
// It fails, as Definition does, when def is not a JSON object.
func Hash(def json.RawMessage) (string, error) {
	d, err := Definition(def)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(d)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Definition returns the part of the tool definition def that Hash hashes, in canonical
// JSON: an object of only those of the members name, title, description, inputSchema,
// outputSchema and annotations that def has, its members (at every depth) sorted
// by the bytes of their names, without insignificant space, strings escaped as RFC 8785
// does (only '"', '\\' and control characters), and numbers as written. It is the form the
// stores keep and Diff compares.
//
// It fails when def is not valid JSON or not an object, and when one of those members appears twice
// in def or a member name appears twice in an object within one: parsers disagree
// on which of two duplicates counts, so no hash could stand for what a client reads.
// Duplicates elsewhere (within _meta, say) do not matter.
func Definition(def json.RawMessage) (json.RawMessage, error) {
	members, err := parseDefinition(def)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, name)
		b.WriteByte(':')
		b.Write(members[name])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// parseDefinition returns the members of def that count, each in canonical JSON.
func parseDefinition(def json.RawMessage) (map[string][]byte, error) {
	if !json.Valid(def) {
		return nil, errors.New("tool definition: not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(def))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("tool definition: %w", err)
	}
	if tok != json.Delim('{') {
		return nil, errors.New("tool definition: not a JSON object")
	}
	members := map[string][]byte{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("tool definition: %w", err)
		}
		name, _ := tok.(string)
		if !counts(name) {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("tool definition: %w", err)
			}
			continue
		}
		if _, dup := members[name]; dup {
			return nil, fmt.Errorf("tool definition: member %q appears twice", name)
		}
		v, err := parseValue(dec)
		if err != nil {
			return nil, fmt.Errorf("tool definition: %s: %w", name, err)
		}
		var b bytes.Buffer
		writeValue(&b, v)
		members[name] = b.Bytes()
	}
	return members, nil
}

// parseValue reads the next JSON value of dec (which uses json.Number) as a tree of
// map[string]any, []any, string, json.Number, bool and nil. It fails on a member name that
// appears twice in one object.
func parseValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name, _ := tok.(string)
			if _, dup := obj[name]; dup {
				return nil, fmt.Errorf("member %q appears twice in one object", name)
			}
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			obj[name] = v
		}
		_, err := dec.Token() // '}'
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token() // ']'
		return arr, err
	}
	return tok, nil
}

// writeValue writes v, a tree of parseValue, to b in canonical JSON.
func writeValue(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.Sort(names)
		b.WriteByte('{')
		for i, name := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, name)
			b.WriteByte(':')
			writeValue(b, v[name])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	case string:
		writeString(b, v)
	case json.Number:
		b.WriteString(string(v))
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	default:
		panic(fmt.Sprintf("pin: writeValue of %T", v)) // parseValue returns no other type
	}
}

// writeString writes s to b as a JSON string, escaped as RFC 8785 (section 3.2.2.2) does:
// '"' and '\\', and the control characters below U+0020, as \b, \t, \n, \f, \r or \u00xx;
// everything else as it is. s is valid UTF-8: the decoder replaced invalid bytes with
// U+FFFD.
func writeString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf || (c >= 0x20 && c != '"' && c != '\\') {
			j := i + 1
			for j < len(s) && (s[j] >= utf8.RuneSelf || (s[j] >= 0x20 && s[j] != '"' && s[j] != '\\')) {
				j++
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
		i++
	}
	b.WriteByte('"')
}

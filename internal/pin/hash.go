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

// The versions of what a hash covers. A pin records the Scheme it was hashed with, so that
// a newer version (or other _meta keys) can re-pin a definition that did not change, rather
// than take it for changed.
const (
	// Version1 covers name, title, description, inputSchema, outputSchema and annotations.
	// Pins recorded before versions existed are of this version.
	Version1 = 1
	// Version2 covers Version1's members, icons and execution (what a client shows of a
	// tool and how it runs it), and the _meta keys the Scheme names.
	Version2 = 2
	// CurrentVersion is the version new pins are hashed with.
	CurrentVersion = Version2
)

// versionFields are, by version, the members of a tool definition that count, in the order
// Diff lists them; the _meta keys a Scheme names come after them.
var versionFields = map[int][]string{
	Version1: {"name", "title", "description", "inputSchema", "outputSchema", "annotations"},
	Version2: {"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "execution"},
}

// metaMember is the member whose named keys a Scheme of Version2 or later pins.
const metaMember = "_meta"

// Scheme is how a tool definition is hashed: which version's members count, and which keys
// of its _meta. It is plain data; the zero Scheme is Version1 (what a pin recorded before
// versions existed was hashed with).
type Scheme struct {
	// Version is the hash version (Version1, Version2); 0 stands for Version1.
	Version int `json:"version"`
	// Meta are the keys of the definition's _meta that count, sorted, without duplicates
	// (NewScheme); Version1 ignores them.
	Meta []string `json:"meta,omitempty"`
}

// NewScheme returns the scheme of CurrentVersion that pins the _meta keys meta too (in any
// order; duplicates and empty keys are dropped).
func NewScheme(meta []string) Scheme {
	var keys []string
	for _, k := range meta {
		if k != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return Scheme{Version: CurrentVersion, Meta: slices.Compact(keys)}
}

// version returns s's version, Version1 for 0.
func (s Scheme) version() int {
	if s.Version == 0 {
		return Version1
	}
	return s.Version
}

// meta returns the _meta keys that count in s: none before Version2.
func (s Scheme) meta() []string {
	if s.version() < Version2 {
		return nil
	}
	return s.Meta
}

// Equal reports whether s and o hash alike: the same version and _meta keys.
func (s Scheme) Equal(o Scheme) bool {
	return s.version() == o.version() && slices.Equal(s.meta(), o.meta())
}

// Covers reports whether s counts everything o does: a version at least o's, and every
// _meta key o counts. A pin hashed with o is re-pinned with s silently only when s covers
// o: a scheme that counts less would drop from the pin what an operator relies on.
func (s Scheme) Covers(o Scheme) bool {
	if s.version() < o.version() {
		return false
	}
	for _, k := range o.meta() {
		if !slices.Contains(s.meta(), k) {
			return false
		}
	}
	return true
}

// join returns the scheme that counts what s and o count: the later version, and the _meta
// keys of both.
func (s Scheme) join(o Scheme) Scheme {
	j := Scheme{Version: max(s.version(), o.version())}
	if j.Version >= Version2 {
		keys := append(slices.Clone(s.meta()), o.meta()...)
		slices.Sort(keys)
		j.Meta = slices.Compact(keys)
	}
	return j
}

// holds reports whether hash h, computed with s, is still that of the tool definition def.
func (s Scheme) holds(h string, def json.RawMessage) bool {
	got, err := s.Hash(def)
	return err == nil && got == h
}

// String names s for logs and errors: "v2", or "v2+_meta[a,b]".
func (s Scheme) String() string {
	if m := s.meta(); len(m) > 0 {
		return fmt.Sprintf("v%d+_meta%v", s.version(), m)
	}
	return fmt.Sprintf("v%d", s.version())
}

// fields returns the members that count in s, or an error for a version this package does
// not know (a pin written by a newer gateway).
func (s Scheme) fields() ([]string, error) {
	f, ok := versionFields[s.version()]
	if !ok {
		return nil, fmt.Errorf("unknown hash version %d", s.version())
	}
	return f, nil
}

// Hash returns the hash of the tool definition def, one tool object as an upstream lists it
// in tools/list, with the scheme of CurrentVersion that pins no _meta key (NewScheme(nil)):
// "sha256:" and the lowercase hex SHA-256 of Definition(def). See Scheme.Hash.
func Hash(def json.RawMessage) (string, error) { return NewScheme(nil).Hash(def) }

// Definition returns the part of the tool definition def that Hash hashes. See
// Scheme.Definition.
func Definition(def json.RawMessage) (json.RawMessage, error) {
	return NewScheme(nil).Definition(def)
}

// Hash returns the hash of the tool definition def with scheme s: "sha256:" and the
// lowercase hex SHA-256 of s.Definition(def).
//
// Member order and insignificant space do not change it; a change to any member that counts
// in s does (Version2: name, title, description, inputSchema, outputSchema, annotations,
// icons, execution, and the named _meta keys), and so does a change to how a number is
// written: numbers are kept as the upstream wrote them, so 1 and 1.0 (or 100 and 1e2) hash
// differently. An upstream that rewrites a number has changed the text clients read, and
// the operator is asked, rather than this package deciding which rewrites are harmless.
//
// It fails, as Definition does, when def is not a JSON object.
func (s Scheme) Hash(def json.RawMessage) (string, error) {
	d, err := s.Definition(def)
	if err != nil {
		return "", err
	}
	return hashOf(d), nil
}

// hashOf returns the hash of a definition in Definition's form.
func hashOf(d json.RawMessage) string {
	sum := sha256.Sum256(d)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Definition returns the part of the tool definition def that s.Hash hashes, in canonical
// JSON: an object of only those of the members that count in s that def has (of its _meta,
// only the named keys, and no _meta when it has none of them), its members (at every depth)
// sorted by the bytes of their names, without insignificant space, strings escaped as RFC
// 8785 does (only '"', '\\' and control characters), and numbers as written. It is the form
// the stores keep and Diff compares.
//
// It fails when def is not valid JSON or not an object, when one of the members that count
// appears twice in def (or a named _meta key twice in its _meta), or a member name appears
// twice in an object within one: parsers disagree on which of two duplicates counts, so no
// hash could stand for what a client reads. Duplicates elsewhere (within _meta's other
// keys, say) do not matter. It fails too for a version this package does not know.
func (s Scheme) Definition(def json.RawMessage) (json.RawMessage, error) {
	members, err := s.parseDefinition(def)
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

// parseDefinition returns the members of def that count in s, each in canonical JSON; the
// _meta member, when s names keys of it, holds only those keys (and is left out when def's
// _meta has none of them).
func (s Scheme) parseDefinition(def json.RawMessage) (map[string][]byte, error) {
	fields, err := s.fields()
	if err != nil {
		return nil, fmt.Errorf("tool definition: %w", err)
	}
	meta := s.meta()
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
	sawMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("tool definition: %w", err)
		}
		name, _ := tok.(string)
		switch {
		case name == metaMember && len(meta) > 0:
			if sawMeta {
				return nil, fmt.Errorf("tool definition: member %q appears twice", name)
			}
			sawMeta = true
			kept, err := parseMeta(dec, meta)
			if err != nil {
				return nil, fmt.Errorf("tool definition: %s: %w", name, err)
			}
			if len(kept) > 0 {
				var b bytes.Buffer
				writeValue(&b, kept)
				members[name] = b.Bytes()
			}
			continue
		case !slices.Contains(fields, name):
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

// parseMeta reads the next value of dec, a definition's _meta, and returns its keys named
// in keys, parsed as parseValue does; none when it is not an object. It fails on a named key
// that appears twice.
func parseMeta(dec *json.Decoder, keys []string) (map[string]any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		if d, ok := tok.(json.Delim); ok && d == '[' {
			// Not an object: skip the array whole.
			for dec.More() {
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token() // ']'
			return nil, err
		}
		return nil, nil
	}
	kept := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if !slices.Contains(keys, name) {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
			continue
		}
		if _, dup := kept[name]; dup {
			return nil, fmt.Errorf("key %q appears twice", name)
		}
		v, err := parseValue(dec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		kept[name] = v
	}
	_, err = dec.Token() // '}'
	return kept, err
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

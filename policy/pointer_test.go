package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/protocol"
)

func TestPointerResolve(t *testing.T) {
	const doc = `{
		"path": "/etc/passwd",
		"n": 1.50,
		"o": { "a" : [ 1, {"b": true}, "x" ] , "e": {} },
		"a/b": 1, "m~n": 2, "": 3,
		"\u0070q": "escaped key",
		"dup": 1, "dup": 2,
		"case": 1, "CASE": 2, "Only": 3,
		"s": "a\"]}b"
	}`
	tests := []struct {
		ptr  string
		want string // "" for none
		f    found
	}{
		{"", "", missing}, // the whole document: checked below
		{"/path", `"/etc/passwd"`, present},
		{"/n", `1.50`, present},
		{"/o/a/0", `1`, present},
		{"/o/a/1/b", `true`, present},
		{"/o/a/2", `"x"`, present},
		{"/o/a/3", "", missing},
		{"/o/a/-", "", missing},
		{"/o/a/01", "", missing},
		{"/o/a/x", "", missing},
		{"/o/e", `{}`, present},
		{"/o/e/x", "", missing},
		{"/a~1b", `1`, present},
		{"/m~0n", `2`, present},
		{"/", `3`, present},
		{"/pq", `"escaped key"`, present},
		{"/dup", "", repeated},
		{"/case", "", caseVariant},
		{"/CASE", "", caseVariant},
		{"/only", "", missing},
		{"/Only", `3`, present},
		{"/s", `"a\"]}b"`, present},
		{"/path/x", "", missing},
		{"/missing", "", missing},
	}
	for _, tt := range tests {
		p, err := compilePointer(tt.ptr)
		if err != nil {
			t.Fatalf("compilePointer(%q): %v", tt.ptr, err)
		}
		got, f := p.resolve([]byte(doc))
		if tt.ptr == "" {
			if f != present || !json.Valid(got) || got[0] != '{' || got[len(got)-1] != '}' {
				t.Errorf("resolve(%q) = %s, %v; want the whole document", tt.ptr, got, f)
			}
			continue
		}
		if f != tt.f || string(got) != tt.want {
			t.Errorf("resolve(%q) = %s, %v; want %s, %v", tt.ptr, got, f, tt.want, tt.f)
		}
	}
}

func TestCompilePointerErrors(t *testing.T) {
	for _, ptr := range []string{"path", "/a~", "/a~2"} {
		if _, err := compilePointer(ptr); err == nil {
			t.Errorf("compilePointer(%q): no error", ptr)
		}
	}
}

func TestCompactEquals(t *testing.T) {
	tests := []struct {
		v, want string
		eq      bool
	}{
		{`1`, `1`, true},
		{`1.0`, `1`, false},
		{`true`, `true`, true},
		{`null`, `null`, true},
		{`[ 1 , 2 ]`, `[1,2]`, true},
		{`{ "a" : "x y" }`, `{"a":"x y"}`, true},
		{`{ "a" : "x y" }`, `{"a":"xy"}`, false},
		{`[1,2]`, `[1,2,3]`, false},
		{`[1,2,3]`, `[1,2]`, false},
		{`"a"`, `"a`, false},
	}
	for _, tt := range tests {
		if got := compactEquals([]byte(tt.v), tt.want); got != tt.eq {
			t.Errorf("compactEquals(%s, %s) = %v", tt.v, tt.want, got)
		}
	}
}

// FuzzPointerResolve checks the scanner against encoding/json: the value a pointer resolves
// to is the one decoding the document finds there; when it finds a member on the way given
// more than once, the document does give one twice, or in names that differ only in case.
func FuzzPointerResolve(f *testing.F) {
	f.Add(`{"a":{"b":[1,"x",{"c":null}]}}`, "/a/b/2/c")
	f.Add(`{"a":1,"a":2}`, "/a")
	f.Add(`{"a":{"b":1},"A":{"b":2}}`, "/a/b")
	f.Add(`{"\u0061":"\"}"}`, "/a")
	f.Add(` [ 0 , [ 1 ] ] `, "/1/0")
	f.Fuzz(func(t *testing.T, doc, ptr string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		p, err := compilePointer(ptr)
		if err != nil || p.hasEach() {
			return
		}
		got, f := p.resolve([]byte(doc))
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		if f.ambiguous() {
			if dup, _ := protocol.DuplicateMember([]byte(doc)); dup == "" && !caseVariants(v, p.tokens) {
				t.Fatalf("resolve(%q) in %s: %v, but no member on the way is given twice", ptr, doc, f)
			}
			return
		}
		ok := f == present
		want, wantOK := reference(v, p.tokens)
		if ok != wantOK {
			t.Fatalf("resolve(%q) in %s: found %v, encoding/json found %v", ptr, doc, ok, wantOK)
		}
		if !ok {
			return
		}
		var gotV any
		if err := json.Unmarshal(got, &gotV); err != nil {
			t.Fatalf("resolve(%q) in %s = %s: %v", ptr, doc, got, err)
		}
		if !reflect.DeepEqual(gotV, want) {
			t.Fatalf("resolve(%q) in %s = %s; encoding/json finds %v", ptr, doc, got, want)
		}
	})
}

// caseVariants reports whether an object on the way tokens lead in v has two members whose
// names differ from the token's only in case.
func caseVariants(v any, tokens []token) bool {
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			n := 0
			for k := range x {
				if strings.EqualFold(k, t.name) {
					n++
				}
			}
			if n > 1 {
				return true
			}
			var ok bool
			if v, ok = x[t.name]; !ok {
				return false
			}
		case []any:
			if t.index < 0 || t.index >= len(x) {
				return false
			}
			v = x[t.index]
		default:
			return false
		}
	}
	return false
}

func reference(v any, tokens []token) (any, bool) {
	for _, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[t.name]; !ok {
				return nil, false
			}
		case []any:
			if t.index < 0 || t.index >= len(x) {
				return nil, false
			}
			v = x[t.index]
		default:
			return nil, false
		}
	}
	return v, true
}

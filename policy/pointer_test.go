package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestPointerWalk reads single values through walk, in each way of matching member names.
func TestPointerWalk(t *testing.T) {
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
	all := []names{exactNames, strictNames, foldNames}
	tests := []struct {
		ptr   string
		modes []names
		want  string // "" for none
		f     found
	}{
		{"/path", all, `"/etc/passwd"`, present},
		{"/n", all, `1.50`, present},
		{"/o/a/0", all, `1`, present},
		{"/o/a/1/b", all, `true`, present},
		{"/o/a/2", all, `"x"`, present},
		{"/o/a/3", all, "", missing},
		{"/o/a/-", all, "", missing},
		{"/o/a/01", all, "", missing},
		{"/o/a/x", all, "", missing},
		{"/o/e", all, `{}`, present},
		{"/o/e/x", all, "", missing},
		{"/a~1b", all, `1`, present},
		{"/m~0n", all, `2`, present},
		{"/", all, `3`, present},
		{"/pq", all, `"escaped key"`, present},
		{"/dup", all, "", repeated},
		{"/case", all, "", caseVariant},
		{"/CASE", all, "", caseVariant},
		{"/only", []names{exactNames}, "", missing},
		{"/only", []names{strictNames}, "", caseOnly},
		{"/only", []names{foldNames}, `3`, present},
		{"/O/a/0", []names{exactNames}, "", missing},
		{"/O/a/0", []names{strictNames}, "", caseOnly},
		{"/O/a/0", []names{foldNames}, `1`, present},
		{"/Only", all, `3`, present},
		{"/s", all, `"a\"]}b"`, present},
		{"/path/x", all, "", missing},
		{"/missing", all, "", missing},
	}
	for _, tt := range tests {
		p, err := compilePointer(tt.ptr)
		if err != nil {
			t.Fatalf("compilePointer(%q): %v", tt.ptr, err)
		}
		for _, mode := range tt.modes {
			values, f := walkAll(&p, []byte(doc), mode)
			got := ""
			if f == present {
				if len(values) != 1 {
					t.Fatalf("walk(%q, %v) reached %d values, want one", tt.ptr, mode, len(values))
				}
				if f = values[0].f; f == present {
					got = values[0].text
				}
			}
			if f != tt.f || got != tt.want {
				t.Errorf("walk(%q, %v) = %s, %v; want %s, %v", tt.ptr, mode, got, f, tt.want, tt.f)
			}
		}
	}
	// The whole document.
	p, _ := compilePointer("")
	if values, f := walkAll(&p, []byte(doc), exactNames); f != present || len(values) != 1 || !json.Valid([]byte(values[0].text)) || values[0].text[0] != '{' {
		t.Errorf("walk(\"\") = %+v, %v; want the whole document", values, f)
	}
}

// TestPointerWalkReadsEveryElement: a * token goes on into every element of an array, in
// order, and says where the pointer cannot go on.
func TestPointerWalkReadsEveryElement(t *testing.T) {
	const doc = `{"a":[{"p":1},{"p":[2]},{"q":3},"s"],"e":[],"o":{"p":1},"d":[{"p":1},{"p":2,"P":3},{"p":4}]}`
	for _, tt := range []struct {
		ptr  string
		want []walked
		f    found
	}{
		{"/a/*/p", []walked{{"1", present}, {"[2]", present}, {`{"q":3}`, missing}, {`"s"`, missing}}, present},
		{"/a/*/p/*", []walked{{"1", notArray}, {"2", present}, {`{"q":3}`, missing}, {`"s"`, missing}}, present},
		{"/e/*", nil, present},
		{"/o/*", []walked{{`{"p":1}`, notArray}}, present},
		{"/d/*/p", []walked{{"1", present}}, caseVariant},
	} {
		p, err := compilePointer(tt.ptr)
		if err != nil {
			t.Fatal(err)
		}
		values, f := walkAll(&p, []byte(doc), exactNames)
		if f != tt.f || !cmp.Equal(values, tt.want, cmp.AllowUnexported(walked{})) {
			t.Errorf("walk(%q) = %+v, %v; want %+v, %v", tt.ptr, values, f, tt.want, tt.f)
		}
	}
}

// walked is a value walk reached (its text), or where it stopped (f not present).
type walked struct {
	text string
	f    found
}

// walkAll returns what walk reaches of p in doc, in order, and what walk returned.
func walkAll(p *pointer, doc []byte, mode names) ([]walked, found) {
	var values []walked
	f, _ := p.walk(doc, mode, func(start, end int, f found, _ int) {
		values = append(values, walked{string(doc[start:end]), f})
	})
	return values, f
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

// FuzzPointerWalk checks the scanner against encoding/json: the values a pointer reaches
// (with * tokens, every element), and where it stops, are those decoding the document finds
// there, member names matched exactly, in any case, or exactly with a lone case variant
// stopping the walk; when walk finds a member on the way given more than once, the document
// does give one twice, or in names that differ only in case.
func FuzzPointerWalk(f *testing.F) {
	f.Add(`{"a":{"b":[1,"x",{"c":null}]}}`, "/a/b/2/c", uint8(0))
	f.Add(`{"a":1,"a":2}`, "/a", uint8(0))
	f.Add(`{"a":{"b":1},"A":{"b":2}}`, "/a/b", uint8(1))
	f.Add(`{"A":{"b":1}}`, "/a/b", uint8(1))
	f.Add(`{"A":{"b":1}}`, "/a/b", uint8(2))
	f.Add(`{"\u0061":"\"}"}`, "/a", uint8(0))
	f.Add(` [ 0 , [ 1 ] ] `, "/1/0", uint8(0))
	f.Add(`{"a":[{"b":1},{"B":2},3]}`, "/a/*/b", uint8(1))
	f.Fuzz(func(t *testing.T, doc, ptr string, m uint8) {
		if !json.Valid([]byte(doc)) {
			return
		}
		p, err := compilePointer(ptr)
		if err != nil {
			return
		}
		mode := names(m % 3)
		got, f := walkAll(&p, []byte(doc), mode)
		var v any
		if err := json.Unmarshal([]byte(doc), &v); err != nil {
			t.Fatal(err)
		}
		var want []refWalked
		stop := reference(v, p.tokens, mode, &want)
		if f == repeated || f == caseVariant {
			if dup, _ := protocol.DuplicateMember([]byte(doc)); dup == "" && stop != caseVariant {
				t.Fatalf("walk(%q) in %s: %v, but no member on the way is given twice", ptr, doc, f)
			}
			return
		}
		if f != stop {
			t.Fatalf("walk(%q, %v) in %s stops %v, encoding/json %v", ptr, mode, doc, f, stop)
		}
		if len(got) != len(want) {
			t.Fatalf("walk(%q, %v) in %s reaches %+v; encoding/json %+v", ptr, mode, doc, got, want)
		}
		for i := range got {
			var gotV any
			if err := json.Unmarshal([]byte(got[i].text), &gotV); err != nil {
				t.Fatalf("walk(%q) in %s reaches %s: %v", ptr, doc, got[i].text, err)
			}
			if got[i].f != want[i].f || !reflect.DeepEqual(gotV, want[i].v) {
				t.Fatalf("walk(%q, %v) in %s reaches %+v; encoding/json %+v", ptr, mode, doc, got, want)
			}
		}
	})
}

// refWalked is a value reference reaches, or where it stops (f not present).
type refWalked struct {
	v any
	f found
}

// reference is walk on v, decoded by encoding/json (a repeated member is its last): it
// appends what tokens reach to out, and returns caseVariant where an object on the way has
// two members whose names differ from the token's only in case, caseOnly where (strictNames)
// it has one whose name differs in case and none of the token's name, present otherwise.
func reference(v any, tokens []token, mode names, out *[]refWalked) found {
	for i, t := range tokens {
		switch x := v.(type) {
		case map[string]any:
			if t.each {
				*out = append(*out, refWalked{v, notArray})
				return present
			}
			folded := ""
			n := 0
			for k := range x {
				if strings.EqualFold(k, t.name) {
					n++
					if k != t.name {
						folded = k
					}
				}
			}
			if n > 1 {
				return caseVariant
			}
			next, ok := x[t.name]
			switch {
			case ok:
			case folded != "" && mode == foldNames:
				next = x[folded]
			case folded != "" && mode == strictNames:
				return caseOnly
			default:
				*out = append(*out, refWalked{v, missing})
				return present
			}
			v = next
		case []any:
			if t.each {
				for _, e := range x {
					if f := reference(e, tokens[i+1:], mode, out); f != present {
						return f
					}
				}
				return present
			}
			if t.index < 0 || t.index >= len(x) {
				*out = append(*out, refWalked{v, missing})
				return present
			}
			v = x[t.index]
		default:
			f := missing
			if t.each {
				f = notArray
			}
			*out = append(*out, refWalked{v, f})
			return present
		}
	}
	*out = append(*out, refWalked{v, present})
	return present
}

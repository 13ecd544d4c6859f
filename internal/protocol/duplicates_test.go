package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestDuplicateMember(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{}`, ""},
		{`{"name":"a","arguments":{"x":1}}`, ""},
		{`{"name":"a","arguments":{"x":1},"name":"b"}`, "/name"},
		{`{"name":"a","arguments":{"x":1},"arguments":{"x":2}}`, "/arguments"},
		{`{"arguments":{"path":"/tmp","path":"/etc"}}`, "/arguments/path"},
		{`{"a":[{"k":1},{"k":1,"k":2}]}`, "/a/1/k"},
		{`{"a~b/c":{"x":1,"x":1}}`, "/a~0b~1c/x"},
		{`{"n\u0061me":"a","name":"b"}`, "/name"}, // the same name, escaped
		{`{"a":"{\"x\":1,\"x\":2}"}`, ""},         // inside a string: text, not members
		{`[{"x":1},{"x":1}]`, ""},
		{`"plain"`, ""},
		{`  { "x" : [ 1 , { "y":1 , "y" : 2 } ] } `, "/x/1/y"},
	}
	for _, tt := range tests {
		got, err := DuplicateMember([]byte(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("DuplicateMember(%s) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// FuzzDuplicateMember: a value encoding/json decodes into a map without losing a member has
// no duplicate, and one that loses a member does.
func FuzzDuplicateMember(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"a":{"b":[1,{"c":1,"c":2}]}}`, `[1,2]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !json.Valid([]byte(s)) {
			return
		}
		got, err := DuplicateMember([]byte(s))
		if err != nil {
			t.Fatalf("DuplicateMember(%s): %v", s, err)
		}
		if want := hasDuplicate(t, []byte(s)); (got != "") != want {
			t.Fatalf("DuplicateMember(%s) = %q, want a duplicate: %v", s, got, want)
		}
	})
}

// hasDuplicate decides with encoding/json's tokens whether an object of v repeats a name.
func hasDuplicate(t *testing.T, v []byte) bool {
	var walk func(raw json.RawMessage) bool
	walk = func(raw json.RawMessage) bool {
		switch {
		case len(raw) > 0 && raw[0] == '{':
			dec := json.NewDecoder(bytes.NewReader(raw))
			_, _ = dec.Token()
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					t.Fatal(err)
				}
				name := tok.(string)
				if seen[name] {
					return true
				}
				seen[name] = true
				var val json.RawMessage
				if err := dec.Decode(&val); err != nil {
					t.Fatal(err)
				}
				if walk(trimSpace(val)) {
					return true
				}
			}
		case len(raw) > 0 && raw[0] == '[':
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				if walk(trimSpace(it)) {
					return true
				}
			}
		}
		return false
	}
	return walk(trimSpace(v))
}

func trimSpace(b []byte) []byte { return bytes.TrimLeft(b, " \t\n\r") }

// BenchmarkDuplicateMember: the check every request's params pass, on a typical tools/call.
func BenchmarkDuplicateMember(b *testing.B) {
	p := []byte(`{"name":"up13__tool_042","arguments":{"text":"hello"},"_meta":{"progressToken":"p1"}}`)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = DuplicateMember(p)
	}
}

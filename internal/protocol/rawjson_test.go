package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestMember(t *testing.T) {
	tests := []struct {
		name, obj, key string
		want           string
		wantOK         bool
	}{
		{"string", `{"name":"echo","arguments":{}}`, "name", `"echo"`, true},
		{"nested object skipped", `{"a":{"name":"inner","b":[1,{"c":"}"}]},"name":"outer"}`, "name", `"outer"`, true},
		{"string with braces and escapes", `{"x":"a\"}{[","name":"n"}`, "name", `"n"`, true},
		{"number", `{"n": 12345678901234567890 }`, "n", `12345678901234567890`, true},
		{"absent", `{"a":1}`, "name", ``, false},
		{"empty object", ` { } `, "name", ``, false},
		{"escaped key", `{"n\u0061me":"x"}`, "name", `"x"`, true},
		{"whitespace", "{\n  \"name\" :\t\"x\"\n}", "name", `"x"`, true},
		{"last duplicate is not reached", `{"name":"first","name":"second"}`, "name", `"first"`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Member([]byte(tc.obj), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.wantOK || string(got) != tc.want {
				t.Errorf("Member = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if _, _, err := Member([]byte(`[1,2]`), "a"); err == nil {
		t.Error("an array is not an object")
	}
}

func TestSetMember(t *testing.T) {
	tests := []struct {
		name, obj, key, value, want string
	}{
		{"replace keeps order and bytes", `{"name":"a__echo","arguments":{"n":1e400},"_meta":{"k":"v"}}`, "name", `"echo"`, `{"name":"echo","arguments":{"n":1e400},"_meta":{"k":"v"}}`},
		{"replace last", `{"a":1,"uri":"x+file:///a"}`, "uri", `"file:///a"`, `{"a":1,"uri":"file:///a"}`},
		{"add to empty", `{}`, "name", `"n"`, `{"name":"n"}`},
		{"add after members", `{"a":1 }`, "name", `"n"`, `{"a":1,"name":"n"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetMember([]byte(tc.obj), tc.key, []byte(tc.value))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("SetMember = %s, want %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("result is not valid JSON: %s", got)
			}
		})
	}
}

func TestDeleteMember(t *testing.T) {
	tests := []struct {
		name, obj, key, want string
	}{
		{"only member", `{ "requestState":"s" }`, "requestState", `{ }`},
		{"first of two", `{"requestState":"s", "name":"a"}`, "requestState", `{ "name":"a"}`},
		{"middle keeps the rest's bytes", `{"name":"a","requestState":"s","arguments":{"n":1e400}}`, "requestState", `{"name":"a","arguments":{"n":1e400}}`},
		{"last", `{"name":"a" , "requestState":{"x":[1]}}`, "requestState", `{"name":"a"}`},
		{"escaped key", `{"a":1,"request\u0053tate":"s"}`, "requestState", `{"a":1}`},
		{"absent", `{"name":"a"}`, "requestState", `{"name":"a"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeleteMember([]byte(tc.obj), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("DeleteMember = %s, want %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("result is not valid JSON: %s", got)
			}
		})
	}
}

func TestDeleteMembers(t *testing.T) {
	keys := []string{"a", "c"}
	tests := []struct {
		name, obj, want string
	}{
		{"none of them", `{ "b":1 , "d":2 }`, `{ "b":1 , "d":2 }`},
		{"all of them", `{"a":1,"c":{"x":[1]}}`, `{}`},
		{"first", `{ "a":1, "b":2}`, `{"b":2}`},
		{"kept before and after", `{"b":"}", "c":3 ,"d":[4] , "a":5,"e":6}`, `{"b":"}","d":[4],"e":6}`},
		{"last", `{"b":1,"d":2,"c":3}`, `{"b":1,"d":2}`},
		{"twice", `{"a":1,"b":2,"a":3}`, `{"b":2}`},
		{"escaped key", `{"b":1,"\u0061":2}`, `{"b":1}`},
		{"empty", `{ }`, `{ }`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeleteMembers([]byte(tc.obj), keys...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("DeleteMembers = %s, want %s", got, tc.want)
			}
		})
	}
	if _, err := DeleteMembers([]byte(`[1]`), "a"); err == nil {
		t.Error("DeleteMembers of an array: no error")
	}
}

// FuzzEachMember checks EachMember and DeleteMembers against encoding/json on any valid
// object: the members EachMember gives, the last of a name winning, are those json.Unmarshal
// reads, and DeleteMembers leaves exactly the others.
func FuzzEachMember(f *testing.F) {
	for _, seed := range []string{`{"name":"x"}`, `{"a":[1,"}"],"name":{"b":"\"name\""}}`, `{}`, `{"name":null,"z":true,"name":2}`, `{"na\u006de":1, "b" : 2 }`} {
		f.Add(seed, "name")
	}
	f.Fuzz(func(t *testing.T, obj, key string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(obj), &want) != nil || want == nil || !utf8.ValidString(obj) || !utf8.ValidString(key) {
			return
		}
		got := map[string]json.RawMessage{}
		if err := EachMember([]byte(obj), func(name, value []byte) bool {
			got[string(name)] = value
			return true
		}); err != nil {
			t.Fatalf("EachMember(%q): %v", obj, err)
		}
		if diff := cmp.Diff(compactValues(want), compactValues(got)); diff != "" {
			t.Fatalf("EachMember(%q) (-encoding/json +got):\n%s", obj, diff)
		}
		deleted, err := DeleteMembers([]byte(obj), key)
		if err != nil {
			t.Fatalf("DeleteMembers(%q): %v", obj, err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(deleted, &after); err != nil {
			t.Fatalf("DeleteMembers(%q, %q) gave invalid JSON %q: %v", obj, key, deleted, err)
		}
		delete(want, key)
		if countKey(obj, key) <= 1 {
			// With duplicates of another name encoding/json keeps the last; so does after.
			if diff := cmp.Diff(compactValues(want), compactValues(after)); diff != "" {
				t.Fatalf("DeleteMembers(%q, %q) (-want +got):\n%s", obj, key, diff)
			}
		}
		if _, ok := after[key]; ok {
			t.Fatalf("DeleteMembers(%q, %q) = %q keeps the member", obj, key, deleted)
		}
	})
}

// FuzzMember checks Member and SetMember against encoding/json on any valid object.
func FuzzMember(f *testing.F) {
	for _, seed := range []string{`{"name":"x"}`, `{"a":[1,"}"],"name":{"b":"\"name\""}}`, `{}`, `{"name":null,"z":true}`} {
		f.Add(seed, "name")
	}
	f.Fuzz(func(t *testing.T, obj, key string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(obj), &m) != nil || m == nil {
			return
		}
		if !utf8.ValidString(key) {
			return // member names the gateway sets are its own valid strings
		}
		if countKey(obj, key) > 1 {
			return // duplicates: encoding/json keeps the last, Member the first
		}
		got, ok, err := Member([]byte(obj), key)
		if err != nil {
			t.Fatalf("Member(%q): %v", obj, err)
		}
		want, wantOK := m[key]
		if ok != wantOK || (ok && string(compact(got)) != string(compact(want))) {
			t.Fatalf("Member(%q, %q) = %q %v, encoding/json says %q %v", obj, key, got, ok, want, wantOK)
		}
		set, err := SetMember([]byte(obj), key, []byte(`"new"`))
		if err != nil {
			t.Fatalf("SetMember(%q): %v", obj, err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(set, &after); err != nil {
			t.Fatalf("SetMember(%q) gave invalid JSON %q: %v", obj, set, err)
		}
		m[key] = json.RawMessage(`"new"`)
		if diff := cmp.Diff(compactValues(m), compactValues(after)); diff != "" {
			t.Fatalf("SetMember(%q) changed other members (-want +got):\n%s", obj, diff)
		}
	})
}

func compact(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// countKey counts how often key occurs as a top-level member (decoded names).
// compactValues returns m's values compacted, for comparisons that ignore whitespace.
func compactValues(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(compact(v))
	}
	return out
}

func countKey(obj, key string) int {
	n := 0
	_ = eachMember([]byte(obj), func(k []byte, escaped bool, _, _ int) bool {
		if keyEquals(k, escaped, key) {
			n++
		}
		return true
	})
	return n
}

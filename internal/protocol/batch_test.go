package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBatch is a batch of 64 calls of 60 kB each, near the default max_body_bytes.
var benchBatch = func() []byte {
	text := strings.Repeat("x", 60000)
	entries := make([]string, 64)
	for i := range entries {
		entries[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":%q}}}`, i+1, text)
	}
	return []byte("[" + strings.Join(entries, ",") + "]")
}()

func BenchmarkBatchEntries(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBatch)))
	for b.Loop() {
		entries, err := BatchEntries(benchBatch)
		if err != nil || len(entries) != 64 {
			b.Fatal(len(entries), err)
		}
	}
}

func TestBatchEntries(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"two messages", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"a"}]`, []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","method":"a"}`}},
		{"whitespace and nesting", " [ {\"a\":[1,{\"b\":\"]\"}]} ,\n\t\"x,y\" , 3 , null ]\n", []string{`{"a":[1,{"b":"]"}]}`, `"x,y"`, `3`, `null`}},
		{"empty", `[]`, nil},
		{"empty with space", "[ \n ]", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BatchEntries([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%d entries %q, want %q", len(got), got, tc.want)
			}
			for i := range got {
				if string(got[i]) != tc.want[i] {
					t.Errorf("entry %d: %s, want %s", i, got[i], tc.want[i])
				}
			}
		})
	}
	for _, bad := range []string{`[`, `[1,]`, `{}`, `"[]"`, ``, `[1] [2]`} {
		if entries, err := BatchEntries([]byte(bad)); err == nil {
			t.Errorf("BatchEntries(%q) = %q, want an error", bad, entries)
		}
	}
	// An entry cannot grow into the next: appending to one leaves the batch intact.
	data := []byte(`[{"a":1},{"b":2}]`)
	entries, _ := BatchEntries(data)
	_ = append(entries[0], 'x')
	if string(data) != `[{"a":1},{"b":2}]` {
		t.Errorf("appending to an entry changed the batch: %s", data)
	}
}

func FuzzBatchEntries(f *testing.F) {
	for _, s := range []string{`[]`, `[1,"a",{"b":[2]},null]`, ` [ {} ] `, `[`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := BatchEntries(data)
		var want []json.RawMessage
		if json.Unmarshal(data, &want) != nil {
			if err == nil {
				t.Fatalf("BatchEntries(%q) = %q, want an error as encoding/json gives", data, entries)
			}
			return
		}
		if err != nil {
			t.Fatalf("BatchEntries(%q): %v; encoding/json reads %q", data, err, want)
		}
		if len(entries) != len(want) {
			t.Fatalf("BatchEntries(%q) = %q, encoding/json reads %q", data, entries, want)
		}
		for i := range want {
			if string(entries[i]) != string(want[i]) {
				t.Fatalf("entry %d of %q: %q, encoding/json reads %q", i, data, entries[i], want[i])
			}
		}
	})
}

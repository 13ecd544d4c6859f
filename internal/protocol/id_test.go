package protocol

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseID(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    string // the id's wire form; ignored when wantErr
		wantErr bool
	}{
		{name: "integer", raw: `7`, want: `7`},
		{name: "zero", raw: `0`, want: `0`},
		{name: "negative", raw: `-42`, want: `-42`},
		{name: "negative zero", raw: `-0`, want: `-0`},
		{name: "max int64", raw: `9223372036854775807`, want: `9223372036854775807`},
		{name: "beyond float64 precision", raw: `9007199254740993`, want: `9007199254740993`},
		{name: "beyond int64", raw: `123456789012345678901234567890`, want: `123456789012345678901234567890`},
		{name: "string", raw: `"abc"`, want: `"abc"`},
		{name: "empty string", raw: `""`, want: `""`},
		{name: "string with escapes kept as sent", raw: `"a\"b\\c\u00e9\n"`, want: `"a\"b\\c\u00e9\n"`},
		{name: "string of digits", raw: `"7"`, want: `"7"`},
		{name: "surrounding whitespace trimmed", raw: " \t7\n", want: `7`},
		{name: "empty", raw: ``, wantErr: true},
		{name: "only whitespace", raw: "  ", wantErr: true},
		{name: "null", raw: `null`, wantErr: true},
		{name: "float", raw: `1.5`, wantErr: true},
		{name: "integral float", raw: `1.0`, wantErr: true},
		{name: "exponent", raw: `1e3`, wantErr: true},
		{name: "capital exponent", raw: `1E3`, wantErr: true},
		{name: "lone minus", raw: `-`, wantErr: true},
		{name: "plus sign", raw: `+1`, wantErr: true},
		{name: "true", raw: `true`, wantErr: true},
		{name: "false", raw: `false`, wantErr: true},
		{name: "object", raw: `{"a":1}`, wantErr: true},
		{name: "array", raw: `[1]`, wantErr: true},
		{name: "unterminated string", raw: `"abc`, wantErr: true},
		{name: "bad escape", raw: `"\x"`, wantErr: true},
		{name: "string then garbage", raw: `"a"b`, wantErr: true},
		{name: "integer then garbage", raw: `1a`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := ParseID([]byte(tt.raw))
			if tt.wantErr {
				if err == nil {
					t.Errorf("ParseID(%q) = %v, want an error", tt.raw, id)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseID(%q): %v", tt.raw, err)
			}
			if diff := cmp.Diff(tt.want, id.String()); diff != "" {
				t.Errorf("ParseID(%q) wire form (-want +got):\n%s", tt.raw, diff)
			}
			if diff := cmp.Diff(json.RawMessage(tt.want), id.Raw()); diff != "" {
				t.Errorf("ParseID(%q).Raw() (-want +got):\n%s", tt.raw, diff)
			}
			if id.IsZero() {
				t.Errorf("ParseID(%q).IsZero() = true", tt.raw)
			}
		})
	}
}

func TestIDConstructors(t *testing.T) {
	tests := []struct {
		name string
		id   ID
		want string
	}{
		{name: "IntID", id: IntID(7), want: `7`},
		{name: "IntID negative", id: IntID(-3), want: `-3`},
		{name: "StringID", id: StringID("abc"), want: `"abc"`},
		{name: "StringID escapes", id: StringID("a\"b\n"), want: `"a\"b\n"`},
		{name: "zero", id: ID{}, want: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.id.String()); diff != "" {
				t.Errorf("wire form (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIDEquality(t *testing.T) {
	tests := []struct {
		name  string
		a, b  ID
		equal bool
	}{
		{name: "same integer", a: IntID(7), b: mustParseID(t, `7`), equal: true},
		{name: "same string", a: StringID("x"), b: mustParseID(t, `"x"`), equal: true},
		{name: "integer and string of digits differ", a: IntID(7), b: StringID("7")},
		{name: "different integers", a: IntID(7), b: IntID(8)},
		{name: "zero and zero", a: ID{}, b: ID{}, equal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a == tt.b; got != tt.equal {
				t.Errorf("%v == %v is %v, want %v", tt.a, tt.b, got, tt.equal)
			}
			m := map[ID]int{tt.a: 1}
			if _, got := m[tt.b]; got != tt.equal {
				t.Errorf("map lookup of %v under %v found=%v, want %v", tt.b, tt.a, got, tt.equal)
			}
		})
	}
}

func TestIDInt(t *testing.T) {
	tests := []struct {
		name   string
		id     ID
		want   int64
		wantOK bool
	}{
		{name: "integer", id: IntID(42), want: 42, wantOK: true},
		{name: "negative", id: IntID(-42), want: -42, wantOK: true},
		{name: "beyond int64", id: mustParseID(t, `9223372036854775808`)},
		{name: "string of digits", id: StringID("42")},
		{name: "zero ID", id: ID{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.id.Int()
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("%v.Int() = %d, %v; want %d, %v", tt.id, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestIDJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // re-marshalled form
		wantErr bool
	}{
		{name: "integer", in: `{"id":7}`, want: `{"id":7}`},
		{name: "huge integer", in: `{"id":12345678901234567890123}`, want: `{"id":12345678901234567890123}`},
		{name: "string", in: `{"id":"a\u0062"}`, want: `{"id":"a\u0062"}`},
		{name: "absent marshals as null", in: `{}`, want: `{"id":null}`},
		{name: "float rejected", in: `{"id":1.5}`, wantErr: true},
		{name: "bool rejected", in: `{"id":true}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v struct {
				ID ID `json:"id"`
			}
			err := json.Unmarshal([]byte(tt.in), &v)
			if tt.wantErr {
				if err == nil {
					t.Errorf("Unmarshal(%s) = %v, want an error", tt.in, v.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.in, err)
			}
			got, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("round trip of %s (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func mustParseID(t *testing.T, raw string) ID {
	t.Helper()
	id, err := ParseID([]byte(raw))
	if err != nil {
		t.Fatalf("ParseID(%q): %v", raw, err)
	}
	return id
}

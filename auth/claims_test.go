package auth

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalResource(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://gw.example.com/mcp", "https://gw.example.com/mcp"},
		{"https://gw.example.com/mcp/", "https://gw.example.com/mcp"},
		{"HTTPS://GW.EXAMPLE.COM/mcp", "https://gw.example.com/mcp"},
		{"https://gw.example.com/MCP", "https://gw.example.com/MCP"},
		{"https://gw.example.com", "https://gw.example.com"},
		{"https://gw.example.com/", "https://gw.example.com"},
		{"https://gw.example.com/mcp//", "https://gw.example.com/mcp/"},
		{"https://gw.example.com:8443/mcp", "https://gw.example.com:8443/mcp"},
		{"https://gw.example.com/mcp?x=/", "https://gw.example.com/mcp?x=/"},
		{"client-123", "client-123"},
		{"Client-123/", "Client-123/"},
		{"urn:example:api", "urn:example:api"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := canonicalResource(tt.in); got != tt.want {
			t.Errorf("canonicalResource(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLookupClaim(t *testing.T) {
	var claims map[string]any
	err := json.Unmarshal([]byte(`{
		"sub": "a",
		"realm_access": {"roles": ["r1"]},
		"https://example.com/groups": ["g1"],
		"ns": {"https://example.com/x": {"y": "deep"}},
		"a.b": {"c": "literal-then-nested"}
	}`), &claims)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want any
		ok   bool
	}{
		{"sub", "a", true},
		{"realm_access.roles", []any{"r1"}, true},
		{"https://example.com/groups", []any{"g1"}, true},
		{"ns.https://example.com/x.y", "deep", true},
		{"a.b.c", "literal-then-nested", true},
		{"realm_access.missing", nil, false},
		{"sub.x", nil, false},
		{"missing", nil, false},
	}
	for _, tt := range tests {
		got, ok := lookupClaim(claims, tt.path)
		if ok != tt.ok || !cmp.Equal(got, tt.want) {
			t.Errorf("lookupClaim(%q) = %v, %v; want %v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func TestListClaim(t *testing.T) {
	claims := map[string]any{
		"scope":  "a  b c",
		"scp":    []any{"a", "b"},
		"groups": "one group",
		"empty":  "",
		"null":   nil,
	}
	tests := []struct {
		name  string
		split bool
		want  []string
	}{
		{"scope", true, []string{"a", "b", "c"}},
		{"scp", true, []string{"a", "b"}},
		{"groups", false, []string{"one group"}},
		{"empty", false, nil},
		{"empty", true, nil},
		{"null", false, nil},
		{"absent", true, nil},
	}
	for _, tt := range tests {
		got, err := listClaim(claims, tt.name, tt.split)
		if err != nil {
			t.Errorf("listClaim(%q): %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("listClaim(%q, %v) (-want +got):\n%s", tt.name, tt.split, diff)
		}
	}
}

func TestIsB64Token(t *testing.T) {
	for s, want := range map[string]bool{
		"abc":             true,
		"a-b.c_d~e+f/g==": true,
		"mfk_AbC-09":      true,
		"==":              false,
		"a=b":             false,
		"a b":             false,
		`"a"`:             false,
		"a,b":             false,
		"é":               false,
	} {
		if got := isB64Token(s); got != want {
			t.Errorf("isB64Token(%q) = %v, want %v", s, got, want)
		}
	}
}

package config

import "testing"

// TestVersionFollowsTheSettings: the same text gives the same version; a changed setting, or a
// changed value of an environment variable it expands, gives another.
func TestVersionFollowsTheSettings(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(string) (string, bool) { return v, true }
	}
	base := "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: http://127.0.0.1:1/mcp\n    headers:\n      X-Key: ${KEY}\n"
	parse := func(text string, lookup func(string) (string, bool)) string {
		t.Helper()
		cfg, err := Parse("gateway.yaml", []byte(text), lookup)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Version()
	}
	v := parse(base, env("one"))
	if len(v) != 16 {
		t.Fatalf("version %q, want 16 hex digits", v)
	}
	if again := parse(base, env("one")); again != v {
		t.Errorf("the same settings gave %q then %q", v, again)
	}
	if other := parse(base+"page_size: 10\n", env("one")); other == v {
		t.Errorf("a changed setting kept version %q", v)
	}
	if other := parse(base, env("two")); other == v {
		t.Errorf("a changed environment value kept version %q", v)
	}
}

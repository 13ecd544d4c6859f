package config

import (
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeyOfFieldNamesEveryTopLevelKey: each field of Config but File is a key the decoder
// accepts at the top, so that a changed setting is always reported under the key an
// operator wrote.
func TestKeyOfFieldNamesEveryTopLevelKey(t *testing.T) {
	var top []string
	for _, s := range Sections() {
		if s.Path == "" {
			top = s.Keys
		}
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if name == "File" {
			continue
		}
		if key := KeyOfField(name); !slices.Contains(top, key) {
			t.Errorf("field %s: key %q is not a top-level key (%v)", name, key, top)
		}
	}
}

func TestChangedKeys(t *testing.T) {
	base := "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: http://127.0.0.1:1/mcp\npolicy:\n  default: allow\n  rules:\n    - name: r\n      effect: deny\n      match:\n        tools: [x]\n"
	parse := func(text string) *Config {
		t.Helper()
		cfg, err := Parse("gateway.yaml", []byte(text), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"same", base, nil},
		{"lines moved", "# a comment\n\n" + base, nil},
		{"listen", "listen: 127.0.0.1:1\n" + base[len("listen: 127.0.0.1:0\n"):], []string{"listen", "auth"}}, // auth.resource defaults to the listen address,
		{"page size and policy", base + "page_size: 10\n" + "", []string{"page_size"}},
		{"upstream url", "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: http://127.0.0.1:2/mcp\npolicy:\n  default: allow\n  rules:\n    - name: r\n      effect: deny\n      match:\n        tools: [x]\n", []string{"upstreams"}},
		{"rule", "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: http://127.0.0.1:1/mcp\npolicy:\n  default: allow\n  rules:\n    - name: r\n      effect: deny\n      match:\n        tools: [y]\n", []string{"policy"}},
		{"http idle timeout", base + "http_idle_timeout: 7s\n", []string{"http_idle_timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parse(base).ChangedKeys(parse(tc.text))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ChangedKeys (-want +got):\n%s", diff)
			}
		})
	}
}

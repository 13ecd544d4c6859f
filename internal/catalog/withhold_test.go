package catalog

import (
	"testing"

	"github.com/manifold-mcp/manifold/upstream"
)

// TestWithheldToolKeepsItsName: a tool withheld (its definition changed since it was pinned)
// is absent from the catalog, and its exposed name stays its upstream's: a later upstream's
// tool of the same name does not answer for it. Tools of other kinds and other names stay.
func TestWithheldToolKeepsItsName(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "first"}, {Name: "second"}}, nil)
	first := &fakeSource{ns: ns[0], catalog: toolCatalog("deploy", "status")}
	second := &fakeSource{ns: ns[1], catalog: toolCatalog("deploy", "logs")}
	b := NewBuilder(sourcesOf(first, second), "__", nil)
	if e := b.Build().Tool("deploy"); e == nil || e.Namespace != ns[0] {
		t.Fatalf("before withholding, deploy is %v, want first's", e)
	}
	b.SetWithhold(func(n *Namespace, it upstream.Item) bool { return n == ns[0] && it.Key == "deploy" })
	snap := b.Build()
	if e := snap.Tool("deploy"); e != nil {
		t.Errorf("the withheld deploy is served by %s", e.Namespace.Name)
	}
	for _, name := range []string{"status", "logs"} {
		if snap.Tool(name) == nil {
			t.Errorf("%s, not withheld, is missing", name)
		}
	}
	for _, e := range snap.Entries(upstream.Tools) {
		if e.Exposed == "deploy" {
			t.Errorf("the list holds deploy of %s", e.Namespace.Name)
		}
	}
	b.SetWithhold(nil)
	if e := b.Build().Tool("deploy"); e == nil || e.Namespace != ns[0] {
		t.Errorf("once accepted, deploy is %v, want first's again", e)
	}
}

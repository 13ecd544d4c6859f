package gateway

import (
	"io"
	"log/slog"
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestReloadNumbersSchemesAsAFreshStart: two prefixes that reduce to one URI scheme are
// numbered (a-b, a-b2). A reload that removes the first gives the second the scheme a gateway
// started on the new files gives it (a-b), replacing its entry, so that a replica reloaded and
// one restarted serve the same resource URIs; an upstream whose scheme stays is kept.
func TestReloadNumbersSchemesAsAFreshStart(t *testing.T) {
	parse := func(text string) *config.Config {
		t.Helper()
		cfg, err := config.Parse("gw.yaml", []byte(text), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const x = "  - {name: x, url: http://127.0.0.1:1/mcp, prefix: a_b}\n"
	const y = "  - {name: y, url: http://127.0.0.1:2/mcp, prefix: a-b}\n"
	const z = "  - {name: z, url: http://127.0.0.1:3/mcp, prefix: zed}\n"
	cur := parse("listen: 127.0.0.1:0\nupstreams:\n" + x + y + z)
	g, err := New(cur, &Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	schemes := map[string]string{}
	for _, ue := range g.ups.Load().live {
		schemes[ue.ns.Name] = ue.ns.Scheme
	}
	if schemes["x"] != "a-b" || schemes["y"] != "a-b2" {
		t.Fatalf("at start: schemes %v, want x a-b and y a-b2", schemes)
	}
	plan, err := g.reloads.planUpstreams(cur, parse("listen: 127.0.0.1:0\nupstreams:\n"+y+z))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ue := range plan.set.live {
		got[ue.ns.Name] = ue.ns.Scheme
	}
	if got["y"] != "a-b" || got["z"] != "zed" {
		t.Errorf("after the reload: schemes %v, want y a-b (as a fresh start) and z zed", got)
	}
	added := map[string]bool{}
	for _, ue := range plan.added {
		added[ue.ns.Name] = true
	}
	if !added["y"] || added["z"] {
		t.Errorf("added %v: want y replaced (its scheme changed) and z kept", added)
	}
}

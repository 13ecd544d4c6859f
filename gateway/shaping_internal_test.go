package gateway

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// toolsOf is a catalog of tools with the given names.
func toolsOf(names ...string) *upstream.Catalog {
	items := make([]upstream.Item, len(names))
	for i, n := range names {
		items[i] = upstream.Item{Key: n, Raw: toolJSON(n)}
	}
	return upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items})
}

// TestListChangedFollowsEachEndpointsCatalog: a catalog change reaches, as list_changed, the
// sessions of /mcp and of the profiles whose own lists it changes, and no others.
func TestListChangedFollowsEachEndpointsCatalog(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`upstreams: []
profiles:
  - name: a-only
    include: [{tools: ["a__*"]}]
  - name: b-only
    include: [{tools: ["b__*"]}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	a := &fakeUpstream{name: "a", catalog: toolsOf("x")}
	b := &fakeUpstream{name: "b", catalog: toolsOf("y")}
	useFakeUpstreams(g, a, b)

	cursors := map[string]*hub.Cursor{}
	for _, group := range []string{"", "a-only", "b-only"} {
		ls, err := g.hub.Open("session-of-"+group, group)
		if err != nil {
			t.Fatal(err)
		}
		_, c, err := ls.OpenStandalone()
		if err != nil {
			t.Fatal(err)
		}
		cursors[group] = c
	}
	received := func() map[string][]string {
		got := map[string][]string{}
		for group, c := range cursors {
			events, _, _ := c.Next()
			for _, e := range events {
				msg, err := protocol.Decode(e.Data)
				if err != nil {
					t.Fatalf("event %s: %v", e.Data, err)
				}
				got[group] = append(got[group], msg.(*protocol.Notification).Method)
			}
			slices.Sort(got[group])
		}
		return got
	}

	a.catalog = toolsOf("x", "x2")
	g.rebuild()
	want := map[string][]string{"": {protocol.NotificationToolsChanged}, "a-only": {protocol.NotificationToolsChanged}}
	if diff := cmp.Diff(want, received()); diff != "" {
		t.Errorf("after a's change, notifications by endpoint (-want +got):\n%s", diff)
	}
	b.catalog = toolsOf()
	g.rebuild()
	want = map[string][]string{"": {protocol.NotificationToolsChanged}, "b-only": {protocol.NotificationToolsChanged}}
	if diff := cmp.Diff(want, received()); diff != "" {
		t.Errorf("after b's change, notifications by endpoint (-want +got):\n%s", diff)
	}
	g.rebuild()
	if diff := cmp.Diff(map[string][]string{}, received()); diff != "" {
		t.Errorf("a rebuild without change notified (-want +got):\n%s", diff)
	}
}

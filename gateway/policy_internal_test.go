package gateway

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// TestListChangedFollowsTheView: when the catalog changes, a session hears of it only if
// what it sees changed: a tool hidden from bob appears, and only alice is told.
func TestListChangedFollowsTheView(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`policy:
  rules:
    - {name: contractors-no-secrets, effect: hide, match: {principal: {groups: [contractors]}, tools: ["secret_*"]}}
upstreams: []
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	gt, err := newGate(cfg, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf := func(tools ...string) *catalog.Snapshot {
		items := make([]upstream.Item, len(tools))
		for i, name := range tools {
			items[i] = upstream.Item{Key: name, Raw: toolJSON(name)}
		}
		f := &fakeUpstream{name: "up", catalog: upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items}),
			server: &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion}}
		ns := catalog.Namespaces([]catalog.Namespace{{Name: "up", Prefix: "up"}}, slog.New(slog.DiscardHandler))
		return catalog.NewBuilder([]catalog.Source{newUpstreamEntry(ns[0], f, false)}, "__", slog.New(slog.DiscardHandler)).Build()
	}
	prev, hiddenAdded, visibleAdded := snapshotOf("echo"), snapshotOf("echo", "secret_a"), snapshotOf("echo", "secret_a", "public_b")
	gt.seen.Store("alice", sessionView{key: gt.current().rules.ViewKey(session.Principal{Issuer: "i", Subject: "alice", Groups: []string{"eng"}}), principal: session.Principal{Issuer: "i", Subject: "alice", Groups: []string{"eng"}}})
	gt.seen.Store("bob", sessionView{key: gt.current().rules.ViewKey(session.Principal{Issuer: "i", Subject: "bob", Groups: []string{"contractors"}}), principal: session.Principal{Issuer: "i", Subject: "bob", Groups: []string{"contractors"}}})
	for _, tc := range []struct {
		name       string
		from, to   *catalog.Snapshot
		alice, bob []string
	}{
		{"a tool bob may not see appears", prev, hiddenAdded, []string{protocol.NotificationToolsChanged}, nil},
		{"a tool both see appears", hiddenAdded, visibleAdded, []string{protocol.NotificationToolsChanged}, []string{protocol.NotificationToolsChanged}},
	} {
		memo := map[string][]string{}
		for who, want := range map[string][]string{"alice": tc.alice, "bob": tc.bob} {
			got, ok := gt.changedFor(who, tc.from, tc.to, memo)
			if !ok || !slices.Equal(got, want) {
				t.Errorf("%s: %s told %v (known %v), want %v", tc.name, who, got, ok, want)
			}
		}
	}
	if _, ok := gt.changedFor("carol", prev, hiddenAdded, map[string][]string{}); ok {
		t.Error("a session that never listed has a view")
	}
}

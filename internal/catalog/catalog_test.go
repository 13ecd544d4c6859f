package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// collisionCounter counts the collision warnings a catalog builder logs, by name.
type collisionCounter struct {
	mu    sync.Mutex
	names map[string]int
}

func (c *collisionCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *collisionCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *collisionCounter) WithGroup(string) slog.Handler            { return c }
func (c *collisionCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "two upstreams expose the same name; the one listed first in the config wins" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "name" {
			c.mu.Lock()
			c.names[a.Value.String()]++
			c.mu.Unlock()
		}
		return true
	})
	return nil
}

func (c *collisionCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[name]
}

// fakeSource is one upstream as a Builder reads it: a catalog that tests change between
// builds, nil while the upstream is down.
type fakeSource struct {
	ns      *Namespace
	catalog *upstream.Catalog
	server  *protocol.InitializeResult
}

func (f *fakeSource) Namespace() *Namespace              { return f.ns }
func (f *fakeSource) Catalog() *upstream.Catalog         { return f.catalog }
func (f *fakeSource) Server() *protocol.InitializeResult { return f.server }
func (f *fakeSource) Status() upstream.Status {
	if f.catalog == nil {
		return upstream.Status{State: upstream.StateStarting}
	}
	return upstream.Status{State: upstream.StateReady}
}

// toolJSON is a typical tool entry: a name, a description and a small input schema.
func toolJSON(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"name":%q,"description":"Echoes the text it is given, for benchmarks of the gateway's catalog.","inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"the text"}},"required":["text"]}}`, name))
}

// toolCatalog is a catalog of tools with the given names.
func toolCatalog(names ...string) *upstream.Catalog {
	items := make([]upstream.Item, len(names))
	for i, n := range names {
		items[i] = upstream.Item{Key: n, Raw: toolJSON(n)}
	}
	return upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items})
}

// sourcesOf is the sources of fakes, for NewBuilder.
func sourcesOf(fakes ...*fakeSource) []Source {
	out := make([]Source, len(fakes))
	for i, f := range fakes {
		out[i] = f
	}
	return out
}

// TestCatalogNameTablesAreBounded: two unprefixed upstreams that list fresh tool names on
// every change (so each change is a new collision, and a new name for "former") must not
// grow the builder's per-name tables: they hold only what the current catalog and the down
// upstreams' last lists need. The real cases keep working: a lasting collision is logged
// once, and a down upstream's former tools are still known as its own until it comes back
// without them.
func TestCatalogNameTablesAreBounded(t *testing.T) {
	logs := &collisionCounter{names: map[string]int{}}
	ns := Namespaces([]Namespace{{Name: "churn"}, {Name: "copycat"}, {Name: "steady", Prefix: "st"}}, nil)
	churn := &fakeSource{ns: ns[0]}
	copycat := &fakeSource{ns: ns[1]}
	steady := &fakeSource{ns: ns[2], catalog: toolCatalog("keep")}
	b := NewBuilder(sourcesOf(churn, copycat, steady), "__", slog.New(logs))

	const rounds = 200
	for i := range rounds {
		name := fmt.Sprintf("t%d", i)
		churn.catalog = toolCatalog(name)
		copycat.catalog = toolCatalog(name)
		snap := b.Build()
		if e := snap.Tool(name); e == nil || e.Namespace != ns[0] {
			t.Fatalf("round %d: %s is not churn's", i, name)
		}
		// The same collision seen again while it lasts is not logged again.
		b.Build()
		if n := logs.count(name); n != 1 {
			t.Fatalf("round %d: the collision on %s was logged %d times, want once", i, name, n)
		}
	}
	b.mu.Lock()
	warned, former := len(b.warned), len(b.former)
	b.mu.Unlock()
	// One collision lasts; two names are listed (churn's latest and steady's).
	if warned > 1 {
		t.Errorf("after %d changes of names the builder remembers %d collisions, want at most 1", rounds, warned)
	}
	if former > 2 {
		t.Errorf("after %d changes of names the builder remembers %d former names, want at most 2", rounds, former)
	}

	// churn goes down: its last tool is still known as its own, however often the catalog is
	// rebuilt meanwhile, so that a call says "unavailable"; steady's is still current.
	last := fmt.Sprintf("t%d", rounds-1)
	copycat.catalog = toolCatalog()
	churn.catalog = nil
	for range 3 {
		b.Build()
	}
	if got := b.FormerOwner(upstream.Tools, last); got != ns[0] {
		t.Errorf("while churn is down, FormerOwner(%s) = %s, want churn", last, nsName(got))
	}
	if got := b.FormerOwner(upstream.Tools, "st__keep"); got != ns[2] {
		t.Errorf("FormerOwner(st__keep) = %s, want steady", nsName(got))
	}
	// Its entry too, as it was listed: the policy decides on it who may hear "unavailable".
	if e := b.Former(upstream.Tools, last); e == nil || e.Original != last || e.Exposed != last || len(e.Raw()) == 0 {
		t.Errorf("while churn is down, Former(%s) = %+v, want its last listed entry", last, e)
	}

	// churn comes back without that tool: the name is forgotten.
	churn.catalog = toolCatalog("fresh")
	b.Build()
	if got := b.FormerOwner(upstream.Tools, last); got != nil {
		t.Errorf("churn is back without %s, yet FormerOwner = %s", last, nsName(got))
	}
	if got := b.FormerOwner(upstream.Tools, "fresh"); got != ns[0] {
		t.Errorf("FormerOwner(fresh) = %s, want churn", nsName(got))
	}

	// A collision that ended and comes back is news again, and logged once more.
	copycat.catalog = toolCatalog("fresh")
	b.Build()
	b.Build()
	if n := logs.count("fresh"); n != 1 {
		t.Errorf("the collision on fresh was logged %d times, want once", n)
	}
	copycat.catalog = toolCatalog()
	b.Build()
	copycat.catalog = toolCatalog("fresh")
	b.Build()
	if n := logs.count("fresh"); n != 2 {
		t.Errorf("the collision on fresh, ended and back, was logged %d times in all, want twice", n)
	}
}

func nsName(ns *Namespace) string {
	if ns == nil {
		return "nil"
	}
	return ns.Name
}

// TestNamespacesNumberClashingSchemes: prefixes that reduce to the same URI scheme get
// numbered schemes in config order, so that every upstream's URIs stay its own.
func TestNamespacesNumberClashingSchemes(t *testing.T) {
	got := Namespaces([]Namespace{
		{Name: "a", Prefix: "a_b"},
		{Name: "b", Prefix: "a-b", IncludeInstructions: true},
		{Name: "plain"},
		{Name: "c", Prefix: "A.B"},
		{Name: "d", Prefix: "A_B2"},
		{Name: "e", Prefix: "a+b", Index: 7, Scheme: "ignored"},
	}, nil)
	want := []*Namespace{
		{Index: 0, Name: "a", Prefix: "a_b", Scheme: "a-b"},
		{Index: 1, Name: "b", Prefix: "a-b", Scheme: "a-b2", IncludeInstructions: true},
		{Index: 2, Name: "plain"},
		{Index: 3, Name: "c", Prefix: "A.B", Scheme: "a.b"},
		{Index: 4, Name: "d", Prefix: "A_B2", Scheme: "a-b22"},
		{Index: 5, Name: "e", Prefix: "a+b", Scheme: "a-b3"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Namespace{}, "Shaping")); diff != "" {
		t.Errorf("Namespaces (-want +got):\n%s", diff)
	}
}

// catalogOf is a catalog with the given items of each kind, keyed by their names or URIs.
func catalogOf(items map[upstream.Kind][]string) *upstream.Catalog {
	lists := map[upstream.Kind][]upstream.Item{}
	for k, keys := range items {
		for _, key := range keys {
			raw, _ := json.Marshal(map[string]string{k.KeyField(): key, "description": "d"})
			lists[k] = append(lists[k], upstream.Item{Key: key, Raw: raw})
		}
	}
	return upstream.NewCatalog(lists)
}

func TestResolveURI(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "gh", Prefix: "gh"}, {Name: "local"}}, nil)
	gh := &fakeSource{ns: ns[0], catalog: catalogOf(map[upstream.Kind][]string{upstream.Resources: {"file:///a"}})}
	local := &fakeSource{ns: ns[1], catalog: catalogOf(map[upstream.Kind][]string{upstream.Resources: {"file:///b"}})}
	snap := NewBuilder(sourcesOf(gh, local), "__", nil).Build()
	tests := []struct {
		name, uri    string
		wantNS       *Namespace
		wantOriginal string
	}{
		{name: "listed resource", uri: "gh+file:///a", wantNS: ns[0], wantOriginal: "file:///a"},
		{name: "unlisted URI under a scheme", uri: "gh+file:///notes/1", wantNS: ns[0], wantOriginal: "file:///notes/1"},
		{name: "upper-case scheme", uri: "GH+file:///x", wantNS: ns[0], wantOriginal: "file:///x"},
		{name: "unprefixed upstream's resource", uri: "file:///b", wantNS: ns[1], wantOriginal: "file:///b"},
		{name: "unknown scheme goes to the unprefixed upstream", uri: "svn+ssh://h/r", wantNS: ns[1], wantOriginal: "svn+ssh://h/r"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, original, ok := snap.ResolveURI(tt.uri)
			if !ok || ns != tt.wantNS || original != tt.wantOriginal {
				t.Errorf("ResolveURI(%q) = %s, %q, %v; want %s, %q, true", tt.uri, nsName(ns), original, ok, nsName(tt.wantNS), tt.wantOriginal)
			}
		})
	}

	// Without an unprefixed upstream, a URI under no known scheme has no upstream.
	only := NewBuilder(sourcesOf(gh), "__", nil).Build()
	if ns, _, ok := only.ResolveURI("file:///b"); ok {
		t.Errorf("ResolveURI(file:///b) without an unprefixed upstream = %s, want none", nsName(ns))
	}
}

// TestPageCursors: pages follow each other through nextCursor; a cursor not issued for the
// list, or issued before it changed, is an invalid-params error.
func TestPageCursors(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "up", Prefix: "up"}}, nil)
	src := &fakeSource{ns: ns[0], catalog: toolCatalog("a", "b", "c")}
	b := NewBuilder(sourcesOf(src), "__", nil)
	snap := b.Build()

	type page struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		NextCursor string `json:"nextCursor"`
	}
	read := func(raw json.RawMessage, err error) page {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var p page
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("page %s: %v", raw, err)
		}
		return p
	}
	var names []string
	next := ""
	for range 3 {
		p := read(snap.Page(upstream.Tools, next, 2))
		for _, tool := range p.Tools {
			names = append(names, tool.Name)
		}
		if next = p.NextCursor; next == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"up__a", "up__b", "up__c"}, names); diff != "" {
		t.Errorf("paged tools (-want +got):\n%s", diff)
	}

	second := read(snap.Page(upstream.Tools, "", 2)).NextCursor
	src.catalog = toolCatalog("a", "b", "c", "d")
	changed := b.Build()
	if changed.Version(upstream.Tools) == snap.Version(upstream.Tools) {
		t.Error("the tool list changed, its version did not")
	}
	bad := []struct {
		name   string
		snap   *Snapshot
		cursor string
	}{
		{name: "not base64", snap: snap, cursor: "not a cursor!"},
		{name: "another kind's cursor", snap: snap, cursor: cursor(upstream.Prompts, snap.Version(upstream.Tools), 2)},
		{name: "past the end", snap: snap, cursor: cursor(upstream.Tools, snap.Version(upstream.Tools), 3)},
		{name: "the list changed since", snap: changed, cursor: second},
	}
	for _, tt := range bad {
		_, err := tt.snap.Page(upstream.Tools, tt.cursor, 2)
		var rpcErr *protocol.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != protocol.CodeInvalidParams {
			t.Errorf("%s: Page error %v, want code %d", tt.name, err, protocol.CodeInvalidParams)
		}
	}
}

func TestExposeContentURIs(t *testing.T) {
	tests := []struct {
		name, scheme, result, want string
	}{
		{
			name:   "resource link and embedded resource",
			scheme: "gh",
			result: `{"content":[{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"resource","resource":{"uri":"file:///b","text":"b"}},{"type":"text","text":"file:///c"}]}`,
			want:   `{"content":[{"type":"resource_link","uri":"gh+file:///a","name":"a"},{"type":"resource","resource":{"uri":"gh+file:///b","text":"b"}},{"type":"text","text":"file:///c"}]}`,
		},
		{
			name:   "prompt messages",
			scheme: "gh",
			result: `{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"file:///b","text":"b"}}}]}`,
			want:   `{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"gh+file:///b","text":"b"}}}]}`,
		},
		{
			name:   "structuredContent is the tool's",
			scheme: "gh",
			result: `{"content":[],"structuredContent":{"type":"resource_link","uri":"file:///a"}}`,
			want:   `{"content":[],"structuredContent":{"type":"resource_link","uri":"file:///a"}}`,
		},
		{
			name:   "unprefixed upstream",
			scheme: "",
			result: `{"content":[{"type":"resource_link","uri":"file:///a","name":"a"}]}`,
			want:   `{"content":[{"type":"resource_link","uri":"file:///a","name":"a"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExposeContentURIs(json.RawMessage(tt.result), tt.scheme)
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("ExposeContentURIs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExposeReadURIs(t *testing.T) {
	got, err := ExposeReadURIs(json.RawMessage(`{"contents":[{"uri":"file:///a","text":"a"},{"blob":"AA=="}]}`), "gh")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"contents":[{"text":"a","uri":"gh+file:///a"},{"blob":"AA=="}]}`, string(got)); diff != "" {
		t.Errorf("ExposeReadURIs (-want +got):\n%s", diff)
	}
	if _, err := ExposeReadURIs(json.RawMessage(`[1]`), "gh"); err == nil {
		t.Error("ExposeReadURIs of a result that is not an object: no error")
	}
	same := json.RawMessage(`{ "contents": [ {"uri":"file:///a"} ] }`)
	if got, err := ExposeReadURIs(same, ""); err != nil || string(got) != string(same) {
		t.Errorf("ExposeReadURIs without a scheme = %s, %v; want the result unchanged", got, err)
	}
}

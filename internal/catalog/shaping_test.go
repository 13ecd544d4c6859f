package catalog

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// mustFilter compiles a filter or fails the test.
func mustFilter(t *testing.T, include, exclude []string) Filter {
	t.Helper()
	f, err := NewFilter(include, exclude)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// itemsOf returns the items of kind k in snap's first page, decoded.
func itemsOf(t *testing.T, snap *Snapshot, k upstream.Kind) []map[string]any {
	t.Helper()
	raw, err := snap.Page(k, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var page map[string][]map[string]any
	if err := json.Unmarshal(raw, &page); err != nil {
		t.Fatalf("page %s: %v", raw, err)
	}
	return page[k.ListField()]
}

// keysOf returns the key field of each item of kind k in snap.
func keysOf(t *testing.T, snap *Snapshot, k upstream.Kind) []string {
	t.Helper()
	var keys []string
	for _, it := range itemsOf(t, snap, k) {
		keys = append(keys, it[k.KeyField()].(string))
	}
	return keys
}

func TestFilters(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
		want             []string
	}{
		{name: "no filter keeps all", want: []string{"fs__read_file", "fs__read_dir", "fs__write_file", "fs__delete"}},
		{name: "include", include: []string{"read_*"}, want: []string{"fs__read_file", "fs__read_dir"}},
		{name: "exclude", exclude: []string{"*_file"}, want: []string{"fs__read_dir", "fs__delete"}},
		{name: "exclude wins over include", include: []string{"read_*", "delete"}, exclude: []string{"read_dir"}, want: []string{"fs__read_file", "fs__delete"}},
		{name: "an empty include keeps nothing", include: []string{}, want: nil},
		{name: "globs match whole names", include: []string{"read"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var shaping Shaping
			shaping.Filters[upstream.Tools] = mustFilter(t, tt.include, tt.exclude)
			ns := Namespaces([]Namespace{{Name: "fs", Prefix: "fs", Shaping: shaping}}, nil)
			src := &fakeSource{ns: ns[0], catalog: toolCatalog("read_file", "read_dir", "write_file", "delete")}
			snap := NewBuilder(sourcesOf(src), "__", nil).Build()
			if diff := cmp.Diff(tt.want, keysOf(t, snap, upstream.Tools)); diff != "" {
				t.Errorf("tools (-want +got):\n%s", diff)
			}
			for _, name := range []string{"fs__write_file", "fs__delete"} {
				if (snap.Tool(name) != nil) != contains(tt.want, name) {
					t.Errorf("Tool(%q) found = %v, listed = %v", name, snap.Tool(name) != nil, contains(tt.want, name))
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestOverridesRenameAndDescribe(t *testing.T) {
	var shaping Shaping
	shaping.Overrides[upstream.Tools] = map[string]Override{
		"read_text_file": {Name: "read", Title: "Read a file", Description: "Reads one text file.", Annotations: map[string]bool{"readOnlyHint": true}},
		"write_file":     {Annotations: map[string]bool{"destructiveHint": false}},
	}
	shaping.Overrides[upstream.Prompts] = map[string]Override{"summarize": {Name: "tldr", Description: "Shortens text."}}
	ns := Namespaces([]Namespace{{Name: "fs", Prefix: "fs", Shaping: shaping}}, nil)
	cat := upstream.NewCatalog(map[upstream.Kind][]upstream.Item{
		upstream.Tools: {
			{Key: "read_text_file", Raw: json.RawMessage(`{"name":"read_text_file","description":"d","inputSchema":{"type":"object"}}`)},
			{Key: "write_file", Raw: json.RawMessage(`{"name":"write_file","annotations":{"title":"Write","readOnlyHint":false},"inputSchema":{"type":"object"}}`)},
		},
		upstream.Prompts: {{Key: "summarize", Raw: json.RawMessage(`{"name":"summarize","arguments":[{"name":"text"}]}`)}},
	})
	snap := NewBuilder(sourcesOf(&fakeSource{ns: ns[0], catalog: cat}), "__", nil).Build()

	tools := itemsOf(t, snap, upstream.Tools)
	want := []map[string]any{
		{"name": "fs__read", "title": "Read a file", "description": "Reads one text file.", "inputSchema": map[string]any{"type": "object"},
			"annotations": map[string]any{"readOnlyHint": true}},
		{"name": "fs__write_file", "inputSchema": map[string]any{"type": "object"},
			"annotations": map[string]any{"title": "Write", "readOnlyHint": false, "destructiveHint": false}},
	}
	if diff := cmp.Diff(want, tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	e := snap.Tool("fs__read")
	if e == nil || e.Original != "read_text_file" {
		t.Fatalf("Tool(fs__read) = %+v, want the entry of read_text_file", e)
	}
	if snap.Tool("fs__read_text_file") != nil {
		t.Error("the renamed tool is still known by its old name")
	}
	prompts := itemsOf(t, snap, upstream.Prompts)
	if diff := cmp.Diff([]map[string]any{{"name": "fs__tldr", "description": "Shortens text.", "arguments": []any{map[string]any{"name": "text"}}}}, prompts); diff != "" {
		t.Errorf("prompts (-want +got):\n%s", diff)
	}
	if e := snap.Prompt("fs__tldr"); e == nil || e.Original != "summarize" {
		t.Errorf("Prompt(fs__tldr) = %+v, want the entry of summarize", e)
	}
}

// TestRenameTakesTheNameFromTheUpstreamsOwn: a tool renamed to the name of another tool of
// the same upstream keeps it, whatever the list order; the other is left out as a collision.
func TestRenameTakesTheNameFromTheUpstreamsOwn(t *testing.T) {
	var shaping Shaping
	shaping.Overrides[upstream.Tools] = map[string]Override{"search_v2": {Name: "search"}}
	ns := Namespaces([]Namespace{{Name: "gh", Prefix: "gh", Shaping: shaping}}, nil)
	src := &fakeSource{ns: ns[0], catalog: toolCatalog("search", "search_v2")}
	snap := NewBuilder(sourcesOf(src), "__", nil).Build()
	if e := snap.Tool("gh__search"); e == nil || e.Original != "search_v2" {
		t.Fatalf("Tool(gh__search) = %+v, want the renamed search_v2", e)
	}
	if diff := cmp.Diff([]string{"gh__search"}, keysOf(t, snap, upstream.Tools)); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	want := []Collision{{Kind: "tool", Name: "gh__search", KeptUpstream: "gh", DroppedUpstream: "gh", DroppedOriginal: "search"}}
	if diff := cmp.Diff(want, snap.Collisions()); diff != "" {
		t.Errorf("collisions (-want +got):\n%s", diff)
	}
}

// TestResourceNamesCarryThePrefix: two upstreams' "readme" resources are told apart by name,
// as their tools are; an unprefixed upstream's names stay as they are.
func TestResourceNamesCarryThePrefix(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "a", Prefix: "a"}, {Name: "b", Prefix: "b"}, {Name: "plain"}}, nil)
	item := func(uri string) upstream.Item {
		return upstream.Item{Key: uri, Raw: json.RawMessage(`{"uri":"` + uri + `","name":"readme"}`)}
	}
	template := upstream.Item{Key: "x://{id}", Raw: json.RawMessage(`{"uriTemplate":"x://{id}","name":"note"}`)}
	cat := upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Resources: {item("x://readme")}, upstream.ResourceTemplates: {template}})
	var srcs []Source
	for _, n := range ns {
		srcs = append(srcs, &fakeSource{ns: n, catalog: cat})
	}
	snap := NewBuilder(srcs, "__", nil).Build()
	var names []string
	for _, it := range itemsOf(t, snap, upstream.Resources) {
		names = append(names, it["uri"].(string)+" "+it["name"].(string))
	}
	for _, it := range itemsOf(t, snap, upstream.ResourceTemplates) {
		names = append(names, it["uriTemplate"].(string)+" "+it["name"].(string))
	}
	want := []string{"a+x://readme a__readme", "b+x://readme b__readme", "x://readme readme", "a+x://{id} a__note", "b+x://{id} b__note", "x://{id} note"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("resources and templates (-want +got):\n%s", diff)
	}
}

// TestResourceFilterAppliesToReads: a URI the upstream's resource filter drops is neither
// listed nor readable, unless a listed template produces it.
func TestResourceFilterAppliesToReads(t *testing.T) {
	var shaping Shaping
	shaping.Filters[upstream.Resources] = mustFilter(t, []string{"file:///docs/*"}, []string{"*secret*"})
	shaping.Filters[upstream.ResourceTemplates] = mustFilter(t, nil, []string{"admin://*"})
	ns := Namespaces([]Namespace{{Name: "fs", Prefix: "fs", Shaping: shaping}}, nil)
	src := &fakeSource{ns: ns[0], catalog: catalogOf(map[upstream.Kind][]string{
		upstream.Resources:         {"file:///docs/a.md", "file:///docs/secret.md", "file:///etc/passwd"},
		upstream.ResourceTemplates: {"notes://{id}", "admin://{user}"},
	})}
	snap := NewBuilder(sourcesOf(src), "__", nil).Build()
	if diff := cmp.Diff([]string{"fs+file:///docs/a.md"}, keysOf(t, snap, upstream.Resources)); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"fs+notes://{id}"}, keysOf(t, snap, upstream.ResourceTemplates)); diff != "" {
		t.Errorf("templates (-want +got):\n%s", diff)
	}
	for uri, readable := range map[string]bool{
		"fs+file:///docs/a.md":      true,
		"fs+file:///docs/new.md":    true, // unlisted, but the filter keeps it
		"fs+file:///docs/secret.md": false,
		"fs+file:///etc/passwd":     false,
		"fs+notes://42":             true, // a listed template's URI
		"fs+notes://{id}":           true, // the template itself, for completion/complete
		"fs+admin://root":           false,
	} {
		if _, _, ok := snap.ResolveURI(uri); ok != readable {
			t.Errorf("ResolveURI(%q) ok = %v, want %v", uri, ok, readable)
		}
	}
}

func TestTemplatePattern(t *testing.T) {
	tests := []struct {
		template string
		match    []string
		miss     []string
	}{
		{"notes://{id}", []string{"notes://1", "notes://{id}", "notes://a%2Fb"}, []string{"note://1", "notes://a/b", "notes://../x", "notes://1?x", "notes://1#x"}},
		{"file:///{+path}", []string{"file:///a/b/c"}, []string{"files:///a"}},
		{"file:///{+path}/x[1]*", []string{"file:///a/b/x[1]*"}, []string{"file:///a/x1"}},
		{"repo://{owner}/{name}/issues{?state}", []string{"repo://a/b/issues", "repo://a/b/issues?state=open"}, []string{"repo://a/b/pulls"}},
		{"plain://a", []string{"plain://a"}, []string{"plain://ab"}},
		{"broken://{id", []string{"broken://{id"}, []string{"broken://1"}},
	}
	for _, tt := range tests {
		p := templatePattern(tt.template)
		for _, s := range tt.match {
			if !p.MatchString(s) {
				t.Errorf("template %q does not match %q", tt.template, s)
			}
		}
		for _, s := range tt.miss {
			if p.MatchString(s) {
				t.Errorf("template %q matches %q", tt.template, s)
			}
		}
	}
}

// profileOf builds a profile from selectors written as upstream → kind → patterns.
func profileOf(t *testing.T, name string, selectors ...map[string]map[upstream.Kind][]string) *Profile {
	t.Helper()
	p := &Profile{Name: name}
	for _, sel := range selectors {
		for up, kinds := range sel {
			s := Selector{Upstream: up}
			for k, patterns := range kinds {
				set, err := glob.CompileSet(patterns)
				if err != nil {
					t.Fatal(err)
				}
				s.Patterns[k] = set
			}
			p.Selectors = append(p.Selectors, s)
		}
	}
	return p
}

func TestProfiles(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "gh", Prefix: "gh", IncludeInstructions: true}, {Name: "fs", Prefix: "fs", IncludeInstructions: true}}, nil)
	gh := &fakeSource{ns: ns[0], catalog: catalogOf(map[upstream.Kind][]string{
		upstream.Tools: {"search", "create_issue"}, upstream.Prompts: {"triage"}, upstream.Resources: {"repo://readme"},
	})}
	fs := &fakeSource{ns: ns[1], catalog: catalogOf(map[upstream.Kind][]string{
		upstream.Tools: {"read", "write"}, upstream.Resources: {"file:///a", "file:///b"}, upstream.ResourceTemplates: {"file:///{path}"},
	})}
	for _, src := range []*fakeSource{gh, fs} {
		src.server = &protocol.InitializeResult{Instructions: "use " + src.ns.Name}
	}
	b := NewBuilder(sourcesOf(gh, fs), "__", nil)
	b.SetProfiles([]*Profile{
		profileOf(t, "readonly", map[string]map[upstream.Kind][]string{"": {upstream.Tools: {"gh__search", "*__read"}}},
			map[string]map[upstream.Kind][]string{"fs": {upstream.Resources: {"fs+file:///a"}}}),
		profileOf(t, "github", map[string]map[upstream.Kind][]string{"gh": {
			upstream.Tools: {"*"}, upstream.Prompts: {"*"}, upstream.Resources: {"*"}, upstream.ResourceTemplates: {"*"}}}),
	})
	full := b.Build()
	if full.Profile("nope") != nil {
		t.Error("Profile(nope) is not nil")
	}
	ro, github := full.Profile("readonly"), full.Profile("github")
	if ro == nil || github == nil {
		t.Fatal("a profile snapshot is missing")
	}
	if diff := cmp.Diff([]string{"gh__search", "fs__read"}, keysOf(t, ro, upstream.Tools)); diff != "" {
		t.Errorf("readonly tools (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"fs+file:///a"}, keysOf(t, ro, upstream.Resources)); diff != "" {
		t.Errorf("readonly resources (-want +got):\n%s", diff)
	}
	if keys := keysOf(t, ro, upstream.Prompts); keys != nil {
		t.Errorf("readonly prompts = %q, want none", keys)
	}
	if diff := cmp.Diff([]string{"gh__search", "gh__create_issue"}, keysOf(t, github, upstream.Tools)); diff != "" {
		t.Errorf("github tools (-want +got):\n%s", diff)
	}
	if ro.Tool("gh__create_issue") != nil || ro.Tool("fs__write") != nil {
		t.Error("a tool outside the profile is known in it")
	}
	if e := ro.Tool("fs__read"); e == nil || e.Original != "read" {
		t.Errorf("readonly Tool(fs__read) = %+v", e)
	}
	for uri, readable := range map[string]bool{
		"fs+file:///a":     true,
		"fs+file:///b":     false, // listed at /mcp, not selected here
		"gh+repo://readme": false, // gh's resources are not in the profile
	} {
		if _, _, ok := ro.ResolveURI(uri); ok != readable {
			t.Errorf("readonly ResolveURI(%q) ok = %v, want %v", uri, ok, readable)
		}
	}
	if _, _, ok := github.ResolveURI("fs+file:///a"); ok {
		t.Error("the github profile reads fs's resources")
	}
	if _, _, ok := full.ResolveURI("fs+file:///b"); !ok {
		t.Error("the whole catalog cannot read fs+file:///b")
	}
	if got, want := github.Instructions(), "[gh] use gh"; got != want {
		t.Errorf("github instructions = %q, want %q", got, want)
	}
	if got, want := full.Instructions(), "[gh] use gh\n\n[fs] use fs"; got != want {
		t.Errorf("whole instructions = %q, want %q", got, want)
	}

	// A change outside a profile leaves its versions alone; one inside changes them.
	fs.catalog = catalogOf(map[upstream.Kind][]string{
		upstream.Tools: {"read", "write", "move"}, upstream.Resources: {"file:///a", "file:///b"}, upstream.ResourceTemplates: {"file:///{path}"},
	})
	next := b.Build()
	if next.Version(upstream.Tools) == full.Version(upstream.Tools) {
		t.Error("the whole catalog's tool version did not change")
	}
	if next.Profile("readonly").Version(upstream.Tools) != ro.Version(upstream.Tools) {
		t.Error("the readonly profile's tool version changed for a tool it does not select")
	}
	gh.catalog = catalogOf(map[upstream.Kind][]string{upstream.Tools: {"search"}, upstream.Prompts: {"triage"}, upstream.Resources: {"repo://readme"}})
	third := b.Build()
	if third.Profile("github").Version(upstream.Tools) == next.Profile("github").Version(upstream.Tools) {
		t.Error("the github profile's tool version did not change when gh dropped a tool")
	}
}

// TestAnnotationOverridesKeepTheListStable: hints set by an override come in one order, so
// that a rebuild without change gives the same list, version and cursors (no spurious
// list_changed).
func TestAnnotationOverridesKeepTheListStable(t *testing.T) {
	var shaping Shaping
	shaping.Overrides[upstream.Tools] = map[string]Override{"a": {Annotations: map[string]bool{
		"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false,
	}}}
	ns := Namespaces([]Namespace{{Name: "up", Prefix: "up", Shaping: shaping}}, nil)
	b := NewBuilder(sourcesOf(&fakeSource{ns: ns[0], catalog: toolCatalog("a")}), "__", nil)
	first := b.Build()
	want, _ := first.Page(upstream.Tools, "", 10)
	for range 20 {
		next := b.Build()
		if got, _ := next.Page(upstream.Tools, "", 10); string(got) != string(want) || next.Version(upstream.Tools) != first.Version(upstream.Tools) {
			t.Fatalf("a rebuild without change gave another list:\n%s\nthen\n%s", want, got)
		}
	}
}

// TestFilteredReadsRefuseURIsThatHideTheirTarget: where a filter or a profile restricts
// reads, a URI whose target a server would resolve differently from its text (dot segments,
// needless percent-escapes, control characters) is refused; plain URIs are judged as before.
func TestFilteredReadsRefuseURIsThatHideTheirTarget(t *testing.T) {
	var shaping Shaping
	shaping.Filters[upstream.Resources] = mustFilter(t, []string{"file:///srv/*"}, []string{"file:///srv/secret/*"})
	ns := Namespaces([]Namespace{{Name: "fs", Prefix: "fs", Shaping: shaping}, {Name: "open", Prefix: "open"}}, nil)
	fs := &fakeSource{ns: ns[0], catalog: catalogOf(map[upstream.Kind][]string{upstream.ResourceTemplates: {"notes://{id}"}})}
	open := &fakeSource{ns: ns[1], catalog: catalogOf(nil)}
	snap := NewBuilder(sourcesOf(fs, open), "__", nil).Build()
	for uri, readable := range map[string]bool{
		"fs+file:///srv/public/a.md":             true,
		"fs+file:///srv/public/a%20b.md":         true, // an escape that is needed
		"fs+file:///srv/secret/key":              false,
		"fs+file:///srv/public/../secret/key":    false,
		"fs+file:///srv/public/%2e%2e/secret/k":  false,
		"fs+file:///srv/%73ecret/key":            false,
		"fs+file:///srv/secret%2Fkey":            false,
		"fs+file:///srv/secret/key\n":            false,
		"fs+file:///srv/./secret/key":            false,
		"fs+file:///srv/public\\..\\secret\\key": false,
		"fs+file:///srv/x/..":                    false,
		"fs+notes://42":                          true,
		"fs+notes://../../etc/passwd":            false,
		"fs+notes://a/b":                         false, // {id} expands to no '/'
		"open+file:///anything/../at/all":        true,  // no filter: the server decides
	} {
		if _, _, ok := snap.ResolveURI(uri); ok != readable {
			t.Errorf("ResolveURI(%q) ok = %v, want %v", uri, ok, readable)
		}
	}
	if ns, original, ok := snap.Owner("fs+file:///srv/secret/key"); !ok || ns.Name != "fs" || original != "file:///srv/secret/key" {
		t.Errorf("Owner of a dropped URI = %v, %q, %v; want fs's, for unsubscribing", ns, original, ok)
	}
}

// TestProfileInstructionsComeFromTheUpstreamsItServes: a selector without an upstream
// serves what its patterns match; only those upstreams' instructions reach the profile.
func TestProfileInstructionsComeFromTheUpstreamsItServes(t *testing.T) {
	ns := Namespaces([]Namespace{{Name: "a", Prefix: "a", IncludeInstructions: true}, {Name: "b", Prefix: "b", IncludeInstructions: true}}, nil)
	var srcs []Source
	for _, n := range ns {
		srcs = append(srcs, &fakeSource{ns: n, catalog: toolCatalog("x"), server: &protocol.InitializeResult{Instructions: "use " + n.Name}})
	}
	b := NewBuilder(srcs, "__", nil)
	b.SetProfiles([]*Profile{
		profileOf(t, "a-tools", map[string]map[upstream.Kind][]string{"": {upstream.Tools: {"a__*"}}}),
		profileOf(t, "nothing", map[string]map[upstream.Kind][]string{"b": {upstream.Tools: {}}}),
	})
	snap := b.Build()
	if got := snap.Profile("a-tools").Instructions(); got != "[a] use a" {
		t.Errorf("a-tools instructions = %q, want a's only", got)
	}
	if got := snap.Profile("nothing").Instructions(); got != "" {
		t.Errorf("a profile that serves nothing has instructions %q", got)
	}
	if !snap.Profile("a-tools").Serves(ns[0]) || snap.Profile("a-tools").Serves(ns[1]) || !snap.Serves(ns[1]) {
		t.Error("Serves: a-tools must serve a only, the whole catalog both")
	}
}

// TestDroppedTemplateIsUnknown: a template the filter drops, or a profile does not list, is
// not found by Template (what completion/complete resolves), though its upstream's other
// URIs may still be read.
func TestDroppedTemplateIsUnknown(t *testing.T) {
	var shaping Shaping
	shaping.Filters[upstream.ResourceTemplates] = mustFilter(t, nil, []string{"admin://*"})
	ns := Namespaces([]Namespace{{Name: "fs", Prefix: "fs", Shaping: shaping}}, nil)
	src := &fakeSource{ns: ns[0], catalog: catalogOf(map[upstream.Kind][]string{upstream.ResourceTemplates: {"notes://{id}", "admin://{user}"}})}
	b := NewBuilder(sourcesOf(src), "__", nil)
	b.SetProfiles([]*Profile{profileOf(t, "res", map[string]map[upstream.Kind][]string{"fs": {upstream.Resources: {"*"}}})})
	snap := b.Build()
	if snap.Template("fs+notes://{id}") == nil {
		t.Error("a listed template is not found")
	}
	if snap.Template("fs+admin://{user}") != nil {
		t.Error("a dropped template is found")
	}
	if snap.Profile("res").Template("fs+notes://{id}") != nil {
		t.Error("a template the profile does not list is found there")
	}
}

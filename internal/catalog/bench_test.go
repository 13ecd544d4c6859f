package catalog

import (
	"fmt"
	"testing"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// benchBuilder is a builder over `upstreams` upstreams of `tools` tools each, every one
// prefixed with its name ("up00", "up01", …), as a gateway configured with them builds it.
func benchBuilder(upstreams, tools int) *Builder {
	specs := make([]Namespace, upstreams)
	for u := range specs {
		specs[u] = Namespace{Name: fmt.Sprintf("up%02d", u), Prefix: fmt.Sprintf("up%02d", u)}
	}
	sources := make([]Source, upstreams)
	for u, ns := range Namespaces(specs, nil) {
		items := make([]upstream.Item, tools)
		for i := range items {
			name := fmt.Sprintf("tool_%03d", i)
			items[i] = upstream.Item{Key: name, Raw: toolJSON(name)}
		}
		sources[u] = &fakeSource{
			ns:      ns,
			catalog: upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items}),
			server:  &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion},
		}
	}
	return NewBuilder(sources, "__", nil)
}

func BenchmarkExposedName(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = ExposedName("github", "__", "create_pull_request")
	}
}

func BenchmarkResolveURI(b *testing.B) {
	snap := benchBuilder(20, 1).Build()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := snap.ResolveURI("up07+file:///srv/data/report.csv"); !ok {
			b.Fatal("not resolved")
		}
	}
}

func BenchmarkToolLookup(b *testing.B) {
	snap := benchBuilder(20, 100).Build()
	b.ReportAllocs()
	for b.Loop() {
		if snap.Tool("up13__tool_042") == nil {
			b.Fatal("missing")
		}
	}
}

// BenchmarkToolsListPage is the first page (the default size, 100) of tools/list over 20
// upstreams × 100 tools, served from the merged catalog with no upstream round trip.
func BenchmarkToolsListPage(b *testing.B) {
	snap := benchBuilder(20, 100).Build()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := snap.Page(upstream.Tools, "", 100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCatalogRebuild merges 20 upstreams × 100 tools, as after any list_changed.
func BenchmarkCatalogRebuild(b *testing.B) {
	builder := benchBuilder(20, 100)
	b.ReportAllocs()
	for b.Loop() {
		builder.Build()
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/upstream"
)

// fakeUpstream serves a fixed catalog and answers every call at once, so that benchmarks
// measure the gateway alone.
type fakeUpstream struct {
	name    string
	catalog *upstream.Catalog
	server  *protocol.InitializeResult
	result  json.RawMessage
}

func (f *fakeUpstream) Name() string                       { return f.name }
func (f *fakeUpstream) Catalog() *upstream.Catalog         { return f.catalog }
func (f *fakeUpstream) Server() *protocol.InitializeResult { return f.server }
func (f *fakeUpstream) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return f.result, nil
}
func (f *fakeUpstream) Notify(context.Context, string, json.RawMessage) error { return nil }
func (f *fakeUpstream) State() upstream.State                                 { return upstream.StateReady }
func (f *fakeUpstream) Status() upstream.Status                               { return upstream.Status{State: upstream.StateReady} }
func (f *fakeUpstream) Run(ctx context.Context)                               { <-ctx.Done() }
func (f *fakeUpstream) Close() error                                          { return nil }
func (f *fakeUpstream) Refresh()                                              {}

// toolJSON is a typical tool entry: a name, a description and a small input schema.
func toolJSON(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"name":%q,"description":"Echoes the text it is given, for benchmarks of the gateway's catalog.","inputSchema":{"type":"object","properties":{"text":{"type":"string","description":"the text"}},"required":["text"]}}`, name))
}

// useFakeUpstreams makes clients g's upstreams, in order, each prefixed with its name, and
// builds the merged catalog over them. g was made without upstreams.
func useFakeUpstreams(g *Gateway, clients ...upstreamClient) {
	specs := make([]catalog.Namespace, len(clients))
	for i, c := range clients {
		specs[i] = catalog.Namespace{Name: c.Name(), Prefix: c.Name()}
	}
	var list []*upstreamEntry
	sources := make([]catalog.Source, len(clients))
	for i, ns := range catalog.Namespaces(specs, g.logger) {
		u := newUpstreamEntry(ns, clients[i], false)
		list = append(list, u)
		sources[i] = u
	}
	g.ups.Store(&upstreamSet{all: list, live: list})
	g.builder = catalog.NewBuilder(sources, g.cfg.Separator, g.logger)
	profiles, err := profilesOf(g.cfg.Profiles)
	if err != nil {
		panic(err)
	}
	g.builder.SetProfiles(profiles)
	g.snapshot.Store(g.builder.Build())
}

// emptyGateway is a gateway without upstreams, closed when the test ends; tests give it fakes
// with useFakeUpstreams. opts may be nil; its Logger defaults to discarding.
func emptyGateway(tb testing.TB, opts *Options) *Gateway {
	tb.Helper()
	cfg, err := config.Parse("t.yaml", []byte("upstreams: []\n"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g, err := New(cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// benchGateway is a gateway over fake upstreams of `tools` tools each, serving through its
// real HTTP handler.
func benchGateway(b testing.TB, upstreams, tools int) *Gateway {
	b.Helper()
	return benchGatewayOn(b, upstreams, tools, "")
}

// authSessions lets the benchmarks' one client address hold every session they make.
const authSessions = "auth: {max_sessions_per_address: 100000}\n"

// benchGatewayOn is benchGateway with more top-level settings (a session store).
func benchGatewayOn(b testing.TB, upstreams, tools int, settings string) *Gateway {
	b.Helper()
	return benchGatewayOpts(b, upstreams, tools, settings, &Options{})
}

// benchGatewayOpts is benchGatewayOn with options (a tracer); their Logger is set to discard.
func benchGatewayOpts(b testing.TB, upstreams, tools int, settings string, opts *Options) *Gateway {
	b.Helper()
	cfg, err := config.Parse("bench.yaml", []byte("max_sessions: 100000\n"+authSessions+settings+"upstreams: []\n"), nil)
	if err != nil {
		b.Fatal(err)
	}
	o := *opts
	o.Logger = slog.New(slog.DiscardHandler)
	g, err := New(cfg, &o)
	if err != nil {
		b.Fatal(err)
	}
	clients := make([]upstreamClient, upstreams)
	for u := range upstreams {
		items := make([]upstream.Item, tools)
		for i := range items {
			name := fmt.Sprintf("tool_%03d", i)
			items[i] = upstream.Item{Key: name, Raw: toolJSON(name)}
		}
		name := fmt.Sprintf("up%02d", u)
		f := &fakeUpstream{
			name:    name,
			catalog: upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: items}),
			server:  &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion},
			result:  json.RawMessage(`{"content":[{"type":"text","text":"hello"}]}`),
		}
		clients[u] = f
	}
	useFakeUpstreams(g, clients...)
	b.Cleanup(func() { g.Close() })
	return g
}

// post sends one JSON-RPC message through the handler.
func post(h http.Handler, sid, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

const benchInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"bench","version":"1.0.0"}}}`

func initSession(b testing.TB, h http.Handler) string {
	rec := post(h, "", benchInit)
	sid := rec.Header().Get("Mcp-Session-Id")
	if rec.Code != http.StatusOK || sid == "" {
		b.Fatalf("initialize: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); rec.Code != http.StatusAccepted {
		b.Fatalf("initialized: %d", rec.Code)
	}
	return sid
}

// BenchmarkCallToolThroughHandler is one tools/call through the whole HTTP handler (session
// lookup, decode, routing, params rewrite, encode) against an upstream that answers at once.
func BenchmarkCallToolThroughHandler(b *testing.B) {
	benchCallTool(b, benchGateway(b, 20, 100))
}

// benchCallTool measures one tools/call after another through g's handler.
func benchCallTool(b *testing.B, g *Gateway) {
	h := g.Handler()
	sid := initSession(b, h)
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up13__tool_042","arguments":{"text":"hello"},"_meta":{"progressToken":"p1"}}}`
	b.ReportAllocs()
	for b.Loop() {
		if rec := post(h, sid, body); rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkCallToolRedisStore is BenchmarkCallToolThroughHandler with the sessions in the
// Redis at 127.0.0.1:6379 (skipped when none answers): what the store adds to a call.
func BenchmarkCallToolRedisStore(b *testing.B) {
	addr := testredis.Addr(b)
	benchCallTool(b, benchGatewayOn(b, 20, 100, fmt.Sprintf("session_store: {type: redis, url: \"redis://%s/0\", key_prefix: %s}\n", addr, testredis.Prefix(b, addr))+testKeysYAML))
}

// BenchmarkCatalogHeap reports the heap that the merged catalog of 20 upstreams × 100 tools
// holds (the upstreams' own lists included).
func BenchmarkCatalogHeap(b *testing.B) {
	for b.Loop() {
		before := heapInUse()
		g := benchGateway(b, 20, 100)
		after := heapInUse()
		b.ReportMetric(float64(after-before), "heap-bytes")
		runtime.KeepAlive(g)
	}
}

// BenchmarkSessionHeap creates 5,000 initialized sessions through the handler (no sockets)
// and reports the heap each holds; the "stream" case also holds each session's standalone
// GET stream open, and reports the goroutine stacks those streams use. The test harness's own
// objects (a request and a recorder per stream, and the goroutine that serves it) are measured
// alone in the same run and taken off: heap-bytes/session is the gateway's own, harness-bytes/session
// what the harness held beside it (a real server holds its connection's buffers instead).
func BenchmarkSessionHeap(b *testing.B) {
	const sessions = 5000
	for _, withStream := range []bool{false, true} {
		name := "no-stream"
		if withStream {
			name = "with-stream"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				g := benchGateway(b, 1, 10)
				h := g.Handler()
				initSession(b, h) // warm up lazily built state
				var harness uint64
				if withStream {
					harness = harnessHeap(sessions)
				}
				heapBefore, stackBefore := heapInUse(), stackInUse()
				ids := make([]string, sessions)
				for i := range ids {
					ids[i] = initSession(b, h)
				}
				ctx, cancel := context.WithCancel(context.Background())
				var streams *sync.WaitGroup
				if withStream {
					streams = openStreams(b, g, ctx, ids)
				}
				heapAfter, stackAfter := heapInUse(), stackInUse()
				b.ReportMetric(float64(heapAfter-heapBefore-harness)/sessions, "heap-bytes/session")
				if withStream {
					b.ReportMetric(float64(harness)/sessions, "harness-bytes/session")
					b.ReportMetric(float64(stackAfter-stackBefore)/sessions, "stack-bytes/session")
				}
				cancel()
				if streams != nil {
					streams.Wait()
				}
			}
		})
	}
}

// getStream is the request that opens a session's standalone stream through the handler,
// as the harness makes it.
func getStream(ctx context.Context, sid string) (*http.Request, *httptest.ResponseRecorder) {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8080/mcp", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	return req, httptest.NewRecorder()
}

// openStreams opens the standalone stream of every session in ids, each served on a goroutine
// until ctx ends or its session does, and returns once all are listening.
func openStreams(tb testing.TB, g *Gateway, ctx context.Context, ids []string) *sync.WaitGroup {
	tb.Helper()
	h := g.Handler()
	var wg sync.WaitGroup
	for _, sid := range ids {
		ls, err := g.hub.Open(sid, "")
		if err != nil {
			tb.Fatal(err)
		}
		wg.Go(func() {
			req, rec := getStream(ctx, sid)
			h.ServeHTTP(rec, req)
		})
		for !ls.Listening() {
			runtime.Gosched()
		}
	}
	return &wg
}

// harnessHeap is the heap that n streams' harness objects hold alone: the same requests and
// recorders, each held by a goroutine that waits as a stream's would.
func harnessHeap(n int) uint64 {
	before := heapInUse()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(n)
	for i := range n {
		wg.Go(func() {
			req, rec := getStream(ctx, fmt.Sprintf("%032d", i))
			started.Done()
			<-req.Context().Done()
			runtime.KeepAlive(rec)
		})
	}
	started.Wait()
	after := heapInUse()
	cancel()
	wg.Wait()
	return after - before
}

// TestSessionsLeaveNothingBehind runs cycles of 5,000 sessions, each with its standalone GET
// stream open, ended by DELETE: after each cycle the heap and the goroutines are back where the
// first cycle left them, so a long run stays flat. (The first cycle leaves what is kept for
// reuse: the room Go maps grew to, and the runtime's descriptors of ended goroutines.)
func TestSessionsLeaveNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 sessions per cycle")
	}
	const sessions, cycles = 5000, 3
	g := benchGateway(t, 1, 10)
	h := g.Handler()
	initSession(t, h) // lazily built state
	goroutinesBefore, heapBefore := runtime.NumGoroutine(), heapInUse()
	var heapAfter []uint64
	for range cycles {
		ids := make([]string, sessions)
		for i := range ids {
			ids[i] = initSession(t, h)
		}
		streams := openStreams(t, g, t.Context(), ids)
		for _, sid := range ids {
			req := httptest.NewRequest(http.MethodDelete, "http://127.0.0.1:8080/mcp", nil)
			req.Header.Set("Mcp-Session-Id", sid)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
			}
		}
		streams.Wait() // each stream ends with its session
		g.hub.Sweep(time.Now().Add(time.Hour))
		heapAfter = append(heapAfter, heapInUse())
	}
	if n := runtime.NumGoroutine(); n > goroutinesBefore {
		t.Errorf("%d goroutines after %d cycles, %d before", n, cycles, goroutinesBefore)
	}
	if n := len(g.hub.Sessions()); n != 1 {
		t.Errorf("the hub holds %d sessions, want the 1 left open", n)
	}
	perSession := func(after, before uint64) float64 { return (float64(after) - float64(before)) / sessions }
	t.Logf("heap left per session after each cycle, against the start: %.0f, %.0f, %.0f bytes",
		perSession(heapAfter[0], heapBefore), perSession(heapAfter[1], heapBefore), perSession(heapAfter[2], heapBefore))
	if grown := perSession(heapAfter[cycles-1], heapAfter[0]); grown > 64 {
		t.Errorf("the heap grew by %.0f bytes per session between the first cycle and the last: something of ended sessions stays", grown)
	}
	if left := perSession(heapAfter[0], heapBefore); left > 1024 {
		t.Errorf("%.0f bytes per session left after the first cycle, want at most the room kept for reuse (1 KB)", left)
	}
}

// heapInUse is the heap in use after two collections.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func stackInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

// BenchmarkParkedCallHeap parks 200 calls of 2026-07-28 clients, each waiting for its
// client's answer to an upstream's sampling request, through the handler, and reports what
// each parked call holds: heap and goroutine stacks. The upstream (the "reverse" test server
// over Streamable HTTP) runs in this process, and its share, a handler waiting on its request,
// is in the figures; heap-bytes/parked and stack-bytes/parked are upper bounds of the
// gateway's.
func BenchmarkParkedCallHeap(b *testing.B) {
	const calls = 200
	server, err := testupstream.New("reverse")
	if err != nil {
		b.Fatal(err)
	}
	reverse := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	b.Cleanup(reverse.Close)
	cfg, err := config.Parse("bench.yaml", []byte("modern_protocol: true\nmax_calls_per_principal: 100000\nupstreams:\n  - name: r\n    url: "+reverse.URL+"\n"), nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		g, err := New(cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		g.Start()
		stop := sync.OnceFunc(func() { g.Close() })
		b.Cleanup(stop)
		h := g.Handler()
		// A list waits for the upstream's first start: its tools are then known.
		list := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
		for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"} {
			list.Header.Set(k, v)
		}
		h.ServeHTTP(httptest.NewRecorder(), list)
		park := func(i int) {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}}},"name":"r__ask","arguments":{"text":"q"}}}`, i)
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp", strings.NewReader(body))
			for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
				"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "r__ask"} {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if !strings.Contains(rec.Body.String(), `"input_required"`) {
				b.Fatalf("call %d: %d %s; want input_required", i, rec.Code, rec.Body)
			}
		}
		park(0) // the upstream's connection and the catalog are built once
		heapBefore, stackBefore := heapInUse(), stackInUse()
		for i := 1; i <= calls; i++ {
			park(i)
		}
		heapAfter, stackAfter := heapInUse(), stackInUse()
		if n := g.streamable.stateless.parked.count(); n != calls+1 {
			b.Fatalf("%d calls parked, want %d", n, calls+1)
		}
		b.ReportMetric(float64(heapAfter-heapBefore)/calls, "heap-bytes/parked")
		b.ReportMetric(float64(stackAfter-stackBefore)/calls, "stack-bytes/parked")
		stop()
	}
}

// eraCall is one tools/call of up13__tool_042 in a protocol era, as cmd/mcpload sends it: a
// 2025-11-25 call in an initialized session, a 2026-07-28 one with no session, its version,
// capabilities and client info in _meta and its method and tool in headers.
type eraCall struct {
	era  string
	body string
	// header returns the headers of one worker's calls, opening its session through h when
	// the era has sessions.
	header func(tb testing.TB, h http.Handler) http.Header
}

var eraCalls = []eraCall{
	{
		era:  "2025-11-25",
		body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up13__tool_042","arguments":{"text":"hello"}}}`,
		header: func(tb testing.TB, h http.Handler) http.Header {
			return http.Header{"Mcp-Session-Id": {initSession(tb, h)}}
		},
	},
	{
		era:  "2026-07-28",
		body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcpload","version":"1"}},"name":"up13__tool_042","arguments":{"text":"hello"}}}`,
		header: func(testing.TB, http.Handler) http.Header {
			return http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"up13__tool_042"}}
		},
	},
}

// postEra sends c's call with header through h and fails tb unless it is answered.
func postEra(tb testing.TB, h http.Handler, c eraCall, header http.Header) {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/mcp", strings.NewReader(c.body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), `"error"`) {
		tb.Fatalf("%s tools/call: %d %s", c.era, rec.Code, rec.Body)
	}
}

// BenchmarkCallEras is one tools/call through the whole HTTP handler in each protocol era,
// on the same gateway (sessions in memory) against an upstream that answers at once: what a
// 2026-07-28 request's own checks cost beside a 2025-11-25 session's lookup. "serial" is one
// call after another; "n32" keeps 32 calls in flight, a session per worker for 2025-11-25,
// as bench/run's N=32. Compare the eras' ns/op and allocs/op within one run.
func BenchmarkCallEras(b *testing.B) {
	g := benchGatewayOn(b, 20, 100, "modern_protocol: true\n")
	h := g.Handler()
	for _, c := range eraCalls {
		b.Run("era="+c.era+"/serial", func(b *testing.B) {
			header := c.header(b, h)
			b.ReportAllocs()
			for b.Loop() {
				postEra(b, h, c, header)
			}
		})
		b.Run("era="+c.era+"/n32", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				header := c.header(b, h)
				for pb.Next() {
					postEra(b, h, c, header)
				}
			})
		})
	}
}

// BenchmarkCallToolMetrics is BenchmarkCallToolThroughHandler with metrics off and on
// (metrics.listen set): what recording a call's metrics adds, in time and allocations.
func BenchmarkCallToolMetrics(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchCallTool(b, benchGatewayOn(b, 20, 100, "")) })
	b.Run("on", func(b *testing.B) { benchCallTool(b, benchGatewayOn(b, 20, 100, "metrics: {listen: 127.0.0.1:0}\n")) })
}

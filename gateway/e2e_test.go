package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"github.com/manifold-mcp/manifold/upstream"
)

func TestMain(m *testing.M) {
	code := testupstream.RunTests(m, closeShared)
	testredis.Stop()
	if pluginDir != "" {
		_ = os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// upstreamYAML is one test upstream entry: the test binary re-executed as a go-sdk server.
// It inherits GOCOVERDIR, so that its coverage counts in a -cover run, and GORACE.
func upstreamYAML(name, flavor, extra string) string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`
  - name: %s
    command: %q
    env:
      %s: %s
      %s: %s
    inherit_env: [GOCOVERDIR, GORACE]
%s`, name, exe, testupstream.EnvFlavor, flavor, testupstream.EnvRun, testupstream.Marker, extra)
}

// testGateway is a gateway serving real HTTP in front of real upstream processes.
type testGateway struct {
	gw  *gateway.Gateway
	srv *httptest.Server
	url string
}

func startGateway(t testing.TB, yaml string, opts *gateway.Options) *testGateway {
	t.Helper()
	return startGatewayWith(t, yaml, opts, true)
}

func startGatewayWith(t testing.TB, yaml string, opts *gateway.Options, waitForUpstreams bool) *testGateway {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return startConfigured(t, cfg, opts, waitForUpstreams)
}

// startConfigured is startGateway for a config already built.
func startConfigured(t testing.TB, cfg *config.Config, opts *gateway.Options, waitForUpstreams bool) *testGateway {
	t.Helper()
	if opts == nil {
		opts = &gateway.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if testing.Verbose() {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	if wrapBackends && opts.Backends == nil && cfg.SessionStore.Type == config.StoreRedis {
		o := *opts
		o.Backends = wrapped(t, cfg, &o)
		opts = &o
	}
	gw, err := gateway.New(cfg, opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	gw.Start()
	// The gateway's own server settings (its timeouts), on a test listener.
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = gw.Server()
	srv.Start()
	tg := &testGateway{gw: gw, srv: srv, url: srv.URL + "/mcp"}
	if waitForUpstreams {
		waitReady(t, gw, len(cfg.EnabledUpstreams()))
	}
	return tg
}

func (tg *testGateway) close() {
	// The gateway first: its sessions end, and with them the requests that HTTP handlers serve,
	// so the server's Close, which waits for its handlers, need not wait for calls to end.
	tg.gw.Close()
	tg.srv.Close()
}

func waitReady(t testing.TB, gw *gateway.Gateway, n int) {
	t.Helper()
	if !testwait.Within(30*time.Second, func() bool {
		ready := 0
		for _, s := range gw.UpstreamStatuses() {
			if s.State == upstream.StateReady {
				ready++
			}
		}
		return ready == n
	}) {
		t.Fatalf("upstreams not ready: %v", gw.UpstreamStatuses())
	}
}

var (
	sharedOnce sync.Once
	shared     *testGateway
	sharedMu   sync.Mutex
)

// sharedGateway is one gateway for the tests that only read: alpha, beta and many, with a
// page size of 10 so that lists span pages.
func sharedGateway(t *testing.T) *testGateway {
	t.Helper()
	sharedOnce.Do(func() {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		shared = startGateway(t, "listen: 127.0.0.1:0\npage_size: 10\nupstreams:"+
			upstreamYAML("alpha", "alpha", "    include_instructions: true\n")+
			upstreamYAML("beta", "beta", "")+
			upstreamYAML("many", "many", ""), nil)
	})
	if shared == nil {
		t.Fatal("shared gateway failed to start")
	}
	return shared
}

func closeShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.close()
	}
	if shaped != nil {
		shaped.close()
	}
}

func connect(t *testing.T, url string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func textOf(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) == 0 {
		t.Fatalf("empty content: %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content[0] is %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestNamespacedCatalog(t *testing.T) {
	tg := sharedGateway(t)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)

	init := cs.InitializeResult()
	if init.ProtocolVersion != "2025-11-25" {
		t.Errorf("negotiated %q, want 2025-11-25", init.ProtocolVersion)
	}
	if init.Capabilities.Tools == nil || !init.Capabilities.Tools.ListChanged {
		t.Errorf("tools capability %+v, want listChanged", init.Capabilities.Tools)
	}
	if init.Instructions != "[alpha] instructions of alpha" {
		t.Errorf("instructions %q: want alpha's only (beta is not marked to include them)", init.Instructions)
	}

	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"alpha__echo", "alpha__whoami", "beta__echo", "beta__whoami", "beta__add", "many__tool_00", "many__tool_24", "many__add_tool"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s; got %v", want, names)
		}
	}
	if len(names) != 5+26+len(addedSoFar(names)) {
		t.Errorf("got %d tools across pages, want %d: %v", len(names), 5+26, names)
	}

	for _, tc := range []struct{ tool, args, want string }{
		{"alpha__echo", `{"text":"hi"}`, "alpha:hi"},
		{"beta__echo", `{"text":"hi"}`, "beta:hi"},
		{"alpha__whoami", `{}`, "alpha"},
		{"many__tool_07", `{}`, "tool_07"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: json.RawMessage(tc.args)})
			if err != nil {
				t.Fatal(err)
			}
			if got := textOf(t, res); got != tc.want {
				t.Errorf("%s answered %q, want %q", tc.tool, got, tc.want)
			}
		})
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "beta__add", Arguments: map[string]any{"a": 2, "b": 40}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"sum": float64(42)}, res.StructuredContent); diff != "" {
		t.Errorf("structuredContent passes through untouched (-want +got):\n%s", diff)
	}
}

func addedSoFar(names []string) []string {
	var added []string
	for _, n := range names {
		if strings.HasPrefix(n, "many__added_") {
			added = append(added, n)
		}
	}
	return added
}

func TestUnknownToolIsInvalidParams(t *testing.T) {
	tg := sharedGateway(t)
	cs := connect(t, tg.url, nil)
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "nope__echo"})
	if err == nil || !strings.Contains(err.Error(), "unknown tool: nope__echo") {
		t.Fatalf("err = %v, want unknown tool", err)
	}
}

func TestPaginationAcrossPages(t *testing.T) {
	tg := sharedGateway(t)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	first, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != 10 || first.NextCursor == "" {
		t.Fatalf("first page has %d tools, cursor %q; want 10 and a cursor", len(first.Tools), first.NextCursor)
	}
	second, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: first.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if second.Tools[0].Name == first.Tools[0].Name {
		t.Errorf("second page starts where the first did")
	}
	again, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: first.NextCursor})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(toolNames(second.Tools), toolNames(again.Tools)); diff != "" {
		t.Errorf("the same cursor gave another page (-first +second):\n%s", diff)
	}
	_, err = cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: "not-a-cursor"})
	if err == nil || !strings.Contains(err.Error(), "cursor") {
		t.Errorf("bogus cursor: err = %v, want an invalid cursor error", err)
	}
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	return names
}

func TestResourcesAndTemplates(t *testing.T) {
	tg := sharedGateway(t)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)

	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, r.URI)
	}
	if diff := cmp.Diff([]string{"alpha+file:///readme.txt", "beta+file:///readme.txt"}, uris); diff != "" {
		t.Errorf("resources (-want +got):\n%s", diff)
	}
	var templates []string
	for rt, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, rt.URITemplate)
	}
	if diff := cmp.Diff([]string{"alpha+file:///notes/{id}", "beta+file:///notes/{id}"}, templates); diff != "" {
		t.Errorf("templates (-want +got):\n%s", diff)
	}

	for _, tc := range []struct{ uri, want string }{
		{"alpha+file:///readme.txt", "readme of alpha"},
		{"beta+file:///readme.txt", "readme of beta"},
		{"beta+file:///notes/42", "beta note 42"}, // a client-expanded template maps back
	} {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: tc.uri})
		if err != nil {
			t.Fatalf("read %s: %v", tc.uri, err)
		}
		if got := res.Contents[0].Text; got != tc.want {
			t.Errorf("read %s = %q, want %q", tc.uri, got, tc.want)
		}
		if got := res.Contents[0].URI; got != tc.uri {
			t.Errorf("read %s: contents uri %q, want the exposed URI", tc.uri, got)
		}
	}
	_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "nobody+file:///x"})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown resource: err = %v, want resource not found", err)
	}
}

func TestPrompts(t *testing.T) {
	tg := sharedGateway(t)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	var names []string
	for p, err := range cs.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"alpha__greet", "beta__greet"}, names); diff != "" {
		t.Errorf("prompts (-want +got):\n%s", diff)
	}
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "beta__greet", Arguments: map[string]string{"who": "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Messages[0].Content.(*mcp.TextContent).Text; got != "beta greets ada" {
		t.Errorf("prompt text %q", got)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "gamma__greet"}); err == nil || !strings.Contains(err.Error(), "unknown prompt") {
		t.Errorf("unknown prompt: err = %v", err)
	}
}

func TestListChangedReachesClient(t *testing.T) {
	tg := sharedGateway(t)
	changed := make(chan struct{}, 8)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	// The go-sdk client opens its standalone stream in the background; a list round trip
	// after connecting does not prove it is open, so add tools until a notification arrives.
	deadline := time.After(10 * time.Second)
	var added string
	for added == "" {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "many__add_tool"})
		if err != nil {
			t.Fatal(err)
		}
		name := textOf(t, res)
		select {
		case <-changed:
			added = name
		case <-time.After(500 * time.Millisecond):
		case <-deadline:
			t.Fatal("no tools/list_changed reached the client")
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "many__" + added})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != added {
		t.Errorf("the added tool answered %q, want %q", got, added)
	}
}

func TestOlderProtocolVersions(t *testing.T) {
	tg := sharedGateway(t)
	for _, v := range []string{"2025-06-18", "2025-03-26", "2024-11-05"} {
		t.Run(v, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil)
			cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Errorf("negotiated %q, want %q", got, v)
			}
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": v}})
			if err != nil {
				t.Fatal(err)
			}
			if got := textOf(t, res); got != "alpha:"+v {
				t.Errorf("got %q", got)
			}
		})
	}
}

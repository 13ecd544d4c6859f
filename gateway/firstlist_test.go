package gateway_test

import (
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/upstream"
)

// TestFirstListHoldsTheToolsOfAnUpstreamJustReady: a list request right after the gateway
// started waits for the upstreams' first attempts to start (first_list_wait). It went on as
// soon as every upstream's state was ready, a moment before the catalog held that upstream's
// items, and came back without them (seen as a first tools/list of the example config with
// one of its two demo upstreams missing). The catalog's merge with the last upstream to
// start is held here until the list either waits for it or has been answered.
func TestFirstListHoldsTheToolsOfAnUpstreamJustReady(t *testing.T) {
	tg, answered := startWithFirstMergeHeld(t)
	ctx := ctxT(t)
	cs := connect(t, tg.url, nil)
	res, err := cs.ListTools(ctx, nil)
	answered()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(res.Tools))
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Contains(names, "alpha__echo") {
		t.Errorf("the first tools/list: %q, want alpha's tools", names)
	}
}

// TestFirstCallWaitsForTheUpstreamsFirstStart: a tools/call right after the gateway started,
// naming a tool of an upstream still making its first attempt to start, waits for it as a
// list does (first_list_wait). It was answered "unknown tool" at once: a desktop host that
// starts `gateway stdio` and calls a tool it knows without listing first got that error.
func TestFirstCallWaitsForTheUpstreamsFirstStart(t *testing.T) {
	tg, answered := startWithFirstMergeHeld(t)
	ctx := ctxT(t)
	cs := connect(t, tg.url, nil)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": "first"}})
	answered()
	if err != nil {
		t.Fatalf("the first call: %v, want alpha's answer", err)
	}
	if got := textOf(t, res); res.IsError || got != "alpha:first" {
		t.Errorf("the first call: %q (error %v), want alpha:first", got, res.IsError)
	}
}

// startWithFirstMergeHeld starts a gateway with upstream alpha and returns it once alpha is
// ready and its items not yet merged into the catalog: the merge is held until a request
// begins to wait for the upstreams' first starts, or answered is called (the request was
// answered without waiting).
func startWithFirstMergeHeld(t *testing.T) (tg *testGateway, answered func()) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nfirst_list_wait: 1m\nupstreams:"+upstreamYAML("alpha", "alpha", "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	listWaits, listAnswered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gw.SetTestHooks(func() {
		if gw.UpstreamStatus("alpha").State != upstream.StateReady {
			return
		}
		once.Do(func() {
			close(entered)
			select {
			case <-listWaits:
			case <-listAnswered:
			}
		})
	}, nil)
	var waitOnce sync.Once
	gw.SetFirstListHook(func() { waitOnce.Do(func() { close(listWaits) }) })
	gw.Start()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = gw.Server()
	srv.Start()
	tg = &testGateway{gw: gw, srv: srv, url: srv.URL + "/mcp"}
	var answerOnce sync.Once
	answered = func() { answerOnce.Do(func() { close(listAnswered) }) }
	t.Cleanup(tg.close)
	t.Cleanup(answered)
	select {
	case <-entered: // alpha is ready, and its items are not yet merged
	case <-ctxT(t).Done():
		t.Fatal("the upstream never became ready")
	}
	return tg, answered
}

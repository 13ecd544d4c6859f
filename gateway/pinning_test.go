package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// rugpullYAML is an upstream of the "rugpull" flavor: its fetch tool is described by
// description ("" for the default) and changes when rug_pull is called.
func rugpullYAML(name, description, extra string) string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	env := ""
	if description != "" {
		env = fmt.Sprintf("      RUGPULL_DESCRIPTION: %q\n", description)
	}
	return fmt.Sprintf(`
  - name: %s
    command: %q
    env:
      %s: rugpull
      %s: %s
%s    inherit_env: [GOCOVERDIR, GORACE]
%s`, name, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker, env, extra)
}

type pinView struct {
	Upstream string `json:"upstream"`
	Tool     string `json:"tool"`
	Hash     string `json:"hash"`
	Withheld bool   `json:"withheld"`
	Change   *struct {
		Hash string `json:"hash"`
		Diff []struct {
			Field  string          `json:"field"`
			Before json.RawMessage `json:"before"`
			After  json.RawMessage `json:"after"`
		} `json:"diff"`
	} `json:"change"`
}

func (a *adminClient) pin(upstream, tool string) pinView {
	a.t.Helper()
	var got struct {
		Pins []pinView `json:"pins"`
	}
	a.do("GET", "/api/pins", nil, &got)
	for _, p := range got.Pins {
		if p.Upstream == upstream && p.Tool == tool {
			return p
		}
	}
	a.t.Fatalf("no pin of %s/%s in %+v", upstream, tool, got.Pins)
	return pinView{}
}

// toolDescriptions lists a session's tools by name.
func toolDescriptions(t *testing.T, cs *mcp.ClientSession) map[string]string {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool.Description
	}
	return out
}

// TestChangedToolIsWithheldUntilAccepted: with pinning: withhold, a tool whose description
// the upstream changes after it was pinned disappears for clients (an unknown tool when
// called), and the admin API shows the change with its diff; once an operator accepts it,
// the tool is back with its new definition.
func TestChangedToolIsWithheldUntilAccepted(t *testing.T) {
	tg := startGateway(t, adminYAML("")+"listen: 127.0.0.1:0\nupstreams:"+rugpullYAML("r", "", "    pinning: withhold\n"), nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	cs := connect(t, tg.url, nil)
	if got := toolDescriptions(t, cs); got["r__fetch"] != "fetches a page" {
		t.Fatalf("tools before the change: %v", got)
	}
	before := adm.pin("r", "fetch")
	if before.Change != nil || before.Withheld || !strings.HasPrefix(before.Hash, "sha256:") {
		t.Fatalf("pin at first sight: %+v", before)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__rug_pull"}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolDescriptions(t, cs)["r__fetch"]; return !listed }) {
		t.Fatalf("the changed tool is still listed: %v", toolDescriptions(t, cs))
	}
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__fetch", Arguments: map[string]any{"text": "x"}})
	if err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("calling the withheld tool: %v, want unknown tool", err)
	}
	changed := adm.pin("r", "fetch")
	if !changed.Withheld || changed.Change == nil || changed.Hash != before.Hash || len(changed.Change.Diff) != 1 || changed.Change.Diff[0].Field != "description" ||
		!strings.Contains(string(changed.Change.Diff[0].After), "id_rsa") {
		t.Fatalf("pin after the change: %+v", changed)
	}
	var cat struct {
		Tools []struct {
			Name, Upstream, Original string
			Withheld                 bool
		} `json:"tools"`
	}
	adm.do("GET", "/api/catalog", nil, &cat)
	if !slices.ContainsFunc(cat.Tools, func(t struct {
		Name, Upstream, Original string
		Withheld                 bool
	}) bool {
		return t.Upstream == "r" && t.Original == "fetch" && t.Withheld
	}) {
		t.Errorf("the admin catalog does not show the withheld tool: %+v", cat.Tools)
	}
	var ups struct {
		Upstreams []struct {
			Name     string `json:"name"`
			State    string `json:"state"`
			Withheld int    `json:"withheld"`
		} `json:"upstreams"`
	}
	adm.do("GET", "/api/upstreams", nil, &ups)
	if len(ups.Upstreams) != 1 || ups.Upstreams[0].State != "ready" || ups.Upstreams[0].Withheld != 1 {
		t.Errorf("upstreams: %+v", ups.Upstreams)
	}

	if code := adm.do("POST", "/api/pins/r/fetch", map[string]string{"decision": "accept", "hash": before.Hash}, nil); code != http.StatusConflict {
		t.Errorf("accepting another hash than the change's: %d, want 409", code)
	}
	if code := (&adminClient{t: t, url: adm.url}).do("POST", "/api/pins/r/fetch", map[string]string{"decision": "accept", "hash": changed.Change.Hash}, nil); code != http.StatusUnauthorized {
		t.Errorf("accepting without admin credentials: %d, want 401", code)
	}
	if code := adm.do("POST", "/api/pins/r/fetch", map[string]string{"decision": "accept", "hash": changed.Change.Hash}, nil); code != http.StatusOK {
		t.Fatalf("accept: %d", code)
	}
	if !testwait.Within(10*time.Second, func() bool { return strings.Contains(toolDescriptions(t, cs)["r__fetch"], "id_rsa") }) {
		t.Fatalf("the accepted tool is not back: %v", toolDescriptions(t, cs))
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__fetch", Arguments: map[string]any{"text": "x"}}); err != nil || resultText(res) != "fetched:x" {
		t.Errorf("the accepted tool: %v %v", res, err)
	}
	if after := adm.pin("r", "fetch"); after.Withheld || after.Change != nil || after.Hash != changed.Change.Hash {
		t.Errorf("pin after acceptance: %+v", after)
	}
}

// TestPinningLogOnlyKeepsServing: with pinning: log, a changed tool is still served, and the
// change is recorded for an operator to see.
func TestPinningLogOnlyKeepsServing(t *testing.T) {
	tg := startGateway(t, adminYAML("")+"listen: 127.0.0.1:0\nupstreams:"+rugpullYAML("r", "", "    pinning: log\n"), nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	cs := connect(t, tg.url, nil)
	if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "r__rug_pull"}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Within(10*time.Second, func() bool { return strings.Contains(toolDescriptions(t, cs)["r__fetch"], "id_rsa") }) {
		t.Fatalf("the changed tool is not served: %v", toolDescriptions(t, cs))
	}
	if p := adm.pin("r", "fetch"); p.Withheld || p.Change == nil {
		t.Errorf("pin in log mode: %+v", p)
	}
}

// TestPinsOutliveARestart: with the memory store, pins are kept in state_dir, so a
// definition that changed while the gateway was down is caught at the next start.
func TestPinsOutliveARestart(t *testing.T) {
	dir := t.TempDir()
	yaml := func(description string) string {
		return fmt.Sprintf("listen: 127.0.0.1:0\nstate_dir: %q\nupstreams:", dir) + rugpullYAML("r", description, "    pinning: withhold\n")
	}
	first := startGateway(t, yaml(""), nil)
	cs := connect(t, first.url, nil)
	if _, listed := toolDescriptions(t, cs)["r__fetch"]; !listed {
		t.Fatal("fetch is not listed at first sight")
	}
	cs.Close()
	first.close()
	if _, err := os.Stat(dir + "/pins.json"); err != nil {
		t.Fatalf("no pins file: %v", err)
	}

	second := startGateway(t, yaml("fetches a page, and mails it to the upstream's owner"), nil)
	defer second.close()
	got := toolDescriptions(t, connect(t, second.url, nil))
	if _, listed := got["r__fetch"]; listed {
		t.Errorf("a tool changed across a restart is served: %v", got)
	}
	if _, listed := got["r__rug_pull"]; !listed {
		t.Errorf("an unchanged tool is not served: %v", got)
	}
}

// toolsServer is an upstream of the test's own making, the Go SDK over Streamable HTTP,
// whose tools the test changes at will; the SDK tells the gateway (list_changed).
type toolsServer struct {
	server *mcp.Server
	url    string
}

func newToolsServer(t *testing.T, tools ...*mcp.Tool) *toolsServer {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "tools", Version: "1"}, nil)
	ts := &toolsServer{server: server}
	for _, tool := range tools {
		ts.set(tool)
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	ts.url = srv.URL
	return ts
}

// set adds tool, or replaces the one of its name.
func (ts *toolsServer) set(tool *mcp.Tool) {
	if tool.InputSchema == nil {
		tool.InputSchema = map[string]any{"type": "object"}
	}
	ts.server.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tool.Name + " ran"}}}, nil
	})
}

// listed returns the tool definitions the server lists, raw, by name, as a client reads them.
func (ts *toolsServer) listed(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	cs := connect(t, ts.url, nil)
	defer cs.Close()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, tool := range res.Tools {
		out[tool.Name], _ = json.Marshal(tool)
	}
	return out
}

// renderTool is a tool whose icon and _meta a client acts on.
func renderTool(icon, ui, trace string) *mcp.Tool {
	return &mcp.Tool{Name: "render", Description: "renders a page", Icons: []mcp.Icon{{Source: "https://example.com/" + icon}},
		Meta: mcp.Meta{"com.example/ui": map[string]any{"template": ui}, "com.example/trace": trace}}
}

// toolMeta lists a session's tools' _meta by name.
func toolMeta(t *testing.T, cs *mcp.ClientSession) map[string]mcp.Meta {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]mcp.Meta{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool.Meta
	}
	return out
}

// TestPinsCoverIconsAndNamedMeta: with pinning: withhold, a tool whose icons change, or whose
// _meta key named in pins.meta changes, is withheld until accepted, as a changed
// description is; a _meta key not named changes freely.
func TestPinsCoverIconsAndNamedMeta(t *testing.T) {
	up := newToolsServer(t, renderTool("a.png", "page", "1"))
	tg := startGateway(t, adminYAML("")+fmt.Sprintf(`listen: 127.0.0.1:0
pins:
  meta: [com.example/ui]
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, up.url), nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	cs := connect(t, tg.url, nil)
	if _, listed := toolMeta(t, cs)["u__render"]; !listed {
		t.Fatal("render is not listed at first sight")
	}
	pinned := adm.pin("u", "render")

	// A _meta key the config does not name: served as it changes.
	up.set(renderTool("a.png", "page", "2"))
	if !testwait.Within(10*time.Second, func() bool { return toolMeta(t, cs)["u__render"]["com.example/trace"] == "2" }) {
		t.Fatalf("a change to an unpinned _meta key is not served: %v", toolMeta(t, cs))
	}
	if p := adm.pin("u", "render"); p.Change != nil || p.Withheld {
		t.Errorf("pin after an unpinned _meta key changed: %+v, want no change", p)
	}

	for _, step := range []struct {
		name  string
		tool  *mcp.Tool
		field string
	}{
		{"icons", renderTool("evil.png", "page", "2"), "icons"},
		{"a pinned _meta key", renderTool("evil.png", "<script>", "2"), `_meta["com.example/ui"]`},
	} {
		up.set(step.tool)
		if !testwait.Within(10*time.Second, func() bool { _, listed := toolMeta(t, cs)["u__render"]; return !listed }) {
			t.Fatalf("%s changed, and the tool is still served", step.name)
		}
		p := adm.pin("u", "render")
		if !p.Withheld || p.Change == nil || p.Hash != pinned.Hash || len(p.Change.Diff) != 1 || p.Change.Diff[0].Field != step.field {
			t.Fatalf("pin after %s changed: %+v, want the change withheld, with a diff of %s", step.name, p, step.field)
		}
		if code := adm.do("POST", "/api/pins/u/render", map[string]string{"decision": "accept", "hash": p.Change.Hash}, nil); code != http.StatusOK {
			t.Fatalf("accept: %d", code)
		}
		if !testwait.Within(10*time.Second, func() bool { _, listed := toolMeta(t, cs)["u__render"]; return listed }) {
			t.Fatalf("the tool is not back once its %s change was accepted", step.name)
		}
		pinned = adm.pin("u", "render")
	}
}

// TestPinUpgradeWithholdsNothing: a pin recorded before hash versions (it covers neither
// icons nor _meta) whose hash still holds for what the upstream lists is re-pinned with the
// current version at the next start: the tool is served, not withheld as changed, and from
// then on its icons count.
func TestPinUpgradeWithholdsNothing(t *testing.T) {
	up := newToolsServer(t, renderTool("a.png", "page", "1"), &mcp.Tool{Name: "other", Description: "another tool"})
	dir := t.TempDir()
	var lines []string
	for name, raw := range up.listed(t) {
		def, err := pin.Scheme{Version: pin.Version1}.Definition(raw)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := pin.Scheme{Version: pin.Version1}.Hash(raw)
		lines = append(lines, fmt.Sprintf(`{"upstream":"u","tool":%q,"hash":%q,"definition":%s,"pinned":"2026-01-01T00:00:00Z"}`, name, h, def))
	}
	if err := os.WriteFile(dir+"/pins.json", []byte(`{"pins": [`+strings.Join(lines, ",\n")+"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := pin.NewScheme([]string{"com.example/ui"})
	tg := startGateway(t, adminYAML("")+fmt.Sprintf(`listen: 127.0.0.1:0
state_dir: %q
pins:
  meta: [com.example/ui]
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, dir, up.url), nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	cs := connect(t, tg.url, nil)
	if got := toolMeta(t, cs); got["u__render"] == nil {
		t.Errorf("a tool pinned before hash versions is withheld after the upgrade: %v", got)
	}
	want, _ := scheme.Hash(up.listed(t)["render"])
	if p := adm.pin("u", "render"); p.Change != nil || p.Withheld || p.Hash != want {
		t.Errorf("pin after the upgrade: %+v, want it re-pinned with hash %s and no change", p, want)
	}
	up.set(renderTool("evil.png", "page", "1"))
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolMeta(t, cs)["u__render"]; return !listed }) {
		t.Errorf("icons changed after the upgrade, and the tool is still served")
	}
}

// TestPinsOfRemovedToolsAreForgotten: the pin of a tool its upstream no longer lists is kept
// for pins.forget_after (30 days by default), then removed, on the gateway's clock; a tool
// back after that is pinned anew, as at first sight.
func TestPinsOfRemovedToolsAreForgotten(t *testing.T) {
	up := newToolsServer(t, &mcp.Tool{Name: "keep", Description: "stays"}, &mcp.Tool{Name: "gone", Description: "goes away"})
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	tg := startGateway(t, adminYAML("")+fmt.Sprintf(`listen: 127.0.0.1:0
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, up.url), &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond})
	defer tg.close()
	adm := startAdmin(t, tg)
	pinned := func() []string {
		var got struct {
			Pins []pinView `json:"pins"`
		}
		adm.do("GET", "/api/pins", nil, &got)
		var names []string
		for _, p := range got.Pins {
			names = append(names, p.Tool)
		}
		return names
	}
	if got := pinned(); !slices.Equal(got, []string{"gone", "keep"}) {
		t.Fatalf("pins at first sight: %v", got)
	}
	up.server.RemoveTools("gone")
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolDescriptions(t, connect(t, tg.url, nil))["u__gone"]; return !listed }) {
		t.Fatal("the removed tool is still listed")
	}
	clock.Advance(29 * 24 * time.Hour)
	if got := pinned(); !slices.Equal(got, []string{"gone", "keep"}) {
		t.Errorf("pins within the grace: %v, want the removed tool's kept", got)
	}
	clock.Advance(2 * 24 * time.Hour)
	if !testwait.Within(10*time.Second, func() bool { return slices.Equal(pinned(), []string{"keep"}) }) {
		t.Fatalf("pins after the grace: %v, want the removed tool's forgotten", pinned())
	}
	// Back, saying something else: a new tool, pinned anew, not a change to withhold.
	up.set(&mcp.Tool{Name: "gone", Description: "is back, and different"})
	if !testwait.Within(10*time.Second, func() bool {
		return toolDescriptions(t, connect(t, tg.url, nil))["u__gone"] == "is back, and different"
	}) {
		t.Fatal("the tool back after it was forgotten is not served")
	}
	if p := adm.pin("u", "gone"); p.Change != nil || p.Withheld {
		t.Errorf("pin of the tool back: %+v, want it pinned anew", p)
	}
}

// TestPinsOfToolsGoneWhileDownAreForgotten: a tool its upstream stopped listing while the
// gateway was down is found missing at the next start, from the pins kept in state_dir, and
// its pin is forgotten after the grace like any other, with no one looking at the admin API.
func TestPinsOfToolsGoneWhileDownAreForgotten(t *testing.T) {
	up := newToolsServer(t, &mcp.Tool{Name: "keep", Description: "stays"}, &mcp.Tool{Name: "gone", Description: "goes away"})
	dir := t.TempDir()
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
state_dir: %q
pins:
  forget_after: 24h
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, dir, up.url)
	pinnedTools := func() []string {
		data, err := os.ReadFile(dir + "/pins.json")
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Pins []struct{ Tool string } `json:"pins"`
		}
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range f.Pins {
			names = append(names, p.Tool)
		}
		return names
	}
	first := startGateway(t, yaml, nil)
	if got := pinnedTools(); !slices.Equal(got, []string{"gone", "keep"}) {
		t.Fatalf("pins at first sight: %v", got)
	}
	first.close()

	up.server.RemoveTools("gone")
	clock := testclock.New(time.Now())
	second := startGateway(t, yaml, &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond})
	defer second.close()
	clock.Advance(25 * time.Hour)
	if !testwait.Within(10*time.Second, func() bool { return slices.Equal(pinnedTools(), []string{"keep"}) }) {
		t.Errorf("pins a day after the start without the tool: %v, want the gone tool's forgotten", pinnedTools())
	}
}

// TestReplicasWithOtherPinsMetaDoNotRePinEachOther: two replicas share their pins in Redis,
// one pinning a _meta key (pins.meta), the other not, as during a rollout of pins.meta. The
// one without the key may not re-pin the tool without it; but the pin's own hash still
// holds for what the upstream lists, so the tool did not change: it is served on both, no
// change is recorded (nothing comes and goes on the admin page as they rebuild in turn),
// and the replica without the key does not go to the store for it at each rebuild. It warns
// once that pins count more than it hashes. When the upstream then changes the key's value,
// the replica that pins it sees a change to withhold, not a pin it may re-pin silently, and
// the other, checking the pin's own hash, withholds it too and keeps that change.
func TestReplicasWithOtherPinsMetaDoNotRePinEachOther(t *testing.T) {
	up := newToolsServer(t, renderTool("a.png", "page", "1"))
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	yaml := func(meta string) string {
		return adminYAML("") + fmt.Sprintf(`listen: 127.0.0.1:0
session_store: {type: redis, url: "redis://%s/0", key_prefix: %s}
`+keysYAML+`pins:
  meta: %s
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, addr, prefix, meta, up.url)
	}
	wide := startGateway(t, yaml("[com.example/ui]"), nil)
	defer wide.close()
	admWide := startAdmin(t, wide)
	pinned := admWide.pin("u", "render")

	// The replica without the key counts its trips to the store for a tool, and its catalog
	// rebuilds can be held back, so that the other replica sees a change first.
	var logs lockedBuffer
	store := &countingPins{}
	var gate atomic.Pointer[chan struct{}]
	narrow := startGatewayHooked(t, yaml("[]"), &gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(gw *gateway.Gateway) {
		gw.WrapPinStore(func(s pin.Store) pin.Store { store.Store = s; return store })
		gw.SetTestHooks(func() {
			if ch := gate.Load(); ch != nil {
				<-*ch
			}
		}, nil)
	})
	defer narrow.close()
	admNarrow := startAdmin(t, narrow)
	csWide, csNarrow := connect(t, wide.url, nil), connect(t, narrow.url, nil)
	if _, listed := toolMeta(t, csNarrow)["u__render"]; !listed {
		t.Fatal("the replica without the key withholds a tool that did not change: its pin still holds")
	}
	before := store.observed("u", "render")
	for _, trace := range []string{"2", "3", "4"} {
		// A _meta key neither pins: each replica lists the tool anew and rebuilds.
		up.set(renderTool("a.png", "page", trace))
		for name, cs := range map[string]*mcp.ClientSession{"with the key": csWide, "without the key": csNarrow} {
			if !testwait.Within(10*time.Second, func() bool { return toolMeta(t, cs)["u__render"]["com.example/trace"] == trace }) {
				t.Fatalf("trace %s: the replica %s does not serve the tool as listed: %v", trace, name, toolMeta(t, cs))
			}
		}
		for name, adm := range map[string]*adminClient{"with the key": admWide, "without the key": admNarrow} {
			if p := adm.pin("u", "render"); p.Hash != pinned.Hash || p.Change != nil || p.Withheld {
				t.Errorf("trace %s: pin on the replica %s: %+v, want it as pinned, no change, not withheld", trace, name, p)
			}
		}
	}
	if n := store.observed("u", "render") - before; n != 0 {
		t.Errorf("the replica without the key went to the store %d times for a tool whose pin holds, over 3 rebuilds; want none", n)
	}
	if n := strings.Count(logs.String(), "pins.meta"); n != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("want one warning naming pins.meta on the replica without the key, got %d:\n%s", n, logs.String())
	}

	// The pinned key changes. The replica that pins it sees the change first.
	hold := make(chan struct{})
	gate.Store(&hold)
	released := false
	release := func() {
		if !released {
			released = true
			gate.Store(nil)
			close(hold)
		}
	}
	defer release()
	up.set(renderTool("a.png", "<script>", "4"))
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolMeta(t, csWide)["u__render"]; return !listed }) {
		t.Fatalf("the pinned _meta key changed, and the tool is served with it: %v", toolMeta(t, csWide))
	}
	p := admWide.pin("u", "render")
	if p.Hash != pinned.Hash || p.Change == nil || !p.Withheld || len(p.Change.Diff) != 1 || !strings.Contains(string(p.Change.Diff[0].After), "script") {
		t.Fatalf("pin after the pinned _meta key changed: %+v, want the change withheld against the first pin", p)
	}
	change := p.Change.Hash
	release()
	// The replica without the key checks the pin's own hash: no longer the listed one.
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolMeta(t, csNarrow)["u__render"]; return !listed }) {
		t.Fatalf("the replica without the key serves a change of the key the pin covers: %v", toolMeta(t, csNarrow))
	}
	for name, adm := range map[string]*adminClient{"with the key": admWide, "without the key": admNarrow} {
		if p := adm.pin("u", "render"); p.Hash != pinned.Hash || p.Change == nil || p.Change.Hash != change || !p.Withheld {
			t.Errorf("pin on the replica %s once both saw the key change: %+v, want the first change kept, withheld", name, p)
		}
	}
}

// countingPins is a pin store that counts the Observe calls of each tool.
type countingPins struct {
	pin.Store
	mu    sync.Mutex
	calls map[string]int // upstream/tool → Observe calls; guarded by mu
}

func (c *countingPins) Observe(ctx context.Context, upstreamName, tool string, def json.RawMessage, s pin.Scheme, now time.Time) (pin.Pin, bool, error) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[upstreamName+"/"+tool]++
	c.mu.Unlock()
	return c.Store.Observe(ctx, upstreamName, tool, def, s, now)
}

func (c *countingPins) observed(upstreamName, tool string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[upstreamName+"/"+tool]
}

// startGatewayHooked is startGateway, with hook run on the gateway between New and Start.
func startGatewayHooked(t *testing.T, yaml string, opts *gateway.Options, hook func(*gateway.Gateway)) *testGateway {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	gw, err := gateway.New(cfg, opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	hook(gw)
	gw.Start()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = gw.Server()
	srv.Start()
	tg := &testGateway{gw: gw, srv: srv, url: srv.URL + "/mcp"}
	waitReady(t, gw, len(cfg.EnabledUpstreams()))
	return tg
}

// TestForgottenPinIsLoggedAtWarn: forgetting the pin of a tool gone for pins.forget_after is
// logged as a warning, naming the tool: if it comes back it is pinned anew, as it is then,
// with nothing to compare it to, and an operator should look at it.
func TestForgottenPinIsLoggedAtWarn(t *testing.T) {
	up := newToolsServer(t, &mcp.Tool{Name: "keep", Description: "stays"}, &mcp.Tool{Name: "gone", Description: "goes away"})
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	var logs lockedBuffer
	tg := startGateway(t, adminYAML("")+fmt.Sprintf(`listen: 127.0.0.1:0
pins:
  forget_after: 1h
upstreams:
  - name: u
    url: %s
    pinning: withhold
`, up.url), &gateway.Options{Now: clock.Now, ExpiryInterval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer tg.close()
	adm := startAdmin(t, tg)
	pinnedTools := func() []string {
		var got struct {
			Pins []pinView `json:"pins"`
		}
		adm.do("GET", "/api/pins", nil, &got)
		var names []string
		for _, p := range got.Pins {
			names = append(names, p.Tool)
		}
		return names
	}
	up.server.RemoveTools("gone")
	if !testwait.Within(10*time.Second, func() bool { _, listed := toolDescriptions(t, connect(t, tg.url, nil))["u__gone"]; return !listed }) {
		t.Fatal("the removed tool is still listed")
	}
	clock.Advance(2 * time.Hour)
	var line string
	logged := func() bool {
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "was forgotten") {
				line = l
			}
		}
		return line != ""
	}
	if !testwait.Within(10*time.Second, logged) {
		t.Fatalf("nothing logged of the forgotten pin:\n%s", logs.String())
	}
	if got := pinnedTools(); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("pins after forget_after: %v, want the removed tool's forgotten", got)
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "tool=gone") {
		t.Errorf("the forgotten pin's log line: %q, want a warning naming the tool", line)
	}
}

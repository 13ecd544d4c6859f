package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// shapedGateway is one gateway for the shaping tests: alpha with a renamed, re-described
// and re-annotated tool, a dropped tool and resource, a renamed prompt; many with an include
// filter and a renamed tool; and two profiles.
var (
	shapedOnce sync.Once
	shaped     *testGateway
)

func shapedGateway(t *testing.T) *testGateway {
	t.Helper()
	shapedOnce.Do(func() {
		sharedMu.Lock()
		defer sharedMu.Unlock()
		shaped = startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+
			upstreamYAML("alpha", "alpha", `    include_instructions: true
    tools:
      exclude: [whoami]
      overrides:
        echo:
          name: say
          title: Say
          description: Says the text back.
          annotations: {readOnlyHint: true, openWorldHint: false}
    prompts:
      overrides:
        greet: {name: hello}
    resources:
      exclude: ["*readme*"]
`)+
			upstreamYAML("many", "many", `    tools:
      include: ["tool_0*", add_tool, "added_*"]
      overrides:
        tool_07: {name: seven}
`)+`
profiles:
  - name: lean
    include:
      - upstream: alpha
        tools: [alpha__say]
  - name: many
    include:
      - upstream: many
`, nil)
	})
	if shaped == nil {
		t.Fatal("shaped gateway failed to start")
	}
	return shaped
}

func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	tools := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctxT(t), nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools[tool.Name] = tool
	}
	return tools
}

// TestShapedCatalog: through the Go SDK client, a renamed tool is listed and called by its
// new name and the upstream receives its own; a dropped tool, resource or old name is
// unknown; overrides of description, title and annotations show in the list.
func TestShapedCatalog(t *testing.T) {
	tg := shapedGateway(t)
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)

	tools := listTools(t, cs)
	for _, gone := range []string{"alpha__echo", "alpha__whoami", "many__tool_07", "many__tool_10", "many__tool_24"} {
		if tools[gone] != nil {
			t.Errorf("tools/list has %s; the config drops or renames it", gone)
		}
	}
	say := tools["alpha__say"]
	if say == nil {
		t.Fatalf("tools/list lacks alpha__say: %v", keys(tools))
	}
	if say.Description != "Says the text back." || say.Title != "Say" {
		t.Errorf("alpha__say: title %q, description %q; want the overrides", say.Title, say.Description)
	}
	if a := say.Annotations; a == nil || !a.ReadOnlyHint || a.OpenWorldHint == nil || *a.OpenWorldHint {
		t.Errorf("alpha__say annotations = %+v, want readOnlyHint true, openWorldHint false", a)
	}
	if tools["many__seven"] == nil || tools["many__tool_00"] == nil || tools["many__add_tool"] == nil {
		t.Errorf("tools/list lacks many's kept tools: %v", keys(tools))
	}

	// The renamed tools reach their upstream under their own names: echo answers
	// "alpha:<text>", tool_07 answers its own name.
	for _, tc := range []struct{ tool, args, want string }{
		{"alpha__say", `{"text":"hi"}`, "alpha:hi"},
		{"many__seven", `{}`, "tool_07"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.tool, Arguments: json.RawMessage(tc.args)})
		if err != nil {
			t.Fatalf("call %s: %v", tc.tool, err)
		}
		if got := textOf(t, res); got != tc.want {
			t.Errorf("%s answered %q, want %q", tc.tool, got, tc.want)
		}
	}
	for _, name := range []string{"alpha__whoami", "alpha__echo", "many__tool_07", "many__tool_10"} {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), "unknown tool: "+name) {
			t.Errorf("call %s: err = %v, want unknown tool", name, err)
		}
	}

	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__hello", Arguments: map[string]string{"who": "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Messages[0].Content.(*mcp.TextContent).Text; got != "alpha greets ada" {
		t.Errorf("alpha__hello said %q", got)
	}

	// alpha's readme is dropped: not listed, not readable; its template still is, and its
	// name tells it apart from other upstreams' notes.
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("resources/list has %s; the filter drops it", r.URI)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+file:///readme.txt"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("read of the dropped readme: err = %v, want resource not found", err)
	}
	var templates []string
	for rt, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		templates = append(templates, rt.URITemplate+" "+rt.Name)
	}
	if diff := cmp.Diff([]string{"alpha+file:///notes/{id} alpha__note"}, templates); diff != "" {
		t.Errorf("templates (-want +got):\n%s", diff)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+file:///notes/7"})
	if err != nil {
		t.Fatal(err)
	}
	if got := read.Contents[0].Text; got != "alpha note 7" {
		t.Errorf("note 7 read %q", got)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestProfilesServeTheirOwnCatalogs: two profiles of one gateway list and serve different
// catalogs; what a profile leaves out is unknown there; a session lives on its own endpoint
// only; a profile that does not exist is a 404.
func TestProfilesServeTheirOwnCatalogs(t *testing.T) {
	tg := shapedGateway(t)
	ctx := ctxT(t)

	lean := connect(t, tg.url+"/lean", nil)
	if got := keys(listTools(t, lean)); !cmp.Equal(got, []string{"alpha__say"}) {
		t.Errorf("/mcp/lean tools = %v, want [alpha__say]", got)
	}
	if got := lean.InitializeResult().Instructions; got != "[alpha] instructions of alpha" {
		t.Errorf("/mcp/lean instructions = %q, want alpha's", got)
	}
	res, err := lean.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__say", Arguments: map[string]any{"text": "lean"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "alpha:lean" {
		t.Errorf("alpha__say on /mcp/lean answered %q", got)
	}
	if _, err := lean.CallTool(ctx, &mcp.CallToolParams{Name: "many__seven", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "unknown tool: many__seven") {
		t.Errorf("many__seven on /mcp/lean: err = %v, want unknown tool", err)
	}
	if _, err := lean.GetPrompt(ctx, &mcp.GetPromptParams{Name: "alpha__hello", Arguments: map[string]string{"who": "x"}}); err == nil || !strings.Contains(err.Error(), "unknown prompt") {
		t.Errorf("alpha__hello on /mcp/lean: err = %v, want unknown prompt", err)
	}
	if _, err := lean.ReadResource(ctx, &mcp.ReadResourceParams{URI: "alpha+file:///notes/1"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("a note on /mcp/lean: err = %v, want resource not found", err)
	}
	// A template outside the profile cannot be completed there; at /mcp it can.
	complete := &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "alpha+file:///notes/{id}"}, Argument: mcp.CompleteParamsArgument{Name: "id", Value: "1"}}
	if _, err := lean.Complete(ctx, complete); err == nil || !strings.Contains(err.Error(), "unknown resource template") {
		t.Errorf("completion of a template outside /mcp/lean: err = %v, want unknown resource template", err)
	}
	if _, err := connect(t, tg.url, nil).Complete(ctx, complete); err != nil {
		t.Errorf("completion of alpha's template at /mcp: %v", err)
	}

	many := connect(t, tg.url+"/many", nil)
	tools := listTools(t, many)
	if tools["alpha__say"] != nil || tools["many__seven"] == nil || tools["many__tool_00"] == nil {
		t.Errorf("/mcp/many tools = %v, want many's only", keys(tools))
	}
	if got := many.InitializeResult().Instructions; got != "" {
		t.Errorf("/mcp/many instructions = %q, want none (many does not include its own)", got)
	}
	res, err = many.CallTool(ctx, &mcp.CallToolParams{Name: "many__seven", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "tool_07" {
		t.Errorf("many__seven on /mcp/many answered %q", got)
	}

	// A session id of /mcp/lean does not exist on /mcp, and one of /mcp not on /mcp/lean.
	leanRaw := rawClient{t: t, url: tg.url + "/lean"}
	sid := leanRaw.initialize()
	if r := (rawClient{t: t, url: tg.url}).do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusNotFound {
		t.Errorf("a /mcp/lean session on /mcp: HTTP %d %s, want 404", r.status, r.body)
	}
	if r := leanRaw.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK {
		t.Errorf("a /mcp/lean session on /mcp/lean: HTTP %d %s, want 200", r.status, r.body)
	}
	mainSID := (rawClient{t: t, url: tg.url}).initialize()
	if r := leanRaw.do(http.MethodDelete, "", map[string]string{"Mcp-Session-Id": mainSID}); r.status != http.StatusNotFound {
		t.Errorf("DELETE of a /mcp session on /mcp/lean: HTTP %d %s, want 404", r.status, r.body)
	}
	if r := (rawClient{t: t, url: tg.url + "/nope"}).do(http.MethodPost, initBody, nil); r.status != http.StatusNotFound || !strings.Contains(string(r.body), "/mcp/lean, /mcp/many") {
		t.Errorf("/mcp/nope: HTTP %d %s, want 404 naming the profiles", r.status, r.body)
	}
}

// TestProfileGetsListChangedForItsOwnCatalog: a tool added upstream reaches, as
// tools/list_changed, the clients of the profiles that select it.
func TestProfileGetsListChangedForItsOwnCatalog(t *testing.T) {
	tg := shapedGateway(t)
	changed := make(chan struct{}, 16)
	many := connect(t, tg.url+"/many", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	// As in TestListChangedReachesClient: the client opens its stream in the background, so
	// add tools until a notification arrives.
	for {
		res, err := many.CallTool(ctx, &mcp.CallToolParams{Name: "many__add_tool", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		added := "many__" + textOf(t, res)
		select {
		case <-changed:
			if listTools(t, many)[added] == nil {
				// The notification may be for an earlier addition; the list catches up.
				continue
			}
			return
		case <-ctx.Done():
			t.Fatal("no tools/list_changed reached the client of /mcp/many")
		case <-time.After(500 * time.Millisecond):
		}
	}
}

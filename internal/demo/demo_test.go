package demo

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func connect(t *testing.T) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewServer("demo-test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ServerInfo.Name; got != "demo-test" {
		t.Errorf("serverInfo.name = %q, want demo-test", got)
	}
	return cs
}

func text(t *testing.T, c []mcp.Content) string {
	t.Helper()
	if len(c) != 1 {
		t.Fatalf("got %d content blocks, want 1", len(c))
	}
	tc, ok := c[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want *mcp.TextContent", c[0])
	}
	return tc.Text
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

func TestTools(t *testing.T) {
	cs := connect(t)
	ctx := context.Background()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"add", "current_time", "delete_note", "echo"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}

	if res := call(t, cs, "echo", map[string]any{"text": "hello, manifold"}); res.IsError || text(t, res.Content) != "hello, manifold" {
		t.Errorf("echo = %+v", res)
	}

	res := call(t, cs, "add", map[string]any{"a": 2, "b": 3.5})
	if res.IsError {
		t.Fatalf("add: tool error %q", text(t, res.Content))
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct{ Sum float64 }
	if err := json.Unmarshal(raw, &out); err != nil || out.Sum != 5.5 {
		t.Errorf("add structuredContent = %s, want {\"sum\":5.5}", raw)
	}

	fixed := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now = func() time.Time { return fixed }
	t.Cleanup(func() { now = time.Now })
	if got := text(t, call(t, cs, "current_time", nil).Content); got != "2026-03-01T12:00:00Z" {
		t.Errorf("current_time() = %q", got)
	}
	if got := text(t, call(t, cs, "current_time", map[string]any{"timezone": "Asia/Tokyo"}).Content); got != "2026-03-01T21:00:00+09:00" {
		t.Errorf("current_time(Asia/Tokyo) = %q", got)
	}
	if got := text(t, call(t, cs, "delete_note", map[string]any{"id": "7"}).Content); got != "deleted note 7" {
		t.Errorf("delete_note(7) = %q", got)
	}
	if res := call(t, cs, "current_time", map[string]any{"timezone": "Mars/Olympus"}); !res.IsError {
		t.Errorf("current_time(Mars/Olympus) is not a tool error: %+v", res)
	}
}

func TestResources(t *testing.T) {
	cs := connect(t)
	ctx := context.Background()

	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://notes/42"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || res.Contents[0].Text != "note 42" || res.Contents[0].URI != "demo://notes/42" {
		t.Errorf("read demo://notes/42 = %+v", res.Contents)
	}

	res, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://readme"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Contents) != 1 || res.Contents[0].MIMEType != "text/markdown" || !strings.Contains(res.Contents[0].Text, "Manifold") {
		t.Errorf("read demo://readme = %+v", res.Contents)
	}
}

func TestPrompt(t *testing.T) {
	cs := connect(t)
	ctx := context.Background()

	list, err := cs.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Prompts) != 1 || list.Prompts[0].Name != "summarize" || list.Prompts[0].Description == "" {
		t.Fatalf("prompts = %+v", list.Prompts)
	}

	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{
		Name:      "summarize",
		Arguments: map[string]string{"text": "MCP gateways multiplex servers.", "style": "bullet"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 || res.Messages[0].Role != "user" {
		t.Fatalf("messages = %+v", res.Messages)
	}
	got := res.Messages[0].Content.(*mcp.TextContent).Text
	if !strings.Contains(got, "MCP gateways multiplex servers.") || !strings.Contains(got, "bulleted list") {
		t.Errorf("prompt text = %q", got)
	}

	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize", Arguments: map[string]string{"style": "brief"}}); err == nil {
		t.Error("summarize without text: no error")
	}

	comp, err := cs.Complete(ctx, &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"},
		Argument: mcp.CompleteParamsArgument{Name: "style", Value: "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"brief", "bullet"}; !slices.Equal(comp.Completion.Values, want) {
		t.Errorf("completion(style, %q) = %v, want %v", "b", comp.Completion.Values, want)
	}
}

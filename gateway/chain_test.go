package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/pipeline"
)

// contactsAddress is the address the contacts upstream puts in every kind of result.
const contactsAddress = "ann@example.com"

// newContactsUpstream serves, over Streamable HTTP, an upstream whose every kind of result
// holds contactsAddress: tool "contact" (text), resource file:///card.txt, template
// file:///private/{name} (unlisted resources), tool "link" (a resource_link to
// file:///private/ann.txt), prompt "write" {who}, and completions of write's argument.
func newContactsUpstream(t *testing.T) string {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "contacts", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{contactsAddress, "bob"}, Total: 2}}, nil
		},
	})
	mcp.AddTool(server, &mcp.Tool{Name: "contact", Description: "names a contact"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "write to " + contactsAddress}}}, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "link", Description: "links a contact's card"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "file:///private/ann.txt", Name: "ann"}}}, nil, nil
		})
	read := func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "card: " + contactsAddress}}}, nil
	}
	server.AddResource(&mcp.Resource{URI: "file:///card.txt", Name: "card", MIMEType: "text/plain"}, read)
	server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "file:///private/{name}", Name: "private", MIMEType: "text/plain"}, read)
	server.AddPrompt(&mcp.Prompt{Name: "write", Description: "writes to someone", Arguments: []*mcp.PromptArgument{{Name: "who"}}},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "write to " + contactsAddress}}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPluginsInspectEveryResultKind: the chain's after steps see every kind of result. The
// example guard plugin redacts a resources/read (of a listed resource, and of a URI a tool's
// resource_link exposed), a prompts/get and a completion/complete result when its `methods:`
// name them, and does not when they do not (without `methods:`, as before, only tool
// results); a tool's result it redacts both ways. An inspecting plugin is told each result's
// real method and target (regression: it was told "tools/call" for every result, and was
// never asked about other results whatever its methods). A plugin is asked about a
// completion before the call, as the policy's rules are, when its methods name it.
func TestPluginsInspectEveryResultKind(t *testing.T) {
	guard, test := plugins(t)
	url := newContactsUpstream(t)
	const all = "    methods: [tools/call, prompts/get, resources/read, completion/complete]\n"
	yaml := "listen: 127.0.0.1:0\nplugins:\n" +
		pluginYAML("every", guard, "    config: {}\n"+all+"    upstreams: [named]\n") +
		pluginYAML("stamp", test, "    config: {stamp: s}\n"+all+"    upstreams: [named]\n    env: {TESTPLUGIN_INSPECT: \"1\"}\n") +
		pluginYAML("default", guard, "    config: {}\n    upstreams: [plain]\n") +
		pluginYAML("nocompletion", test, "    config: {effect: deny, reason: no completions here}\n    methods: [completion/complete]\n    upstreams: [closed]\n") +
		fmt.Sprintf("upstreams:\n  - name: named\n    url: %s\n  - name: plain\n    url: %s\n  - name: closed\n    url: %s\n", url, url, url)
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)

	// Each kind of request returns the texts of its result and its _meta.
	type read func(t *testing.T, up string) ([]string, mcp.Meta)
	readURI := func(t *testing.T, uri string) ([]string, mcp.Meta) {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("read %s: %v", uri, err)
		}
		var texts []string
		for _, c := range res.Contents {
			texts = append(texts, c.Text)
		}
		return texts, res.Meta
	}
	kinds := []struct {
		name string
		read read
		// byDefault: a plugin without methods: inspects it; stamp is what the stamping
		// plugin is told (method and target).
		byDefault bool
		stamp     string
	}{
		{"tools/call", func(t *testing.T, up string) ([]string, mcp.Meta) {
			res := callTool(t, cs, up+"__contact", nil)
			return []string{resultText(res)}, res.Meta
		}, true, "s tools/call contact"},
		{"resources/read", func(t *testing.T, up string) ([]string, mcp.Meta) {
			return readURI(t, up+"+file:///card.txt")
		}, false, "s resources/read file:///card.txt"},
		{"resources/read of a resource_link's URI", func(t *testing.T, up string) ([]string, mcp.Meta) {
			res := callTool(t, cs, up+"__link", nil)
			link, ok := res.Content[0].(*mcp.ResourceLink)
			if !ok || link.URI != up+"+file:///private/ann.txt" {
				t.Fatalf("the link: %#v", res.Content[0])
			}
			return readURI(t, link.URI)
		}, false, "s resources/read file:///private/ann.txt"},
		{"prompts/get", func(t *testing.T, up string) ([]string, mcp.Meta) {
			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: up + "__write"})
			if err != nil {
				t.Fatalf("get prompt: %v", err)
			}
			return []string{res.Messages[0].Content.(*mcp.TextContent).Text}, res.Meta
		}, false, "s prompts/get write"},
		{"completion/complete", func(t *testing.T, up string) ([]string, mcp.Meta) {
			res, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: up + "__write"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
			if err != nil {
				t.Fatalf("complete: %v", err)
			}
			return res.Completion.Values, res.Meta
		}, false, "s completion/complete write"},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			texts, meta := k.read(t, "named")
			if got := strings.Join(texts, "|"); strings.Contains(got, contactsAddress) || !strings.Contains(got, "[redacted email]") {
				t.Errorf("with its method named, the result is %q, want the address redacted", got)
			}
			if diff := cmp.Diff([]any{k.stamp}, meta["testplugin/seen"]); diff != "" {
				t.Errorf("what the inspecting plugin was told (-want +got):\n%s", diff)
			}
			texts, _ = k.read(t, "plain")
			if got := strings.Join(texts, "|"); strings.Contains(got, contactsAddress) == k.byDefault {
				t.Errorf("without methods:, the result is %q; want it redacted only for a tool's result", got)
			}
		})
	}

	t.Run("completion/complete is asked before the call", func(t *testing.T) {
		_, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "closed__write"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
		if err == nil || !strings.Contains(err.Error(), "no completions here") {
			t.Errorf("a completion a plugin denies: %v, want its reason", err)
		}
		if res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "closed__write"}); err != nil || len(res.Messages) != 1 {
			t.Errorf("a prompts/get the plugin's methods do not name: %v", err)
		}
	})
}

// TestChainOrderInTheGateway: a check given in Options.Checks runs after the policy and the
// plugins (it sees their decisions), and, given an after step, sees the upstream's result
// before the plugins' after steps do (as middleware nests: the plugins' redaction is the last
// word); the client gets the redacted result.
func TestChainOrderInTheGateway(t *testing.T) {
	guard, _ := plugins(t)
	var before []string
	var after string
	given := pipeline.Link{
		Before: func(_ context.Context, req *pipeline.Request, _ *pipeline.Target) error {
			for _, d := range req.Decisions {
				before = append(before, d.Check+" "+d.Effect+" "+d.Rule)
			}
			return nil
		},
		After: func(_ context.Context, req *pipeline.Request, _ *pipeline.Target, result json.RawMessage) (json.RawMessage, error) {
			after = string(result)
			return result, nil
		},
	}
	tg := startGateway(t, "listen: 127.0.0.1:0\npolicy:\n  rules:\n    - {name: contacts, effect: allow, match: {tools: [contact]}}\nplugins:\n"+
		pluginYAML("guard", guard, "    config: {}\n")+fmt.Sprintf("upstreams:\n  - name: c\n    url: %s\n", newContactsUpstream(t)),
		&gateway.Options{Checks: []pipeline.Check{given}})
	defer tg.close()
	res := callTool(t, connect(t, tg.url, nil), "c__contact", nil)
	if diff := cmp.Diff([]string{"policy allow contacts", "plugin allow guard"}, before); diff != "" {
		t.Errorf("the decisions before the given check (-want +got):\n%s", diff)
	}
	if !strings.Contains(after, contactsAddress) {
		t.Errorf("the given check's after step saw %s, want the result before the plugins redact it", after)
	}
	if got := resultText(res); got != "write to [redacted email]" {
		t.Errorf("the client got %q, want the plugins' redaction", got)
	}
}

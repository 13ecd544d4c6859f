package gateway_test

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// The protocol eras a client or an upstream speaks.
const (
	era2026 = "2026-07-28"
	era2025 = "2025-11-25"
)

// clientEras are the eras a Go SDK client is pinned to in the era tests, 2026-07-28 first.
var clientEras = []string{era2026, era2025}

// connectEra connects a Go SDK client pinned to era (ClientSessionOptions.ProtocolVersion),
// with token as its bearer credential when it is not empty, and checks that it got that era:
// a 2026-07-28 client holds no session, a 2025-11-25 one does.
func connectEra(t *testing.T, url, era, token string) *mcp.ClientSession {
	t.Helper()
	transport := &mcp.StreamableClientTransport{Endpoint: url}
	if token != "" {
		transport.HTTPClient = &http.Client{Transport: bearer{token, http.DefaultTransport}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "era-" + era, Version: "1"}, nil)
	cs, err := client.Connect(ctxT(t), transport, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatalf("connect a %s client: %v", era, err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != era {
		t.Fatalf("a client pinned to %s speaks %s", era, got)
	}
	if hasSession := cs.ID() != ""; hasSession != (era == era2025) {
		t.Fatalf("a %s client holds session %q", era, cs.ID())
	}
	return cs
}

// eraOnly are the members a result has in one era only: the 2026-07-28 result type and
// cache hints, and _meta, where the gateway names itself to 2026-07-28 clients.
var eraOnly = []string{"resultType", "ttlMs", "cacheScope", "_meta"}

// withoutEraOnly returns v as generic JSON, without the members of eraOnly at any depth.
func withoutEraOnly(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range eraOnly {
				delete(v, k)
			}
			for k, member := range v {
				v[k] = strip(member)
			}
		case []any:
			for i, e := range v {
				v[i] = strip(e)
			}
		}
		return v
	}
	return strip(generic)
}

// collect gathers every item of a paginated list (all pages) that keep accepts.
func collect[T any](t *testing.T, items iter.Seq2[T, error], keep func(T) bool) []T {
	t.Helper()
	var kept []T
	for item, err := range items {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if keep(item) {
			kept = append(kept, item)
		}
	}
	return kept
}

// eraOp is one request of the era matrix, made by a client to the items of one upstream
// (prefix, with the namespace separator); check inspects the answer (in its era) and
// returns what is compared between the eras.
type eraOp struct {
	name string
	do   func(ctx context.Context, t *testing.T, cs *mcp.ClientSession, prefix string) (any, error)
	// want is a string the answer must hold, so that two equally wrong answers do not pass.
	want func(prefix string) string
}

var eraOps = []eraOp{
	{"tools/list", func(ctx context.Context, t *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return collect(t, cs.Tools(ctx, nil), func(tool *mcp.Tool) bool { return strings.HasPrefix(tool.Name, prefix) }), nil
	}, func(prefix string) string { return `"name":"` + prefix + `echo"` }},
	{"tools/call", func(ctx context.Context, _ *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: prefix + "echo", Arguments: map[string]any{"text": "hi"}})
	}, func(string) string { return `"text":"beta:hi"` }},
	{"tools/call with structured output", func(ctx context.Context, _ *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: prefix + "add", Arguments: map[string]any{"a": 1, "b": 2}})
	}, func(string) string { return `"structuredContent":{"sum":3}` }},
	{"resources/list", func(ctx context.Context, t *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return collect(t, cs.Resources(ctx, nil), func(r *mcp.Resource) bool { return strings.HasPrefix(r.URI, strings.TrimSuffix(prefix, "__")+"+") }), nil
	}, func(prefix string) string {
		return `"uri":"` + strings.TrimSuffix(prefix, "__") + `+file:///readme.txt"`
	}},
	{"resources/templates/list", func(ctx context.Context, t *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return collect(t, cs.ResourceTemplates(ctx, nil), func(r *mcp.ResourceTemplate) bool {
			return strings.HasPrefix(r.URITemplate, strings.TrimSuffix(prefix, "__")+"+")
		}), nil
	}, func(prefix string) string {
		return `"uriTemplate":"` + strings.TrimSuffix(prefix, "__") + `+file:///notes/{id}"`
	}},
	{"prompts/list", func(ctx context.Context, t *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return collect(t, cs.Prompts(ctx, nil), func(p *mcp.Prompt) bool { return strings.HasPrefix(p.Name, prefix) }), nil
	}, func(prefix string) string { return `"name":"` + prefix + `greet"` }},
	{"resources/read", func(ctx context.Context, _ *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: strings.TrimSuffix(prefix, "__") + "+file:///readme.txt"})
	}, func(string) string { return `"text":"readme of beta"` }},
	{"resources/read of a template", func(ctx context.Context, _ *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: strings.TrimSuffix(prefix, "__") + "+file:///notes/7"})
	}, func(string) string { return `"text":"beta note 7"` }},
	{"prompts/get", func(ctx context.Context, _ *testing.T, cs *mcp.ClientSession, prefix string) (any, error) {
		return cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: prefix + "greet", Arguments: map[string]string{"who": "ada"}})
	}, func(string) string { return `"text":"beta greets ada"` }},
}

// TestEraMatrix: Go SDK clients pinned to 2026-07-28 and to 2025-11-25, through one gateway
// with modern_protocol on, in front of the same server (the beta flavor) reached four ways —
// 2025-11-25 over stdio, 2025-11-25 over Streamable HTTP (a stateful go-sdk handler),
// 2026-07-28 over stdio, 2026-07-28 over Streamable HTTP (a stateless one) — list its tools,
// resources, templates and prompts, call a tool (one with structured output too), read a
// resource and a templated one, and get a prompt, and get the same answers
// in both eras once the members only one era has are dropped.
func TestEraMatrix(t *testing.T) {
	legacyHTTP := httptest.NewServer(goSDKHandler(t, "beta", false))
	t.Cleanup(legacyHTTP.Close)
	server, err := testupstream.New("beta")
	if err != nil {
		t.Fatal(err)
	}
	modernHTTP := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(modernHTTP.Close)
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:"+
		upstreamYAML("ls", "beta", "    protocol: 2025-11-25\n")+
		upstreamYAML("ms", "beta", "    protocol: 2026-07-28\n")+`
  - name: lh
    url: `+legacyHTTP.URL+`
    protocol: 2025-11-25
  - name: mh
    url: `+modernHTTP.URL+`
    protocol: 2026-07-28
`, nil)
	t.Cleanup(tg.close)
	ctx := ctxT(t)
	sessions := map[string]*mcp.ClientSession{}
	for _, era := range clientEras {
		sessions[era] = connectEra(t, tg.url, era, "")
	}

	upstreams := []struct{ name, era, transport string }{
		{"ls", era2025, "stdio"},
		{"lh", era2025, "http"},
		{"ms", era2026, "stdio"},
		{"mh", era2026, "http"},
	}
	for _, up := range upstreams {
		for _, op := range eraOps {
			t.Run(up.era+" "+up.transport+" upstream/"+op.name, func(t *testing.T) {
				prefix := up.name + "__"
				answers := map[string]any{}
				for _, era := range clientEras {
					got, err := op.do(ctx, t, sessions[era], prefix)
					if err != nil {
						t.Fatalf("%s client: %v", era, err)
					}
					raw, _ := json.Marshal(got)
					if want := op.want(prefix); !strings.Contains(string(raw), want) {
						t.Errorf("%s client got %s; want it to hold %s", era, raw, want)
					}
					answers[era] = withoutEraOnly(t, got)
				}
				if diff := cmp.Diff(answers[era2025], answers[era2026]); diff != "" {
					t.Errorf("the eras' answers differ (-2025-11-25 +2026-07-28):\n%s", diff)
				}
			})
		}
	}
}

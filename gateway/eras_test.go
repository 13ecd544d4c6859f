package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
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

// statelessSDKServer serves the test upstream of flavor over stateless Streamable HTTP until
// the test ends, as a server of 2026-07-28 (the go-sdk serves that era only statelessly), and
// returns its URL.
func statelessSDKServer(t *testing.T, flavor string) string {
	t.Helper()
	server, err := testupstream.New(flavor)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	return srv.URL
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
	modernURL := statelessSDKServer(t, "beta")
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:"+
		upstreamYAML("ls", "beta", "    protocol: 2025-11-25\n")+
		upstreamYAML("ms", "beta", "    protocol: 2026-07-28\n")+`
  - name: lh
    url: `+legacyHTTP.URL+`
    protocol: 2025-11-25
  - name: mh
    url: `+modernURL+`
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

// parityYAML is a gateway with the 2026-07-28 face on and two API keys — alice (eng) and
// bob (contractors) — in front of the beta flavor twice: l as a 2025-11-25 upstream over
// stdio, its echo renamed say and re-described; m as a 2026-07-28 upstream over HTTP at
// modernURL, its whoami dropped, its add re-described and its prompt greet renamed hello.
// The policy denies by default, allows by tool and by principal, denies echo of paths under
// /etc, and hides add from contractors. Profile ops serves m only.
func parityYAML(modernURL string) string {
	return "listen: 127.0.0.1:0\nmodern_protocol: true\nauth:\n  api_keys:\n" +
		"    - {name: alice, hash: " + auth.HashAPIKey("mfk_alice") + ", groups: [eng]}\n" +
		"    - {name: bob, hash: " + auth.HashAPIKey("mfk_bob") + ", groups: [contractors]}\n" + `policy:
  default: deny
  rules:
    - {name: contractors-no-add, effect: hide, match: {principal: {groups: [contractors]}, tools: [add]}}
    - {name: no-etc, effect: deny, reason: "paths under /etc are off limits", match: {tools: [echo], arguments: [{pointer: /text, matches: "^/etc"}]}}
    - {name: eng-whoami, effect: allow, match: {principal: {groups: [eng]}, tools: [whoami]}}
    - {name: tools-for-all, effect: allow, match: {tools: [echo, add]}}
    - {name: eng-prompts, effect: allow, match: {principal: {groups: [eng]}, prompts: [greet]}}
upstreams:` + upstreamYAML("l", "beta", `    protocol: 2025-11-25
    tools:
      overrides:
        echo: {name: say, description: Says the text back.}
`) + `
  - name: m
    url: ` + modernURL + `
    protocol: 2026-07-28
    tools:
      exclude: [whoami]
      overrides:
        add: {description: Sums two numbers.}
    prompts:
      overrides:
        greet: {name: hello}
profiles:
  - {name: ops, include: [{upstream: m}]}
`
}

// parityOutcome is what a client of one era got from one request of TestEraParity.
type parityOutcome struct {
	// Tools ("name: description") and Prompts are the catalog a list row sees.
	Tools, Prompts []string
	// Text is the first text of a result, IsError and Reason (_meta dev.manifold/reason)
	// say whether and why the gateway refused a call.
	Text    string
	IsError bool
	Reason  string
	// Code is the JSON-RPC error code of a request that failed, with Text its message.
	Code int64
}

// TestEraParity: the policy's decisions (allow, deny by rule, by argument and by default,
// hide), the catalog's shaping (rename, drop, description) and profiles come out the same for
// a 2025-11-25 session and for 2026-07-28 requests with the same API key, whichever era the
// upstream speaks: each row asserts both client eras.
func TestEraParity(t *testing.T) {
	tg := startGateway(t, parityYAML(statelessSDKServer(t, "beta")), nil)
	t.Cleanup(tg.close)
	ctx := ctxT(t)

	sessions := map[string]*mcp.ClientSession{}
	session := func(key, endpoint, era string) *mcp.ClientSession {
		id := key + " " + endpoint + " " + era
		if sessions[id] == nil {
			sessions[id] = connectEra(t, tg.srv.URL+"/mcp"+endpoint, era, key)
		}
		return sessions[id]
	}
	list := func(cs *mcp.ClientSession) (parityOutcome, any) {
		tools := collect(t, cs.Tools(ctx, nil), func(*mcp.Tool) bool { return true })
		prompts := collect(t, cs.Prompts(ctx, nil), func(*mcp.Prompt) bool { return true })
		var out parityOutcome
		for _, tool := range tools {
			out.Tools = append(out.Tools, tool.Name+": "+tool.Description)
		}
		for _, p := range prompts {
			out.Prompts = append(out.Prompts, p.Name)
		}
		return out, withoutEraOnly(t, []any{tools, prompts})
	}
	// The JSON-RPC error's own message: the SDK words what wraps it by transport and era.
	failed := func(err error) parityOutcome {
		var e *jsonrpc.Error
		if !errors.As(err, &e) {
			return parityOutcome{Text: err.Error()}
		}
		return parityOutcome{Code: e.Code, Text: e.Message}
	}
	call := func(tool string, args map[string]any) func(*mcp.ClientSession) (parityOutcome, any) {
		return func(cs *mcp.ClientSession) (parityOutcome, any) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				return failed(err), nil
			}
			out := parityOutcome{IsError: res.IsError, Text: textOf(t, res)}
			out.Reason, _ = res.Meta["dev.manifold/reason"].(string)
			return out, withoutEraOnly(t, res)
		}
	}
	prompt := func(name string) func(*mcp.ClientSession) (parityOutcome, any) {
		return func(cs *mcp.ClientSession) (parityOutcome, any) {
			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"who": "ada"}})
			if err != nil {
				return failed(err), nil
			}
			return parityOutcome{Text: res.Messages[0].Content.(*mcp.TextContent).Text}, withoutEraOnly(t, res)
		}
	}
	unknownTool := func(name string) parityOutcome {
		return parityOutcome{Code: -32602, Text: "unknown tool: " + name}
	}

	tests := []struct {
		name, key, endpoint string
		do                  func(*mcp.ClientSession) (parityOutcome, any)
		want                parityOutcome
	}{
		{"alice's catalog: renamed, re-described, dropped; denied tools listed", "mfk_alice", "", list, parityOutcome{
			Tools:   []string{"l__add: adds two numbers", "l__say: Says the text back.", "l__whoami: names the upstream", "m__add: Sums two numbers.", "m__echo: echoes text prefixed with the upstream's name"},
			Prompts: []string{"l__greet", "m__hello"},
		}},
		{"bob's catalog: add hidden", "mfk_bob", "", list, parityOutcome{
			Tools:   []string{"l__say: Says the text back.", "l__whoami: names the upstream", "m__echo: echoes text prefixed with the upstream's name"},
			Prompts: []string{"l__greet", "m__hello"},
		}},
		{"alice's profile catalog", "mfk_alice", "/ops", list, parityOutcome{
			Tools:   []string{"m__add: Sums two numbers.", "m__echo: echoes text prefixed with the upstream's name"},
			Prompts: []string{"m__hello"},
		}},
		{"bob's profile catalog", "mfk_bob", "/ops", list, parityOutcome{
			Tools:   []string{"m__echo: echoes text prefixed with the upstream's name"},
			Prompts: []string{"m__hello"},
		}},
		{"allowed by tool, renamed", "mfk_alice", "", call("l__say", map[string]any{"text": "hi"}), parityOutcome{Text: "beta:hi"}},
		{"allowed by tool, 2026 upstream", "mfk_bob", "", call("m__echo", map[string]any{"text": "/tmp"}), parityOutcome{Text: "beta:/tmp"}},
		{"allowed by principal", "mfk_alice", "", call("l__whoami", nil), parityOutcome{Text: "beta"}},
		{"denied by default", "mfk_bob", "", call("l__whoami", nil), parityOutcome{IsError: true, Reason: "denied",
			Text: `the gateway's policy does not allow this request; ask the gateway's operator for access (rule "default"); ask the gateway's operator if you need it`}},
		{"denied by argument", "mfk_alice", "", call("m__echo", map[string]any{"text": "/etc/passwd"}), parityOutcome{IsError: true, Reason: "denied",
			Text: `paths under /etc are off limits (rule "no-etc"); ask the gateway's operator if you need it`}},
		{"denied by argument, renamed", "mfk_bob", "", call("l__say", map[string]any{"text": "/etc/x"}), parityOutcome{IsError: true, Reason: "denied",
			Text: `paths under /etc are off limits (rule "no-etc"); ask the gateway's operator if you need it`}},
		{"hidden by policy", "mfk_bob", "", call("m__add", map[string]any{"a": 1, "b": 2}), unknownTool("m__add")},
		{"dropped by shaping", "mfk_alice", "", call("m__whoami", nil), unknownTool("m__whoami")},
		{"old name of a renamed tool", "mfk_alice", "", call("l__echo", map[string]any{"text": "hi"}), unknownTool("l__echo")},
		{"outside the profile", "mfk_alice", "/ops", call("l__say", map[string]any{"text": "hi"}), unknownTool("l__say")},
		{"prompt allowed, renamed", "mfk_alice", "", prompt("m__hello"), parityOutcome{Text: "beta greets ada"}},
		{"prompt denied by default", "mfk_bob", "", prompt("l__greet"), parityOutcome{Code: -32008}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outcomes := map[string]parityOutcome{}
			full := map[string]any{}
			for _, era := range clientEras {
				got, answer := tt.do(session(tt.key, tt.endpoint, era))
				outcomes[era], full[era] = got, answer
				if tt.want.Code != 0 && tt.want.Text == "" {
					got.Text = "" // the message is compared between the eras only
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s client (-want +got):\n%s", era, diff)
				}
			}
			if diff := cmp.Diff(outcomes[era2025], outcomes[era2026]); diff != "" {
				t.Errorf("the eras' outcomes differ (-2025-11-25 +2026-07-28):\n%s", diff)
			}
			if diff := cmp.Diff(full[era2025], full[era2026]); diff != "" {
				t.Errorf("the eras' answers differ (-2025-11-25 +2026-07-28):\n%s", diff)
			}
		})
	}
}

// TestUpstreamHeaderMismatchInBothEras: a 2026-07-28 upstream changes its tool's
// x-mcp-header annotation without announcing it; a call from a client of either era is
// refused by it (-32020) as the gateway's catalog had the tool, and completes once the
// gateway fetched the tool list again and sent the call once more. An upstream that refuses
// the retry too gives clients of both eras a -32603 that says its headers disagree, never its
// -32020, which a client would take for a fault in its own headers.
func TestUpstreamHeaderMismatchInBothEras(t *testing.T) {
	u := testupstream.NewChanging(`{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repo"},"q":{"type":"string"}}}`)
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:\n  - name: ch\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n", nil)
	t.Cleanup(tg.close)
	ctx := ctxT(t)
	args := map[string]any{"repo": "acme/widgets", "q": "crash"}

	for i, era := range clientEras {
		t.Run(era+" client", func(t *testing.T) {
			cs := connectEra(t, tg.url, era, "")
			// A client of 2026-07-28 sends the Mcp-Param-* headers of the schema it listed,
			// which the gateway checks against its own: it lists first, as it should.
			collect(t, cs.Tools(ctx, nil), func(*mcp.Tool) bool { return true })
			header := fmt.Sprintf("Renamed%d", i)
			u.SetSchema(`{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"` + header + `"},"q":{"type":"string"}}}`)
			before := len(u.CallHeaders())
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ch__lookup", Arguments: args})
			if err != nil {
				t.Fatalf("call after the upstream changed its annotation: %v", err)
			}
			if got := textOf(t, res); got != "acme/widgets:crash" {
				t.Errorf("lookup answered %q; want acme/widgets:crash", got)
			}
			calls := u.CallHeaders()[before:]
			if len(calls) != 2 || calls[1].Get("Mcp-Param-"+header) != "acme/widgets" {
				t.Errorf("the upstream got %d tools/call POSTs; want 2, the second with Mcp-Param-%s", len(calls), header)
			}
		})
	}

	u.RefuseCalls.Store(true)
	messages := map[string]string{}
	for _, era := range clientEras {
		cs := connectEra(t, tg.url, era, "")
		collect(t, cs.Tools(ctx, nil), func(*mcp.Tool) bool { return true })
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ch__lookup", Arguments: args})
		var e *jsonrpc.Error
		if !errors.As(err, &e) || e.Code != -32603 || !strings.Contains(e.Message, "headers disagree with its own tool schema") {
			t.Errorf("%s client, the upstream refusing every call: %v; want -32603 saying the upstream's headers disagree", era, err)
			continue
		}
		messages[era] = e.Message
	}
	if messages[era2025] != messages[era2026] {
		t.Errorf("the eras' messages differ: %q and %q", messages[era2025], messages[era2026])
	}
}

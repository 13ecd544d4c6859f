package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// modernUpstreamGateway starts a 2026-07-28 upstream (testupstream.Modern, served statelessly
// over HTTP) behind a gateway whose face serves 2025-11-25 sessions; its tools are mod__*.
func modernUpstreamGateway(t *testing.T, opts *gateway.Options) (*testupstream.Modern, string) {
	m, tg := modernUpstreamBehind(t, "", opts)
	return m, tg.url
}

// modernUpstreamBehind starts a 2026-07-28 upstream "mod" (testupstream.Modern, served
// statelessly over HTTP) behind a gateway with the top-level settings given.
func modernUpstreamBehind(t *testing.T, settings string, opts *gateway.Options) (*testupstream.Modern, *testGateway) {
	t.Helper()
	m := testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+settings+"upstreams:\n  - name: mod\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n", opts)
	t.Cleanup(tg.close)
	return m, tg
}

// TestInputBridgeForSessions: a 2025-11-25 session calls a 2026-07-28 upstream that answers
// input_required (mcp-2026-notes §3.2). The client gets real requests in the middle of its
// call, as 2025-11-25 has them, the upstream is called again with the answers and its
// requestState, and the client sees one call with the final result. The upstream is told
// what the client declared at initialize, and no more.
func TestInputBridgeForSessions(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	m, url := modernUpstreamGateway(t, &gateway.Options{Audit: trail})
	var (
		mu          sync.Mutex
		elicitIDs   []string
		names       = []string{"Ada", "Lovelace"}
		decline     bool
		failSamples bool
	)
	client := mcp.NewClient(&mcp.Implementation{Name: "session", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if req.Params.Mode == "url" {
				elicitIDs = append(elicitIDs, req.Params.ElicitationID)
				if decline {
					return &mcp.ElicitResult{Action: "decline"}, nil
				}
				return &mcp.ElicitResult{Action: "accept"}, nil
			}
			name := names[0]
			names = append(names[1:], name)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			mu.Lock()
			defer mu.Unlock()
			if failSamples {
				return nil, errors.New("the user refused to sample")
			}
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "sampled: " + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		},
		Capabilities: &mcp.ClientCapabilities{
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
			Sampling:    &mcp.SamplingCapabilities{},
			RootsV2:     &mcp.RootCapabilities{},
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///work"})
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("the client speaks %q; want a 2025-11-25 session", v)
	}

	call := func(name string, args map[string]any) (string, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mod__" + name, Arguments: args})
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", errors.New(textOf(t, res))
		}
		return textOf(t, res), nil
	}
	tests := []struct {
		name, tool string
		args       map[string]any
		before     func()
		want       string
		wantErr    string
	}{
		{"form elicitation", "ask", nil, nil, "hello Ada", ""},
		{"two rounds", "ask_twice", nil, nil, "hello Lovelace Ada", ""},
		{"sampling", "ask_for", map[string]any{"what": "sampling"}, nil, "sampled: say hi", ""},
		{"roots", "ask_for", map[string]any{"what": "roots"}, nil, "file:///work", ""},
		{"url elicitation", "ask_for", map[string]any{"what": "url"}, nil, "accept", ""},
		{"url elicitation declined", "ask_for", map[string]any{"what": "url"}, func() { decline = true }, "decline", ""},
		{"a requestState alone", "ask_for", map[string]any{"what": "none"}, nil, "retried", ""},
		{"the client's error ends the call", "ask_for", map[string]any{"what": "sampling"}, func() { failSamples = true }, "", "the user refused to sample"},
		{"asking without end", "ask_forever", nil, nil, "", "after 10 rounds"},
		{"calling again without end", "ask_forever", map[string]any{"nothing": true}, nil, "", "3 times in a row"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			decline, failSamples = false, false
			if tt.before != nil {
				tt.before()
			}
			mu.Unlock()
			got, err := call(tt.tool, tt.args)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("%s: got %q, %v; want an error containing %q", tt.tool, got, err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Errorf("%s: %v", tt.tool, err)
			case got != tt.want:
				t.Errorf("%s = %q, want %q", tt.tool, got, tt.want)
			}
		})
	}
	mu.Lock()
	for _, id := range elicitIDs {
		if !strings.HasPrefix(id, "mf-e-") {
			t.Errorf("a URL elicitation reached the client with elicitationId %q; want one the gateway made (2025-11-25 requires it)", id)
		}
	}
	mu.Unlock()

	// Every round is in the audit record of its call.
	_ = cs.Close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var rounds []string
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] == "tools/call" && rec["target"] == "ask_twice" {
			inputs, _ := json.Marshal(rec["inputs"])
			rounds = append(rounds, string(inputs))
		}
	}
	wantRounds := `[{"asked":["elicitation/create"],"outcome":"answered","round":1},{"asked":["elicitation/create"],"outcome":"answered","round":2}]`
	if len(rounds) != 1 || rounds[0] != wantRounds {
		t.Errorf("audit inputs of ask_twice = %v; want [%s]", rounds, wantRounds)
	}

	// The upstream was told what the client declared at initialize, and no more.
	var meta map[string]json.RawMessage
	for _, s := range m.Seen() {
		if s.Method == "tools/call" {
			if err := json.Unmarshal(s.Meta, &meta); err != nil {
				t.Fatal(err)
			}
		}
	}
	var caps any
	_ = json.Unmarshal(meta[protocol.MetaClientCapabilities], &caps)
	want := map[string]any{"elicitation": map[string]any{"form": map[string]any{}, "url": map[string]any{}}, "sampling": map[string]any{}, "roots": map[string]any{}}
	if diff := cmp.Diff(want, caps); diff != "" {
		t.Errorf("client capabilities declared to the upstream (-want +got):\n%s", diff)
	}
}

// TestInputBridgeAsksOnlyWhatTheSessionDeclared: a session that declared no sampling is not
// offered to the 2026-07-28 upstream as one that can sample; an upstream that asks anyway
// fails the call with an error that says what it asked, and the client is sent nothing.
func TestInputBridgeAsksOnlyWhatTheSessionDeclared(t *testing.T) {
	_, url := modernUpstreamGateway(t, nil)
	// No handler, no sampling declared: a request the client got anyway would come back as
	// its own "method not found", not as the gateway's refusal.
	cs := connect(t, url, nil)
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "mod__ask_for", Arguments: map[string]any{"what": "sampling"}})
	if err == nil || !strings.Contains(err.Error(), "sampling/createMessage") || !strings.Contains(err.Error(), "did not declare") {
		t.Fatalf("call: %v; want an error naming sampling/createMessage as not declared", err)
	}
}

// TestInputBridgeAcrossReplicas: the client's answers to the bridged input requests land on
// either replica behind a balancer without affinity, and reach the call waiting for them on
// the replica that serves it.
func TestInputBridgeAcrossReplicas(t *testing.T) {
	m := testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	a, b := twoReplicas(t, "  - name: mod\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n")
	rr := newRoundRobin(t, a.url, b.url)
	names := []string{"Grace", "Hopper"}
	var mu sync.Mutex
	client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			name := names[0]
			names = append(names[1:], name)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}, nil
		},
	})
	cs := connectRoundRobin(t, rr, a.url, client)
	for range 3 {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "mod__ask_twice"})
		if err != nil {
			t.Fatal(err)
		}
		if got := textOf(t, res); got != "hello Grace Hopper" {
			t.Fatalf("mod__ask_twice = %q, want hello Grace Hopper", got)
		}
	}
	if rr.sent[0].Load() == 0 || rr.sent[1].Load() == 0 {
		t.Errorf("requests per replica %d and %d: the balancer did not spread them", rr.sent[0].Load(), rr.sent[1].Load())
	}
}

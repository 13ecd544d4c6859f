package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// TestCrossReplicaEraCells: the four cells of the two protocol eras through two gateway
// processes on one Redis, behind a balancer that sends each HTTP request to the other replica
// than the last: Go SDK clients pinned to 2026-07-28 and to 2025-11-25 call a stateful
// 2025-11-25 upstream whose tool samples then elicits mid-call, and a stateless 2026-07-28
// upstream whose tool answers input_required. Each call's rounds cross replicas: a parked
// call's retry lands on the replica that does not hold it. Then by hand: a tampered state and
// a replayed one are refused on the other replica, and a retry for a call whose replica was
// killed gets an error saying the call may have run in part.
func TestCrossReplicaEraCells(t *testing.T) {
	cl := newCrossCluster(t, "info")
	cl.config = "modern_protocol: true\n" + cl.config + "  - name: mod\n    url: " + serveModern(t) + "\n    protocol: 2026-07-28\n"
	a, b := cl.start("a"), cl.start("b")
	ctx := testCtx(t, 2*time.Minute)
	balancer := &alternating{targets: []string{a.url, b.url}}
	hc := &http.Client{Transport: balancer}
	connect := func(version string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: "era-" + version, Version: "1"}, &mcp.ClientOptions{
			CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
			},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "E", "name": "Ada"}}, nil
			},
		})
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connect a %s client: %v%s", version, err, tails(a, b))
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	modern, legacy := connect("2026-07-28"), connect("2025-11-25")
	for _, cell := range []struct {
		name string
		cs   *mcp.ClientSession
		tool string
		want string
	}{
		{"2026 client, 2025 upstream: the call parks", modern, "rev__ask", "sampled=S/q;elicited=E"},
		{"2026 client, 2026 upstream: input relayed", modern, "mod__ask", "hello Ada"},
		{"2025 client, 2026 upstream: input bridged", legacy, "mod__ask", "hello Ada"},
		{"2025 client, 2025 upstream", legacy, "rev__ask", "sampled=S/q;elicited=E"},
	} {
		// Twice, so that each replica takes the call's first request once.
		for i := range 2 {
			res, err := cell.cs.CallTool(ctx, &mcp.CallToolParams{Name: cell.tool, Arguments: map[string]any{"text": "q"}})
			if err != nil {
				t.Fatalf("%s, call %d: %v%s", cell.name, i, err, tails(a, b))
			}
			if len(res.Content) != 1 || res.IsError {
				t.Fatalf("%s, call %d: %+v", cell.name, i, res)
			}
			if got := res.Content[0].(*mcp.TextContent).Text; got != cell.want {
				t.Errorf("%s, call %d = %q, want %q", cell.name, i, got, cell.want)
			}
		}
	}

	// By hand: a call parked on A, retried on B.
	key, state := parkOn(t, ctx, a)
	sampled := `{"` + key + `":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}}`
	tampered := state[:len(state)-2] + map[bool]string{true: "AA", false: "BA"}[!strings.HasSuffix(state, "AA")]
	if r := retryOn(t, ctx, b, sampled, tampered); !r.refused("requestState") {
		t.Errorf("a tampered state on B: %d %s; want 400 -32602", r.status, r.body)
	}
	if r := retryOn(t, ctx, b, sampled, state); r.status != http.StatusOK || !strings.Contains(r.body, `"input_required"`) {
		t.Fatalf("the retry on B: %d %s; want the next round, from A%s", r.status, r.body, tails(a, b))
	}
	if r := retryOn(t, ctx, b, sampled, state); !r.refused("not the latest") {
		t.Errorf("the same state again on B: %d %s; want it refused as not the latest", r.status, r.body)
	}

	// A call parked on A, whose replica is then killed.
	key, state = parkOn(t, ctx, a)
	a.kill(t)
	if r := retryOn(t, ctx, b, `{"`+key+`":{"role":"assistant","model":"m","content":{"type":"text","text":"S"}}}`, state); !r.refused("may have run in part") {
		t.Errorf("a retry on B once A was killed: %d %s; want -32602 saying the call may have run in part", r.status, r.body)
	}
}

// serveModern serves a stateless 2026-07-28 go-sdk server (testupstream.Modern) over
// Streamable HTTP on loopback until the test ends, and returns its URL.
func serveModern(t *testing.T) string {
	t.Helper()
	m := testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// alternating sends each request to the next of its targets in turn: a balancer without
// affinity.
type alternating struct {
	targets []string
	next    atomic.Int64
}

func (b *alternating) RoundTrip(req *http.Request) (*http.Response, error) {
	target, err := url.Parse(b.targets[int(b.next.Add(1)-1)%len(b.targets)])
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host, req.Host = target.Scheme, target.Host, target.Host
	return http.DefaultTransport.RoundTrip(req)
}

// modernReply is the status and body of a raw 2026-07-28 request.
type modernReply struct {
	status int
	body   string
}

// refused reports whether the reply is 400 with a JSON-RPC error -32602 whose message holds
// what.
func (r modernReply) refused(what string) bool {
	return r.status == http.StatusBadRequest && strings.Contains(r.body, `"code":-32602`) && strings.Contains(r.body, what)
}

// askOn posts a raw 2026-07-28 tools/call of rev__ask to n, with more params (",..." or "").
func askOn(t *testing.T, ctx context.Context, n *node, more string) modernReply {
	t.Helper()
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}}`
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{%s,"name":"rev__ask","arguments":{"text":"x"}%s}}`, meta, more)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "rev__ask"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST to %s: %v", n.name, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return modernReply{status: resp.StatusCode, body: string(data)}
}

// parkOn calls rev__ask on n, which parks the call there, and returns the key of its input
// request and its state.
func parkOn(t *testing.T, ctx context.Context, n *node) (key, state string) {
	t.Helper()
	r := askOn(t, ctx, n, "")
	var msg struct {
		Result struct {
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
			RequestState  string                     `json:"requestState"`
		} `json:"result"`
	}
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &msg) != nil || len(msg.Result.InputRequests) != 1 {
		t.Fatalf("rev__ask on %s: %d %s; want input_required with one input request", n.name, r.status, r.body)
	}
	for k := range msg.Result.InputRequests {
		key = k
	}
	return key, msg.Result.RequestState
}

// retryOn retries rev__ask on n with inputResponses responses and requestState state.
func retryOn(t *testing.T, ctx context.Context, n *node, responses, state string) modernReply {
	t.Helper()
	quoted, _ := json.Marshal(state)
	return askOn(t, ctx, n, `,"inputResponses":`+responses+`,"requestState":`+string(quoted))
}

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// modernReplicas starts two replicas with the 2026-07-28 face on, the API keys of alice and
// bob, on one Redis, in front of a 2026-07-28 upstream "mod" (testupstream.Modern, stateless
// over HTTP).
func modernReplicas(t *testing.T) (a, b *testGateway, m *testupstream.Modern) {
	t.Helper()
	m = testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	extra := "modern_protocol: true\nauth:\n  api_keys:\n" +
		"    - {name: alice, hash: " + auth.HashAPIKey(mrtrAliceKey) + "}\n" +
		"    - {name: bob, hash: " + auth.HashAPIKey(mrtrBobKey) + "}\n"
	a, b = twoReplicasWith(t, extra, "  - name: mod\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n")
	return a, b, m
}

// completeText reads the text of a complete tools/call result, failing the test otherwise.
func completeText(t *testing.T, r rawReply) string {
	t.Helper()
	var res struct {
		ResultType string
		Content    []struct{ Text string }
	}
	if r.status != http.StatusOK || r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil ||
		res.ResultType != "complete" || len(res.Content) != 1 {
		t.Fatalf("answer %d %s; want a complete result with one text", r.status, r.body)
	}
	return res.Content[0].Text
}

// TestModernRequestsServedByAReplicaThatNeverSawTheClient: 2026-07-28 requests need no
// affinity. A replica that never heard of the client serves its first tools/call; a
// multi-round-trip call whose input_required (and sealed requestState) came from replica A is
// completed by its retry to replica B, and the upstream gets its own state back; a state A
// sealed for alice opens on B for alice only; and the Go SDK client, through a balancer
// without affinity, completes calls whose rounds land on either replica.
func TestModernRequestsServedByAReplicaThatNeverSawTheClient(t *testing.T) {
	t.Run("first contact", func(t *testing.T) {
		_, b, _ := modernReplicas(t)
		r := mrtrCall(t, b, mrtrAliceKey, 1, "mod__echo", `{"text":"hi"}`, `{}`, "")
		if got := completeText(t, r); got != "hi" {
			t.Errorf("echo through replica B answered %q; want hi", got)
		}
	})

	t.Run("input_required on A, retry on B", func(t *testing.T) {
		a, b, m := modernReplicas(t)
		ir := readInputRequired(t, mrtrCall(t, a, mrtrAliceKey, 1, "mod__ask", `{}`, formCaps, ""))
		if ir.RequestState == nil {
			t.Fatalf("input_required without a requestState")
		}
		state := `,"requestState":"` + *ir.RequestState + `"`
		wantInvalidState(t, mrtrCall(t, b, mrtrBobKey, 2, "mod__ask", `{}`, formCaps, nameAnswers+state), "2")
		r := mrtrCall(t, b, mrtrAliceKey, 3, "mod__ask", `{}`, formCaps, nameAnswers+state)
		if got := completeText(t, r); got != "hello Ada" {
			t.Errorf("the retry on B answered %q; want hello Ada", got)
		}
		states := m.RequestStates()
		if got := states[len(states)-1]; got != "asked" {
			t.Errorf("the upstream got requestState %q from B; want its own, \"asked\"", got)
		}
	})

	t.Run("Go SDK client through a balancer without affinity", func(t *testing.T) {
		a, b, _ := modernReplicas(t)
		rr := newRoundRobin(t, a.url, b.url)
		client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
			},
		})
		cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: a.url,
			HTTPClient: &http.Client{Transport: bearer{mrtrAliceKey, rr}}}, &mcp.ClientSessionOptions{ProtocolVersion: era2026})
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { cs.Close() })
		for range 3 {
			res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "mod__ask_twice"})
			if err != nil {
				t.Fatalf("call ask_twice: %v", err)
			}
			if got := textOf(t, res); got != "hello Ada Ada" {
				t.Errorf("ask_twice answered %q; want hello Ada Ada", got)
			}
		}
		if rr.sent[0].Load() == 0 || rr.sent[1].Load() == 0 {
			t.Errorf("requests per replica %d and %d; want both used", rr.sent[0].Load(), rr.sent[1].Load())
		}
	})
}

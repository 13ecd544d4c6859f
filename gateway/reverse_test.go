package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// markedClient connects a client whose sampling and elicitation handlers answer with its own
// marker, and records every reverse request it receives.
func markedClient(t *testing.T, url, marker string, elicitation bool) (*mcp.ClientSession, *[]string, *sync.Mutex) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	opts := &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			prompt := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			mu.Lock()
			seen = append(seen, "sampling:"+prompt)
			mu.Unlock()
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: marker + "/" + prompt}}, nil
		},
	}
	if elicitation {
		opts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			seen = append(seen, "elicitation:"+req.Params.Message)
			mu.Unlock()
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": marker}}, nil
		}
	}
	return connect(t, url, opts), &seen, &mu
}

// TestReverseRequestsReachTheirOwnClient: two sessions call tools at the same time on one
// shared Streamable HTTP upstream whose tools sample and elicit mid-call; each client gets
// only its own requests and its own marker back, round after round.
func TestReverseRequestsReachTheirOwnClient(t *testing.T) {
	upstreamSrv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer upstreamSrv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: r\n    url: %s\n", upstreamSrv.URL), nil)
	defer tg.close()

	clients := map[string]*mcp.ClientSession{}
	seen := map[string]*[]string{}
	for _, m := range []string{"A", "B"} {
		cs, s, _ := markedClient(t, tg.url, m, true)
		clients[m], seen[m] = cs, s
	}
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for _, m := range []string{"A", "B"} {
		wg.Go(func() {
			for round := range 15 {
				text := fmt.Sprintf("%s-%d", m, round)
				res, err := clients[m].CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": text}})
				if err != nil {
					t.Errorf("client %s round %d: %v", m, round, err)
					return
				}
				want := fmt.Sprintf("sampled=%s/%s;elicited=%s", m, text, m)
				if got := textOf(t, res); got != want {
					t.Errorf("client %s round %d: %q, want %q", m, round, got, want)
				}
			}
		})
	}
	wg.Wait()
	for _, m := range []string{"A", "B"} {
		for _, s := range *seen[m] {
			if !strings.Contains(s, ":"+m+"-") && !strings.Contains(s, " "+m+"-") {
				t.Errorf("client %s received another session's request: %q", m, s)
			}
		}
		if len(*seen[m]) != 30 {
			t.Errorf("client %s saw %d reverse requests, want 30", m, len(*seen[m]))
		}
	}
}

// TestSharedStdioRoutesOnlyWhenUnambiguous: over a shared stdio upstream nothing ties a
// server request to a call. With one session in flight the request is routed; while another
// session has a call in flight there too, the upstream gets the routing error and neither
// client receives anything. The overlap is made, not waited for: B's call is in flight
// (its progress came back) before A calls.
func TestSharedStdioRoutesOnlyWhenUnambiguous(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	defer tg.close()
	a, seenA, muA := markedClient(t, tg.url, "A", true)
	progressed := make(chan struct{}, 1)
	var seenB []string
	var muB sync.Mutex
	b := connect(t, tg.url, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			muB.Lock()
			seenB = append(seenB, "sampling")
			muB.Unlock()
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "B"}}, nil
		},
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	ctx := ctxT(t)

	res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "alone"}})
	if err != nil || textOf(t, res) != "sampled=A/alone;elicited=A" {
		t.Fatalf("a single session in flight: %v %v", res, err)
	}

	muA.Lock()
	before := len(*seenA)
	muA.Unlock()
	holdCtx, release := context.WithCancel(ctx)
	held := holdInFlight(t, holdCtx, b, "r__hold", progressed)
	defer func() { release(); <-held }()
	res, err = a.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "both"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), "isolation: session") {
		t.Errorf("a call while another session has one in flight: %q, want the routing error naming isolation: session", textOf(t, res))
	}
	muA.Lock()
	muB.Lock()
	defer muA.Unlock()
	defer muB.Unlock()
	if len(*seenA) != before || len(seenB) != 0 {
		t.Errorf("a request crossed: A saw %v, B saw %v", (*seenA)[before:], seenB)
	}
}

// TestProgressTokensStayWithTheirOwner: two sessions use the same progress token "1"; each
// receives only its own notifications, with its token as it sent it.
func TestProgressTokensStayWithTheirOwner(t *testing.T) {
	upstreamSrv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer upstreamSrv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: r\n    url: %s\n", upstreamSrv.URL)+upstreamYAML("s", "reverse", ""), nil)
	defer tg.close()
	for _, tool := range []string{"r__progress", "s__progress"} {
		t.Run(tool, func(t *testing.T) {
			type note struct {
				token    any
				progress float64
			}
			var mu sync.Mutex
			got := map[string][]note{}
			sessions := map[string]*mcp.ClientSession{}
			for _, m := range []string{"A", "B"} {
				sessions[m] = connect(t, tg.url, &mcp.ClientOptions{
					ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
						mu.Lock()
						got[m] = append(got[m], note{req.Params.ProgressToken, req.Params.Progress})
						mu.Unlock()
					},
				})
			}
			ctx := ctxT(t)
			var wg sync.WaitGroup
			for _, m := range []string{"A", "B"} {
				wg.Go(func() {
					params := &mcp.CallToolParams{Name: tool}
					params.SetProgressToken("1")
					res, err := sessions[m].CallTool(ctx, params)
					if err != nil {
						t.Errorf("%s: %v", m, err)
						return
					}
					if text := textOf(t, res); strings.Contains(text, "token=1") {
						t.Errorf("%s: the upstream saw the client's own token (%q); it must see the gateway's", m, text)
					}
				})
			}
			wg.Wait()
			// The client may run its notification handler after the call has returned.
			testwait.Within(waitBound, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got["A"]) >= 3 && len(got["B"]) >= 3
			})
			mu.Lock()
			defer mu.Unlock()
			for _, m := range []string{"A", "B"} {
				if len(got[m]) != 3 {
					t.Errorf("session %s got %d progress notifications, want its own 3: %v", m, len(got[m]), got[m])
				}
				for _, n := range got[m] {
					if n.token != "1" {
						t.Errorf("session %s got token %v (%T), want \"1\" as sent", m, n.token, n.token)
					}
				}
			}
		})
	}
}

// TestCancelStopsOnlyItsOwnCall: a client cancels a long call; the upstream sees the cancel,
// and another session's call completes.
func TestCancelStopsOnlyItsOwnCall(t *testing.T) {
	upstreamSrv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer upstreamSrv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: r\n    url: %s\n", upstreamSrv.URL), nil)
	defer tg.close()
	a := connect(t, tg.url, nil)
	b, _, _ := markedClient(t, tg.url, "B", true)

	callCtx, cancel := context.WithCancel(context.Background())
	blocked := make(chan error, 1)
	go func() {
		_, err := a.CallTool(callCtx, &mcp.CallToolParams{Name: "r__block"})
		blocked <- err
	}()
	ctx := ctxT(t)
	waitUntil(t, "the call to reach the upstream", func() bool {
		res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "r__blocking"})
		return err == nil && textOf(t, res) == "1"
	})
	cancel() // the go-sdk client sends notifications/cancelled
	if err := <-blocked; err == nil {
		t.Error("the cancelled call returned no error")
	}
	res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "x"}})
	if err != nil || textOf(t, res) != "sampled=B/x;elicited=B" {
		t.Errorf("the other session's call: %v %v", res, err)
	}
	seen := ""
	waitUntil(t, "the upstream to see the cancel", func() bool {
		res, err := b.CallTool(ctx, &mcp.CallToolParams{Name: "r__cancels"})
		if err != nil {
			t.Fatal(err)
		}
		seen = textOf(t, res)
		return seen == "1"
	})
	if seen != "1" {
		t.Fatalf("the upstream saw %s cancels, want 1", seen)
	}
}

// TestUndeclaredCapabilityIsNeverForwarded: a client without elicitation never receives an
// elicitation request; the upstream gets an error instead.
func TestUndeclaredCapabilityIsNeverForwarded(t *testing.T) {
	upstreamSrv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer upstreamSrv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: r\n    url: %s\n", upstreamSrv.URL), nil)
	defer tg.close()
	cs, seen, mu := markedClient(t, tg.url, "A", false)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), "elicitation") {
		t.Errorf("result %q, want the tool to fail on the refused elicitation", textOf(t, res))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range *seen {
		if strings.HasPrefix(s, "elicitation:") {
			t.Errorf("the client received %q without declaring elicitation", s)
		}
	}
}

// TestSessionIsolation: with isolation: session each client session gets its own stdio
// child, so requests the upstream sends mid-call route even when sessions overlap; the
// children end with their sessions, and max_connections caps them.
func TestSessionIsolation(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", "    isolation: session\n    max_connections: 2\n"), nil)
	defer tg.close()
	a, _, _ := markedClient(t, tg.url, "A", true)
	b, _, _ := markedClient(t, tg.url, "B", true)
	ctx := ctxT(t)
	for round := range 3 {
		var wg sync.WaitGroup
		for m, cs := range map[string]*mcp.ClientSession{"A": a, "B": b} {
			wg.Go(func() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__slow_ask", Arguments: map[string]any{"text": "t"}})
				if err != nil {
					t.Errorf("round %d, %s: %v", round, m, err)
					return
				}
				if got, want := textOf(t, res), "sampled="+m+"/t"; got != want {
					t.Errorf("round %d, %s: %q, want %q", round, m, got, want)
				}
			})
			wg.Go(func() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "e"}})
				if err != nil {
					t.Errorf("round %d, %s ask: %v", round, m, err)
					return
				}
				if got, want := textOf(t, res), "sampled="+m+"/e;elicited="+m; got != want {
					t.Errorf("round %d, %s ask: %q, want %q", round, m, got, want)
				}
			})
		}
		wg.Wait()
	}
	if n := tg.gw.IsolatedConnections("r"); n != 2 {
		t.Errorf("%d session connections open, want 2", n)
	}

	// A third session is refused past max_connections, with a tool result that says so.
	c, _, _ := markedClient(t, tg.url, "C", true)
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta["dev.manifold/reason"] != "connection_limit" {
		t.Errorf("third session: %q %v, want a connection_limit tool error", textOf(t, res), res.Meta)
	}

	// Ending a session ends its child; then C gets one.
	a.Close()
	waitUntil(t, "one connection left after a session ended", func() bool { return tg.gw.IsolatedConnections("r") == 1 })
	res, err = c.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "x"}})
	if err != nil || textOf(t, res) != "sampled=C/x;elicited=C" {
		t.Errorf("C after A left: %v %v", res, err)
	}
}

// TestIsolatedConnectionClosesWhenIdle: a session's own connection closes after
// isolation_idle_timeout without calls, and reopens on the next call.
func TestIsolatedConnectionClosesWhenIdle(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", "    isolation: session\n    isolation_idle_timeout: 200ms\n"),
		&gateway.Options{ExpiryInterval: 50 * time.Millisecond})
	defer tg.close()
	a, _, _ := markedClient(t, tg.url, "A", true)
	ctx := ctxT(t)
	call := func() {
		res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "i"}})
		if err != nil || textOf(t, res) != "sampled=A/i;elicited=A" {
			t.Fatalf("call: %v %v", res, err)
		}
	}
	call()
	waitUntil(t, "the idle session's connection to close", func() bool { return tg.gw.IsolatedConnections("r") == 0 })
	call()
}

// stderrLines is a log handler that passes the stderr lines of upstreams that start with
// prefix to a channel.
type stderrLines struct {
	prefix string
	lines  chan string
}

func (h stderrLines) Enabled(context.Context, slog.Level) bool { return true }
func (h stderrLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h stderrLines) WithGroup(string) slog.Handler            { return h }
func (h stderrLines) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "upstream stderr" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if line := a.Value.String(); a.Key == "line" && strings.HasPrefix(line, h.prefix) {
			h.lines <- strings.TrimPrefix(line, h.prefix)
		}
		return true
	})
	return nil
}

// TestRootsOutsideACall: a shared upstream asking for roots outside any call gets the
// config's roots; a session's own connection asks its own client, on the session's
// standalone stream. The test waits for the upstream's report on stderr, so that no call of
// its own is in flight when the request comes. (That no other client's roots answer is
// TestRequestOutsideACallNeverReachesABystander.)
func TestRootsOutsideACall(t *testing.T) {
	got := stderrLines{prefix: "roots_later got ", lines: make(chan string, 4)}
	tg := startGateway(t, "listen: 127.0.0.1:0\nroots: [file:///srv/shared]\nupstreams:"+
		upstreamYAML("shared", "reverse", "")+upstreamYAML("own", "reverse", "    isolation: session\n"),
		&gateway.Options{Logger: slog.New(got)})
	defer tg.close()
	client := mcp.NewClient(&mcp.Implementation{Name: "roots", Version: "1"}, nil)
	client.AddRoots(&mcp.Root{URI: "file:///home/client", Name: "mine"})
	cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: tg.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := ctxT(t)
	for _, tc := range []struct{ upstream, want string }{
		{"shared", "file:///srv/shared"},
		{"own", "file:///home/client"},
	} {
		t.Run(tc.upstream, func(t *testing.T) {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tc.upstream + "__roots_later"}); err != nil {
				t.Fatal(err)
			}
			select {
			case roots := <-got.lines:
				if roots != tc.want {
					t.Errorf("the upstream got roots %q, want %q", roots, tc.want)
				}
			case <-ctx.Done():
				t.Fatal("the upstream never reported the roots it got")
			}
		})
	}
}

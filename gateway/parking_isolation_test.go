package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestParkedCallsOwnStdioConnections: over stdio an upstream cannot say which call a request
// of its belongs to. With isolation: session, each 2026-07-28 call (which has no session) gets
// a child of its own, kept while the call waits for its client's input: two calls parked at
// once, each sampled by its own client, get their own answers; their children end with them.
func TestParkedCallsOwnStdioConnections(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:"+
		upstreamYAML("r", "reverse", "    isolation: session\n    max_connections: 4\n"), nil)
	defer tg.close()
	ctx := ctxT(t)

	// Both calls are asked for input before either answers: they are parked side by side.
	var mu sync.Mutex
	asked := 0
	bothAsked := make(chan struct{})
	arrive := func() {
		mu.Lock()
		defer mu.Unlock()
		if asked++; asked == 2 {
			close(bothAsked)
		}
	}
	modernClient := func(marker string) *mcp.ClientSession {
		var once sync.Once
		client := mcp.NewClient(&mcp.Implementation{Name: "modern-" + marker, Version: "1"}, &mcp.ClientOptions{
			CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				once.Do(arrive)
				select {
				case <-bothAsked:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: marker + "/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
			},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": marker}}, nil
			},
		})
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	clients := map[string]*mcp.ClientSession{"A": modernClient("A"), "B": modernClient("B")}
	var wg sync.WaitGroup
	for marker, cs := range clients {
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": "t"}})
			if err != nil {
				t.Errorf("%s: %v", marker, err)
				return
			}
			if got, want := textOf(t, res), fmt.Sprintf("sampled=%s/t;elicited=%s", marker, marker); got != want {
				t.Errorf("%s: %q, want %q", marker, got, want)
			}
		})
	}
	wg.Wait()
	// A call's own child ends with it.
	testwait.Until(t, 10*time.Second, "no connection open after both calls ended", func() bool { return tg.gw.IsolatedConnections("r") == 0 })
	if n := tg.gw.ParkedCalls(); n != 0 {
		t.Errorf("%d calls still parked", n)
	}
}

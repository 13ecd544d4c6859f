package gateway_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// logRecorder collects the log messages a client receives.
type logRecorder struct {
	mu   sync.Mutex
	data []string
}

func (l *logRecorder) handler(_ context.Context, req *mcp.LoggingMessageRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.data = append(l.data, fmt.Sprint(req.Params.Data))
}

func (l *logRecorder) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.data...)
}

func semanticsGateway(t *testing.T, extra string) *testGateway {
	t.Helper()
	up := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(up.Close)
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: sem\n    url: %s\n%s", up.URL, extra), nil)
	t.Cleanup(tg.close)
	return tg
}

// TestLogLevelsPerSession: two sessions at different levels call a logging tool at once over
// one shared upstream; each receives exactly its own messages at or above its level. A
// message that belongs to no call reaches no one, unless the upstream broadcasts its logs.
func TestLogLevelsPerSession(t *testing.T) {
	for _, broadcast := range []bool{false, true} {
		t.Run(fmt.Sprintf("broadcast_logs=%v", broadcast), func(t *testing.T) {
			tg := semanticsGateway(t, fmt.Sprintf("    broadcast_logs: %v\n", broadcast))
			ctx := ctxT(t)
			levels := map[string]mcp.LoggingLevel{"A": "debug", "B": "warning"}
			logs := map[string]*logRecorder{"A": {}, "B": {}}
			sessions := map[string]*mcp.ClientSession{}
			for m, level := range levels {
				sessions[m] = connect(t, tg.url, &mcp.ClientOptions{LoggingMessageHandler: logs[m].handler})
				if err := sessions[m].SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
					t.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for m := range levels {
				wg.Go(func() {
					if _, err := sessions[m].CallTool(ctx, &mcp.CallToolParams{Name: "sem__log", Arguments: map[string]any{"text": m}}); err != nil {
						t.Errorf("%s: %v", m, err)
					}
				})
			}
			wg.Wait()
			want := map[string][]string{"A": {"A@debug", "A@info", "A@warning"}, "B": {"B@warning"}}
			// The client may run its notification handler after the call has returned.
			testwait.Within(waitBound, func() bool { return len(logs["A"].got()) >= 3 && len(logs["B"].got()) >= 1 })
			for m := range levels {
				if got := logs[m].got(); strings.Join(got, ",") != strings.Join(want[m], ",") {
					t.Errorf("session %s received %v, want %v", m, got, want[m])
				}
			}

			if _, err := sessions["A"].CallTool(ctx, &mcp.CallToolParams{Name: "sem__log_later", Arguments: map[string]any{"text": "L"}}); err != nil {
				t.Fatal(err)
			}
			// Broadcast, both sessions get it; otherwise neither does, which a second
			// without it stands for.
			testwait.Within(time.Second, func() bool {
				return broadcast && len(logs["A"].got()) == 4 && len(logs["B"].got()) == 2
			})
			for m := range levels {
				later := strings.Contains(strings.Join(logs[m].got(), ","), "L@later")
				if later != broadcast {
					t.Errorf("session %s got the unattributable message: %v, want %v (logs %v)", m, later, broadcast, logs[m].got())
				}
			}
		})
	}
}

// TestSubscriptionsFanOut: only subscribers get updates, with the namespaced URI; the
// upstream sees one subscribe and one unsubscribe however many sessions subscribe.
func TestSubscriptionsFanOut(t *testing.T) {
	tg := semanticsGateway(t, "")
	ctx := ctxT(t)
	updates := map[string]chan string{}
	sessions := map[string]*mcp.ClientSession{}
	for _, m := range []string{"A", "B", "C"} {
		ch := make(chan string, 8)
		updates[m] = ch
		sessions[m] = connect(t, tg.url, &mcp.ClientOptions{
			ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { ch <- req.Params.URI },
		})
	}
	const uri = "sem+file:///watched.txt"
	for _, m := range []string{"A", "B"} {
		if err := sessions[m].Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatalf("%s subscribe: %v", m, err)
		}
	}
	counts := func() string {
		res, err := sessions["C"].CallTool(ctx, &mcp.CallToolParams{Name: "sem__sub_counts"})
		if err != nil {
			t.Fatal(err)
		}
		return textOf(t, res)
	}
	if got := counts(); got != "subscribe=1 unsubscribe=0" {
		t.Errorf("after two subscribers: %s", got)
	}
	// The go-sdk client opens its standalone stream in the background: touch until the
	// subscribers have both heard.
	heard := map[string]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for !(heard["A"] && heard["B"]) {
		if _, err := sessions["C"].CallTool(ctx, &mcp.CallToolParams{Name: "sem__touch"}); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"A", "B"} {
			select {
			case got := <-updates[m]:
				if got != uri {
					t.Errorf("%s got update for %q, want %q", m, got, uri)
				}
				heard[m] = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscribers heard: %v", heard)
		}
	}
	select {
	case got := <-updates["C"]:
		t.Errorf("C, not subscribed, got an update for %q", got)
	default:
	}
	if err := sessions["A"].Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if got := counts(); got != "subscribe=1 unsubscribe=0" {
		t.Errorf("after one of two left: %s", got)
	}
	sessions["B"].Close() // the last subscriber's session ends
	if !testwait.Within(waitBound, func() bool { return counts() == "subscribe=1 unsubscribe=1" }) {
		t.Fatalf("after the last subscriber's session ended: %s", counts())
	}
}

// TestResourceLinkReadsThroughGateway: a tool's resource_link names the upstream's URI in the
// gateway's form, and reading it through the gateway works.
func TestResourceLinkReadsThroughGateway(t *testing.T) {
	tg := semanticsGateway(t, "")
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sem__link"})
	if err != nil {
		t.Fatal(err)
	}
	link, ok := res.Content[0].(*mcp.ResourceLink)
	if !ok {
		t.Fatalf("content[0] is %T, want a resource link", res.Content[0])
	}
	if link.URI != "sem+file:///linked.txt" {
		t.Errorf("link URI %q, want the gateway's form", link.URI)
	}
	read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: link.URI})
	if err != nil || read.Contents[0].Text != "content of file:///linked.txt" {
		t.Errorf("reading the link: %v %v", read, err)
	}
}

// TestVersionBridging: older clients get what their version can parse.
func TestVersionBridging(t *testing.T) {
	tg := semanticsGateway(t, "")
	ctx := ctxT(t)
	call := func(version, tool string) *mcp.CallToolResult {
		t.Helper()
		client := mcp.NewClient(&mcp.Implementation{Name: "v", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool})
		if err != nil {
			t.Fatalf("%s %s: %v", version, tool, err)
		}
		return res
	}
	// Structured output also as text before 2025-06-18, and only then.
	if res := call("2025-03-26", "sem__structured"); len(res.Content) != 1 || textOf(t, res) != `{"n":42}` {
		t.Errorf("2025-03-26 structured: %+v, want the JSON as a text block", res.Content)
	}
	if res := call("2025-11-25", "sem__structured"); len(res.Content) != 0 {
		t.Errorf("2025-11-25 structured: %+v, want the upstream's content untouched", res.Content)
	}
	// No resource_link before 2025-06-18.
	res := call("2024-11-05", "sem__link")
	if _, isText := res.Content[0].(*mcp.TextContent); !isText || !strings.Contains(textOf(t, res), "sem+file:///linked.txt") {
		t.Errorf("2024-11-05 link: %#v, want a text block naming the link", res.Content[0])
	}
	if _, isLink := call("2025-06-18", "sem__link").Content[0].(*mcp.ResourceLink); !isLink {
		t.Error("2025-06-18 link: want the resource_link block")
	}
}

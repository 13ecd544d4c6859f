package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// holdInFlight starts a call of the reverse upstream's "hold" tool for cs, and returns once
// the call runs upstream (its progress notification came back); the call ends with ctx.
func holdInFlight(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, progressed <-chan struct{}) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		params := &mcp.CallToolParams{Name: tool}
		params.SetProgressToken("hold")
		_, _ = cs.CallTool(ctx, params)
	}()
	select {
	case <-progressed:
	case <-time.After(20 * time.Second):
		t.Fatal("the held call never reached the upstream")
	}
	return done
}

// rootsClient connects a client whose roots are root; progressed hears of its progress
// notifications.
func rootsClient(t *testing.T, url, root string) (*mcp.ClientSession, <-chan struct{}) {
	t.Helper()
	progressed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "roots", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	client.AddRoots(&mcp.Root{URI: root, Name: "mine"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, progressed
}

// TestRequestOutsideACallNeverReachesABystander: session X has a long call in flight on a
// shared upstream; session Y's call returns, and Y's upstream then asks for roots. X's roots
// must never answer it. Over stdio the request is refused (Y's call ended within the
// attribution window, so its owner is ambiguous); over Streamable HTTP it comes on the
// upstream's standalone stream, which belongs to no session: the config's roots answer it.
func TestRequestOutsideACallNeverReachesABystander(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upstream func(t *testing.T) string
		want     string
	}{
		{"stdio", func(*testing.T) string {
			return upstreamYAML("r", "reverse", "    attribution_window: 1m\n")
		}, "error: "},
		{"streamable-http", func(t *testing.T) string {
			srv := httptest.NewServer(goSDKHandler(t, "reverse", false))
			t.Cleanup(srv.Close)
			return fmt.Sprintf("\n  - name: r\n    url: %s\n", srv.URL)
		}, "file:///srv/config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startGateway(t, "listen: 127.0.0.1:0\nroots: [file:///srv/config]\nupstreams:"+tc.upstream(t), nil)
			defer tg.close()
			x, xProgressed := rootsClient(t, tg.url, "file:///home/x")
			y, _ := rootsClient(t, tg.url, "file:///home/y")
			ctx := ctxT(t)
			holdCtx, release := context.WithCancel(ctx)
			held := holdInFlight(t, holdCtx, x, "r__hold", xProgressed)
			defer func() { release(); <-held }()

			if _, err := y.CallTool(ctx, &mcp.CallToolParams{Name: "r__roots_later"}); err != nil {
				t.Fatal(err)
			}
			// X asks what the upstream got: X's calls are the only ones in flight meanwhile,
			// as when the defect was found.
			got := "none yet"
			for got == "none yet" && ctx.Err() == nil {
				res, err := x.CallTool(ctx, &mcp.CallToolParams{Name: "r__last_roots"})
				if err != nil {
					t.Fatal(err)
				}
				got = textOf(t, res)
			}
			if strings.Contains(got, "/home/") {
				t.Fatalf("the upstream's request after Y's call was answered with a client's roots: %q", got)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("the upstream got %q, want %q…", got, tc.want)
			}
			if tc.want == "error: " && !strings.Contains(got, "isolation: session") {
				t.Errorf("the refusal %q does not say to set isolation: session", got)
			}
		})
	}
}

// TestSlowClientSlowsOnlyItself: a session whose client does not read its POST stream, while
// an upstream floods that stream with progress notifications (the client chose their size
// through its progress token), must not hold up another session's calls on the same shared
// upstream. Written as an ordering: the other session's calls complete while the non-reader
// is still not reading.
func TestSlowClientSlowsOnlyItself(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmax_body_bytes: 1048576\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	defer tg.close()
	sid := rawClient{t: t, url: tg.url}.initialize()
	u, err := url.Parse(tg.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	token := strings.Repeat("t", 64<<10)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__flood","arguments":{"count":2000},"_meta":{"progressToken":"` + token + `"}}}`
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s",
		u.Host, sid, len(body), body)
	// Read the start of the flood, to know it runs; then read no more.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the flooding call: %v %v", resp, err)
	}

	other := connect(t, tg.url, nil)
	ctx := ctxT(t)
	for i := range 10 {
		if _, err := other.CallTool(ctx, &mcp.CallToolParams{Name: "r__cancels"}); err != nil {
			t.Fatalf("call %d of the other session while a client does not read: %v", i, err)
		}
	}
}

// TestRootsChangeReachesOwnConnections: a client's notifications/roots/list_changed reaches
// the upstream connections of its own session (isolation: session), which ask it for roots.
func TestRootsChangeReachesOwnConnections(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("own", "reverse", "    isolation: session\n"), nil)
	defer tg.close()
	client := mcp.NewClient(&mcp.Implementation{Name: "roots", Version: "1"}, nil)
	client.AddRoots(&mcp.Root{URI: "file:///home/first", Name: "first"})
	ctx := ctxT(t)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: tg.url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	changes := func() string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "own__roots_changes"})
		if err != nil {
			t.Fatal(err)
		}
		return textOf(t, res)
	}
	if got := changes(); got != "0" { // this first call opens the session's own connection
		t.Fatalf("roots changes before any: %s", got)
	}
	client.AddRoots(&mcp.Root{URI: "file:///home/second", Name: "second"})
	for got := changes(); got != "1"; got = changes() {
		if ctx.Err() != nil {
			t.Fatalf("the session's own upstream saw %s roots changes, want 1", got)
		}
	}
}

// TestURLElicitationCompletesAtItsOwnClient: the completion of a URL-mode elicitation, which
// a shared Streamable HTTP upstream sends after the call on its standalone stream (a stream of
// no session), reaches the client the elicitation went to, found by its elicitationId, and no
// other client.
func TestURLElicitationCompletesAtItsOwnClient(t *testing.T) {
	srv := httptest.NewServer(goSDKHandler(t, "reverse", false))
	defer srv.Close()
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nupstreams:\n  - name: r\n    url: %s\n", srv.URL), nil)
	defer tg.close()
	completed := map[string]chan string{"A": make(chan string, 4), "B": make(chan string, 4)}
	clients := map[string]*mcp.ClientSession{}
	for _, m := range []string{"A", "B"} {
		clients[m] = connect(t, tg.url, &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept"}, nil
			},
			ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
				completed[m] <- req.Params.ElicitationID
			},
		})
	}
	ctx := ctxT(t)
	for _, m := range []string{"A", "B"} {
		res, err := clients[m].CallTool(ctx, &mcp.CallToolParams{Name: "r__url_elicit", Arguments: map[string]any{"text": m}})
		if err != nil || textOf(t, res) != "accept" {
			t.Fatalf("%s: %v %v", m, res, err)
		}
		select {
		case id := <-completed[m]:
			if id != "el-"+m {
				t.Errorf("client %s was told %q completed, want el-%s", m, id, m)
			}
		case <-ctx.Done():
			t.Fatalf("client %s never heard its elicitation complete", m)
		}
	}
	for m, ch := range completed {
		select {
		case id := <-ch:
			t.Errorf("client %s also heard %q complete", m, id)
		default:
		}
	}
}

// TestRequestOfASessionOutlivesItsOtherCalls: over stdio a request from the upstream is known
// by its session, not by its call. While a session has two calls in flight on its own
// connection, a sampling request of one must not be cancelled when the other call ends.
func TestRequestOfASessionOutlivesItsOtherCalls(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("own", "reverse", "    isolation: session\n"), nil)
	defer tg.close()
	arrived := make(chan struct{}, 1)
	answer := make(chan struct{})
	progressed := make(chan struct{}, 16)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			arrived <- struct{}{}
			<-answer
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "ok"}}, nil
		},
	})
	ctx := ctxT(t)
	cancelled := func() string {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "own__cancels"})
		if err != nil {
			t.Fatal(err)
		}
		return textOf(t, res)
	}
	// Which call the request is taken for depends on map order: several rounds.
	for round := range 6 {
		holdCtx, release := context.WithCancel(ctx)
		held := holdInFlight(t, holdCtx, cs, "own__hold", progressed)
		got := make(chan string, 1)
		go func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "own__slow_ask", Arguments: map[string]any{"text": "x"}})
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- textOf(t, res)
		}()
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("no sampling request reached the client")
		}
		release() // the other call ends while the client thinks
		<-held
		for want := fmt.Sprint(round + 1); cancelled() != want; {
			if ctx.Err() != nil {
				t.Fatal("the upstream never saw the held call cancelled")
			}
		}
		answer <- struct{}{}
		if r := <-got; r != "sampled=ok" {
			t.Fatalf("round %d: the sampling call got %q after another call of its session ended", round, r)
		}
	}
}

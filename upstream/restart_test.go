package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestCallsInFlightWhenAnHTTPUpstreamRestartsMayHaveRun: an HTTP upstream restarts (its
// connections break and it forgets its sessions) while calls run there. Each had gone out
// and may have run in part: it fails as interrupted, never as "unavailable" (which invites a
// retry), and is not sent again; the next call is served on a new session. Both fates of a
// call are covered: its answer stream open, and its answer not yet begun.
func TestCallsInFlightWhenAnHTTPUpstreamRestartsMayHaveRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		call string // the call's params
	}{
		{"answer streaming", `{"name":"held","arguments":{},"_meta":{"progressToken":"p"}}`},
		{"answer not begun", `{"name":"hang","arguments":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newHTTPUpstream(t, false)
			defer close(u.held) // a held run that outlived its connection ends with the test
			progressed := make(chan struct{}, 1)
			c := New(Spec{Name: "http", URL: u.srv.URL}, &Options{RestartDelay: 20 * time.Millisecond, OnNotification: func(_ *Client, n *protocol.Notification, _ Origin) {
				if n.Method == protocol.NotificationProgress {
					select {
					case progressed <- struct{}{}:
					default:
					}
				}
			}})
			start(t, c)
			waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
			ctx := context.Background()
			failed := make(chan error, 1)
			go func() {
				_, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(tc.call))
				failed <- err
			}()
			select { // the call runs upstream
			case <-progressed:
			case <-u.hanging:
			}
			u.reset(false) // the upstream restarts: its connections break, its sessions are gone
			u.srv.CloseClientConnections()
			err := <-failed
			if !errors.Is(err, ErrInterrupted) || errors.Is(err, ErrUnavailable) {
				t.Errorf("the call running when the upstream restarted: %v; want ErrInterrupted (it may have run), not ErrUnavailable", err)
			}
			if runs := u.heldRuns.Load() + u.hangs.Load(); runs != 1 {
				t.Errorf("the call reached the upstream %d times, want once", runs)
			}
			// The next call is served, on a new session (once the upstream is back).
			waitUntil(t, "a call served after the restart", func() bool {
				raw, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"echo","arguments":{"Text":"hi"}}`))
				return err == nil && strings.Contains(string(raw), `"hi"`)
			})
		})
	}
}

// hookReinitWait returns a channel that hears of each call that starts waiting for a
// re-initialization, until the test ends.
func hookReinitWait(t *testing.T) <-chan struct{} {
	waiting := make(chan struct{}, 4)
	beforeReinitWait = func() { waiting <- struct{}{} }
	t.Cleanup(func() { beforeReinitWait = nil })
	return waiting
}

// TestCallDuringReinitializationWaitsForIt: while the gateway re-initializes a session an
// HTTP upstream forgot, a call that arrives waits for the new session (within the
// initialize timeout) instead of failing at once, and the upstream's catalog and state stay
// as they were, so that no client sees its tools vanish for that moment.
func TestCallDuringReinitializationWaitsForIt(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "restarting", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "echo"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	var handler atomic.Pointer[http.Handler]
	fresh := func() {
		h := http.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
		handler.Store(&h)
	}
	fresh()
	var holdInit atomic.Bool
	initHeld, releaseInit := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && holdInit.Load() {
			initHeld <- struct{}{}
			<-releaseInit
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(releaseInit) }) }
	t.Cleanup(release) // before srv.Close, which waits for the held initialize
	c := startHTTPClient(t, Spec{URL: srv.URL}, nil)
	ctx := context.Background()
	callText(t, ctx, c, "echo")
	waiting := hookReinitWait(t)

	holdInit.Store(true)
	fresh() // the upstream forgets the session: the next request gets 404, and re-initializes
	type answer struct {
		text string
		err  error
	}
	call := func(out chan<- answer) {
		raw, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"echo","arguments":{"Text":"hi"}}`))
		out <- answer{string(raw), err}
	}
	first := make(chan answer, 1)
	go call(first) // refused with 404: it is sent again once the session is new
	<-initHeld     // the re-initialization is under way
	if c.State() != StateReady || c.Catalog() == nil || len(c.Catalog().List(Tools)) != 1 {
		t.Errorf("during the re-initialization: state %s, catalog %v; want ready with its tool", c.State(), c.Catalog())
	}
	second := make(chan answer, 1)
	go call(second) // arrives during the re-initialization
	select {
	case <-waiting:
	case a := <-second:
		t.Fatalf("a call during the re-initialization ended at once: %v", a.err)
	}
	release()
	for _, ch := range []chan answer{first, second} {
		if a := <-ch; a.err != nil || !strings.Contains(a.text, `"hi"`) {
			t.Errorf("a call around the re-initialization = %s, %v; want hi", a.text, a.err)
		}
	}
}

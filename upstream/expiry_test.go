package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStandaloneStreamDoesNotCutAPOSTWhenTheSessionExpires: the upstream forgets the session
// while a call's POST is on its way. The standalone stream, reconnecting, learns it first
// (404); it must not end the connection under that POST, whose fate would then be unknown (so
// it could not be sent again): the POST meets its own 404, and the call is sent again on the
// next connection and succeeds. Once failed under load as "connection closed".
func TestStandaloneStreamDoesNotCutAPOSTWhenTheSessionExpires(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "expiring", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "echo"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct{ Text string }) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	real := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)

	var (
		mu        sync.Mutex
		lastSID   string                   // the session id the client uses, guarded by mu
		forgotten atomic.Pointer[string]   // once set, requests with this session id get 404
		endGET    = make(chan struct{})    // closed to end the standalone stream being served
		seen      = make(chan string, 16)  // what the forgetting upstream saw: get404, init
		postHeld  = make(chan struct{}, 1) // a POST of the forgotten session arrived
		release   = make(chan struct{})    // lets that POST have its 404
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get("Mcp-Session-Id")
		if old := forgotten.Load(); old != nil && sid == *old {
			if r.Method == http.MethodGet {
				select {
				case seen <- "get404":
				default:
				}
			} else if r.Method == http.MethodPost {
				select {
				case postHeld <- struct{}{}:
				default:
				}
				<-release
			}
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if sid == "" && forgotten.Load() != nil {
			select {
			case seen <- "init": // a new connection
			default:
			}
		}
		if sid != "" {
			mu.Lock()
			lastSID = sid
			mu.Unlock()
		}
		if r.Method == http.MethodGet && forgotten.Load() == nil {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			go func() {
				select {
				case <-endGET:
					cancel()
				case <-ctx.Done():
				}
			}()
			r = r.WithContext(ctx)
		}
		real.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	releasePOST := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releasePOST) // before srv.Close, which waits for the held POST
	c := startHTTPClient(t, Spec{URL: srv.URL}, nil)
	callText(t, context.Background(), c, "echo")

	mu.Lock()
	old := lastSID
	mu.Unlock()
	forgotten.Store(&old) // the upstream forgets the session
	type answer struct {
		raw json.RawMessage
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		raw, err := c.Call(context.Background(), protocol.MethodCallTool, json.RawMessage(`{"name":"echo","arguments":{"Text":"hi"}}`))
		answered <- answer{raw, err}
	}()
	<-postHeld    // the call's POST is on its way
	close(endGET) // the standalone stream ends; its reconnect meets the 404
	// The standalone stream learns of the 404 when it tries again; a connection ended under
	// the POST would show as a new connection first.
	for gets := 0; gets < 2; {
		switch <-seen {
		case "get404":
			gets++
		case "init":
			t.Fatal("the connection was ended under the call's POST")
		}
	}
	releasePOST() // the POST has its own 404: the call is sent again on a new connection
	if a := <-answered; a.err != nil || !strings.Contains(string(a.raw), `"hi"`) {
		t.Errorf("the call after the upstream forgot the session = %s, %v; want hi", a.raw, a.err)
	}
}

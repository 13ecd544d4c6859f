package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// schemaChangingUpstream is a go-sdk server of 2026-07-28, served statelessly over HTTP, whose
// tool "lookup" {repo, q} can be replaced by one with another input schema without any
// announcement (it declares no listChanged): the gateway's catalog then holds the old one.
// It records the headers of each tools/call POST and counts tools/list POSTs; with
// refuseCalls set, every tools/call is refused with 400 -32020 before it reaches the server.
type schemaChangingUpstream struct {
	server *mcp.Server
	srv    *httptest.Server

	refuseCalls atomic.Bool
	lists       atomic.Int64

	mu    sync.Mutex
	calls []http.Header // guarded by mu
}

func newSchemaChangingUpstream(t *testing.T, schema string) *schemaChangingUpstream {
	t.Helper()
	u := &schemaChangingUpstream{server: mcp.NewServer(&mcp.Implementation{Name: "changing", Version: "1"},
		&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}}})}
	u.setSchema(schema)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, &mcp.StreamableHTTPOptions{Stateless: true})
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			ID     json.RawMessage
			Method string
		}
		_ = json.Unmarshal(body, &msg)
		switch msg.Method {
		case protocol.MethodListTools:
			u.lists.Add(1)
		case protocol.MethodCallTool:
			u.mu.Lock()
			u.calls = append(u.calls, r.Header.Clone())
			u.mu.Unlock()
			if u.refuseCalls.Load() {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"error":{"code":-32020,"message":"header mismatch: missing Mcp-Param-Always header"}}`))
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// setSchema replaces the tool "lookup" by one of input schema schema.
func (u *schemaChangingUpstream) setSchema(schema string) {
	u.server.AddTool(&mcp.Tool{Name: "lookup", InputSchema: json.RawMessage(schema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Repo, Q string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Repo + ":" + in.Q}}}, nil
		})
}

func (u *schemaChangingUpstream) callHeaders() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.calls...)
}

const (
	repoAsRepo       = `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repo"},"q":{"type":"string"}}}`
	repoAsRepository = `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repository"},"q":{"type":"string"}}}`
	repoUnannotated  = `{"type":"object","properties":{"repo":{"type":"string"},"q":{"type":"string"}}}`
)

// TestHeaderMismatchRefreshesToolsAndRetries: a 2026-07-28 upstream whose tool's
// x-mcp-header annotations changed since the gateway fetched its tool list refuses the call
// with -32020; the client fetches the tool list again, publishes it, and sends the call once
// more with the headers of the new schema, which the upstream runs. An upstream that refuses
// the second time too fails the call with ErrHeaderMismatch, after exactly two attempts and
// one refetch.
func TestHeaderMismatchRefreshesToolsAndRetries(t *testing.T) {
	tests := []struct {
		name       string
		before     string
		after      string
		refuseAll  bool
		wantHeader string // the Mcp-Param-* header the second attempt carries
	}{
		{"annotation renamed", repoAsRepo, repoAsRepository, false, "Mcp-Param-Repository"},
		{"annotation added", repoUnannotated, repoAsRepo, false, "Mcp-Param-Repo"},
		{"refused again after the refetch", repoAsRepo, repoAsRepo, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := newSchemaChangingUpstream(t, tt.before)
			changes := make(chan struct{}, 16)
			c := startModernClient(t, Spec{Name: "changing", URL: u.srv.URL, Protocol: ProtocolModern},
				&Options{OnChange: func(*Client) {
					select {
					case changes <- struct{}{}:
					default:
					}
				}})
			for len(changes) > 0 {
				<-changes
			}
			listsBefore := u.lists.Load()
			u.setSchema(tt.after)
			u.refuseCalls.Store(tt.refuseAll)

			raw, err := c.Call(context.Background(), protocol.MethodCallTool,
				json.RawMessage(`{"name":"lookup","arguments":{"repo":"acme/widgets","q":"crash"}}`))
			calls := u.callHeaders()
			if len(calls) != 2 {
				t.Fatalf("the upstream got %d tools/call POSTs; want 2 (the refused one and one retry)", len(calls))
			}
			if n := u.lists.Load() - listsBefore; n != 1 {
				t.Errorf("tools/list was fetched %d times after the refusal; want 1", n)
			}
			if tt.refuseAll {
				if !errors.Is(err, ErrHeaderMismatch) {
					t.Fatalf("call refused twice: err = %v; want ErrHeaderMismatch", err)
				}
				var rpcErr *protocol.Error
				if errors.As(err, &rpcErr) {
					t.Errorf("the error wraps the upstream's -32020 (%v): a gateway would relay it as the client's own header mismatch", rpcErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("call after the schema changed: %v", err)
			}
			if got := resultText(t, raw); got != "acme/widgets:crash" {
				t.Errorf("lookup answered %q; want acme/widgets:crash", got)
			}
			if got := calls[1].Get(tt.wantHeader); got != "acme/widgets" {
				t.Errorf("the retry's %s = %q; want acme/widgets (from the refetched schema)", tt.wantHeader, got)
			}
			if got := string(inputSchemaOf(c.Catalog().List(Tools)[0].Raw)); !bytes.Contains([]byte(got), []byte(`"x-mcp-header":"`+headerName(tt.wantHeader)+`"`)) {
				t.Errorf("the catalog holds schema %s; want the refetched one", got)
			}
			select {
			case <-changes:
			default:
				t.Error("OnChange was not called for the refetched tool list")
			}
		})
	}
}

// headerName is the x-mcp-header value behind a Mcp-Param-* header name.
func headerName(header string) string { return header[len("Mcp-Param-"):] }

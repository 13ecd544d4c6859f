package testupstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Changing is a go-sdk server of 2026-07-28, served statelessly over HTTP (it is an
// http.Handler), whose one tool "lookup" {repo, q} answers "<repo>:<q>" and has an input
// schema that SetSchema replaces without any announcement: it declares no listChanged, so a
// client's copy of its tool list goes stale, as when a server changes its x-mcp-header
// annotations. It records the headers of each tools/call POST and counts tools/list POSTs.
type Changing struct {
	server  *mcp.Server
	handler http.Handler

	// RefuseCalls, while set, makes every tools/call answered 400 with error -32020 before
	// it reaches the server: a server whose headers never agree with its schema.
	RefuseCalls atomic.Bool
	lists       atomic.Int64

	mu    sync.Mutex
	calls []http.Header // guarded by mu
}

// NewChanging returns a Changing whose tool "lookup" has input schema schema.
func NewChanging(schema string) *Changing {
	c := &Changing{server: mcp.NewServer(&mcp.Implementation{Name: "test-changing", Version: "1.0.0"},
		&mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}}})}
	c.SetSchema(schema)
	c.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return c.server }, &mcp.StreamableHTTPOptions{Stateless: true})
	return c
}

// SetSchema replaces the tool "lookup" by one of input schema schema.
func (c *Changing) SetSchema(schema string) {
	c.server.AddTool(&mcp.Tool{Name: "lookup", Description: "looks a query up in a repository", InputSchema: json.RawMessage(schema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Repo, Q string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return text(in.Repo + ":" + in.Q), nil
		})
}

// CallHeaders returns the headers of every tools/call POST, in order.
func (c *Changing) CallHeaders() []http.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]http.Header(nil), c.calls...)
}

// Lists returns how many tools/list POSTs the server got.
func (c *Changing) Lists() int64 { return c.lists.Load() }

// ServeHTTP implements http.Handler.
func (c *Changing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		ID     json.RawMessage
		Method string
	}
	_ = json.Unmarshal(body, &msg)
	switch msg.Method {
	case "tools/list":
		c.lists.Add(1)
	case "tools/call":
		c.mu.Lock()
		c.calls = append(c.calls, r.Header.Clone())
		c.mu.Unlock()
		if c.RefuseCalls.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"error":{"code":-32020,"message":"header mismatch: missing Mcp-Param-Always header"}}`))
			return
		}
	}
	c.handler.ServeHTTP(w, r)
}

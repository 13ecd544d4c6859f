package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// panickyUpstream panics on every call, to prove that no panic reaches a client.
type panickyUpstream struct{ fakeUpstream }

func (panickyUpstream) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	panic("upstream client bug")
}

func TestPanicBecomesInternalError(t *testing.T) {
	g := emptyGateway(t, nil)
	f := &panickyUpstream{fakeUpstream{name: "p", server: &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion},
		catalog: upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: {{Key: "boom", Raw: toolJSON("boom")}}})}}
	useFakeUpstreams(g, f)
	h := g.Handler()

	rec := post(h, "", benchInit)
	sid := rec.Header().Get("Mcp-Session-Id")
	rec = post(h, sid, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"p__boom"}}`)
	var resp struct {
		ID    int `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || resp.Error.Code != protocol.CodeInternalError || strings.Contains(resp.Error.Message, "upstream client bug") {
		t.Errorf("panicking call answered %d %s, want -32603 without the panic's text", rec.Code, rec.Body)
	}
	if rec := post(h, sid, `{"jsonrpc":"2.0","id":6,"method":"ping"}`); rec.Code != http.StatusOK {
		t.Errorf("the gateway stopped serving after a panic: %d", rec.Code)
	}
}

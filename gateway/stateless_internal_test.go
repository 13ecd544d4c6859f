package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestMissingCapability: the -32021 of a 2026-07-28 call names, as a ClientCapabilities
// object, exactly what the upstream asked for.
func TestMissingCapability(t *testing.T) {
	tests := []struct {
		name, method, params, want string
	}{
		{"sampling", protocol.MethodCreateMessage, `{"messages":[],"maxTokens":1}`, `{"requiredCapabilities":{"sampling":{}}}`},
		{"sampling with tools", protocol.MethodCreateMessage, `{"messages":[],"maxTokens":1,"tools":[]}`, `{"requiredCapabilities":{"sampling":{"tools":{}}}}`},
		{"form elicitation", protocol.MethodElicit, `{"message":"m","requestedSchema":{"type":"object"}}`, `{"requiredCapabilities":{"elicitation":{"form":{}}}}`},
		{"URL elicitation", protocol.MethodElicit, `{"mode":"url","message":"m","url":"https://x.example"}`, `{"requiredCapabilities":{"elicitation":{"url":{}}}}`},
		{"roots", protocol.MethodListRoots, `{}`, `{"requiredCapabilities":{"roots":{}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := missingCapability("up", tt.method, json.RawMessage(tt.params), false)
			if f.Status != http.StatusBadRequest || f.Err.Code != protocol.CodeMissingRequiredClientCapability {
				t.Errorf("HTTP %d code %d, want 400 -32021", f.Status, f.Err.Code)
			}
			if string(f.Err.Data) != tt.want {
				t.Errorf("data %s, want %s", f.Err.Data, tt.want)
			}
		})
	}
}

// TestModernAnswer: what a 2026-07-28 client gets for a result or error of the pipeline.
func TestModernAnswer(t *testing.T) {
	tests := []struct {
		name, method, result string
		err                  *protocol.Error
		want                 string
	}{
		{"call", protocol.MethodCallTool, `{"content":[]}`, nil, `{"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}}`},
		{"empty result", protocol.MethodComplete, ``, nil, `{"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}}`},
		{"list", protocol.MethodListTools, `{"tools":[]}`, nil, `{"result":{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"private","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}}`},
		{"read keeps the upstream's ttl, private", protocol.MethodReadResource, `{"contents":[],"ttlMs":5000,"cacheScope":"public"}`, nil,
			`{"result":{"contents":[],"ttlMs":5000,"cacheScope":"private","resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}}`},
		{"an input_required read keeps its resultType and gets no cache hints", protocol.MethodReadResource, `{"resultType":"input_required","requestState":"s"}`, nil,
			`{"result":{"resultType":"input_required","requestState":"s","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}}`},
		{"resource not found", protocol.MethodReadResource, ``, &protocol.Error{Code: protocol.CodeResourceNotFound, Message: "resource not found: a+file:///x", Data: json.RawMessage(`{"uri":"a+file:///x"}`)},
			`{"error":{"code":-32602,"message":"resource not found: a+file:///x","data":{"uri":"a+file:///x"}}}`},
		{"an upstream's _meta is kept beside serverInfo", protocol.MethodCallTool, `{"content":[],"_meta":{"x.example/k":1}}`, nil,
			`{"result":{"content":[],"_meta":{"x.example/k":1,"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}},"resultType":"complete"}}`},
		{"a gateway code is kept", protocol.MethodGetPrompt, ``, &protocol.Error{Code: protocol.CodeDenied, Message: "denied", Data: json.RawMessage(`{"reason":"denied"}`)},
			`{"error":{"code":-32008,"message":"denied","data":{"reason":"denied"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, _ := protocol.ParseID([]byte("7"))
			resp := modernAnswer(&protocol.Request{ID: id, Method: tt.method}, json.RawMessage(tt.result), tt.err, json.RawMessage(`{"name":"m","version":"1"}`))
			data, err := protocol.Encode(resp)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(`{"jsonrpc":"2.0","id":7,`+tt.want[1:]), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWithoutRequestMeta: the _meta keys that stand in for initialize stay with the gateway;
// the progress token, the trace context and anything else go on.
func TestWithoutRequestMeta(t *testing.T) {
	in := `{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"info","progressToken":3,"traceparent":"00-x","x.example/k":true}}`
	out, err := withoutRequestMeta(json.RawMessage(in))
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	_ = json.Unmarshal(out, &got)
	_ = json.Unmarshal([]byte(`{"name":"t","_meta":{"progressToken":3,"traceparent":"00-x","x.example/k":true}}`), &want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
}

// TestDirectPartyIsItsOwn: each 2026-07-28 request is a party of its own to its upstream
// calls, and that party is not its directStream, which a stdio upstream would otherwise keep,
// buffer and context with it, for the attribution window after the call ends.
func TestDirectPartyIsItsOwn(t *testing.T) {
	owner := func() *callOwner {
		return &callOwner{direct: &directStream{events: make(chan []byte, directStreamBuffer), party: new(directParty)}}
	}
	a, b := owner(), owner()
	if a.party() == b.party() {
		t.Error("two requests share a party")
	}
	if a.party() == any(a.direct) {
		t.Error("a request's party is its directStream")
	}
	if session := (&callOwner{sessionID: "s"}).party(); session != "s" {
		t.Errorf("a session's request has party %v, want its session id", session)
	}
}

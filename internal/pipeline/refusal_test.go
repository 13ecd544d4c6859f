package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestMapRefusals: every refusal of the table (design decision 7) takes its wire form from
// Map: for tools/call a tool result with isError and the reason in _meta, for other methods a
// JSON-RPC error with the gateway's code; unknown names and resources are errors for both.
func TestMapRefusals(t *testing.T) {
	tests := []struct {
		reason string
		// code is the JSON-RPC error code of another method; for tools/call, toolResult says
		// whether it is a tool result (else the same error).
		code       int64
		toolResult bool
	}{
		{ReasonUnknownTool, protocol.CodeInvalidParams, false},
		{ReasonUnknownPrompt, protocol.CodeInvalidParams, false},
		{ReasonResourceNotFound, protocol.CodeResourceNotFound, false},
		{ReasonUpstreamUnavailable, protocol.CodeUpstreamUnavailable, true},
		{ReasonConnectionLimit, protocol.CodeUpstreamUnavailable, true},
		{ReasonUpstreamInterrupted, protocol.CodeInterrupted, true},
		{ReasonUpstreamTimeout, protocol.CodeUpstreamTimeout, true},
		{ReasonTooManyCalls, protocol.CodeTooManyRequests, true},
		{ReasonTooManyTasks, protocol.CodeTooManyRequests, true},
		{ReasonRateLimited, protocol.CodeTooManyRequests, true},
		{ReasonDenied, protocol.CodeDenied, true},
	}
	for _, tt := range tests {
		for _, method := range []string{protocol.MethodCallTool, protocol.MethodReadResource} {
			t.Run(tt.reason+"/"+method, func(t *testing.T) {
				req := &Request{Method: method, LogID: "r1"}
				target := &Target{Kind: Resource, Upstream: "up", Exposed: "up+file:///a", Original: "file:///a"}
				refusal := &Refusal{Reason: tt.reason, Message: "what happened; what to do", Upstream: "up", RetryAfter: 1500 * time.Millisecond}
				result, wireErr, out := Map(req, target, nil, fmt.Errorf("wrapped: %w", refusal), slog.New(slog.DiscardHandler))
				if out.Result != audit.OutcomeRefused || out.Reason != tt.reason {
					t.Errorf("outcome %+v, want refused for %s", out, tt.reason)
				}
				if method == protocol.MethodCallTool && tt.toolResult {
					var res struct {
						Content []struct{ Text string } `json:"content"`
						IsError bool                    `json:"isError"`
						Meta    map[string]any          `json:"_meta"`
					}
					if wireErr != nil || json.Unmarshal(result, &res) != nil {
						t.Fatalf("want a tool result, got %s / %v", result, wireErr)
					}
					if !res.IsError || res.Content[0].Text != refusal.Message || res.Meta[MetaReason] != tt.reason ||
						res.Meta[MetaUpstream] != "up" || res.Meta[MetaRetryAfter] != float64(2) || out.Code != 0 {
						t.Errorf("tool result %s", result)
					}
					return
				}
				if wireErr == nil || wireErr.Code != tt.code || wireErr.Message != refusal.Message || out.Code != tt.code {
					t.Fatalf("error %+v (outcome %+v), want code %d with the refusal's message", wireErr, out, tt.code)
				}
				if tt.reason == ReasonResourceNotFound && string(wireErr.Data) != `{"uri":"up+file:///a"}` {
					t.Errorf("resource not found data %s, want the exposed URI", wireErr.Data)
				}
			})
		}
	}
}

// TestMapUpstreamErrors: the error rule of design decision 9, code by code.
func TestMapUpstreamErrors(t *testing.T) {
	resource := &Target{Kind: Resource, Upstream: "up", Exposed: "up+file:///secret/a.txt", Original: "file:///secret/a.txt"}
	tool := &Target{Kind: Tool, Upstream: "up", Exposed: "up__echo", Original: "echo"}
	task := &Target{Kind: Task, Upstream: "up", Exposed: "mf-t-abc", Original: "u-task-7"}
	tests := []struct {
		name   string
		target *Target
		err    *protocol.Error
		// want is the error the client gets; logged says whether the original goes to the
		// log instead.
		want   protocol.Error
		logged bool
	}{
		{"invalid params pass with data", tool,
			&protocol.Error{Code: -32602, Message: "argument who: missing; echoes nothing", Data: json.RawMessage(`{"argument":"who"}`)},
			protocol.Error{Code: -32602, Message: "argument who: missing; echoes nothing", Data: json.RawMessage(`{"argument":"who"}`)}, false},
		{"a task is named by the gateway's id", task,
			&protocol.Error{Code: -32602, Message: "unknown task u-task-7"},
			protocol.Error{Code: -32602, Message: "unknown task mf-t-abc"}, false},
		{"invalid request passes", tool, &protocol.Error{Code: -32600, Message: "bad"}, protocol.Error{Code: -32600, Message: "bad"}, false},
		{"method not found passes", tool, &protocol.Error{Code: -32601, Message: "no such method"}, protocol.Error{Code: -32601, Message: "no such method"}, false},
		{"resource not found names the gateway's URI", resource,
			&protocol.Error{Code: -32002, Message: "resource not found: file:///secret/a.txt", Data: json.RawMessage(`{"uri":"file:///secret/a.txt"}`)},
			protocol.Error{Code: -32002, Message: "resource not found: up+file:///secret/a.txt", Data: json.RawMessage(`{"uri":"up+file:///secret/a.txt"}`)}, false},
		{"resource not found as -32602 too", resource,
			&protocol.Error{Code: -32602, Message: "Resource not found", Data: json.RawMessage(`{"uri":"file:///secret/a.txt"}`)},
			protocol.Error{Code: -32602, Message: "Resource not found", Data: json.RawMessage(`{"uri":"up+file:///secret/a.txt"}`)}, false},
		{"URL elicitation required passes with its elicitations", tool,
			&protocol.Error{Code: -32042, Message: "authorize first", Data: json.RawMessage(`{"elicitations":[{"mode":"url","elicitationId":"e1","url":"https://x.example/a","message":"m"}]}`)},
			protocol.Error{Code: -32042, Message: "authorize first", Data: json.RawMessage(`{"elicitations":[{"mode":"url","elicitationId":"e1","url":"https://x.example/a","message":"m"}]}`)}, false},
		{"missing required client capability passes with what is required", tool,
			&protocol.Error{Code: -32021, Message: "sampling required", Data: json.RawMessage(`{"requiredCapabilities":{"sampling":{}}}`)},
			protocol.Error{Code: -32021, Message: "sampling required", Data: json.RawMessage(`{"requiredCapabilities":{"sampling":{}}}`)}, false},
		{"header mismatch is the gateway's, not the client's", tool, &protocol.Error{Code: -32020, Message: "Header mismatch: Mcp-Name"},
			protocol.Error{Code: -32603, Message: "upstream up failed to handle the request (request r9); the gateway's log has the details"}, true},
		{"internal error is generic", tool, &protocol.Error{Code: -32603, Message: "db.internal:5432 refused", Data: json.RawMessage(`"trace"`)},
			protocol.Error{Code: -32603, Message: "upstream up failed to handle the request (request r9); the gateway's log has the details"}, true},
		{"implementation-defined code is generic", tool, &protocol.Error{Code: -32011, Message: "shard 7 down"},
			protocol.Error{Code: -32603, Message: "upstream up failed to handle the request (request r9); the gateway's log has the details"}, true},
		{"a code outside the reserved ranges is generic", tool, &protocol.Error{Code: 42, Message: "teapot at 10.1.2.3"},
			protocol.Error{Code: -32603, Message: "upstream up failed to handle the request (request r9); the gateway's log has the details"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			req := &Request{Method: protocol.MethodReadResource, LogID: "r9"}
			_, got, out := Map(req, tt.target, nil, &UpstreamError{Upstream: "up", Err: tt.err}, logger)
			if got == nil || got.Code != tt.want.Code || got.Message != tt.want.Message || string(got.Data) != string(tt.want.Data) {
				t.Errorf("client got %+v (data %s), want %+v (data %s)", got, got.Data, tt.want, tt.want.Data)
			}
			if out.Result != audit.OutcomeError || out.Code != tt.want.Code {
				t.Errorf("outcome %+v", out)
			}
			if inLog := strings.Contains(logs.String(), tt.err.Message) && strings.Contains(logs.String(), "r9"); inLog != tt.logged {
				t.Errorf("original in the log with the request id: %v, want %v; log: %s", inLog, tt.logged, logs.String())
			}
		})
	}
}

// TestMapOtherFailures: the gateway's own JSON-RPC errors pass; a cancel is an outcome of its
// own; anything else is an internal error whose details only the log has.
func TestMapOtherFailures(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	req := &Request{Method: protocol.MethodGetPrompt, LogID: "r3"}

	own := protocol.Errorf(protocol.CodeInvalidParams, "invalid params: name")
	if _, got, out := Map(req, nil, nil, own, logger); got != own || out.Result != audit.OutcomeError {
		t.Errorf("own error: %+v %+v", got, out)
	}
	connect := &protocol.Error{Code: protocol.CodeURLElicitationRequired, Message: "URL elicitation required: connect"}
	if _, got, out := Map(req, nil, nil, connect, logger); got != connect || out.Result != audit.OutcomeRefused || out.Reason != ReasonConnectRequired {
		t.Errorf("the gateway's ask to connect: %+v %+v; want it passed, counted as refused with reason %s", got, out, ReasonConnectRequired)
	}
	if _, _, out := Map(req, nil, nil, fmt.Errorf("call: %w", context.Canceled), logger); out.Result != audit.OutcomeCancelled {
		t.Errorf("cancel: %+v", out)
	}
	_, got, out := Map(req, nil, nil, errors.New("encoder exploded at 0xdeadbeef"), logger)
	if got.Code != protocol.CodeInternalError || strings.Contains(got.Message, "0xdeadbeef") || !strings.Contains(got.Message, "r3") || out.Result != audit.OutcomeError {
		t.Errorf("internal failure reached the client as %+v", got)
	}
	if !strings.Contains(logs.String(), "0xdeadbeef") {
		t.Errorf("the log lacks the failure: %s", logs.String())
	}
	if res, got, out := Map(req, nil, json.RawMessage(`{"x":1}`), nil, logger); got != nil || string(res) != `{"x":1}` || out.Result != audit.OutcomeOK {
		t.Errorf("a result: %s %+v %+v", res, got, out)
	}
}

func TestChainStopsAtTheFirstRefusal(t *testing.T) {
	var ran []string
	check := func(name string, err error) Check {
		return CheckFunc(func(context.Context, *Request, *Target) error { ran = append(ran, name); return err })
	}
	deny := &Refusal{Reason: ReasonDenied, Message: "no"}
	err := Chain{check("auth", nil), check("policy", deny), check("plugins", nil)}.Check(context.Background(), &Request{}, &Target{})
	if err != deny || strings.Join(ran, ",") != "auth,policy" {
		t.Errorf("chain: %v after %v", err, ran)
	}
	if err := (Chain{}).Check(context.Background(), &Request{}, &Target{}); err != nil {
		t.Errorf("the empty chain refused: %v", err)
	}
}

// TestInterruptedRequestHasACodeOfItsOwn: a request other than tools/call that went out and
// whose upstream's connection ended before it answered may have run in part. Its code is
// not -32003, the upstream unavailable ("try again later"), on which a client branching by
// code would send it again; it has a code of its own, -32010, with data.reason.
func TestInterruptedRequestHasACodeOfItsOwn(t *testing.T) {
	req := &Request{Method: protocol.MethodGetPrompt, LogID: "r1"}
	target := &Target{Kind: Prompt, Upstream: "up", Exposed: "up__greet", Original: "greet"}
	refusal := &Refusal{Reason: ReasonUpstreamInterrupted, Message: "it may have run in part: check before sending it again", Upstream: "up"}
	_, wireErr, out := Map(req, target, nil, refusal, slog.New(slog.DiscardHandler))
	if wireErr == nil || wireErr.Code == protocol.CodeUpstreamUnavailable || wireErr.Code != protocol.CodeInterrupted || out.Code != wireErr.Code {
		t.Fatalf("an interrupted prompts/get: %+v (outcome %+v); want -32010, not the upstream-unavailable -32003", wireErr, out)
	}
	if string(wireErr.Data) != `{"reason":"upstream_interrupted"}` {
		t.Errorf("data %s, want the reason upstream_interrupted", wireErr.Data)
	}
}

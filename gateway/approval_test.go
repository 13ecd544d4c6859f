package gateway_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// approvalYAML holds a's echo for approval, remembered for 10 minutes, with a short timeout.
func approvalYAML() string {
	return policyYAML(`  approval: {timeout: 300ms, remember: 10m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`)
}

// approver is a client whose user answers elicitations with action, counting the questions
// and keeping the last message.
func approver(action string, approve bool, asked *atomic.Int64, last *atomic.Value) *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		last.Store(req.Params.Message)
		if action == "wait" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &mcp.ElicitResult{Action: action, Content: map[string]any{"approve": approve}}, nil
	}}
}

// TestApprovalByElicitation: a call an approve rule matches is held and its client's user is
// asked, with the server, tool, arguments and annotations; it runs only on an explicit
// accept. The approval is remembered for the same principal, tool and arguments only.
func TestApprovalByElicitation(t *testing.T) {
	tg := startGateway(t, approvalYAML(), nil)
	defer tg.close()
	ctx := ctxT(t)
	call := func(cs *mcp.ClientSession, text string) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": text}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var asked atomic.Int64
	var last atomic.Value
	alice := connectAs(t, tg.url, "mfk_alice", approver("accept", true, &asked, &last))
	if res := call(alice, "hello"); res.IsError || !strings.Contains(textOf(t, res), "hello") {
		t.Fatalf("approved call: %s", textOf(t, res))
	}
	msg, _ := last.Load().(string)
	for _, want := range []string{"server: a", "tool: a__echo (echo there)", `arguments: {"text":"hello"}`, "annotations:", "echo-needs-approval"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the question lacks %q:\n%s", want, msg)
		}
	}
	// Remembered for the same arguments; asked again for others.
	call(alice, "hello")
	if n := asked.Load(); n != 1 {
		t.Errorf("asked %d times for the same call twice, want once (remembered)", n)
	}
	call(alice, "other")
	if n := asked.Load(); n != 2 {
		t.Errorf("asked %d times after a call with other arguments, want 2", n)
	}
	// Not for another principal.
	var bobAsked atomic.Int64
	bob := connectAs(t, tg.url, "mfk_bob", approver("decline", false, &bobAsked, &last))
	res := call(bob, "hello")
	if bobAsked.Load() != 1 || !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("bob's call after alice's approval: asked %d, %s %v; want asked and declined", bobAsked.Load(), textOf(t, res), res.Meta)
	}
	// An accept that does not approve is no approval.
	var carolAsked atomic.Int64
	carol := connectAs(t, tg.url, "mfk_alice", approver("accept", false, &carolAsked, &last))
	if res := call(carol, "unchecked"); !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("accept without approve: %s, want declined", textOf(t, res))
	}
	// Other tools are not held.
	if res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "b__shout", Arguments: map[string]any{"text": "x"}}); err != nil || res.IsError {
		t.Errorf("a tool without an approve rule: %v %v", res, err)
	}
}

// TestApprovalTimesOutOrCannotBeAsked: a user who does not answer lets the call time out;
// a client without elicitation cannot be asked, and is told so.
func TestApprovalTimesOutOrCannotBeAsked(t *testing.T) {
	tg := startGateway(t, approvalYAML(), nil)
	defer tg.close()
	ctx := ctxT(t)
	var asked atomic.Int64
	var last atomic.Value
	silent := connectAs(t, tg.url, "mfk_alice", approver("wait", false, &asked, &last))
	res, err := silent.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || !res.IsError || res.Meta["dev.manifold/reason"] != "approval_timeout" {
		t.Errorf("unanswered approval: %v %v, want approval_timeout", res, err)
	}
	plain := connectAs(t, tg.url, "mfk_bob", nil)
	res, err = plain.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || !res.IsError || res.Meta["dev.manifold/reason"] != "approval_unavailable" || !strings.Contains(textOf(t, res), "elicitation") {
		t.Errorf("a client without elicitation: %v %v, want approval_unavailable saying why", res, err)
	}
}

// TestApprovalOutcomeMessagesSayWhatHappened: each way a user can answer (or not) the
// approval question gets a message that says plainly what happened; an accept whose box is
// left unchecked is not reported as "did not approve … (accept)", which reads as a
// contradiction.
func TestApprovalOutcomeMessagesSayWhatHappened(t *testing.T) {
	tg := startGateway(t, approvalYAML(), nil)
	defer tg.close()
	tests := []struct {
		name    string
		action  string
		approve bool
		want    []string
	}{
		{"accepted without the box checked", "accept", false, []string{`the user answered the approval question for a__echo without checking "Run this call"`, "it did not run"}},
		{"declined", "decline", false, []string{"the user declined to run a__echo", "it did not run"}},
		{"cancelled", "cancel", false, []string{"the user dismissed the approval question for a__echo without answering", "it did not run", "call it again to be asked again"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int64
			var last atomic.Value
			cs := connectAs(t, tg.url, "mfk_alice", approver(tt.action, tt.approve, &asked, &last))
			res := callTool(t, cs, "a__echo", map[string]any{"text": tt.name})
			if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
				t.Fatalf("%s: %v %v %q, want approval_declined", tt.name, res.IsError, res.Meta, resultText(res))
			}
			msg := resultText(res)
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "("+tt.action+")") {
				t.Errorf("message %q names the raw action", msg)
			}
		})
	}
}

// anonymousApprovalYAML is a gateway without authentication that holds a's echo for
// approval, remembered for 10 minutes, and extra top-level settings.
func anonymousApprovalYAML(extra string) string {
	return extra + `listen: 127.0.0.1:0
policy:
  approval: {timeout: 20s, remember: 10m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
upstreams:` + upstreamYAML("a", "beta", "")
}

// TestAnonymousApprovalIsBoundToItsSession: with authentication off every client is the
// same "anonymous" principal, so a remembered approval is bound to the session it was given
// in: another client's identical call is asked again, not let through on someone else's
// approval.
func TestAnonymousApprovalIsBoundToItsSession(t *testing.T) {
	tg := startGateway(t, anonymousApprovalYAML(""), nil)
	defer tg.close()
	var asked, otherAsked atomic.Int64
	var last atomic.Value
	first := connect(t, tg.url, approver("accept", true, &asked, &last))
	args := map[string]any{"text": "deploy"}
	if res := callTool(t, first, "a__echo", args); res.IsError {
		t.Fatalf("the approved call: %q", resultText(res))
	}
	if res := callTool(t, first, "a__echo", args); res.IsError || asked.Load() != 1 {
		t.Errorf("the same call in the same session: %v %q, asked %d times; want it remembered", res.IsError, resultText(res), asked.Load())
	}
	other := connect(t, tg.url, approver("decline", false, &otherAsked, &last))
	res := callTool(t, other, "a__echo", args)
	if otherAsked.Load() != 1 || !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("another anonymous client's identical call: asked %d times, %v %q; want it asked and declined", otherAsked.Load(), res.IsError, resultText(res))
	}
}

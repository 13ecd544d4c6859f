package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// policyYAML is a gateway with two API-key principals (alice in eng, bob a contractor), two
// alpha upstreams — a with trusted annotations, b without, and b's echo renamed shout — and
// policy (YAML lines at two spaces under `policy:`).
func policyYAML(policy string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
auth:
  api_keys:
    - {name: alice, hash: %q, groups: [eng]}
    - {name: bob, hash: %q, groups: [contractors]}
audit: {arguments: true, redact: [secret]}
policy:
%supstreams:%s%s`, auth.HashAPIKey("mfk_alice"), auth.HashAPIKey("mfk_bob"), policy,
		upstreamYAML("a", "beta", "    trust_annotations: true\n    tools:\n      overrides:\n        whoami: {annotations: {readOnlyHint: true}}\n"),
		upstreamYAML("b", "beta", "    tools:\n      overrides:\n        whoami: {annotations: {readOnlyHint: true}}\n        echo: {name: shout}\n"))
}

const policyRules = `  default: deny
  rules:
    - {name: contractors-no-add, effect: hide, match: {principal: {groups: [contractors]}, tools: [add]}}
    - {name: no-etc, effect: deny, reason: "paths under /etc are off limits", match: {tools: [echo], arguments: [{pointer: /text, matches: "^/etc"}]}}
    - {name: read-only, effect: allow, match: {annotations: {readOnlyHint: true}}}
    - {name: tools-for-all, effect: allow, match: {tools: [echo, add]}}
`

// TestPolicyDecidesPerPrincipal: two principals see different catalogs and get allow, deny
// and hide on the same tool; an argument rule denies with its reason; an annotation rule
// counts for the trusted upstream only; a rule on a renamed tool matches its original name;
// every decision is in the audit record, with the arguments redacted as configured.
func TestPolicyDecidesPerPrincipal(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, policyYAML(policyRules), &gateway.Options{Audit: trail})
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	names := func(cs *mcp.ClientSession) []string {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return toolNames(res.Tools)
	}
	if got, want := names(alice), []string{"a__add", "a__echo", "a__whoami", "b__add", "b__shout", "b__whoami"}; !slices.Equal(got, want) {
		t.Errorf("alice's tools %v, want %v (denied tools are listed)", got, want)
	}
	if got, want := names(bob), []string{"a__echo", "a__whoami", "b__shout", "b__whoami"}; !slices.Equal(got, want) {
		t.Errorf("bob's tools %v, want %v (add hidden from contractors)", got, want)
	}

	call := func(cs *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	}
	// Hidden: exactly as a tool that does not exist.
	_, hidden := call(bob, "a__add", map[string]any{"a": 1, "b": 2})
	_, missing := call(bob, "a__nope", nil)
	if hidden == nil || missing == nil || strings.Replace(hidden.Error(), "a__add", "X", 1) != strings.Replace(missing.Error(), "a__nope", "X", 1) {
		t.Errorf("bob calling a hidden tool: %v; a missing one: %v; want the same error", hidden, missing)
	}
	if res, err := call(alice, "a__add", map[string]any{"a": 1, "b": 2}); err != nil || res.IsError {
		t.Errorf("alice calling add: %v %v", res, err)
	}
	// An argument rule.
	res, err := call(alice, "a__echo", map[string]any{"text": "/etc/passwd", "secret": "s3"})
	if err != nil || !res.IsError || !strings.Contains(textOf(t, res), "off limits") || res.Meta["dev.manifold/reason"] != "denied" {
		t.Errorf("echo of /etc: %v %v, want a denied tool result with the rule's reason", res, err)
	}
	if res, err := call(alice, "a__echo", map[string]any{"text": "/tmp"}); err != nil || res.IsError {
		t.Errorf("echo of /tmp: %v %v", res, err)
	}
	// The renamed tool: the rule names the upstream's echo.
	if res, err := call(alice, "b__shout", map[string]any{"text": "/etc/x"}); err != nil || !res.IsError {
		t.Errorf("shout (echo renamed) of /etc: %v %v, want denied by the rule on echo", res, err)
	}
	// Annotations count for the trusted upstream only: b's whoami falls to the default.
	if res, err := call(alice, "a__whoami", nil); err != nil || res.IsError {
		t.Errorf("whoami of the trusted upstream: %v %v", res, err)
	}
	if res, err := call(alice, "b__whoami", nil); err != nil || !res.IsError || !strings.Contains(textOf(t, res), `"default"`) {
		t.Errorf("whoami of the untrusted upstream: %v %v, want denied by the default", res, err)
	}

	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var sawDeny, sawHide bool
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] != "tools/call" {
			continue
		}
		decisions := fmt.Sprint(rec["decisions"])
		if rec["target"] == "echo" && rec["upstream"] == "a" && strings.Contains(decisions, "no-etc") {
			sawDeny = true
			if rec["outcome"] != "refused" || rec["reason"] != "denied" || !strings.Contains(decisions, "effect:deny") {
				t.Errorf("denied call's record: %v", rec)
			}
			if args := fmt.Sprint(rec["arguments"]); !strings.Contains(args, "[redacted]") || strings.Contains(args, "s3") || !strings.Contains(args, "/etc/passwd") {
				t.Errorf("denied call's arguments %s, want the secret redacted and the rest kept", args)
			}
		}
		if rec["principal"] == "apikey:bob" && strings.Contains(decisions, "contractors-no-add") {
			// The client learns nothing of it (unknown tool); the record says why.
			sawHide = rec["reason"] == "unknown_tool" && strings.Contains(decisions, "effect:hide")
		}
	}
	if !sawDeny || !sawHide {
		t.Errorf("audit records lack the deny (%v) or hide (%v) decision:\n%s", sawDeny, sawHide, out.String())
	}
}

// TestPolicyDryRun: in dry run nothing is enforced, and the decisions are audited as such.
func TestPolicyDryRun(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, policyYAML("  dry_run: true\n"+policyRules), &gateway.Options{Audit: trail})
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	res, err := bob.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__add", Arguments: map[string]any{"a": 1, "b": 2}})
	if err != nil || res.IsError {
		t.Errorf("bob's add in dry run: %v %v, want it served", res, err)
	}
	tg.close()
	_ = trail.Close()
	if !strings.Contains(out.String(), `"rule":"contractors-no-add","dryRun":true`) {
		t.Errorf("no dry-run decision audited:\n%s", out.String())
	}
}

// TestRateLimitRefusesAndRecovers: a burst past a principal's limit on a tool is refused
// with the retry hint, other principals and tools are not affected, and the limit recovers
// as time passes.
func TestRateLimitRefusesAndRecovers(t *testing.T) {
	clock := testclock.New(time.Now())
	tg := startGateway(t, policyYAML("  rate_limits:\n    - {key: principal_tool, rate: 1/m, burst: 2}\n"), &gateway.Options{Now: clock.Now})
	defer tg.close()
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	echo := func(cs *mcp.ClientSession, tool string) *mcp.CallToolResult {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 2 {
		if res := echo(alice, "a__echo"); res.IsError {
			t.Fatalf("call %d within the burst: %s", i+1, textOf(t, res))
		}
	}
	res := echo(alice, "a__echo")
	if !res.IsError || res.Meta["dev.manifold/reason"] != "rate_limited" || res.Meta["dev.manifold/retryAfterSeconds"] == nil {
		t.Fatalf("call past the burst: %s %v, want rate_limited with retryAfterSeconds", textOf(t, res), res.Meta)
	}
	if res := echo(bob, "a__echo"); res.IsError {
		t.Errorf("bob's call: %s (limits are per principal)", textOf(t, res))
	}
	if res := echo(alice, "b__shout"); res.IsError {
		t.Errorf("alice's other tool: %s (limits are per tool)", textOf(t, res))
	}
	clock.Advance(time.Minute)
	if res := echo(alice, "a__echo"); res.IsError {
		t.Errorf("a minute later: %s, want the limit recovered", textOf(t, res))
	}
}

// TestSharedRateLimitAcrossReplicas: a shared limit counts the calls of both replicas
// together, in Redis.
func TestSharedRateLimitAcrossReplicas(t *testing.T) {
	a, b := twoReplicasWith(t, fmt.Sprintf("auth:\n  api_keys: [{name: alice, hash: %q}]\npolicy:\n  rate_limits:\n    - {key: principal, rate: 1/h, burst: 3, shared: true}\n", auth.HashAPIKey("mfk_alice")),
		upstreamYAML("a", "beta", "")[1:])
	ctx := ctxT(t)
	sessions := []*mcp.ClientSession{connectAs(t, a.url, "mfk_alice", nil), connectAs(t, b.url, "mfk_alice", nil)}
	allowed := 0
	for i := range 8 {
		res, err := sessions[i%2].CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			allowed++
		} else if res.Meta["dev.manifold/reason"] != "rate_limited" {
			t.Fatalf("call %d: %s, want served or rate_limited", i, textOf(t, res))
		}
	}
	if allowed != 3 {
		t.Errorf("%d of 8 calls served through two replicas, want the shared burst: 3", allowed)
	}
}

// TestHiddenPromptsAndResourcesAreMissing: a prompt and a resource hidden from a principal
// are left out of its lists, and getting, reading or completing them answers exactly as for
// items that do not exist.
func TestHiddenPromptsAndResourcesAreMissing(t *testing.T) {
	tg := startGateway(t, policyYAML(`  rules:
    - {name: no-greet, effect: hide, match: {principal: {groups: [contractors]}, prompts: [greet]}}
    - {name: no-readme, effect: hide, match: {principal: {groups: [contractors]}, resources: ["file:///readme.txt", "file:///notes/*"]}}
`), nil)
	defer tg.close()
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	prompts := func(cs *mcp.ClientSession) int {
		res, err := cs.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Prompts)
	}
	resources := func(cs *mcp.ClientSession) int {
		res, err := cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Resources)
	}
	if a, b := prompts(alice), prompts(bob); a != 2 || b != 0 {
		t.Errorf("prompts listed: alice %d, bob %d; want 2 and 0", a, b)
	}
	if a, b := resources(alice), resources(bob); a != 2 || b != 0 {
		t.Errorf("resources listed: alice %d, bob %d; want 2 and 0", a, b)
	}
	if res, err := bob.ListResourceTemplates(ctx, nil); err != nil || len(res.ResourceTemplates) != 0 {
		t.Errorf("bob's templates: %v %v, want none", res, err)
	}
	same := func(what string, hidden, missing error) {
		t.Helper()
		norm := func(err error) string {
			if err == nil {
				return "<nil>"
			}
			s := err.Error()
			for _, name := range []string{"a__greet", "a__nope", "a+file:///readme.txt", "a+file:///nope.txt", "a+file:///notes/{id}", "a+file:///nope/{id}"} {
				s = strings.ReplaceAll(s, name, "X")
			}
			return s
		}
		if hidden == nil || norm(hidden) != norm(missing) {
			t.Errorf("%s: hidden %v; missing %v; want the same error", what, hidden, missing)
		}
	}
	_, hidden := bob.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"who": "x"}})
	_, missing := bob.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__nope", Arguments: map[string]string{"who": "x"}})
	same("prompts/get", hidden, missing)
	_, hidden = bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a+file:///readme.txt"})
	_, missing = bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a+file:///nope.txt"})
	same("resources/read", hidden, missing)
	_, hidden = bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__greet"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
	_, missing = bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__nope"}, Argument: mcp.CompleteParamsArgument{Name: "who", Value: "a"}})
	same("completion/complete", hidden, missing)
	_, hidden = bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "a+file:///notes/{id}"}, Argument: mcp.CompleteParamsArgument{Name: "id", Value: "a"}})
	_, missing = bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "a+file:///nope/{id}"}, Argument: mcp.CompleteParamsArgument{Name: "id", Value: "a"}})
	same("completion/complete of a template", hidden, missing)
	if _, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"who": "x"}}); err != nil {
		t.Errorf("alice's prompt: %v", err)
	}
	if _, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: "a+file:///readme.txt"}); err != nil {
		t.Errorf("alice's resource: %v", err)
	}
}

// TestArgumentRuleDecidesUnderAHidingDefault: an allow rule with an argument matcher keeps
// its tool listed under a hiding default, and decides each call by its arguments.
func TestArgumentRuleDecidesUnderAHidingDefault(t *testing.T) {
	tg := startGateway(t, policyYAML(`  default: hide
  rules:
    - {name: echo-hi, effect: allow, match: {tools: [echo], arguments: [{pointer: /text, equals: hi}]}}
`), nil)
	defer tg.close()
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	res, err := alice.ListTools(ctx, nil)
	if err != nil || !slices.Equal(toolNames(res.Tools), []string{"a__echo", "b__shout"}) {
		t.Fatalf("tools listed %v (%v), want the two echoes only (b's is renamed shout; the rule names the original)", toolNames(res.Tools), err)
	}
	if res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "hi"}}); err != nil || res.IsError {
		t.Errorf("echo hi: %v %v, want it served", res, err)
	}
	if _, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "bye"}}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("echo bye: %v, want unknown tool (hidden by the default)", err)
	}
}

// TestMembersGivenTwiceAreRefused: params that give a member twice, at any depth, are refused
// (-32602) before any check: the gateway would read one value and the upstream, taking the
// last (or merging repeated objects, as Go's encoding/json does), another — a hidden tool
// called under an allowed tool's name, a denied argument behind an allowed one. (The policy
// refuses them on its own too, where its rules read: policy.TestRepeatedNestedMemberIsRefused.)
func TestMembersGivenTwiceAreRefused(t *testing.T) {
	tg := startGateway(t, `listen: 127.0.0.1:0
policy:
  rules:
    - {name: no-add, effect: hide, match: {tools: [add]}}
    - {name: no-etc, effect: deny, match: {tools: [echo], arguments: [{pointer: /text, matches: "^/etc"}]}}
upstreams:`+upstreamYAML("a", "beta", ""), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	for _, params := range []string{
		`{"name":"a__echo","arguments":{"text":"x"},"name":"a__add","arguments":{"a":1,"b":2}}`,
		`{"name":"a__echo","arguments":{"text":"fine","text":"/etc/shadow"}}`,
		`{"name":"a__echo","arguments":{"text":"fine"},"arguments":{"text":"/etc/shadow"}}`,
		`{"name":"a__echo","arguments":{"o":{"text":"/etc/shadow"},"o":{"x":1},"text":"fine"}}`,
	} {
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`, map[string]string{"Mcp-Session-Id": sid})
		if r.msg.Error == nil || r.msg.Error.Code != -32602 || !strings.Contains(r.msg.Error.Message, "appears twice") {
			t.Errorf("%s: %d %s, want -32602 naming the member given twice", params, r.status, r.body)
		}
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"fine"}}}`, map[string]string{"Mcp-Session-Id": sid}); r.msg.Error != nil || !strings.Contains(string(r.msg.Result), "beta:fine") {
		t.Errorf("a call with each member once: %s", r.body)
	}
}

// TestHiddenToolAuditNamesWhatWasAsked: the audit record of a call on a hidden tool names
// the tool as the client asked for it, and neither the upstream nor the upstream's own name
// of what it hides: hidden by the catalog view (the resolver does not find it) or by a rule
// on its arguments (the policy check refuses it).
func TestHiddenToolAuditNamesWhatWasAsked(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, policyYAML(`  rules:
    - {name: contractors-no-add, effect: hide, match: {principal: {groups: [contractors]}, tools: [add]}}
    - {name: no-classified, effect: hide, match: {tools: [echo], arguments: [{pointer: /text, equals: classified}]}}
`), &gateway.Options{Audit: trail})
	ctx := ctxT(t)
	bob := connectAs(t, tg.url, "mfk_bob", nil)
	if _, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "a__add", Arguments: map[string]any{"a": 1, "b": 2}}); err == nil || !strings.Contains(err.Error(), "unknown tool: a__add") {
		t.Errorf("bob's add: %v, want unknown tool", err)
	}
	if _, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "b__shout", Arguments: map[string]any{"text": "classified"}}); err == nil || !strings.Contains(err.Error(), "unknown tool: b__shout") {
		t.Errorf("bob's shout of classified: %v, want unknown tool", err)
	}
	if _, err := bob.CallTool(ctx, &mcp.CallToolParams{Name: "b__nope", Arguments: map[string]any{"text": "x"}}); err == nil {
		t.Errorf("bob's call of a missing tool succeeded")
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] != "tools/call" {
			continue
		}
		target, _ := rec["target"].(string)
		targets[target] = true
		if _, ok := rec["upstream"]; ok {
			t.Errorf("record of a refused call names upstream %v: %v", rec["upstream"], rec)
		}
		if rec["outcome"] != "refused" || rec["reason"] != "unknown_tool" {
			t.Errorf("record %v, want refused as unknown_tool", rec)
		}
	}
	for _, want := range []string{"a__add", "b__shout", "b__nope"} {
		if !targets[want] {
			t.Errorf("no record names the tool %q as asked; the records name %v:\n%s", want, targets, out.String())
		}
	}
	for _, hidden := range []string{"add", "echo"} {
		if targets[hidden] {
			t.Errorf("a record names the hidden tool by its upstream's own name %q:\n%s", hidden, out.String())
		}
	}
}

// TestRateLimitTargetsAPrincipal: a rate limit with principal matchers (the rules' own)
// counts only the principals they match: the contractors' calls are limited, the others'
// are not; on this replica, and shared by two replicas in Redis.
func TestRateLimitTargetsAPrincipal(t *testing.T) {
	calls := func(t *testing.T, sessions ...*mcp.ClientSession) (served int) {
		t.Helper()
		for i := range 4 {
			res, err := sessions[i%len(sessions)].CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}})
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError {
				served++
			} else if res.Meta["dev.manifold/reason"] != "rate_limited" {
				t.Fatalf("call %d: %s, want served or rate_limited", i, textOf(t, res))
			}
		}
		return served
	}
	t.Run("local", func(t *testing.T) {
		tg := startGateway(t, policyYAML("  rate_limits:\n    - {key: principal, rate: 1/h, burst: 1, principal: {groups: [contractors]}}\n"), nil)
		defer tg.close()
		if n := calls(t, connectAs(t, tg.url, "mfk_bob", nil)); n != 1 {
			t.Errorf("bob, a contractor: %d of 4 calls served, want the burst of his group's limit: 1", n)
		}
		if n := calls(t, connectAs(t, tg.url, "mfk_alice", nil)); n != 4 {
			t.Errorf("alice, not a contractor: %d of 4 calls served, want all: the limit is not hers", n)
		}
	})
	t.Run("shared", func(t *testing.T) {
		a, b := twoReplicasWith(t, fmt.Sprintf("auth:\n  api_keys: [{name: alice, hash: %q}, {name: bob, hash: %q}]\npolicy:\n  rate_limits:\n    - {key: principal, rate: 1/h, burst: 2, shared: true, principal: {api_keys: [bob]}}\n",
			auth.HashAPIKey("mfk_alice"), auth.HashAPIKey("mfk_bob")), upstreamYAML("a", "beta", "")[1:])
		if n := calls(t, connectAs(t, a.url, "mfk_bob", nil), connectAs(t, b.url, "mfk_bob", nil)); n != 2 {
			t.Errorf("bob through two replicas: %d of 4 calls served, want the shared burst: 2", n)
		}
		if n := calls(t, connectAs(t, a.url, "mfk_alice", nil), connectAs(t, b.url, "mfk_alice", nil)); n != 4 {
			t.Errorf("alice through two replicas: %d of 4 calls served, want all: the limit is bob's", n)
		}
	})
}

// TestPathRuleSeesThePathTheUpstreamGets: a rule on a path argument with path: true cannot be
// walked around with //, /./ or /../, nor by a relative path (refused: the rule has no root),
// and what the rule that allows a call checked, the cleaned path, is what the upstream gets;
// the audit record says which rule rewrote the arguments, and keeps them as the upstream got
// them. With fold_case, a member in another case is matched too.
func TestPathRuleSeesThePathTheUpstreamGets(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	t.Cleanup(func() { _ = trail.Close() })
	tg := startGateway(t, policyYAML(`  rules:
    - name: no-system-paths
      effect: deny
      reason: paths under /etc are off limits
      match:
        tools: [echo]
        arguments: [{pointer: /text, path: true, fold_case: true, matches: "^/etc(/|$)"}]
    - name: tmp
      effect: allow
      match:
        tools: [echo]
        arguments: [{pointer: /text, path: true, fold_case: true, matches: "^/tmp(/|$)"}]
`), &gateway.Options{Audit: trail})
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)
	echo := func(args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, p := range []string{"/etc/passwd", "//etc/passwd", "/./etc/passwd", "/tmp/../etc/passwd", "/etc/"} {
		if res := echo(map[string]any{"text": p}); !res.IsError || res.Meta["dev.manifold/reason"] != "denied" || !strings.Contains(textOf(t, res), "off limits") {
			t.Errorf("echo %q: %s, want denied by no-system-paths", p, textOf(t, res))
		}
	}
	for _, p := range []string{"etc/passwd", "../etc/passwd"} {
		if res := echo(map[string]any{"text": p}); !res.IsError || res.Meta["dev.manifold/reason"] != "denied" || !strings.Contains(textOf(t, res), `must be an absolute path (starting with /): the gateway's policy cannot tell where a relative one leads (rule "no-system-paths")`) {
			t.Errorf("echo %q: %s, want denied by no-system-paths, which has no root to read it from", p, textOf(t, res))
		}
	}
	if res := echo(map[string]any{"TEXT": "/tmp/../etc/passwd"}); !res.IsError || res.Meta["dev.manifold/reason"] != "denied" {
		t.Errorf("echo with TEXT: %s, want denied (fold_case)", textOf(t, res))
	}
	if res := echo(map[string]any{"text": "/tmp//notes/./today"}); res.IsError || textOf(t, res) != "beta:/tmp/notes/today" {
		t.Errorf("echo of a path outside /etc: %q, want the upstream to get it cleaned (beta:/tmp/notes/today)", textOf(t, res))
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rec := range auditLines(t, out.String()) {
		if rec["outcome"] != "ok" || rec["method"] != "tools/call" {
			continue
		}
		found = true
		decisions, args := fmt.Sprint(rec["decisions"]), fmt.Sprint(rec["arguments"])
		if !strings.Contains(decisions, "effect:rewrite rule:tmp") || !strings.Contains(args, "/tmp/notes/today") || strings.Contains(args, "//") {
			t.Errorf("record of the cleaned call: decisions %s, arguments %s; want the rewrite by tmp and the cleaned path", decisions, args)
		}
	}
	if !found {
		t.Errorf("no record of the served call:\n%s", out.String())
	}
}

// TestApprovalBindsToTheCleanedPath: an approval is given for the arguments the upstream
// gets, after the approve rule's path matcher cleaned them: the person is shown the cleaned
// path, and an approval of /tmp/./x is remembered for /tmp/x.
func TestApprovalBindsToTheCleanedPath(t *testing.T) {
	tg := startGateway(t, policyYAML(`  approval: {timeout: 5s, remember: 10m}
  rules:
    - {name: no-etc, effect: deny, match: {tools: [echo], arguments: [{pointer: /text, path: true, matches: "^/etc(/|$)"}]}}
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo], arguments: [{pointer: /text, path: true, matches: "^/tmp(/|$)"}]}}
`), nil)
	defer tg.close()
	ctx := ctxT(t)
	var asked atomic.Int64
	var last atomic.Value
	alice := connectAs(t, tg.url, "mfk_alice", approver("accept", true, &asked, &last))
	for _, p := range []string{"/tmp/./x", "/tmp/x", "//tmp/x"} {
		res, err := alice.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": p}})
		if err != nil || res.IsError || textOf(t, res) != "beta:/tmp/x" {
			t.Fatalf("echo %q: %v %v, want it approved and served as /tmp/x", p, res, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("asked %d times for one path written three ways, want once (remembered)", n)
	}
	if msg, _ := last.Load().(string); !strings.Contains(msg, `arguments: {"text":"/tmp/x"}`) {
		t.Errorf("the question does not show the cleaned path:\n%s", msg)
	}
}

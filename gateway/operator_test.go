package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// adminKey is the admin API key of the tests' admin, "ops".
const adminKey = "mfk_ops-admin-key"

// adminYAML is the admin section of a test config: a listener, the key of "ops", and more
// lines (extra, indented by four spaces).
func adminYAML(extra string) string {
	return fmt.Sprintf("admin:\n  listen: 127.0.0.1:0\n  api_keys:\n    - {name: ops, hash: %q}\n%s", auth.HashAPIKey(adminKey), extra)
}

// adminClient calls a gateway's admin API, served on a listener of its own.
type adminClient struct {
	t   *testing.T
	url string
	key string
}

func startAdmin(t *testing.T, tg *testGateway) *adminClient {
	t.Helper()
	h, err := tg.gw.AdminHandler()
	if err != nil || h == nil {
		t.Fatalf("admin handler: %v %v", h, err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &adminClient{t: t, url: srv.URL, key: adminKey}
}

// do sends a request with the admin key and decodes the JSON answer into out, if not nil.
func (a *adminClient) do(method, path string, body any, out any) int {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

type heldCall struct {
	ID        string          `json:"id"`
	Principal string          `json:"principal"`
	Tool      string          `json:"tool"`
	Upstream  string          `json:"upstream"`
	Arguments json.RawMessage `json:"arguments"`
	Rule      string          `json:"rule"`
	Session   string          `json:"session"`
}

// waitHeld waits until the admin API lists n held calls, and returns them.
func (a *adminClient) waitHeld(n int) []heldCall {
	a.t.Helper()
	var got struct {
		Approvals []heldCall `json:"approvals"`
	}
	if !testwait.Within(10*time.Second, func() bool {
		a.do("GET", "/api/approvals", nil, &got)
		return len(got.Approvals) == n
	}) {
		a.t.Fatalf("held calls: %+v, want %d", got.Approvals, n)
	}
	return got.Approvals
}

// callAsync calls a tool in the background; the result arrives on the channel.
func callAsync(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) <-chan *mcp.CallToolResult {
	ch := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		ch <- res
	}()
	return ch
}

func resultText(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// TestOperatorDecidesHeldCalls: a client that cannot ask its user (no elicitation) has its
// call held for an operator, who sees it on the admin API (tool, principal, arguments) and
// approves or denies it; the call runs only when approved, and the audit record names the
// approver. Every admin action is audited; the webhook hears of each held call.
func TestOperatorDecidesHeldCalls(t *testing.T) {
	var hooks struct {
		sync.Mutex
		bodies []string
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hooks.Lock()
		hooks.bodies = append(hooks.bodies, string(b))
		hooks.Unlock()
	}))
	defer hook.Close()
	var out lockedBuffer
	trail := audit.New(&out, nil)
	yaml := adminYAML("  webhook: "+hook.URL+"\n") + policyYAML(`  approval: {timeout: 20s}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`)
	tg := startGateway(t, yaml, &gateway.Options{Audit: trail})
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	alice := connectAs(t, tg.url, "mfk_alice", nil)

	done := callAsync(ctx, alice, "a__echo", map[string]any{"text": "hello"})
	held := adm.waitHeld(1)[0]
	if held.Tool != "a__echo" || held.Upstream != "a" || held.Principal != "apikey:alice" || held.Rule != "echo-needs-approval" ||
		!strings.Contains(string(held.Arguments), `"hello"`) || held.Session == "" {
		t.Errorf("held call as listed: %+v", held)
	}
	select {
	case res := <-done:
		t.Fatalf("the call ran before a decision: %v", resultText(res))
	default:
	}
	var sessions struct {
		Sessions []struct {
			Fingerprint, Principal, Client, ProtocolVersion string
		} `json:"sessions"`
	}
	adm.do("GET", "/api/sessions", nil, &sessions)
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].Fingerprint != held.Session || sessions.Sessions[0].Principal != "apikey:alice" ||
		sessions.Sessions[0].Client != "authed 1" || sessions.Sessions[0].ProtocolVersion != "2025-11-25" {
		t.Errorf("sessions: %+v, want alice's, of fingerprint %s", sessions.Sessions, held.Session)
	}
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if res := <-done; res.IsError || resultText(res) != "beta:hello" {
		t.Fatalf("approved call: %v %q", res.IsError, resultText(res))
	}
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil); code != http.StatusNotFound {
		t.Errorf("a decision on a call that ran: %d, want 404", code)
	}

	done = callAsync(ctx, alice, "a__echo", map[string]any{"text": "rm -rf /"})
	held = adm.waitHeld(1)[0]
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	res := <-done
	if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" || !strings.Contains(resultText(res), "apikey:ops") {
		t.Errorf("denied call: %v %v %q", res.IsError, res.Meta, resultText(res))
	}
	if got := adm.waitHeld(0); len(got) != 0 {
		t.Errorf("held after the decisions: %+v", got)
	}

	// What the API refuses.
	if code := adm.do("POST", "/api/approvals/nosuch", map[string]string{"decision": "maybe"}, nil); code != http.StatusBadRequest {
		t.Errorf("a bad decision: %d, want 400", code)
	}
	for _, key := range []string{"", "mfk_alice", "mfk_wrong"} {
		anon := &adminClient{t: t, url: adm.url, key: key}
		if code := anon.do("GET", "/api/approvals", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("key %q: %d, want 401", key, code)
		}
		if code := anon.do("POST", "/api/approvals/x", map[string]string{"decision": "approve"}, nil); code != http.StatusUnauthorized {
			t.Errorf("key %q: decision %d, want 401", key, code)
		}
	}
	for name, set := range map[string]func(*http.Request){
		"foreign origin": func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"rebound host":   func(r *http.Request) { r.Host = "evil.example" },
	} {
		req, _ := http.NewRequest("GET", adm.url+"/api/approvals", nil)
		req.Header.Set("Authorization", "Bearer "+adminKey)
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}

	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var approvedBy, deniedBy, adminActions, refusedActions int
	for _, rec := range auditLines(t, out.String()) {
		method, _ := rec["method"].(string)
		switch {
		case method == "tools/call":
			decisions, _ := rec["decisions"].([]any)
			for _, d := range decisions {
				d, _ := d.(map[string]any)
				if d["check"] == "approval" && d["rule"] == "operator" && d["by"] == "apikey:ops" {
					switch d["effect"] {
					case "allow":
						approvedBy++
					case "deny":
						deniedBy++
					}
				}
			}
		case strings.HasPrefix(method, "admin/") && rec["outcome"] == "ok":
			if rec["principal"] == "apikey:ops" {
				adminActions++
			}
		case strings.HasPrefix(method, "admin/"):
			refusedActions++
		}
	}
	if approvedBy != 1 || deniedBy != 1 || adminActions != 2 || refusedActions < 4 {
		t.Errorf("audit: approved by ops %d, denied by ops %d, admin actions %d, refused %d; want 1, 1, 2, >= 4:\n%s", approvedBy, deniedBy, adminActions, refusedActions, out.String())
	}
	hooks.Lock()
	defer hooks.Unlock()
	if len(hooks.bodies) != 2 || !strings.Contains(hooks.bodies[0], `"event":"approval.held"`) || !strings.Contains(hooks.bodies[0], `"tool":"a__echo"`) {
		t.Errorf("webhook posts: %q", hooks.bodies)
	}
}

// TestHeldCallTimesOut: with no decision within approval.timeout, the call gets a tool error
// saying so, and a decision after that comes too late.
func TestHeldCallTimesOut(t *testing.T) {
	yaml := adminYAML("") + policyYAML(`  approval: {timeout: 300ms, by: operator}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`)
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	// The client could be asked, but by: operator sends every approval to an operator.
	var asked atomicCount
	alice := connectAs(t, tg.url, "mfk_alice", &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.add()
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}})
	done := callAsync(ctx, alice, "a__echo", map[string]any{"text": "late"})
	held := adm.waitHeld(1)[0]
	res := <-done
	if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_timeout" {
		t.Fatalf("unanswered held call: %v %v %q", res.IsError, res.Meta, resultText(res))
	}
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusNotFound && code != http.StatusConflict {
		t.Errorf("a decision after the timeout: %d, want 404 or 409", code)
	}
	if asked.get() != 0 {
		t.Errorf("the client's user was asked %d times with by: operator", asked.get())
	}
}

type atomicCount struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCount) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *atomicCount) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestDecisionOnAnotherReplicaReleasesTheCall: replicas share held calls through Redis; a
// call held on one replica is listed by the other's admin API, and the decision posted
// there releases it where it is held.
func TestDecisionOnAnotherReplicaReleasesTheCall(t *testing.T) {
	extra := adminYAML("") + `policy:
  approval: {timeout: 20s}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {tools: [echo]}}
`
	a, b := twoReplicasWith(t, extra, upstreamYAML("a", "beta", ""))
	adminA, adminB := startAdmin(t, a), startAdmin(t, b)
	ctx := ctxT(t)
	cs := connect(t, a.url, nil)
	var sessions struct {
		Sessions []struct{ Fingerprint, Principal string } `json:"sessions"`
	}
	adminB.do("GET", "/api/sessions", nil, &sessions)
	if len(sessions.Sessions) != 1 || sessions.Sessions[0].Principal != "anonymous" || len(sessions.Sessions[0].Fingerprint) != 12 {
		t.Errorf("sessions listed on B: %+v, want the one made on A", sessions.Sessions)
	}
	for i, decision := range []string{"approve", "deny"} {
		text := fmt.Sprintf("call %d", i)
		done := callAsync(ctx, cs, "a__echo", map[string]any{"text": text})
		held := adminB.waitHeld(1)[0]
		if got := adminA.waitHeld(1)[0]; got.ID != held.ID {
			t.Fatalf("the replicas list different held calls: %s and %s", got.ID, held.ID)
		}
		if code := adminB.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": decision}, nil); code != http.StatusOK {
			t.Fatalf("%s on the other replica: %d", decision, code)
		}
		res := <-done
		switch decision {
		case "approve":
			if res.IsError || resultText(res) != "beta:"+text {
				t.Errorf("approved on the other replica: %v %q", res.IsError, resultText(res))
			}
		case "deny":
			if !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
				t.Errorf("denied on the other replica: %v %q", res.IsError, resultText(res))
			}
		}
		if code := adminA.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusNotFound {
			t.Errorf("a second decision, on the holding replica: %d, want 404", code)
		}
	}
}

// TestAdminRoleClaim: with admin.roles, a token of the gateway's issuer carrying an admin role
// signs in to the admin API, as the subject it names; a valid token without the role is
// refused with 403, and an MCP client's API key is no admin key (401).
func TestAdminRoleClaim(t *testing.T) {
	iss := testissuer.New(t)
	yaml := authYAML(iss, "mfk_client-key", "admin:\n  listen: 127.0.0.1:0\n  roles: [gateway-admins]\nupstreams:"+upstreamYAML("a", "beta", ""))
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	token := func(roles ...string) string {
		return iss.Token(t, map[string]any{"sub": "sam", "aud": gatewayResource, "scope": "mcp", "roles": roles})
	}
	var who struct{ Admin string }
	if code := (&adminClient{t: t, url: adm.url, key: token("gateway-admins")}).do("GET", "/api/whoami", nil, &who); code != http.StatusOK || !strings.HasPrefix(who.Admin, "sam@") {
		t.Errorf("a token with the admin role: %d %q", code, who.Admin)
	}
	if code := (&adminClient{t: t, url: adm.url, key: token("eng")}).do("GET", "/api/approvals", nil, nil); code != http.StatusForbidden {
		t.Errorf("a token without the admin role: %d, want 403", code)
	}
	if code := (&adminClient{t: t, url: adm.url, key: "mfk_client-key"}).do("GET", "/api/approvals", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("an MCP client's API key: %d, want 401", code)
	}
}

// TestRememberedApprovalHoldsOnEveryReplica: with replicas on Redis, an approval remembered
// by one replica is honoured by the others, for the same principal, tool and arguments only.
// (The principal is authenticated: an anonymous caller's approval is its session's only,
// TestAnonymousApprovalIsBoundToItsSessionOnEveryReplica.)
func TestRememberedApprovalHoldsOnEveryReplica(t *testing.T) {
	extra := adminYAML("") + fmt.Sprintf(`auth:
  api_keys:
    - {name: alice, hash: %q}
policy:
  approval: {timeout: 20s, remember: 10m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {tools: [echo]}}
`, auth.HashAPIKey("mfk_alice"))
	a, b := twoReplicasWith(t, extra, upstreamYAML("a", "beta", ""))
	adminA := startAdmin(t, a)
	ctx := ctxT(t)
	onA, onB := connectAs(t, a.url, "mfk_alice", nil), connectAs(t, b.url, "mfk_alice", nil)

	done := callAsync(ctx, onA, "a__echo", map[string]any{"text": "deploy"})
	held := adminA.waitHeld(1)[0]
	if code := adminA.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if res := <-done; res.IsError {
		t.Fatalf("the approved call: %q", resultText(res))
	}
	// The same call on B runs at once: nothing is held.
	if res := callTool(t, onB, "a__echo", map[string]any{"text": "deploy"}); res.IsError || resultText(res) != "beta:deploy" {
		t.Errorf("the same call on the other replica: %v %q", res.IsError, resultText(res))
	}
	// Other arguments are held again, on B too.
	done = callAsync(ctx, onB, "a__echo", map[string]any{"text": "deploy everything"})
	held = adminA.waitHeld(1)[0]
	if code := adminA.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	if res := <-done; !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("a call with other arguments: %v %q, want it held and denied", res.IsError, resultText(res))
	}
}

// switchable sends every HTTP request to the replica it points at now: one client session
// moved from one replica to another.
type switchable struct{ target atomic.Pointer[url.URL] }

func newSwitchable(t *testing.T, to string) *switchable {
	s := &switchable{}
	s.to(t, to)
	return s
}

func (s *switchable) to(t *testing.T, u string) {
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	s.target.Store(parsed)
}

func (s *switchable) RoundTrip(req *http.Request) (*http.Response, error) {
	target := s.target.Load()
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = target.Scheme, target.Host, target.Host
	return http.DefaultTransport.RoundTrip(out)
}

// TestAnonymousApprovalIsBoundToItsSessionOnEveryReplica: remembered approvals kept in Redis
// bind an anonymous caller's approval to its session too: the session's identical call runs
// on another replica unasked, another anonymous session's is held.
func TestAnonymousApprovalIsBoundToItsSessionOnEveryReplica(t *testing.T) {
	extra := adminYAML("") + `policy:
  approval: {timeout: 20s, remember: 10m}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {tools: [echo]}}
`
	a, b := twoReplicasWith(t, extra, upstreamYAML("a", "beta", ""))
	adminA := startAdmin(t, a)
	ctx := ctxT(t)
	route := newSwitchable(t, a.url)
	client := mcp.NewClient(&mcp.Implementation{Name: "moving", Version: "1"}, nil)
	mine, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: &http.Client{Transport: route}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	args := map[string]any{"text": "deploy"}
	done := callAsync(ctx, mine, "a__echo", args)
	held := adminA.waitHeld(1)[0]
	if code := adminA.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if res := <-done; res.IsError {
		t.Fatalf("the approved call: %q", resultText(res))
	}
	route.to(t, b.url)
	if res := callTool(t, mine, "a__echo", args); res.IsError || resultText(res) != "beta:deploy" {
		t.Errorf("the same call of the same session on the other replica: %v %q", res.IsError, resultText(res))
	}
	other := connect(t, b.url, nil)
	done = callAsync(ctx, other, "a__echo", args)
	held = adminA.waitHeld(1)[0]
	if code := adminA.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	if res := <-done; !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("another anonymous session's identical call: %v %q, want it held and denied", res.IsError, resultText(res))
	}
}

// selfApprovalYAML holds a's echo for an operator; alice and sam are clients, and also
// admins: alice by an admin API key of her name, sam by a token of the issuer with an admin
// role. More settings go under policy.approval (approval) and at the top (extra).
func selfApprovalYAML(iss *testissuer.Issuer, approval, extra string) string {
	return authYAML(iss, "mfk_client-key", fmt.Sprintf(`    - {name: alice, hash: %q, scopes: [mcp]}
admin:
  listen: 127.0.0.1:0
  roles: [gateway-admins]
  api_keys:
    - {name: ops, hash: %q}
    - {name: alice, hash: %q}
policy:
  approval: {timeout: 20s, by: operator%s}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
%supstreams:%s`, auth.HashAPIKey("mfk_alice"), auth.HashAPIKey(adminKey), auth.HashAPIKey("mfk_alice-admin"), approval, extra, upstreamYAML("a", "beta", "")))
}

// TestOperatorCannotApproveOwnCall: separation of duties. An operator whose principal is the
// caller's (the same API key name, or the same issuer and subject) cannot approve the call:
// 403, audited as such; another operator can. Denying one's own call is allowed: it only
// stops it.
func TestOperatorCannotApproveOwnCall(t *testing.T) {
	iss := testissuer.New(t)
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, selfApprovalYAML(iss, "", ""), &gateway.Options{Audit: trail})
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	aliceAdmin := &adminClient{t: t, url: adm.url, key: "mfk_alice-admin"}
	samToken := func(roles ...string) string {
		return iss.Token(t, map[string]any{"sub": "sam", "aud": gatewayResource, "scope": "mcp", "roles": roles})
	}
	samAdmin := &adminClient{t: t, url: adm.url, key: samToken("gateway-admins")}

	tests := []struct {
		name   string
		client *mcp.ClientSession
		self   *adminClient
	}{
		{"the same API key name", connectAs(t, tg.url, "mfk_alice", nil), aliceAdmin},
		{"the same issuer and subject", connectAs(t, tg.url, samToken(), nil), samAdmin},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := callAsync(ctx, tt.client, "a__echo", map[string]any{"text": fmt.Sprint("own ", i)})
			held := adm.waitHeld(1)[0]
			if code := tt.self.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusForbidden {
				t.Errorf("approving one's own call: %d, want 403", code)
			}
			if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
				t.Fatalf("another operator's approval: %d", code)
			}
			if res := <-done; res.IsError {
				t.Errorf("the call another operator approved: %q", resultText(res))
			}
			done = callAsync(ctx, tt.client, "a__echo", map[string]any{"text": fmt.Sprint("own ", i, " again")})
			held = adm.waitHeld(1)[0]
			if code := tt.self.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil); code != http.StatusOK {
				t.Errorf("denying one's own call: %d, want 200", code)
			}
			if res := <-done; !res.IsError || res.Meta["dev.manifold/reason"] != "approval_declined" {
				t.Errorf("the call its caller denied: %v %q", res.IsError, resultText(res))
			}
		})
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	refused := map[string]string{}
	for _, rec := range auditLines(t, out.String()) {
		if rec["method"] == "admin/approval/approve" && rec["outcome"] == "refused" {
			principal, _ := rec["principal"].(string)
			refused[principal], _ = rec["reason"].(string)
		}
	}
	if refused["apikey:alice"] != "refused_403" || refused["sam@"+iss.URL] != "refused_403" {
		t.Errorf("refused self-approvals in the audit trail: %v, want apikey:alice and sam@%s refused_403:\n%s", refused, iss.URL, out.String())
	}
}

// TestSelfApprovalComparesOneIdentity: the separation of duties compares principals, not
// people. An operator whose admin key is named alice, calling through a client key named
// alice-cli, is another principal to the gateway, and may approve the call: the README says
// to name a person's keys alike, or to use OIDC, whose issuer and subject are one identity.
func TestSelfApprovalComparesOneIdentity(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, authYAML(iss, "mfk_client-key", fmt.Sprintf(`    - {name: alice-cli, hash: %q, scopes: [mcp]}
admin:
  listen: 127.0.0.1:0
  api_keys:
    - {name: alice, hash: %q}
policy:
  approval: {timeout: 20s, by: operator}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
upstreams:%s`, auth.HashAPIKey("mfk_alice-cli"), auth.HashAPIKey("mfk_alice-admin"), upstreamYAML("a", "beta", ""))), nil)
	defer tg.close()
	alice := startAdmin(t, tg)
	alice.key = "mfk_alice-admin"
	done := callAsync(ctxT(t), connectAs(t, tg.url, "mfk_alice-cli", nil), "a__echo", map[string]any{"text": "mine"})
	held := alice.waitHeld(1)[0]
	if code := alice.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Errorf("approving a call of a client key named otherwise: %d, want 200 (another principal)", code)
	}
	if res := <-done; res.IsError {
		t.Errorf("the approved call: %q", resultText(res))
	}
}

// TestSelfApprovalAllowedIsLoud: approval.allow_self_approval lets an operator approve a
// call of their own, and the gateway warns about it at startup.
func TestSelfApprovalAllowedIsLoud(t *testing.T) {
	iss := testissuer.New(t)
	var logs lockedBuffer
	tg := startGateway(t, selfApprovalYAML(iss, ", allow_self_approval: true", ""), &gateway.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer tg.close()
	adm := startAdmin(t, tg)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "allow_self_approval") {
		t.Errorf("no warning about allow_self_approval at startup:\n%s", logs.String())
	}
	done := callAsync(ctxT(t), connectAs(t, tg.url, "mfk_alice", nil), "a__echo", map[string]any{"text": "mine"})
	held := adm.waitHeld(1)[0]
	if code := (&adminClient{t: t, url: adm.url, key: "mfk_alice-admin"}).do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Errorf("approving one's own call with allow_self_approval: %d, want 200", code)
	}
	if res := <-done; res.IsError {
		t.Errorf("the self-approved call: %q", resultText(res))
	}
}

// TestAdminForbiddenIsAuditedAs403: a valid token without an admin role gets 403 on the
// admin API, and the audit trail records that 403, with who was refused, not a 401 of
// someone unauthenticated.
func TestAdminForbiddenIsAuditedAs403(t *testing.T) {
	iss := testissuer.New(t)
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, selfApprovalYAML(iss, "", ""), &gateway.Options{Audit: trail})
	defer tg.close()
	adm := startAdmin(t, tg)
	token := iss.Token(t, map[string]any{"sub": "eve", "aud": gatewayResource, "scope": "mcp", "roles": []string{"eng"}})
	if code := (&adminClient{t: t, url: adm.url, key: token}).do("POST", "/api/approvals/x", map[string]string{"decision": "approve"}, nil); code != http.StatusForbidden {
		t.Fatalf("a token without the admin role: %d, want 403", code)
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range auditLines(t, out.String()) {
		if method, _ := rec["method"].(string); strings.HasPrefix(method, "admin/") {
			got = append(got, fmt.Sprintf("%s %s %s", rec["principal"], rec["outcome"], rec["reason"]))
		}
	}
	if want := []string{"eve@" + iss.URL + " refused forbidden_403"}; !slices.Equal(got, want) {
		t.Errorf("admin audit records: %q, want %q", got, want)
	}
}

// TestApprovalWebhookRedactsArguments: the webhook's payload carries the held call's
// arguments redacted as the audit trail redacts them (audit.redact, and the secret names
// redacted by default); the admin API, where an operator decides, shows them whole.
func TestApprovalWebhookRedactsArguments(t *testing.T) {
	bodies := make(chan string, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
	}))
	defer hook.Close()
	yaml := adminYAML("  webhook: "+hook.URL+"\n") + policyYAML(`  approval: {timeout: 20s, by: operator}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [a], tools: [echo]}}
`)
	tg := startGateway(t, yaml, nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	ctx := ctxT(t)
	done := callAsync(ctx, connectAs(t, tg.url, "mfk_alice", nil), "a__echo", map[string]any{"text": "hello", "nested": map[string]any{"Secret": "hunter2"}, "api_token": "tok-123"})
	held := adm.waitHeld(1)[0]
	if !strings.Contains(string(held.Arguments), "hunter2") {
		t.Errorf("the admin API's arguments: %s, want them whole", held.Arguments)
	}
	var body string
	select {
	case body = <-bodies:
	case <-ctx.Done():
		t.Fatal("the webhook heard nothing")
	}
	if strings.Contains(body, "hunter2") || strings.Contains(body, "tok-123") || !strings.Contains(body, `"Secret":"[redacted]"`) || !strings.Contains(body, `"text":"hello"`) {
		t.Errorf("webhook payload: %s, want the secret redacted and the rest kept", body)
	}
	adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "deny"}, nil)
	<-done
}

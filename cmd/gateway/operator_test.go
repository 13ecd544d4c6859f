package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/admin/admintest"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// runGateway runs the gateway command args in this process and returns its exit code and
// outputs.
func runGateway(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// serveLogged is serveConfig, the gateway's log shown if the test fails.
func serveLogged(t *testing.T, cfg *config.Config) *servedGateway {
	t.Helper()
	g := serveConfig(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", g.logs.String())
		}
	})
	return g
}

// waitReady waits until g answers /readyz with 200.
func waitReady(t *testing.T, g *servedGateway) {
	t.Helper()
	waitFor(t, "the gateway to be ready", func() bool {
		resp, err := http.Get(strings.TrimSuffix(g.url, "/mcp") + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// connectAs opens an MCP session with the official SDK's client, sending key as the bearer
// token ("" sends none); the test's end closes it.
func connectAs(t *testing.T, url, key string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: &credentialTransport{base: http.DefaultTransport, credential: key}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "operator-test", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// listedDescription is the description of the tool name as cs lists it; ok=false when it is
// not listed.
func listedDescription(t *testing.T, cs *mcp.ClientSession, name string) (description string, ok bool) {
	t.Helper()
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("list the tools: %v", err)
		}
		if tool.Name == name {
			return tool.Description, true
		}
	}
	return "", false
}

// callInBackground calls tool with args in a goroutine the test's end waits for; the result
// (or the error, as text) arrives on the channel.
func callInBackground(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) <-chan *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan *mcp.CallToolResult, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "call failed: " + err.Error()}}}
		}
		done <- res
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return done
}

// heldIDs lists the ids of the held calls of tool, as `gateway approvals -json` prints them.
func heldIDs(t *testing.T, adminURL, tool string) []string {
	t.Helper()
	code, out, errOut := runGateway("approvals", "-url", adminURL, "-json")
	if code != 0 {
		t.Fatalf("gateway approvals -json: exit %d: %s", code, errOut)
	}
	var held struct {
		Approvals []struct{ ID, Tool string } `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(out), &held); err != nil {
		t.Fatalf("gateway approvals -json printed no JSON: %v\n%s", err, out)
	}
	var ids []string
	for _, a := range held.Approvals {
		if a.Tool == tool {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// waitHeld waits until one call of tool is held and returns its id.
func waitHeld(t *testing.T, adminURL, tool string) string {
	t.Helper()
	var ids []string
	waitFor(t, tool+" to be held for approval", func() bool {
		ids = heldIDs(t, adminURL, tool)
		return len(ids) == 1
	})
	return ids[0]
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestApprovalsCommand: a client's call held for an operator is listed by `gateway
// approvals`, and runs once approved there; a denied one gets the tool error that says so.
// The command says what is wrong when there is no credential, a refused one, an id that is
// not held, or no gateway.
func TestApprovalsCommand(t *testing.T) {
	adminAddr := freePort(t)
	cfg, err := config.Parse("approvals.yaml", fmt.Appendf(nil, `
listen: %s
auth:
  api_keys: [{name: alice, hash: %q}]
admin:
  listen: %s
  api_keys: [{name: alice, hash: %q}, {name: bob, hash: %q}]
policy:
  approval: {timeout: 1h, by: operator}
  rules: [{name: echo-needs-approval, effect: approve, match: {tools: [echo]}}]
upstreams:
  - {name: demo, command: "@self", args: [demo], env: {%s: %s}}
`, freePort(t), auth.HashAPIKey("mfk_alice"), adminAddr, auth.HashAPIKey("mfk_alice-admin"), auth.HashAPIKey("mfk_bob"), testupstream.EnvRun, testupstream.Marker), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := serveLogged(t, cfg)
	adminURL := "http://" + adminAddr
	waitReady(t, g)
	cs := connectAs(t, g.url, "mfk_alice")
	t.Setenv(envAdminKey, "mfk_bob")
	waitFor(t, "demo__echo to be listed", func() bool { _, ok := listedDescription(t, cs, "demo__echo"); return ok })

	// Approved: listed with its arguments, then it runs.
	approved := callInBackground(t, cs, "demo__echo", map[string]any{"text": "approve me"})
	id := waitHeld(t, adminURL, "demo__echo")
	code, out, errOut := runGateway("approvals", "-url", adminURL)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "demo__echo") || !strings.Contains(out, "echo-needs-approval") || !strings.Contains(out, `{"text":"approve me"}`) {
		t.Errorf("gateway approvals: exit %d, stdout:\n%s\nstderr: %s\nwant the held call %s with its tool, rule and arguments", code, out, errOut, id)
	}
	// The operator who made the call may not approve it.
	t.Setenv(envAdminKey, "mfk_alice-admin")
	if code, _, errOut := runGateway("approvals", "approve", id, "-url", adminURL); code != 1 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "own") {
		t.Errorf("approving one's own call: exit %d, stderr %q; want 1, refused as one's own call", code, errOut)
	}
	t.Setenv(envAdminKey, "mfk_bob")
	if code, out, errOut := runGateway("approvals", "approve", id, "-url", adminURL); code != 0 || !strings.Contains(out, "approved: "+id+" demo__echo of apikey:alice") {
		t.Errorf("gateway approvals approve %s: exit %d, stdout %q, stderr %q", id, code, out, errOut)
	}
	if res := <-approved; res.IsError || resultText(res) != "approve me" {
		t.Errorf("the approved call: %+v %q", res, resultText(res))
	}

	// Denied: the client is told an operator denied it.
	denied := callInBackground(t, cs, "demo__echo", map[string]any{"text": "deny me"})
	id = waitHeld(t, adminURL, "demo__echo")
	if code, out, errOut := runGateway("approvals", "deny", id, "-url", adminURL, "-json"); code != 0 || !strings.Contains(out, `"decision": "deny"`) {
		t.Errorf("gateway approvals deny %s -json: exit %d, stdout %q, stderr %q", id, code, out, errOut)
	}
	if res := <-denied; !res.IsError || !strings.Contains(resultText(res), "denied") || res.Meta["dev.manifold/reason"] != "approval_declined" {
		t.Errorf("the denied call: %+v %q, want a tool error approval_declined", res, resultText(res))
	}
	if code, out, _ := runGateway("approvals", "-url", adminURL); code != 0 || !strings.Contains(out, "no calls are held") {
		t.Errorf("gateway approvals with nothing held: exit %d, %q", code, out)
	}

	for _, tc := range []struct {
		name     string
		key      string
		args     []string
		wantCode int
		want     string
	}{
		{"an id not held", "mfk_bob", []string{"approvals", "approve", id, "-url", adminURL}, 1, "no call " + id + " is held"},
		{"no credential", "", []string{"approvals", "-url", adminURL}, 2, "set " + envAdminKey},
		{"a client's key", "mfk_alice", []string{"approvals", "-url", adminURL}, 1, "did not accept the credential in " + envAdminKey + " (HTTP 401"},
		{"no gateway", "mfk_bob", []string{"approvals", "-url", "http://" + freePort(t)}, 1, "nothing answers at"},
		{"a config without admin", "mfk_bob", []string{"approvals", "-config", writeConfig(t, "listen: 127.0.0.1:0\nupstreams: [{name: a, command: a}]\n")}, 2, "has no admin listener"},
		{"approve without an id", "mfk_bob", []string{"approvals", "approve", "-url", adminURL}, 2, "approve takes the id of one held call"},
		{"an unknown verb", "mfk_bob", []string{"approvals", "allow", "x", "-url", adminURL}, 2, `unexpected "allow x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envAdminKey, tc.key)
			code, out, errOut := runGateway(tc.args...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.want) {
				t.Errorf("gateway %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, tc.wantCode, tc.want)
			}
		})
	}
}

// TestPinsCommand: a tool whose description its upstream changes is withheld; `gateway
// pins` shows the change and its diff, and once accepted there the client sees the tool
// with its new description.
func TestPinsCommand(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := freePort(t)
	cfgPath := writeConfig(t, fmt.Sprintf(`
listen: %s
state_dir: %q
admin:
  listen: %s
  api_keys: [{name: ops, hash: %q}]
upstreams:
  - name: r
    command: %q
    env: {%s: rugpull, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
    pinning: withhold
`, freePort(t), t.TempDir(), adminAddr, auth.HashAPIKey("mfk_ops"), exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker))
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := serveLogged(t, cfg)
	t.Setenv(envAdminKey, "mfk_ops")
	waitReady(t, g)
	cs := connectAs(t, g.url, "")
	description := func() (string, bool) { return listedDescription(t, cs, "r__fetch") }
	waitFor(t, "r__fetch to be listed", func() bool { _, ok := description(); return ok })
	// -config finds the admin listener.
	if code, out, errOut := runGateway("pins", "-config", cfgPath); code != 0 || !strings.Contains(out, "r/fetch") || !strings.Contains(out, "pinned") {
		t.Errorf("gateway pins -config: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	if code, _, errOut := runGateway("pins", "accept", "r/fetch", "-config", cfgPath); code != 1 || !strings.Contains(errOut, "no pending change") {
		t.Errorf("accepting an unchanged pin: exit %d, stderr %q", code, errOut)
	}

	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "r__rug_pull"}); err != nil {
		t.Fatal(err)
	}
	var out string
	waitFor(t, "gateway pins to show the change", func() bool {
		_, out, _ = runGateway("pins", "-config", cfgPath)
		return strings.Contains(out, "changed, withheld")
	})
	if !strings.Contains(out, "description") || !strings.Contains(out, "<script>") || !strings.Contains(out, "id_rsa") {
		t.Errorf("gateway pins shows no diff of the description:\n%s", out)
	}
	if _, listed := description(); listed {
		t.Errorf("the changed tool is still listed")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a tool not pinned", []string{"pins", "accept", "r/nope"}, "no pin of r/nope"},
		{"no tool", []string{"pins", "accept", "r"}, "takes UPSTREAM/TOOL"},
		{"another hash", []string{"pins", "accept", "r/fetch", "-hash", "sha256:0000"}, "list again"},
		{"a prefix of another hash", []string{"pins", "accept", "r/fetch", "-hash", "sha256:0123456789ab…"}, "list again"},
	} {
		code, _, errOut := runGateway(append(tc.args, "-config", cfgPath)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: gateway %s: exit %d, stderr %q; want %q", tc.name, strings.Join(tc.args, " "), code, errOut, tc.want)
		}
	}
	// The change as the table shows it: its hash cut short.
	shown := regexp.MustCompile(`r/fetch +changed, withheld +\S+ +(sha256:[0-9a-f]{12}…)`).FindStringSubmatch(out)
	if shown == nil {
		t.Fatalf("gateway pins shows no short hash of the change:\n%s", out)
	}
	if code, out, errOut := runGateway("pins", "accept", "r/fetch", "-hash", shown[1], "-config", cfgPath); code != 0 || !strings.Contains(out, "accepted: the change "+strings.TrimSuffix(shown[1], "…")) {
		t.Fatalf("gateway pins accept r/fetch -hash %s: exit %d, stdout %q, stderr %q", shown[1], code, out, errOut)
	}
	waitFor(t, "the accepted tool to be listed with its new description", func() bool {
		d, _ := description()
		return strings.Contains(d, "id_rsa")
	})
	if code, out, _ := runGateway("pins", "-json", "-config", cfgPath); code != 0 || strings.Contains(out, `"change"`) || !strings.Contains(out, `"withheld": false`) {
		t.Errorf("gateway pins -json after the acceptance: exit %d:\n%s", code, out)
	}
}

// grantsBackend is the admin API's backend of a gateway whose users gave it grants. Only the
// grants part of admin.Backend is there.
type grantsBackend struct {
	admin.Backend // nil: the command asks for nothing else
	*admintest.GrantList
}

func (b grantsBackend) Grants(ctx context.Context, cursor string) ([]grants.GrantInfo, string, error) {
	return b.GrantList.Grants(ctx, cursor)
}

func (b grantsBackend) RevokeGrant(ctx context.Context, user grants.Principal, upstream string) error {
	return b.GrantList.RevokeGrant(ctx, user, upstream)
}

func (grantsBackend) Audit(string, string, string, string, int) {}

// keyAuthorizer admits the bearer key as the operator ops.
type keyAuthorizer string

func (k keyAuthorizer) Admin(r *http.Request) (admin.Operator, error) {
	if r.Header.Get("Authorization") != "Bearer "+string(k) {
		return admin.Operator{}, fmt.Errorf("%w: the admin key is not valid", admin.ErrUnauthorized)
	}
	return admin.Operator{Name: "apikey:ops"}, nil
}

// TestGrantsCommand: `gateway grants` lists every grant of the admin API, page after page, as
// a table or as JSON, and revokes one by issuer, subject and upstream; it says what is wrong
// with a grant nobody has, a missing or refused credential, wrong operands, or no gateway.
func TestGrantsCommand(t *testing.T) {
	const idp = "https://login.example.com"
	granted := time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
	b := grantsBackend{GrantList: admintest.NewGrantList(2,
		grants.GrantInfo{Principal: grants.Principal{Issuer: idp, Subject: "alice"}, Upstream: "github", Issuer: "https://github.com/login/oauth",
			Scopes: []string{"repo", "read:org"}, Refreshable: true, Granted: granted, Expiry: time.Now().Add(time.Hour)},
		grants.GrantInfo{Principal: grants.Principal{Issuer: idp, Subject: "bob\x1b[2J"}, Upstream: "linear", Scopes: []string{"read"}, Granted: granted, Expiry: granted.Add(time.Hour)},
		grants.GrantInfo{Upstream: "jira", Unreadable: true},
		grants.GrantInfo{Principal: grants.Principal{Issuer: idp, Subject: "carol"}, Upstream: "github", Granted: granted},
		grants.GrantInfo{Principal: grants.Principal{Issuer: idp, Subject: "dave"}, Upstream: "notion", Granted: granted},
	)}
	srv := httptest.NewServer(admin.NewHandler(b, keyAuthorizer("mfk_ops"), admin.Options{}))
	t.Cleanup(srv.Close)
	t.Setenv(envAdminKey, "mfk_ops")

	// The table: every page, terminal controls quoted, the unreadable grant and what to do.
	code, out, errOut := runGateway("grants", "-url", srv.URL)
	if code != 0 {
		t.Fatalf("gateway grants: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"ISSUER", "alice", "repo read:org", "2026-03-01T09:30:00Z", "yes", `"bob\x1b[2J"`, "(expired)", "carol", "dave", "notion",
		"1 grant(s) cannot be opened",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("gateway grants prints no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("gateway grants printed a terminal control:\n%q", out)
	}
	if !regexp.MustCompile(`(?m)^-\s+-\s+jira\s+unreadable\s`).MatchString(out) {
		t.Errorf("gateway grants shows the unreadable grant otherwise:\n%s", out)
	}
	if diff := cmp.Diff([]string{"", "2", "4"}, b.Cursors()); diff != "" {
		t.Errorf("the pages asked for (-want +got):\n%s", diff)
	}

	// -json: the API's grants, every page of them in one list.
	code, out, errOut = runGateway("grants", "list", "-json", "-url", srv.URL)
	var listed struct {
		Grants []grants.GrantInfo `json:"grants"`
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Grants) != 5 {
		t.Errorf("gateway grants list -json: exit %d, %d grants (%v), stderr %q:\n%s", code, len(listed.Grants), err, errOut, out)
	}

	// Revoke alice's grant at github; then again: there is none.
	if code, out, errOut := runGateway("grants", "revoke", idp, "alice", "github", "-url", srv.URL); code != 0 || !strings.Contains(out, "revoked: alice@"+idp+"'s grant at github") {
		t.Errorf("gateway grants revoke: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := runGateway("grants", "revoke", idp, "carol", "github", "-json", "-url", srv.URL); code != 0 || !strings.Contains(out, `"revoked"`) || !strings.Contains(out, `"sub": "carol"`) {
		t.Errorf("gateway grants revoke -json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := runGateway("grants", "-url", srv.URL); code != 0 || strings.Contains(out, "alice") || strings.Contains(out, "carol") || !strings.Contains(out, "dave") {
		t.Errorf("gateway grants after two revocations: exit %d:\n%s", code, out)
	}

	empty := httptest.NewServer(admin.NewHandler(grantsBackend{GrantList: admintest.NewGrantList(2)}, keyAuthorizer("mfk_ops"), admin.Options{}))
	t.Cleanup(empty.Close)
	for _, tc := range []struct {
		name     string
		key      string
		args     []string
		wantCode int
		stdout   bool
		want     string
	}{
		{"none", "mfk_ops", []string{"grants", "-url", empty.URL}, 0, true, "no user has connected an upstream"},
		{"a grant nobody has", "mfk_ops", []string{"grants", "revoke", idp, "alice", "github", "-url", srv.URL}, 1, false, "alice@" + idp + " has no grant at upstream github: `gateway grants` lists"},
		{"no credential", "", []string{"grants", "-url", srv.URL}, 2, false, "set " + envAdminKey},
		{"a refused key", "mfk_client", []string{"grants", "-url", srv.URL}, 1, false, "did not accept the credential in " + envAdminKey + " (HTTP 401"},
		{"no gateway", "mfk_ops", []string{"grants", "-url", "http://" + freePort(t)}, 1, false, "nothing answers at"},
		{"revoke without the upstream", "mfk_ops", []string{"grants", "revoke", idp, "alice", "-url", srv.URL}, 2, false, "revoke takes the ISSUER, SUBJECT and UPSTREAM"},
		{"an unknown verb", "mfk_ops", []string{"grants", "forget", "x", "-url", srv.URL}, 2, false, `unexpected "forget x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envAdminKey, tc.key)
			code, out, errOut := runGateway(tc.args...)
			got := errOut
			if tc.stdout {
				got = out
			}
			if code != tc.wantCode || !strings.Contains(got, tc.want) {
				t.Errorf("gateway %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, errOut, tc.wantCode, tc.want)
			}
		})
	}
}

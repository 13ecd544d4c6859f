package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testissuer"
)

// gatewayResource is the resource URI the auth tests' gateways advertise and accept tokens
// for (their public_url is https://gw.test).
const gatewayResource = "https://gw.test/mcp"

// authYAML is the config of a gateway that trusts iss, with the API key key named "ci-bot",
// and extra top-level settings.
func authYAML(iss *testissuer.Issuer, apiKey, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
public_url: https://gw.test
auth:
  scopes: [mcp]
  oidc:
    - issuer: %s
  api_keys:
    - {name: ci-bot, hash: %q, scopes: [mcp]}
%s`, iss.URL, auth.HashAPIKey(apiKey), extra)
}

// bearer adds a bearer token to every request of an HTTP client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connectAs connects a Go SDK client with token.
func connectAs(t *testing.T, url, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "authed", Version: "1"}, opts)
	cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// userToken is a valid token of iss for the gateway, for subject sub.
func userToken(t *testing.T, iss *testissuer.Issuer, sub string) string {
	return iss.Token(t, map[string]any{"sub": sub, "aud": gatewayResource, "scope": "mcp openid", "groups": []string{"eng"}})
}

// TestAuthChallengesAndAccepts: every request needs a credential; a missing, bad or
// insufficient one gets the status and WWW-Authenticate challenge the MCP authorization spec
// names, and the metadata it points to tells a client where to get a token. A valid token
// works through the Go SDK client, and so does an API key.
func TestAuthChallengesAndAccepts(t *testing.T) {
	iss := testissuer.New(t)
	const apiKey = "mfk_test-key-of-the-ci-bot"
	tg := startGateway(t, authYAML(iss, apiKey, "upstreams:"+upstreamYAML("alpha", "alpha", "")+"profiles:\n  - {name: ops, include: [{upstream: alpha}]}\n"), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	const metadata = `resource_metadata="https://gw.test/.well-known/oauth-protected-resource/mcp"`

	cases := []struct {
		name          string
		authorization string
		status        int
		challenge     []string // substrings of WWW-Authenticate
	}{
		{"no credential", "", http.StatusUnauthorized, []string{"Bearer ", metadata, `scope="mcp"`}},
		{"malformed token", "Bearer abc.def", http.StatusUnauthorized, []string{`error="invalid_token"`, metadata}},
		{"token for another resource", "Bearer " + iss.Token(t, map[string]any{"sub": "alice", "aud": "https://other.test/mcp", "scope": "mcp"}), http.StatusUnauthorized, []string{`error="invalid_token"`}},
		{"expired token", "Bearer " + iss.Token(t, map[string]any{"sub": "alice", "aud": gatewayResource, "scope": "mcp", "exp": 1000, "iat": 900, "nbf": 900}), http.StatusUnauthorized, []string{`error="invalid_token"`}},
		{"alg none", "Bearer " + iss.SignWith(t, map[string]any{"kid": "k1"}, map[string]any{"sub": "alice", "aud": gatewayResource, "scope": "mcp"}, "none", nil), http.StatusUnauthorized, []string{`error="invalid_token"`}},
		{"HMAC keyed with the public key", "Bearer " + iss.SignWith(t, map[string]any{"kid": "k1"}, map[string]any{"sub": "alice", "aud": gatewayResource, "scope": "mcp"}, "HS256", iss.PublicKeyPEM()), http.StatusUnauthorized, []string{`error="invalid_token"`}},
		{"unknown API key", "Bearer mfk_not-a-key", http.StatusUnauthorized, []string{`error="invalid_token"`}},
		{"basic credentials", "Basic YWxpY2U6cHc=", http.StatusBadRequest, []string{`error="invalid_request"`}},
		{"missing scope", "Bearer " + iss.Token(t, map[string]any{"sub": "alice", "aud": gatewayResource, "scope": "openid"}), http.StatusForbidden, []string{`error="insufficient_scope"`, `scope="mcp"`, metadata}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.do(http.MethodPost, initBody, map[string]string{"Authorization": tc.authorization})
			if r.status != tc.status {
				t.Fatalf("status %d, want %d (%s)", r.status, tc.status, r.body)
			}
			got := r.header.Get("WWW-Authenticate")
			for _, want := range tc.challenge {
				if !strings.Contains(got, want) {
					t.Errorf("WWW-Authenticate %q lacks %q", got, want)
				}
			}
			if r.msg.Error == nil || r.header.Get("Mcp-Session-Id") != "" {
				t.Errorf("refused initialize: body %s, session %q; want a JSON-RPC error and no session", r.body, r.header.Get("Mcp-Session-Id"))
			}
			if strings.Contains(string(r.body), strings.TrimPrefix(tc.authorization, "Bearer ")) && tc.authorization != "" {
				t.Error("the error echoes the credential")
			}
		})
	}

	// The profile's challenge names its own metadata document.
	r := rawClient{t: t, url: tg.url + "/ops"}.do(http.MethodPost, initBody, nil)
	if got := r.header.Get("WWW-Authenticate"); r.status != http.StatusUnauthorized || !strings.Contains(got, `resource_metadata="https://gw.test/.well-known/oauth-protected-resource/mcp/ops"`) {
		t.Errorf("profile without a token: %d %q", r.status, got)
	}
	// The metadata, at the root and path-suffixed for /mcp and the profile: each names the
	// resource its URL was built from (RFC 9728 §3.3), and the issuer.
	base := strings.TrimSuffix(tg.url, "/mcp")
	for path, resource := range map[string]string{"": "https://gw.test", "/mcp": gatewayResource, "/mcp/ops": gatewayResource + "/ops"} {
		resp, err := http.Get(base + "/.well-known/oauth-protected-resource" + path)
		if err != nil {
			t.Fatal(err)
		}
		var md auth.ResourceMetadata
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || md.Resource != resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != iss.URL || strings.Join(md.ScopesSupported, " ") != "mcp" {
			t.Errorf("metadata at %q: %d %+v (%v), want resource %s", path, resp.StatusCode, md, err, resource)
		}
	}
	if resp, err := http.Get(base + "/.well-known/oauth-protected-resource/mcp/nope"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("metadata of a profile that does not exist: %v %v", resp.StatusCode, err)
	}
	// A token for the profile's resource, as a client that read its metadata asks for, works
	// there.
	opsToken := iss.Token(t, map[string]any{"sub": "alice", "aud": gatewayResource + "/ops", "scope": "mcp"})
	if _, err := connectAs(t, tg.url+"/ops", opsToken, nil).ListTools(ctxT(t), nil); err != nil {
		t.Errorf("a token for the profile's resource: %v", err)
	}

	// A valid token works through the Go SDK client, with no further key fetch per request.
	cs := connectAs(t, tg.url, userToken(t, iss, "alice"), nil)
	fetches := iss.JWKSFetches()
	for range 5 {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": "hi"}})
		if err != nil || res.IsError {
			t.Fatalf("call with a valid token: %v %v", res, err)
		}
	}
	if n := iss.JWKSFetches(); n != fetches {
		t.Errorf("%d key fetches during calls with a known key, want none", n-fetches)
	}
	// So does an API key.
	keyed := connectAs(t, tg.url, apiKey, nil)
	if _, err := keyed.ListTools(ctxT(t), nil); err != nil {
		t.Errorf("API key: %v", err)
	}
}

// TestAPIKeysOnlyRefusalSaysWhatToSend: with API keys and no OIDC issuer the challenge is a
// bare "Bearer" that points nowhere, so the 401's message must not send the client to the
// WWW-Authenticate header for a token: it says to send an API key. With an issuer configured,
// the message points at the challenge as before.
func TestAPIKeysOnlyRefusalSaysWhatToSend(t *testing.T) {
	const apiKey = "mfk_test-key-of-the-ci-bot"
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
auth:
  api_keys:
    - {name: ci-bot, hash: %q}
upstreams:`+upstreamYAML("alpha", "alpha", ""), auth.HashAPIKey(apiKey)), nil)
	defer tg.close()
	r := rawClient{t: t, url: tg.url}.do(http.MethodPost, initBody, nil)
	if r.status != http.StatusUnauthorized || r.msg.Error == nil {
		t.Fatalf("no credential: %d %s, want 401 with a JSON-RPC error", r.status, r.body)
	}
	if got := r.header.Get("WWW-Authenticate"); strings.Contains(got, "resource_metadata") {
		t.Errorf("WWW-Authenticate %q points at metadata that does not exist", got)
	}
	msg := r.msg.Error.Message
	if strings.Contains(msg, "WWW-Authenticate") || !strings.Contains(msg, "API key") || !strings.Contains(msg, "Authorization: Bearer mfk_") {
		t.Errorf("message %q: want one that says to send an API key as Authorization: Bearer mfk_…, not one that points at the challenge", msg)
	}
	if r := (rawClient{t: t, url: tg.url}).do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer " + apiKey}); r.status != http.StatusOK {
		t.Errorf("with the key: %d %s", r.status, r.body)
	}

	iss := testissuer.New(t)
	withIssuer := startGateway(t, authYAML(iss, apiKey, "upstreams:"+upstreamYAML("alpha", "alpha", "")), nil)
	defer withIssuer.close()
	r = rawClient{t: t, url: withIssuer.url}.do(http.MethodPost, initBody, nil)
	if r.msg.Error == nil || !strings.Contains(r.msg.Error.Message, "WWW-Authenticate") {
		t.Errorf("with an issuer, the message should point at the challenge: %s", r.body)
	}
}

// TestSessionBoundToItsPrincipal: a live session id presented with another user's valid
// token does not exist for that user, whatever the method: requests, notifications, answers
// to the gateway's requests, the standalone stream, a stream resume, DELETE; and a task id of
// one user's session is unknown in another's. The owner's session goes on working.
func TestSessionBoundToItsPrincipal(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, authYAML(iss, "mfk_unused", "upstreams:"+upstreamYAML("tk", "tasks", "")), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	alice := map[string]string{"Authorization": "Bearer " + userToken(t, iss, "alice")}
	bob := map[string]string{"Authorization": "Bearer " + userToken(t, iss, "bob")}
	with := func(h map[string]string, sid string) map[string]string {
		out := map[string]string{"Mcp-Session-Id": sid}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	initTasks := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"raw","version":"1"}}}`
	open := func(h map[string]string) string {
		r := c.do(http.MethodPost, initTasks, h)
		if r.status != http.StatusOK || r.header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize: %d %s", r.status, r.body)
		}
		return r.header.Get("Mcp-Session-Id")
	}
	aliceSID, bobSID := open(alice), open(bob)

	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tk__job","arguments":{"text":"x"},"task":{"ttl":60000}}}`, with(alice, aliceSID))
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.msg.Result, &created); err != nil || created.Task.TaskID == "" {
		t.Fatalf("alice's task-augmented call: %s", r.body)
	}

	hijacks := []struct {
		name, method, body string
		headers            map[string]string
	}{
		{"request", http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, nil},
		{"task by id", http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"` + created.Task.TaskID + `"}}`, nil},
		{"notification", http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`, nil},
		{"answer to a request of the gateway", http.MethodPost, `{"jsonrpc":"2.0","id":"mf-1","result":{}}`, nil},
		{"standalone stream", http.MethodGet, "", map[string]string{"Accept": "text/event-stream"}},
		{"stream resume", http.MethodGet, "", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": "1"}},
		{"delete", http.MethodDelete, "", nil},
	}
	for _, h := range hijacks {
		t.Run(h.name, func(t *testing.T) {
			as := func(sid string) rawReply {
				headers := with(bob, sid)
				for k, v := range h.headers {
					headers[k] = v
				}
				return c.do(h.method, h.body, headers)
			}
			r, unknown := as(aliceSID), as("no-such-session")
			if r.status != http.StatusNotFound || string(r.body) != string(unknown.body) {
				t.Errorf("bob with alice's session: %d %s; want the 404 of an unknown session: %s", r.status, r.body, unknown.body)
			}
		})
	}

	// In bob's own session, alice's task does not exist.
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"`+created.Task.TaskID+`"}}`, with(bob, bobSID))
	if r.msg.Error == nil {
		t.Errorf("bob read alice's task in his own session: %s", r.body)
	}
	// Alice's session is untouched, DELETE included.
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":6,"method":"tasks/get","params":{"taskId":"`+created.Task.TaskID+`"}}`, with(alice, aliceSID))
	if r.status != http.StatusOK || r.msg.Error != nil {
		t.Errorf("alice's own task after the hijack attempts: %d %s", r.status, r.body)
	}
	// Without any token the session does not answer either: the challenge comes first.
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, map[string]string{"Mcp-Session-Id": aliceSID})
	if r.status != http.StatusUnauthorized {
		t.Errorf("alice's session without a token: %d, want 401", r.status)
	}
}

// TestSessionsPerPrincipalCapped: one principal holds at most max_sessions_per_principal
// sessions; another is not affected, and an ended session frees its place.
func TestSessionsPerPrincipalCapped(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, authYAML(iss, "mfk_unused", "  max_sessions_per_principal: 2\nupstreams: []\n"), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	alice := map[string]string{"Authorization": "Bearer " + userToken(t, iss, "alice")}
	var sids []string
	for range 2 {
		r := c.do(http.MethodPost, initBody, alice)
		if r.status != http.StatusOK {
			t.Fatalf("alice's session: %d %s", r.status, r.body)
		}
		sids = append(sids, r.header.Get("Mcp-Session-Id"))
	}
	r := c.do(http.MethodPost, initBody, alice)
	if r.status != http.StatusTooManyRequests || r.msg.Error == nil || !strings.Contains(r.msg.Error.Message, "max_sessions_per_principal") {
		t.Errorf("alice's third session: %d %s, want 429 naming the limit", r.status, r.body)
	}
	if r := c.do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer " + userToken(t, iss, "bob")}); r.status != http.StatusOK {
		t.Errorf("bob's session: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodDelete, "", map[string]string{"Authorization": alice["Authorization"], "Mcp-Session-Id": sids[0]}); r.status/100 != 2 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodPost, initBody, alice); r.status != http.StatusOK {
		t.Errorf("alice's session after one ended: %d %s", r.status, r.body)
	}
}

// recordingUpstream serves a go-sdk upstream of flavor over Streamable HTTP and records the
// Authorization header of every request it gets.
type recordingUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newRecordingUpstream(t *testing.T, flavor string) *recordingUpstream {
	u := &recordingUpstream{}
	h := goSDKHandler(t, flavor, false)
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.Header.Get("Authorization"))
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// authorizations returns the distinct Authorization values the upstream saw.
func (u *recordingUpstream) authorizations() map[string]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]bool{}
	for _, a := range u.seen {
		out[a] = true
	}
	return out
}

// tokenEndpoint is a local OAuth token endpoint: client credentials give "cc-<client>",
// token exchange gives "x-<subject token's last 8 characters>", and it records each form.
type tokenEndpoint struct {
	*httptest.Server
	mu    sync.Mutex
	forms []map[string]string
}

func newTokenEndpoint(t *testing.T) *tokenEndpoint {
	te := &tokenEndpoint{}
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		form := map[string]string{}
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
		id, _, _ := r.BasicAuth()
		if id == "" {
			id = form["client_id"]
		}
		form["client"] = id
		te.mu.Lock()
		te.forms = append(te.forms, form)
		te.mu.Unlock()
		token := ""
		switch form["grant_type"] {
		case "client_credentials":
			token = "cc-" + id
		case "urn:ietf:params:oauth:grant-type:token-exchange":
			st := form["subject_token"]
			token = "x-" + st[len(st)-8:]
		default:
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600,"issued_token_type":"urn:ietf:params:oauth:token-type:access_token"}`, token)
	}))
	t.Cleanup(te.Close)
	return te
}

func (te *tokenEndpoint) requests() []map[string]string {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]map[string]string(nil), te.forms...)
}

// TestUpstreamsGetTheGatewaysCredentials: the client's token never reaches an upstream; each
// gets what the gateway's config gives it: a header read from a file, a client-credentials
// token requested with the upstream as resource, or, with isolation: principal, each user's
// own exchanged token on that user's own connection.
func TestUpstreamsGetTheGatewaysCredentials(t *testing.T) {
	iss := testissuer.New(t)
	tokens := newTokenEndpoint(t)
	filed := newRecordingUpstream(t, "alpha")
	cc := newRecordingUpstream(t, "alpha")
	exchanged := newRecordingUpstream(t, "alpha")
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const apiKey = "mfk_key-of-a-service"
	tg := startGateway(t, authYAML(iss, apiKey, fmt.Sprintf(`upstreams:
  - name: filed
    url: %s
    credentials:
      header_files: [{name: Authorization, path: %q, prefix: "Bearer "}]
  - name: cc
    url: %s
    credentials:
      client_credentials: {token_url: %q, client_id: manifold, client_secret: s3cret, scopes: [tools]}
  - name: exchanged
    url: %s
    isolation: principal
    credentials:
      client_credentials: {token_url: %q, client_id: manifold, client_secret: s3cret}
      token_exchange: {token_url: %q, client_id: manifold, client_secret: s3cret}
`, filed.URL, secret, cc.URL, tokens.URL, exchanged.URL, tokens.URL, tokens.URL)), nil)
	defer tg.close()

	aliceToken, bobToken := userToken(t, iss, "alice"), userToken(t, iss, "bob")
	ctx := ctxT(t)
	for _, token := range []string{aliceToken, bobToken} {
		cs := connectAs(t, tg.url, token, nil)
		for _, tool := range []string{"filed__echo", "cc__echo", "exchanged__echo"} {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
			if err != nil || res.IsError {
				t.Fatalf("%s: %v %v", tool, res, err)
			}
		}
	}
	for name, u := range map[string]*recordingUpstream{"filed": filed, "cc": cc, "exchanged": exchanged} {
		for a := range u.authorizations() {
			if strings.Contains(a, aliceToken) || strings.Contains(a, bobToken) {
				t.Errorf("upstream %s received a client's token", name)
			}
		}
	}
	if got := filed.authorizations(); len(got) != 1 || !got["Bearer from-a-file"] {
		t.Errorf("upstream with a header file saw %v", got)
	}
	if got := cc.authorizations(); len(got) != 1 || !got["Bearer cc-manifold"] {
		t.Errorf("upstream with client credentials saw %v", got)
	}
	want := map[string]bool{"Bearer cc-manifold": true, "Bearer x-" + aliceToken[len(aliceToken)-8:]: true, "Bearer x-" + bobToken[len(bobToken)-8:]: true}
	if got := exchanged.authorizations(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("upstream with token exchange saw %v, want the gateway's own token (catalog) and one per user: %v", got, want)
	}
	if n := tg.gw.IsolatedConnections("exchanged"); n != 2 {
		t.Errorf("%d connections of the principal-isolated upstream, want one per user: 2", n)
	}
	// A service with an API key has no token to exchange: it is told so at once.
	keyed := connectAs(t, tg.url, apiKey, nil)
	res, err := keyed.CallTool(ctx, &mcp.CallToolParams{Name: "exchanged__echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(t, res), "API key") {
		t.Errorf("an API key calling a token-exchange upstream: %v %v, want a tool error saying why", res, err)
	}
	var ccResources, exchanges int
	for _, f := range tokens.requests() {
		switch f["grant_type"] {
		case "client_credentials":
			if f["resource"] == cc.URL && f["scope"] == "tools" && f["client"] == "manifold" {
				ccResources++
			}
		case "urn:ietf:params:oauth:grant-type:token-exchange":
			exchanges++
			if f["resource"] != exchanged.URL || f["subject_token_type"] != "urn:ietf:params:oauth:token-type:access_token" {
				t.Errorf("token exchange form %v", f)
			}
		}
	}
	if ccResources != 1 {
		t.Errorf("%d client-credentials requests for cc with its URL as resource, want 1 (the token is reused)", ccResources)
	}
	if exchanges != 2 {
		t.Errorf("%d token exchanges, want one per user: 2 (cached until expiry)", exchanges)
	}
}

// TestIsolationPrincipalSharesAConnectionPerUser: with isolation: principal, a user's sessions
// share that user's own connection (here a child process), and another user gets another.
func TestIsolationPrincipalSharesAConnectionPerUser(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, authYAML(iss, "mfk_unused", "upstreams:"+upstreamYAML("r", "reverse", "    isolation: principal\n    attribution_window: 0s\n")), nil)
	defer tg.close()
	ctx := ctxT(t)
	sampler := func(marker string) *mcp.ClientOptions {
		return &mcp.ClientOptions{
			CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: marker}}, nil
			},
		}
	}
	alice1 := connectAs(t, tg.url, userToken(t, iss, "alice"), sampler("A1"))
	alice2 := connectAs(t, tg.url, userToken(t, iss, "alice"), sampler("A2"))
	bob := connectAs(t, tg.url, userToken(t, iss, "bob"), sampler("B"))
	for name, cs := range map[string]*mcp.ClientSession{"A1": alice1, "A2": alice2, "B": bob} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__slow_ask", Arguments: map[string]any{"text": "t"}})
		if err != nil || textOf(t, res) != "sampled="+name {
			t.Errorf("%s: %v %v", name, textOf(t, res), err)
		}
	}
	if n := tg.gw.IsolatedConnections("r"); n != 2 {
		t.Errorf("%d connections for two users' three sessions, want 2", n)
	}
}

// TestChainRefusesAnonymousWhenAuthIsOn: authentication is the policy chain's first check, so
// a request value that reaches the pipeline without a principal (a face that did not
// authenticate) is refused, and one with a principal is served.
func TestChainRefusesAnonymousWhenAuthIsOn(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, authYAML(iss, "mfk_unused", "upstreams:"+upstreamYAML("a", "alpha", "")), nil)
	defer tg.close()
	serve := func(who session.Principal) (json.RawMessage, *protocol.Error) {
		return tg.gw.ServeValue(ctxT(t), &pipeline.Request{
			ID: protocol.IntID(1), Method: protocol.MethodGetPrompt, Params: json.RawMessage(`{"name":"a__greet","arguments":{"who":"you"}}`),
			Client: pipeline.ClientContext{ProtocolVersion: protocol.Version20251125, Principal: who},
			LogID:  "t1", Received: time.Now(),
		})
	}
	if _, err := serve(session.Principal{}); err == nil || err.Code != protocol.CodeDenied || !strings.Contains(err.Message, "authenticat") {
		t.Errorf("anonymous request value: %v, want -32008 saying authentication is required", err)
	}
	if res, err := serve(session.Principal{Issuer: iss.URL, Subject: "alice"}); err != nil || !strings.Contains(string(res), "you") {
		t.Errorf("request value of alice: %s %v", res, err)
	}
}

// TestPrincipalConnectionsAcrossReplicas: with sessions in Redis and no affinity, a user's
// session runs its calls on the replica where it first called a principal-isolated upstream,
// on that replica's connection of the user, with its sampling and elicitation answered
// through either replica; another user gets a connection of their own. The cap on a user's
// sessions holds across the replicas.
func TestPrincipalConnectionsAcrossReplicas(t *testing.T) {
	iss := testissuer.New(t)
	a, b := twoReplicasWith(t, fmt.Sprintf("public_url: https://gw.test\nauth:\n  max_sessions_per_principal: 2\n  oidc:\n    - issuer: %s\n", iss.URL),
		upstreamYAML("r", "reverse", "    isolation: principal\n")[1:])
	clientOpts := &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "E"}}, nil
		},
	}
	ctx := ctxT(t)
	open := func(sub string) *mcp.ClientSession {
		rr := newRoundRobin(t, a.url, b.url)
		client := mcp.NewClient(&mcp.Implementation{Name: sub, Version: "1"}, clientOpts)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: &http.Client{Transport: bearer{userToken(t, iss, sub), rr}}}, nil)
		if err != nil {
			t.Fatalf("%s connects: %v", sub, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	connections := func() int { return a.gw.IsolatedConnections("r") + b.gw.IsolatedConnections("r") }
	alice := open("alice")
	askRounds(ctx, t, alice, 4, func(text string) string { return "sampled=S/" + text + ";elicited=E" })
	if n := connections(); n != 1 {
		t.Errorf("%d connections for alice's session, want 1 (on the replica of its first call)", n)
	}
	bob := open("bob")
	askRounds(ctx, t, bob, 4, func(text string) string { return "sampled=S/" + text + ";elicited=E" })
	if n := connections(); n != 2 {
		t.Errorf("%d connections for two users, want 2", n)
	}
	open("alice")
	// A third session of alice's, on either replica, is refused: the cap is shared.
	for _, tg := range []*testGateway{a, b} {
		r := rawClient{t: t, url: tg.url}.do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer " + userToken(t, iss, "alice")})
		if r.status != http.StatusTooManyRequests {
			t.Errorf("alice's third session: %d %s, want 429", r.status, r.body)
		}
	}
}

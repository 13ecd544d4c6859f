package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// oauthWorld is a gateway in front of an upstream that demands its own authorization
// server's tokens (testupstream.NewProtected): the gateway's identity provider (idp), where
// users sign in, and the upstream's (as), where they grant the gateway access, are separate
// test issuers, as Okta and GitHub would be.
type oauthWorld struct {
	idp, as *testissuer.Issuer
	up      *testupstream.Protected
	public  string // the gateway's public URL
	tg      *testGateway

	mu     sync.Mutex
	tokens map[string]string // the token of each user, made once
}

// oauthAPIKey is the API key of the service account "ci-bot" in the oauthWorld gateways.
const oauthAPIKey = "mfk_key-of-the-oauth-tests"

// userOAuthYAML is the config of a gateway at public in front of w's upstream as "gh", with
// settings added to its user_oauth mapping (each line indented by 8), and extra top-level
// settings.
func userOAuthYAML(w *oauthWorld, public, settings, extra string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
public_url: %s
%sauth:
  oidc:
    - issuer: %s
  login: {client_id: manifold-login, client_secret: login-secret}
  api_keys:
    - {name: ci-bot, hash: %q}
upstreams:
  - name: gh
    url: %s
    isolation: principal
    credentials:
      user_oauth:
        client_id: gw
        client_secret: gw-secret
        allow_private_network: true
        scopes: [read]
%s%s`, public, keysYAML, w.idp.URL, auth.HashAPIKey(oauthAPIKey), w.up.URL, settings, extra)
}

// catalogCredentialsYAML gives the catalog connection the gateway's own token at w's
// authorization server (client credentials).
func catalogCredentialsYAML(w *oauthWorld) string {
	return fmt.Sprintf("        catalog_credentials:\n          client_credentials: {token_url: %s, client_id: gw, client_secret: gw-secret}\n", w.as.URL+testissuer.TokenPath)
}

// newOAuthWorld starts the issuers and the protected upstream; the gateway is started by
// start.
func newOAuthWorld(t *testing.T) *oauthWorld {
	t.Helper()
	w := &oauthWorld{idp: testissuer.New(t), as: testissuer.New(t)}
	w.up = testupstream.NewProtected(t, w.as, testupstream.ProtectedOptions{})
	return w
}

// start starts a gateway of yaml(public URL) and registers its clients at both issuers.
func (w *oauthWorld) start(t *testing.T, yaml func(public string) string, opts *gateway.Options) *testGateway {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	public := "http://" + srv.Listener.Addr().String()
	w.idp.RegisterClient("manifold-login", "login-secret", public+"/oauth/login/callback")
	w.as.RegisterClient("gw", "gw-secret", public+"/oauth/callback")
	cfg, err := config.Parse("test.yaml", []byte(yaml(public)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if opts == nil {
		opts = &gateway.Options{}
	}
	gw, err := gateway.New(cfg, opts)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	gw.Start()
	srv.Config = gw.Server()
	srv.Start()
	tg := &testGateway{gw: gw, srv: srv, url: public + "/mcp"}
	t.Cleanup(tg.close)
	waitReady(t, gw, len(cfg.EnabledUpstreams()))
	w.public, w.tg = public, tg
	return tg
}

// token is the access token of the gateway's identity provider for user, for the gateway:
// the same each time, so that a test can look for it where it must not be.
func (w *oauthWorld) token(t *testing.T, user string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tokens == nil {
		w.tokens = map[string]string{}
	}
	if tok, ok := w.tokens[user]; ok {
		return tok
	}
	tok := w.idp.Token(t, map[string]any{"sub": user, "aud": w.public + "/mcp", "email": user + "@example.com"})
	w.tokens[user] = tok
	return tok
}

// urlElicitingClient connects a Go SDK client as user that declares URL-mode elicitation;
// completed receives the ids of the elicitations the gateway says are complete.
func (w *oauthWorld) urlElicitingClient(t *testing.T, user string) (cs *mcp.ClientSession, completed chan string) {
	t.Helper()
	completed = make(chan string, 8)
	cs = connectAs(t, w.tg.url, w.token(t, user), &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			completed <- req.Params.ElicitationID
		},
	})
	return cs, completed
}

// userAgent is an HTTP client signed in as user at the gateway's identity provider and at
// the upstream's authorization server: a person's browser, with both sessions. (The test
// issuers' sign-in cookies share their name, and a cookie is not bound to a port: the two
// sessions are one user's.)
// It records every URL it is redirected to.
type userAgent struct {
	*http.Client
	mu      sync.Mutex
	visited []string
}

func (w *oauthWorld) browser(t *testing.T, user string) *userAgent {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &userAgent{Client: &http.Client{Jar: jar}}
	b.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		b.mu.Lock()
		b.visited = append(b.visited, req.URL.String())
		b.mu.Unlock()
		return nil
	}
	w.idp.SignIn(b.Client, user)
	w.as.SignIn(b.Client, user)
	return b
}

// visitedPath returns the last URL the browser was sent to whose path is path.
func (b *userAgent) visitedPath(path string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.visited) - 1; i >= 0; i-- {
		if u, err := url.Parse(b.visited[i]); err == nil && u.Path == path {
			return b.visited[i]
		}
	}
	return ""
}

// page is an HTTP answer to a browser: its status and body.
type page struct {
	status int
	body   string
	at     *url.URL
}

func (b *userAgent) get(t *testing.T, link string) page {
	t.Helper()
	resp, err := b.Get(link)
	if err != nil {
		t.Fatalf("GET %s: %v", link, err)
	}
	return readPage(t, resp)
}

func readPage(t *testing.T, resp *http.Response) page {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, body: string(body), at: resp.Request.URL}
}

var (
	formAction = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
	csrfField  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// submit posts the first form of p with the button action=value.
func (b *userAgent) submit(t *testing.T, p page, action string) page {
	t.Helper()
	a, c := formAction.FindStringSubmatch(p.body), csrfField.FindStringSubmatch(p.body)
	if a == nil || c == nil {
		t.Fatalf("no form with a csrf token on the page (%d): %s", p.status, p.body)
	}
	target, err := p.at.Parse(html.UnescapeString(a[1]))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.PostForm(target.String(), url.Values{"csrf": {html.UnescapeString(c[1])}, "action": {action}})
	if err != nil {
		t.Fatalf("POST %s: %v", target, err)
	}
	return readPage(t, resp)
}

// consent opens a connect link and approves: the page it ends on.
func (b *userAgent) consent(t *testing.T, link string) page {
	t.Helper()
	p := b.get(t, link)
	if p.status != http.StatusOK || !strings.Contains(p.body, "gh") {
		t.Fatalf("connect page: %d %s", p.status, p.body)
	}
	return b.submit(t, p, "connect")
}

// urlElicitationOf reads the one URL elicitation a -32042 error asks for.
func urlElicitationOf(t *testing.T, err error) (link, id string) {
	t.Helper()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32042 {
		t.Fatalf("want a -32042 URL elicitation required error, got %v", err)
	}
	var data struct {
		Elicitations []struct {
			Mode, URL, ElicitationID, Message string
		} `json:"elicitations"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil || len(data.Elicitations) != 1 {
		t.Fatalf("error data %s: %v", rpcErr.Data, err)
	}
	el := data.Elicitations[0]
	if el.Mode != "url" || el.URL == "" || el.ElicitationID == "" || el.Message == "" {
		t.Fatalf("elicitation %+v: want mode url with url, id and message", el)
	}
	return el.URL, el.ElicitationID
}

// whoami calls gh__whoami: the user the upstream saw, or the call's error.
func whoami(ctx context.Context, t *testing.T, cs *mcp.ClientSession) (string, error) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "gh__whoami", Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	if res.IsError {
		return "", fmt.Errorf("tool error: %s", textOf(t, res))
	}
	return textOf(t, res), nil
}

// awaitComplete waits for the elicitation complete notification of id.
func awaitComplete(ctx context.Context, t *testing.T, completed chan string, id string) {
	t.Helper()
	for {
		select {
		case got := <-completed:
			if got == id {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no notifications/elicitation/complete for %s", id)
		}
	}
}

// TestUserConnectsAnUpstreamThroughURLElicitation: a user calls a tool of an upstream that
// only its own authorization server's tokens open. Without a grant, the Go SDK client gets
// -32042 with the gateway's connect URL; its handler follows the URL with a browser signed
// in as the same user (the gateway's identity provider, then the upstream's authorization
// server), the client is told the elicitation completed, and its retry runs with the user's
// token. The same URL opened by another user is refused and grants nothing; the callback
// replayed is refused; each user's calls carry that user's token only, never a client's; an
// API key is told it cannot connect; revoking on the user's grants page revokes at the
// authorization server, and the next call asks again.
func TestUserConnectsAnUpstreamThroughURLElicitation(t *testing.T) {
	w := newOAuthWorld(t)
	w.start(t, func(public string) string {
		return userOAuthYAML(w, public, catalogCredentialsYAML(w), "state_dir: "+t.TempDir()+"\n")
	}, nil)
	ctx := ctxT(t)
	alice, completed := w.urlElicitingClient(t, "alice")

	_, err := whoami(ctx, t, alice)
	link, id := urlElicitationOf(t, err)
	if !strings.HasPrefix(link, w.public+"/connect/") {
		t.Fatalf("connect URL %s is not the gateway's", link)
	}

	// Bob, signed in as himself, opens alice's link: refused, and nothing is authorized.
	bob := w.browser(t, "bob")
	if p := bob.get(t, link); p.status != http.StatusForbidden {
		t.Fatalf("bob opening alice's link: %d %s, want 403", p.status, p.body)
	}
	if n := w.as.Authorizations(); n != 0 {
		t.Fatalf("%d authorizations at the upstream's server after bob opened alice's link, want 0", n)
	}

	aliceBrowser := w.browser(t, "alice")
	if p := aliceBrowser.consent(t, link); p.status != http.StatusOK {
		t.Fatalf("alice's consent ended on %d %s", p.status, p.body)
	}
	awaitComplete(ctx, t, completed, id)
	if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
		t.Fatalf("alice's retry: %q, %v; want the upstream to see alice", who, err)
	}

	// The callback replayed (the browser's history, a leaked URL) is refused: single use.
	callback := aliceBrowser.visitedPath("/oauth/callback")
	if callback == "" {
		t.Fatal("the browser never reached the gateway's callback")
	}
	if p := aliceBrowser.get(t, callback); p.status != http.StatusBadRequest {
		t.Errorf("replayed callback: %d %s, want 400", p.status, p.body)
	}
	if n := w.as.TokenRequests("authorization_code"); n != 1 {
		t.Errorf("%d codes redeemed, want 1", n)
	}
	// The connect link is spent too.
	if p := aliceBrowser.get(t, link); p.status != http.StatusNotFound {
		t.Errorf("spent connect link: %d, want 404", p.status)
	}

	// Bob connects his own account; each user's calls carry that user's token.
	bobClient, bobCompleted := w.urlElicitingClient(t, "bob")
	_, err = whoami(ctx, t, bobClient)
	bobLink, bobID := urlElicitationOf(t, err)
	bob.consent(t, bobLink)
	awaitComplete(ctx, t, bobCompleted, bobID)
	if who, err := whoami(ctx, t, bobClient); err != nil || who != "bob" {
		t.Fatalf("bob's call: %q, %v; want bob", who, err)
	}
	if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
		t.Fatalf("alice's call after bob connected: %q, %v; want alice@gh", who, err)
	}
	for _, tok := range w.up.Tokens() {
		for _, client := range []string{w.token(t, "alice"), w.token(t, "bob"), oauthAPIKey} {
			if tok == client {
				t.Fatal("the upstream received a client's own credential")
			}
		}
	}
	if n := w.tg.gw.IsolatedConnections("gh"); n != 2 {
		t.Errorf("%d users' connections, want 2", n)
	}

	// A service with an API key has no browser identity to connect with: told so, no link.
	keyed := connectAs(t, w.tg.url, oauthAPIKey, nil)
	res, err := keyed.CallTool(ctx, &mcp.CallToolParams{Name: "gh__whoami", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(textOf(t, res), "API key") {
		t.Errorf("API key's call: %v %v; want a tool error naming the API key", res, err)
	}

	// Alice revokes on her grants page: revoked at the authorization server, and her next
	// call asks her to connect again.
	grantsPage := aliceBrowser.get(t, w.public+"/grants")
	if grantsPage.status != http.StatusOK || !strings.Contains(grantsPage.body, "gh") {
		t.Fatalf("grants page: %d %s", grantsPage.status, grantsPage.body)
	}
	before := w.as.Revocations()
	if p := aliceBrowser.submit(t, grantsPage, "revoke"); p.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", p.status, p.body)
	}
	if w.as.Revocations() != before+1 {
		t.Errorf("revoking did not revoke at the authorization server (%d revocations)", w.as.Revocations())
	}
	_, err = whoami(ctx, t, alice)
	urlElicitationOf(t, err)
	if who, err := whoami(ctx, t, bobClient); err != nil || who != "bob" {
		t.Errorf("bob's call after alice revoked: %q, %v", who, err)
	}
}

// TestUserOAuthRefreshAndStepUp: a token about to expire is renewed with its refresh token
// before a call (the authorization server rotates it), with no user in the loop; a tool the
// upstream says needs a wider scope (403 insufficient_scope) asks the user for that scope,
// and the retry runs with the wider grant.
func TestUserOAuthRefreshAndStepUp(t *testing.T) {
	w := newOAuthWorld(t)
	// Every token is within the vault's refresh margin (a minute) of its expiry: each call
	// renews it first.
	w.as.AccessTTL = 30 * time.Second
	w.start(t, func(public string) string {
		return userOAuthYAML(w, public, catalogCredentialsYAML(w), "state_dir: "+t.TempDir()+"\n")
	}, nil)
	ctx := ctxT(t)
	alice, completed := w.urlElicitingClient(t, "alice")
	aliceBrowser := w.browser(t, "alice")
	_, err := whoami(ctx, t, alice)
	link, id := urlElicitationOf(t, err)
	aliceBrowser.consent(t, link)
	awaitComplete(ctx, t, completed, id)
	for range 3 {
		if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
			t.Fatalf("call with a token due for renewal: %q, %v", who, err)
		}
	}
	if n := w.as.TokenRequests("refresh_token"); n < 3 {
		t.Errorf("%d refreshes for 3 calls with tokens due, want at least 3", n)
	}

	// The authorization server revokes alice's grant (say, she removed the app there): the
	// next renewal is refused, and her call asks her to connect again.
	w.as.RevokeUser("alice")
	_, err = whoami(ctx, t, alice)
	link, id = urlElicitationOf(t, err)
	aliceBrowser.consent(t, link)
	awaitComplete(ctx, t, completed, id)
	if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
		t.Fatalf("call after connecting again: %q, %v", who, err)
	}

	// write needs the scope write, which alice did not grant (the config asks for read).
	write := func() (*mcp.CallToolResult, error) {
		return alice.CallTool(ctx, &mcp.CallToolParams{Name: "gh__write", Arguments: map[string]any{}})
	}
	_, err = write()
	link, id = urlElicitationOf(t, err)
	if p := aliceBrowser.get(t, link); !strings.Contains(p.body, "write") {
		t.Fatalf("the step-up's page does not name the scope asked: %s", p.body)
	}
	aliceBrowser.consent(t, link)
	awaitComplete(ctx, t, completed, id)
	if q := strings.Fields(w.as.LastAuthorization().Get("scope")); !slices.Contains(q, "write") || !slices.Contains(q, "read") {
		t.Errorf("step-up authorization asked for %q, want read (granted) and write (asked)", q)
	}
	res, err := write()
	if err != nil || res.IsError || textOf(t, res) != "written by alice" {
		t.Fatalf("write after the step-up: %v %v", res, err)
	}
}

// TestModernClientConnectsThroughInputRequired: a 2026-07-28 client that declared URL
// elicitation is asked to connect with an input_required result carrying the URL; its retry
// with the requestState waits for the grant (bounded by connect_wait) and runs once the user
// connected. A 2026-07-28 client that cannot be asked gets a tool error carrying the URL.
func TestModernClientConnectsThroughInputRequired(t *testing.T) {
	w := newOAuthWorld(t)
	w.start(t, func(public string) string {
		return userOAuthYAML(w, public, catalogCredentialsYAML(w)+"        connect_wait: 30s\n", "modern_protocol: true\nstate_dir: "+t.TempDir()+"\n")
	}, nil)
	post := func(user, body, name string) rawReply {
		h := modernHeaders("tools/call", name)
		h["Authorization"] = "Bearer " + w.token(t, user)
		return rawClient{t: t, url: w.tg.url}.do(http.MethodPost, body, h)
	}
	const urlCaps = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}`
	call := func(id int, extra string) rawReply {
		return post("alice", modernBody(id, "tools/call", `{`+urlCaps+`,"name":"gh__whoami","arguments":{}`+extra+`}`), "gh__whoami")
	}
	r := call(1, "")
	var first struct {
		Result struct {
			ResultType    string `json:"resultType"`
			InputRequests map[string]struct {
				Method string `json:"method"`
				Params struct {
					Mode, URL, Message string
					ElicitationID      *string `json:"elicitationId"`
				} `json:"params"`
			} `json:"inputRequests"`
			RequestState string `json:"requestState"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.body, &first); err != nil || first.Result.ResultType != "input_required" {
		t.Fatalf("first round: %d %s", r.status, r.body)
	}
	ask, ok := first.Result.InputRequests["connect"]
	if !ok || ask.Method != "elicitation/create" || ask.Params.Mode != "url" || !strings.HasPrefix(ask.Params.URL, w.public+"/connect/") || ask.Params.ElicitationID != nil {
		t.Fatalf("input request: %s; want one URL elicitation/create of the gateway's connect URL, without elicitationId", r.body)
	}
	// The retry waits for the user, who connects meanwhile.
	retried := make(chan rawReply, 1)
	go func() {
		state, _ := json.Marshal(first.Result.RequestState)
		retried <- call(2, `,"requestState":`+string(state)+`,"inputResponses":{"connect":{"action":"accept"}}`)
	}()
	waitUntil(t, "the retry to wait for alice's grant", func() bool { return w.tg.gw.GrantWaiters() == 1 })
	w.browser(t, "alice").consent(t, ask.Params.URL)
	r = <-retried
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"text":"alice"`) || !strings.Contains(string(r.body), `"resultType":"complete"`) {
		t.Fatalf("retry: %d %s; want the upstream's answer for alice", r.status, r.body)
	}

	if n := w.tg.gw.GrantWaiters(); n != 0 {
		t.Errorf("%d retries still wait after the grant landed", n)
	}

	// Carol declines: her retry ends at once with a tool error, and waits for nothing.
	r = post("carol", modernBody(4, "tools/call", `{`+urlCaps+`,"name":"gh__whoami","arguments":{}}`), "gh__whoami")
	var carolAsked struct {
		Result struct{ RequestState string } `json:"result"`
	}
	if err := json.Unmarshal(r.body, &carolAsked); err != nil || carolAsked.Result.RequestState == "" {
		t.Fatalf("carol's first round: %d %s", r.status, r.body)
	}
	state, _ := json.Marshal(carolAsked.Result.RequestState)
	r = post("carol", modernBody(5, "tools/call", `{`+urlCaps+`,"name":"gh__whoami","arguments":{},"requestState":`+string(state)+`,"inputResponses":{"connect":{"action":"decline"}}}`), "gh__whoami")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"isError":true`) || !strings.Contains(string(r.body), "decline") {
		t.Fatalf("carol's declined retry: %d %s; want a tool error saying she declined", r.status, r.body)
	}

	// A client that declared no URL elicitation is told where to connect in a tool error.
	r = post("bob", modernBody(3, "tools/call", `{"name":"gh__whoami","arguments":{}}`), "gh__whoami")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"isError":true`) || !strings.Contains(string(r.body), w.public+"/connect/") {
		t.Fatalf("bob without URL elicitation: %d %s; want a tool error with the connect URL", r.status, r.body)
	}
}

// TestUserOAuthAcrossReplicas: two replicas on one Redis behind one public URL, which sends
// each request, the browser's included, to the other replica than the last. A user's call
// on one replica is asked to connect; the sign-in, the consent and the callback land on
// either replica; the session learns that the elicitation completed on the replica holding
// its stream; the retry runs with the grant on either. The grant is revoked through the
// admin API of the other replica. Nothing of the grant is in Redis in the clear: no access
// or refresh token, no client secret, no user's token.
func TestUserOAuthAcrossReplicas(t *testing.T) {
	w := newOAuthWorld(t)
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	published := recordPubSub(t, rdb, prefix)

	// The public face: a proxy alternating between the replicas, started once they are.
	var targets []*url.URL
	var next atomic.Int64
	front := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[int(next.Add(1))%len(targets)])
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
	})
	public := "http://" + front.Listener.Addr().String()
	w.public = public
	w.idp.RegisterClient("manifold-login", "login-secret", public+"/oauth/login/callback")
	w.as.RegisterClient("gw", "gw-secret", public+"/oauth/callback")
	yaml := userOAuthYAML(w, public, catalogCredentialsYAML(w), adminYAML("")+fmt.Sprintf(`session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
`, addr, prefix))
	a, b := startGateway(t, yaml, nil), startGateway(t, yaml, nil)
	t.Cleanup(a.close)
	t.Cleanup(b.close)
	for _, tg := range []*testGateway{a, b} {
		u, err := url.Parse(tg.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u)
	}
	front.Start()
	t.Cleanup(front.Close)
	w.tg = &testGateway{gw: a.gw, srv: front, url: public + "/mcp"}

	ctx := ctxT(t)
	alice, completed := w.urlElicitingClient(t, "alice")
	_, err := whoami(ctx, t, alice)
	link, id := urlElicitationOf(t, err)
	aliceBrowser := w.browser(t, "alice")
	if p := aliceBrowser.consent(t, link); p.status != http.StatusOK {
		t.Fatalf("consent through both replicas: %d %s", p.status, p.body)
	}
	awaitComplete(ctx, t, completed, id)
	for range 4 { // on both replicas
		if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
			t.Fatalf("alice's call after connecting: %q, %v", who, err)
		}
	}
	if n := w.as.TokenRequests("authorization_code"); n != 1 {
		t.Errorf("%d codes redeemed, want 1", n)
	}

	dump := dumpRedis(t, rdb, prefix)
	if !strings.Contains(strings.Join(keysOf(dump), " "), ":grants:") {
		t.Fatalf("no grant in Redis: %v", keysOf(dump))
	}
	secrets := map[string]string{"alice's token at the gateway": w.token(t, "alice"), "the gateway's client secret at the upstream": "gw-secret",
		"the gateway's client secret at its issuer": "login-secret"}
	for i, tok := range w.up.Tokens() {
		secrets[fmt.Sprintf("access token %d the upstream saw", i)] = tok
	}
	for i, rt := range w.as.RefreshTokens() {
		secrets[fmt.Sprintf("refresh token %d", i)] = rt
	}
	messages := published()
	for what, secret := range secrets {
		for key, value := range dump {
			if strings.Contains(key, secret) || strings.Contains(value, secret) {
				t.Errorf("%s is in Redis in the clear, in key %s", what, key)
			}
		}
		for _, m := range messages {
			if strings.Contains(m, secret) {
				t.Errorf("%s was published between the replicas", what)
			}
		}
	}

	// An operator revokes alice's grant on the other replica: her next call, on either,
	// asks again.
	adminB := startAdmin(t, b)
	var listed struct {
		Grants []struct {
			Principal struct {
				Issuer  string `json:"iss"`
				Subject string `json:"sub"`
			}
			Upstream string
		}
	}
	if code := adminB.do("GET", "/api/grants", nil, &listed); code != http.StatusOK || len(listed.Grants) != 1 || listed.Grants[0].Principal.Subject != "alice" {
		t.Fatalf("GET /api/grants: %d %+v", code, listed)
	}
	revocations := w.as.Revocations()
	body := map[string]any{"principal": map[string]string{"iss": w.idp.URL, "sub": "alice"}, "upstream": "gh"}
	if code := adminB.do("POST", "/api/grants/revoke", body, nil); code != http.StatusOK {
		t.Fatalf("revoke through the admin API: %d", code)
	}
	if w.as.Revocations() != revocations+1 {
		t.Error("the admin API's revocation did not reach the authorization server")
	}
	if code := adminB.do("POST", "/api/grants/revoke", body, nil); code != http.StatusNotFound {
		t.Errorf("revoking again: %d, want 404", code)
	}
	for range 2 {
		_, err = whoami(ctx, t, alice)
		urlElicitationOf(t, err)
	}
}

// TestCatalogBorrowedFromAConnectedUser: an upstream with no catalog_credentials lists
// nothing to the gateway itself, so its tools are not listed until a user connects it (from
// the grants page, where it is offered); then the catalog is that user's listing, and every
// user sees it, each calling with their own grant. A gateway started later on the same
// state_dir lists the upstream at once, through a user who has a grant, and no token went
// to a connection of the gateway's own.
func TestCatalogBorrowedFromAConnectedUser(t *testing.T) {
	w := newOAuthWorld(t)
	stateDir := t.TempDir()
	// A header file goes with every request of the users' connections; alone it opens
	// nothing at the upstream, so the catalog is still borrowed.
	tenant := filepath.Join(t.TempDir(), "tenant")
	if err := os.WriteFile(tenant, []byte("acme\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.start(t, func(public string) string {
		yaml := userOAuthYAML(w, public, "", "state_dir: "+stateDir+"\n")
		return strings.Replace(yaml, "    credentials:\n", fmt.Sprintf("    credentials:\n      header_files: [{name: X-Tenant, path: %q}]\n", tenant), 1)
	}, nil)
	ctx := ctxT(t)
	alice, _ := w.urlElicitingClient(t, "alice")
	listed := func(cs *mcp.ClientSession) bool {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == "gh__whoami" {
				return true
			}
		}
		return false
	}
	if listed(alice) {
		t.Fatal("gh's tools are listed before any user connected it")
	}
	if n := w.up.Unauthorized(); n != 0 {
		t.Errorf("the gateway called the upstream without a user's token %d times", n)
	}

	aliceBrowser := w.browser(t, "alice")
	grantsPage := aliceBrowser.get(t, w.public+"/grants")
	if !strings.Contains(grantsPage.body, "Not connected yet") {
		t.Fatalf("the grants page offers no upstream to connect: %s", grantsPage.body)
	}
	consentPage := aliceBrowser.submit(t, grantsPage, "connect")
	if p := aliceBrowser.submit(t, consentPage, "connect"); p.status != http.StatusOK {
		t.Fatalf("connecting from the grants page: %d %s", p.status, p.body)
	}
	waitUntil(t, "gh's tools to be listed once alice connected", func() bool { return listed(alice) })
	if who, err := whoami(ctx, t, alice); err != nil || who != "alice" {
		t.Fatalf("alice's call: %q, %v", who, err)
	}
	bob, bobCompleted := w.urlElicitingClient(t, "bob")
	if !listed(bob) {
		t.Fatal("bob does not see the tools alice's listing brought")
	}
	_, err := whoami(ctx, t, bob)
	link, id := urlElicitationOf(t, err)
	w.browser(t, "bob").consent(t, link)
	awaitComplete(ctx, t, bobCompleted, id)
	if who, err := whoami(ctx, t, bob); err != nil || who != "bob" {
		t.Fatalf("bob's call: %q, %v", who, err)
	}

	if owner := w.tg.gw.BorrowedCatalogOwner("gh"); !strings.Contains(owner, "alice") {
		t.Errorf("the listing is lent by %q, want alice's connection (the first)", owner)
	}
	// Alice revokes her grant: her connection no longer lends the listing; bob's, open
	// already, lends it.
	grantsPage = aliceBrowser.get(t, w.public+"/grants")
	if p := aliceBrowser.submit(t, grantsPage, "revoke"); p.status != http.StatusOK {
		t.Fatalf("alice revokes: %d %s", p.status, p.body)
	}
	if owner := w.tg.gw.BorrowedCatalogOwner("gh"); !strings.Contains(owner, "bob") {
		t.Errorf("the listing is lent by %q after alice revoked, want bob's open connection", owner)
	}
	if !listed(bob) {
		t.Error("the tools left the catalog when the lending user revoked")
	}

	// Another gateway on the same state_dir: bob's grant lends it the listing at start.
	other := &oauthWorld{idp: w.idp, as: w.as, up: w.up}
	other.start(t, func(public string) string {
		return userOAuthYAML(other, public, "", "state_dir: "+stateDir+"\n")
	}, nil)
	carol := connectAs(t, other.tg.url, other.token(t, "carol"), nil)
	waitUntil(t, "the other gateway to list gh through a granted user", func() bool { return listed(carol) })
}

// TestUserOAuthDiscoveryStaysOutOfTheNetwork: without allow_private_network, the upstream's
// authorization server on loopback is refused by discovery: the user who consents gets an
// error page, and nothing is asked of that server.
func TestUserOAuthDiscoveryStaysOutOfTheNetwork(t *testing.T) {
	w := newOAuthWorld(t)
	w.start(t, func(public string) string {
		yaml := userOAuthYAML(w, public, catalogCredentialsYAML(w), "state_dir: "+t.TempDir()+"\n")
		return strings.Replace(yaml, "        allow_private_network: true\n", "", 1)
	}, nil)
	ctx := ctxT(t)
	alice, _ := w.urlElicitingClient(t, "alice")
	_, err := whoami(ctx, t, alice)
	link, _ := urlElicitationOf(t, err)
	discovered := w.as.DiscoveryFetches()
	if p := w.browser(t, "alice").consent(t, link); p.status < 400 {
		t.Fatalf("consent toward an authorization server on loopback: %d %s, want an error page", p.status, p.body)
	}
	if w.as.DiscoveryFetches() != discovered || w.as.Authorizations() != 0 {
		t.Errorf("the authorization server on loopback was reached (%d metadata fetches, %d authorizations)", w.as.DiscoveryFetches()-discovered, w.as.Authorizations())
	}
}

// TestUserOAuthRefusesUsersOfAnotherIssuer: the connect page signs users in at auth.login's
// issuer only; a user of another trusted issuer could never complete it, and is told so
// instead of being handed a link.
func TestUserOAuthRefusesUsersOfAnotherIssuer(t *testing.T) {
	w := newOAuthWorld(t)
	other := testissuer.New(t)
	w.start(t, func(public string) string {
		yaml := userOAuthYAML(w, public, catalogCredentialsYAML(w), "state_dir: "+t.TempDir()+"\n")
		return strings.Replace(yaml, "    - issuer: "+w.idp.URL+"\n", "    - issuer: "+w.idp.URL+"\n    - issuer: "+other.URL+"\n", 1)
	}, nil)
	ctx := ctxT(t)
	dave := connectAs(t, w.tg.url, other.Token(t, map[string]any{"sub": "dave", "aud": w.public + "/mcp"}), nil)
	res, err := dave.CallTool(ctx, &mcp.CallToolParams{Name: "gh__whoami", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(textOf(t, res), w.idp.URL) {
		t.Fatalf("a user of another issuer: %v %v; want a tool error naming the issuer to sign in at", res, err)
	}
}

package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// startDemoIssuer runs the demo issuer as `gateway demo -issuer` runs it, on a free loopback
// port, until the test ends; it returns the issuer's URL.
func startDemoIssuer(t *testing.T) string {
	t.Helper()
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serveIssuer(ctx, addr, "", logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the demo issuer stopped with %v", err)
		}
	})
	issuerURL := "http://" + addr
	waitFor(t, "the demo issuer to answer", func() bool {
		resp, err := http.Get(issuerURL + "/.well-known/openid-configuration")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return issuerURL
}

// getJSON GETs u and decodes its 200 answer into out.
func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, body)
	}
}

// postForm posts form to u and returns the status and the decoded answer.
func postForm(t *testing.T, u string, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// serveAuthExample serves docs/auth.md's walkthrough: the demo issuer, and the gateway of
// examples/auth/gateway.yaml asking for its tokens, both on free ports.
func serveAuthExample(t *testing.T) (g *servedGateway, issuerURL string) {
	t.Helper()
	issuerURL = startDemoIssuer(t)
	env := map[string]string{"DEMO_ISSUER": issuerURL}
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "auth", "gateway.yaml"), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if err := listenOverride(cfg, freePort(t)); err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Upstreams {
		cfg.Upstreams[i].Env = map[string]string{testupstream.EnvRun: testupstream.Marker}
	}
	g = serveLogged(t, cfg)
	waitReady(t, g)
	return g, issuerURL
}

// startCallback serves a client's redirect URI on loopback until the test ends: the query of
// each redirect to it arrives on the channel.
func startCallback(t *testing.T) (redirectURI string, queries <-chan url.Values) {
	t.Helper()
	got := make(chan url.Values, 1)
	callback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Query()
		io.WriteString(w, "you may close this window")
	}))
	t.Cleanup(callback.Close)
	return callback.URL + "/callback", got
}

var resourceMetadata = regexp.MustCompile(`resource_metadata="([^"]+)"`)

// TestDemoIssuerOAuthFlow runs a client's OAuth flow against the gateway of docs/auth.md's
// walkthrough (examples/auth/gateway.yaml and the demo issuer), as an MCP client does it:
// from the 401's resource metadata to the issuer, client registration, the authorization
// code with PKCE (the HTTP client follows the redirects to its loopback callback), the token
// for the gateway's resource, and a call with it through the official SDK.
func TestDemoIssuerOAuthFlow(t *testing.T) {
	g, issuerURL := serveAuthExample(t)

	// 1. The 401 names the protected resource metadata, which names the issuer.
	resp, err := http.Post(g.url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	m := resourceMetadata.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if resp.StatusCode != http.StatusUnauthorized || m == nil {
		t.Fatalf("a request without a token: %d, WWW-Authenticate %q; want 401 naming resource_metadata", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	getJSON(t, m[1], &prm)
	if prm.Resource != g.url || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != issuerURL {
		t.Fatalf("protected resource metadata: %+v; want resource %s and the issuer %s", prm, g.url, issuerURL)
	}
	// 2. The authorization server's metadata (RFC 8414), and a registration (RFC 7591).
	var as struct {
		Issuer                string `json:"issuer"`
		AuthorizationEndpoint string `json:"authorization_endpoint"`
		TokenEndpoint         string `json:"token_endpoint"`
		RegistrationEndpoint  string `json:"registration_endpoint"`
	}
	getJSON(t, prm.AuthorizationServers[0]+"/.well-known/oauth-authorization-server", &as)
	if as.Issuer != issuerURL {
		t.Fatalf("authorization server metadata: %+v", as)
	}
	redirectURI, codes := startCallback(t)
	reg, _ := json.Marshal(map[string]any{"client_name": "oauth-flow-test", "redirect_uris": []string{redirectURI}})
	resp, err = http.Post(as.RegistrationEndpoint, "application/json", strings.NewReader(string(reg)))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		ClientID string `json:"client_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&client)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || client.ClientID == "" {
		t.Fatalf("registration: %d %v %+v", resp.StatusCode, err, client)
	}
	// 3. The authorization code with PKCE: the authorize endpoint approves at once and
	// redirects to the callback, which the HTTP client follows.
	verifierBytes := make([]byte, 32)
	_, _ = rand.Read(verifierBytes)
	verifier := base64.RawURLEncoding.EncodeToString(verifierBytes)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {client.ClientID}, "redirect_uri": {redirectURI},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"st4te"}, "resource": {prm.Resource}, "scope": {"mcp"},
	}
	resp, err = http.Get(as.AuthorizationEndpoint + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var got url.Values
	select {
	case got = <-codes:
	default:
		t.Fatalf("the authorize endpoint did not redirect to the callback (status %d at %s)", resp.StatusCode, resp.Request.URL)
	}
	if got.Get("state") != "st4te" || got.Get("code") == "" || got.Get("iss") != issuerURL {
		t.Fatalf("the callback got %v; want a code, the state and the issuer", got)
	}
	exchange := url.Values{"grant_type": {"authorization_code"}, "code": {got.Get("code")}, "redirect_uri": {redirectURI}, "client_id": {client.ClientID}}
	wrong := url.Values{}
	for k, v := range exchange {
		wrong[k] = v
	}
	wrong.Set("code_verifier", "not-the-verifier-not-the-verifier-not-the-verifier")
	if status, body := postForm(t, as.TokenEndpoint, wrong); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("a code with the wrong PKCE verifier: %d %v, want 400 invalid_grant", status, body)
	}
	// The wrong verifier spent the code: a code is good for one try.
	exchange.Set("code_verifier", verifier)
	if status, body := postForm(t, as.TokenEndpoint, exchange); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
		t.Errorf("a spent code: %d %v, want 400 invalid_grant", status, body)
	}
	// A fresh code, redeemed with its verifier.
	resp, err = http.Get(as.AuthorizationEndpoint + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	exchange.Set("code", (<-codes).Get("code"))
	status, body := postForm(t, as.TokenEndpoint, exchange)
	token, _ := body["access_token"].(string)
	if status != http.StatusOK || token == "" || body["token_type"] != "Bearer" {
		t.Fatalf("token for the code: %d %v", status, body)
	}
	// 4. The token opens a session; the call runs as the demo user.
	cs := connectAs(t, g.url, token)
	waitFor(t, "demo__echo to be listed", func() bool { _, ok := listedDescription(t, cs, "demo__echo"); return ok })
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "hello by oauth"}})
	if err != nil || res.IsError || resultText(res) != "hello by oauth" {
		t.Fatalf("demo__echo with the token: %v %+v", err, res)
	}
	if want := "principal=demo-user@" + issuerURL; !strings.Contains(g.logs.String(), want) {
		t.Errorf("the gateway's log does not name the session's principal %q", want)
	}
}

// TestDemoIssuerWithTheSDKsOAuthClient: the official Go SDK's OAuth client (dynamic
// registration, authorization code with PKCE, RFC 9207 iss check) connects through the
// gateway with a token of the demo issuer, on its own from the gateway's 401.
func TestDemoIssuerWithTheSDKsOAuthClient(t *testing.T) {
	g, issuerURL := serveAuthExample(t)
	redirectURI, results := startCallback(t)
	// The user's browser: it opens the authorization URL and follows the redirects to the
	// client's callback, where the code arrives.
	browser := func(ctx context.Context, args *sdkauth.AuthorizationArgs) (*sdkauth.AuthorizationResult, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		select {
		case q := <-results:
			return &sdkauth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		default:
			return nil, fmt.Errorf("the authorization ended at %s (%d), not at the callback", resp.Request.URL, resp.StatusCode)
		}
	}
	handler, err := sdkauth.NewAuthorizationCodeHandler(&sdkauth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &sdkauth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirectURI}, ClientName: "sdk-oauth-test", TokenEndpointAuthMethod: "none",
		}},
		RedirectURL:              redirectURI,
		AuthorizationCodeFetcher: browser,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdk-oauth-test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.url, OAuthHandler: handler}, nil)
	if err != nil {
		t.Fatalf("connect with the SDK's OAuth client: %v", err)
	}
	defer cs.Close()
	waitFor(t, "demo__echo to be listed", func() bool { _, ok := listedDescription(t, cs, "demo__echo"); return ok })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "hello from the sdk"}})
	if err != nil || res.IsError || resultText(res) != "hello from the sdk" {
		t.Fatalf("demo__echo: %v %+v", err, res)
	}
	if want := "client=sdk-oauth-test principal=demo-user@" + issuerURL; !strings.Contains(g.logs.String(), want) {
		t.Errorf("the gateway's log does not name the session's principal %q", want)
	}
}

// TestDemoIssuerRefusesBeyondLoopback: the demo issuer gives anyone a token, so `gateway demo
// -issuer` does not listen beyond loopback.
func TestDemoIssuerRefusesBeyondLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8090", ":8090", "[::]:8090", "192.0.2.1:8090", "example.com:8090"} {
		code, _, errOut := runGateway("demo", "-issuer", addr)
		if code != 1 || !strings.Contains(errOut, "loopback") {
			t.Errorf("gateway demo -issuer %s: exit %d, stderr %q; want 1, refused as beyond loopback", addr, code, errOut)
		}
	}
}

package testupstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testissuer"
)

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens a go-sdk client session to p with token.
func connect(t *testing.T, p *Protected, token string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: p.URL,
		HTTPClient: &http.Client{Transport: bearerTransport{token}}}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, error) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("%s: %+v, want one text", name, res)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func TestProtectedServesTheTokensUser(t *testing.T) {
	as := testissuer.New(t)
	p := NewProtected(t, as, ProtectedOptions{})
	tok := as.Token(t, map[string]any{"sub": "alice", "aud": p.URL, "scope": "read write"})
	cs, err := connect(t, p, tok)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if diff := cmp.Diff([]string{"echo", "whoami", "write"}, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"whoami", nil, "alice"},
		{"echo", map[string]any{"text": "hi"}, "hi"},
		{"write", nil, "written by alice"},
	} {
		got, err := callText(t, cs, c.tool, c.args)
		if err != nil || got != c.want {
			t.Errorf("%s = %q, %v; want %q", c.tool, got, err, c.want)
		}
	}
	if p.Requests("alice") == 0 || p.Requests("bob") != 0 {
		t.Errorf("Requests: alice %d, bob %d; want some and none", p.Requests("alice"), p.Requests("bob"))
	}
	if diff := cmp.Diff([]string{tok}, p.Tokens()); diff != "" {
		t.Errorf("Tokens (-want +got):\n%s", diff)
	}

	// alice's session refuses bob's token: a session is bound to its user.
	req, _ := http.NewRequest(http.MethodPost, p.URL, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Authorization", "Bearer "+as.Token(t, map[string]any{"sub": "bob", "aud": p.URL, "scope": "read write"}))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob in alice's session: %d, want 403", resp.StatusCode)
	}
}

func TestProtectedRefuses(t *testing.T) {
	as := testissuer.New(t)
	p := NewProtected(t, as, ProtectedOptions{})
	challenge := `Bearer resource_metadata="` + p.ResourceMetadataURL + `"`
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const callWrite = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{}}}`
	tests := []struct {
		name      string
		token     string
		body      string
		status    int
		challenge string
	}{
		{"no token", "", initialize, http.StatusUnauthorized, challenge},
		{"garbage", "not-a-jwt", initialize, http.StatusUnauthorized, challenge + `, error="invalid_token"`},
		{"other audience", as.Token(t, map[string]any{"sub": "alice", "aud": "https://elsewhere.example/mcp"}), initialize,
			http.StatusUnauthorized, challenge + `, error="invalid_token"`},
		{"expired", as.Token(t, map[string]any{"sub": "alice", "aud": p.URL, "exp": 1000}), initialize,
			http.StatusUnauthorized, challenge + `, error="invalid_token"`},
		{"write without scope write", as.Token(t, map[string]any{"sub": "alice", "aud": p.URL, "scope": "read"}), callWrite,
			http.StatusForbidden, `Bearer error="insufficient_scope", scope="write", resource_metadata="` + p.ResourceMetadataURL + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, p.URL, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status || resp.Header.Get("WWW-Authenticate") != tt.challenge {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), tt.status, tt.challenge)
			}
		})
	}
	if got := p.Unauthorized(); got != 4 {
		t.Errorf("Unauthorized() = %d, want 4", got)
	}
	if got := p.Forbidden(); got != 1 {
		t.Errorf("Forbidden() = %d, want 1", got)
	}

	// Through the SDK: no token fails to connect; write without the scope fails, read works.
	if _, err := connect(t, p, ""); err == nil {
		t.Error("connecting without a token worked")
	}
	cs, err := connect(t, p, as.Token(t, map[string]any{"sub": "bob", "aud": p.URL, "scope": "read"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := callText(t, cs, "whoami", nil); err != nil || got != "bob" {
		t.Errorf("whoami = %q, %v; want bob", got, err)
	}
	if _, err := callText(t, cs, "write", nil); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("write without scope write: %v, want an error", err)
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	as := testissuer.New(t)
	p := NewProtected(t, as, ProtectedOptions{Scopes: []string{"mcp"}})
	resp, err := http.Get(p.ResourceMetadataURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var md struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&md); err != nil {
		t.Fatal(err)
	}
	want := struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		ScopesSupported      []string `json:"scopes_supported"`
	}{p.URL, []string{as.URL}, []string{"mcp"}}
	if diff := cmp.Diff(want, md); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
}

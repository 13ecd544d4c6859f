package testupstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/manifold-mcp/manifold/internal/testissuer"
)

// ProtectedOptions shape a Protected upstream.
type ProtectedOptions struct {
	// Scopes are the scopes_supported of its Protected Resource Metadata. If nil,
	// ["read", "write"].
	Scopes []string
}

// Protected is an MCP server over Streamable HTTP (a go-sdk server with sessions) that
// demands bearer tokens of one authorization server, a testissuer.Issuer, issued for it:
// the token must pass the issuer's Check and name URL in its aud. A request without one is
// answered 401 with a Bearer challenge naming its Protected Resource Metadata (RFC 9728),
// served at ResourceMetadataURL.
//
// Its tools: "whoami" answers the token's sub; "echo" {text} answers text; "write" answers
// "written by <sub>" and needs scope "write": a tools/call of write with a token without it
// is answered 403 with an insufficient_scope challenge (RFC 6750 §3.1), before the server.
// Any valid token lists the tools.
//
// Its methods are safe for concurrent use. Its server is closed when the test ends.
type Protected struct {
	// URL is the MCP endpoint, <server>/mcp, and the resource its tokens must be for.
	URL string
	// ResourceMetadataURL is where its Protected Resource Metadata is served:
	// <server>/.well-known/oauth-protected-resource/mcp.
	ResourceMetadataURL string

	as     *testissuer.Issuer
	scopes []string

	// mu guards the counters below.
	mu           sync.Mutex
	requests     map[string]int
	tokens       []string
	seen         map[string]bool
	unauthorized int
	forbidden    int
}

// protectedPath is the path of a Protected upstream's MCP endpoint.
const protectedPath = "/mcp"

// NewProtected starts a Protected upstream whose tokens come from as.
func NewProtected(t testing.TB, as *testissuer.Issuer, opts ProtectedOptions) *Protected {
	t.Helper()
	p := &Protected{as: as, scopes: slices.Clone(opts.Scopes), requests: map[string]int{}, seen: map[string]bool{}}
	if p.scopes == nil {
		p.scopes = []string{"read", "write"}
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "test-protected", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "whoami", Description: "names the user whose token arrived"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text(subject(req)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "echoes text"},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "write", Description: "writes on the user's behalf; needs scope write"},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return text("written by " + subject(req)), nil, nil
		})
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)

	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections() // a session's GET stream would hold Close forever
		srv.Close()
	})
	p.URL = srv.URL + protectedPath
	p.ResourceMetadataURL = srv.URL + "/.well-known/oauth-protected-resource" + protectedPath

	// The SDK's middleware hands the checked token's facts to the server (the session's
	// user, req.Extra.TokenInfo); p.guard has checked it already, by the issuer's clock.
	bearer := auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		info, ok := ctx.Value(tokenInfoKey{}).(*auth.TokenInfo)
		if !ok {
			return nil, fmt.Errorf("%w: not checked", auth.ErrInvalidToken)
		}
		return info, nil
	}, &auth.RequireBearerTokenOptions{ResourceMetadataURL: p.ResourceMetadataURL, AllowMissingExpiration: true})
	mux.Handle(protectedPath, p.guard(bearer(streamable)))
	mux.Handle("GET /.well-known/oauth-protected-resource"+protectedPath, auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               p.URL,
		AuthorizationServers:   []string{as.URL},
		ScopesSupported:        p.scopes,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "test protected upstream",
	}))
	return p
}

// tokenInfoKey is the context key of the token facts p.guard found.
type tokenInfoKey struct{}

// subject is the sub of the token of req.
func subject(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return ""
	}
	return req.Extra.TokenInfo.UserID
}

// guard checks the bearer token of every request (RFC 6750, MCP 2025-11-25
// "Authorization"), records it, and refuses a tools/call of write without scope write.
func (p *Protected) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, hasToken := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !hasToken || raw == "" {
			p.refuse(w, "", "no bearer token")
			return
		}
		p.mu.Lock()
		if !p.seen[raw] {
			p.seen[raw] = true
			p.tokens = append(p.tokens, raw)
		}
		p.mu.Unlock()
		sub, scopes, aud, err := p.as.Check(raw)
		if err == nil && !slices.Contains(aud, p.URL) {
			err = fmt.Errorf("the token is not for %s", p.URL)
		}
		if err != nil {
			p.refuse(w, "invalid_token", err.Error())
			return
		}
		p.mu.Lock()
		p.requests[sub]++
		p.mu.Unlock()
		if r.Method == http.MethodPost && !slices.Contains(scopes, "write") {
			body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
			if err != nil {
				http.Error(w, "unreadable body", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			if callsWrite(body) {
				p.mu.Lock()
				p.forbidden++
				p.mu.Unlock()
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope="write", resource_metadata=%q`, p.ResourceMetadataURL))
				http.Error(w, "the token lacks scope write", http.StatusForbidden)
				return
			}
		}
		info := &auth.TokenInfo{Scopes: scopes, UserID: sub}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, info)))
	})
}

// callsWrite reports whether body is a tools/call of write.
func callsWrite(body []byte) bool {
	var msg struct {
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	return json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" && msg.Params.Name == "write"
}

// refuse answers 401 with the Bearer challenge; errCode is "" when no token came.
func (p *Protected) refuse(w http.ResponseWriter, errCode, desc string) {
	p.mu.Lock()
	p.unauthorized++
	p.mu.Unlock()
	challenge := fmt.Sprintf("Bearer resource_metadata=%q", p.ResourceMetadataURL)
	if errCode != "" {
		challenge += fmt.Sprintf(", error=%q", errCode)
	}
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, desc, http.StatusUnauthorized)
}

// Requests reports how many HTTP requests bearing a valid token of sub the endpoint got
// (each MCP message, and each GET or DELETE of a session).
func (p *Protected) Requests(sub string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[sub]
}

// Unauthorized reports how many requests were answered 401.
func (p *Protected) Unauthorized() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unauthorized
}

// Forbidden reports how many requests were answered 403 insufficient_scope.
func (p *Protected) Forbidden() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forbidden
}

// Tokens returns every distinct bearer token the endpoint was sent, valid or not, in the
// order first seen.
func (p *Protected) Tokens() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tokens)
}

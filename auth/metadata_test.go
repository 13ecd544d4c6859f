package auth_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/auth"
)

const mdURL = "https://gw.example.com/.well-known/oauth-protected-resource/mcp"

func TestChallenge(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		url        string
		scopes     []string
		wantStatus int
		want       string
	}{
		{"no credentials", auth.ErrNoCredentials, mdURL, nil, 401,
			`Bearer resource_metadata="` + mdURL + `"`},
		{"no credentials with scopes", auth.ErrNoCredentials, mdURL, []string{"tools.read", "tools.call"}, 401,
			`Bearer resource_metadata="` + mdURL + `", scope="tools.read tools.call"`},
		{"no credentials, wrapped", fmt.Errorf("face: %w", auth.ErrNoCredentials), mdURL, nil, 401,
			`Bearer resource_metadata="` + mdURL + `"`},
		{"no credentials, no URL", auth.ErrNoCredentials, "", nil, 401, `Bearer`},
		{"invalid token", &auth.Error{Status: 401, Code: "invalid_token", Description: "token is expired"}, mdURL, []string{"tools.read"}, 401,
			`Bearer error="invalid_token", error_description="token is expired", resource_metadata="` + mdURL + `", scope="tools.read"`},
		{"invalid request", &auth.Error{Status: 400, Code: "invalid_request", Description: "send exactly one Authorization header"}, mdURL, nil, 400,
			`Bearer error="invalid_request", error_description="send exactly one Authorization header", resource_metadata="` + mdURL + `"`},
		{"quotes and backslashes escaped", &auth.Error{Status: 401, Code: "invalid_token", Description: `say "hi" \ bye`}, `https://x/"a"`, []string{`s"1`}, 401,
			`Bearer error="invalid_token", error_description="say \"hi\" \\ bye", resource_metadata="https://x/\"a\"", scope="s\"1"`},
		{"control and non-ASCII bytes replaced", &auth.Error{Status: 401, Code: "invalid_token", Description: "a\r\nb\tc é"}, "", nil, 401,
			`Bearer error="invalid_token", error_description="a??b?c ??"`},
		{"other error", errors.New("boom"), mdURL, nil, 401,
			`Bearer error="invalid_token", resource_metadata="` + mdURL + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, got := auth.Challenge(tt.err, tt.url, tt.scopes)
			if status != tt.wantStatus || got != tt.want {
				t.Errorf("Challenge = %d, %s\nwant       %d, %s", status, got, tt.wantStatus, tt.want)
			}
		})
	}
}

func TestChallengeOfAuthenticateErrors(t *testing.T) {
	// The errors Authenticate returns map to the statuses RFC 6750 §3.1 names.
	a, err := auth.New(auth.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r := httptest.NewRequest(http.MethodGet, "/mcp?access_token=x", nil)
	_, err = a.Authenticate(t.Context(), r)
	status, h := auth.Challenge(err, mdURL, nil)
	want := `Bearer error="invalid_request", error_description="send the access token in the Authorization header, not in the query string", resource_metadata="` + mdURL + `"`
	if status != 400 || h != want {
		t.Errorf("Challenge = %d, %s\nwant       400, %s", status, h, want)
	}
	_, err = a.Authenticate(t.Context(), bearer("mfk_nope"))
	status, h = auth.Challenge(err, mdURL, []string{"a"})
	want = `Bearer error="invalid_token", error_description="unknown API key", resource_metadata="` + mdURL + `", scope="a"`
	if status != 401 || h != want {
		t.Errorf("Challenge = %d, %s\nwant       401, %s", status, h, want)
	}
}

func TestInsufficientScope(t *testing.T) {
	status, got := auth.InsufficientScope([]string{"tools.read", "tools.call"}, mdURL)
	want := `Bearer error="insufficient_scope", scope="tools.read tools.call", resource_metadata="` + mdURL + `"`
	if status != http.StatusForbidden || got != want {
		t.Errorf("InsufficientScope = %d, %s\nwant               403, %s", status, got, want)
	}
	status, got = auth.InsufficientScope([]string{`a"b`}, "")
	want = `Bearer error="insufficient_scope", scope="a\"b"`
	if status != http.StatusForbidden || got != want {
		t.Errorf("InsufficientScope = %d, %s\nwant               403, %s", status, got, want)
	}
}

func TestMetadataHandler(t *testing.T) {
	md := auth.ResourceMetadata{
		Resource:             resource,
		AuthorizationServers: []string{"https://idp.example.com"},
		ScopesSupported:      []string{"tools.read"},
		ResourceName:         "Manifold",
	}
	h := auth.MetadataHandler(md)
	md.AuthorizationServers[0] = "https://changed.example.com" // the handler keeps its own copy

	t.Run("GET", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.well-known/oauth-protected-resource/mcp", nil))
		res := rec.Result()
		if res.StatusCode != 200 {
			t.Fatalf("status %d, want 200", res.StatusCode)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
		if o := res.Header.Get("Access-Control-Allow-Origin"); o != "*" {
			t.Errorf("Access-Control-Allow-Origin %q, want *", o)
		}
		var got map[string]any
		if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"resource":                 resource,
			"authorization_servers":    []any{"https://idp.example.com"},
			"scopes_supported":         []any{"tools.read"},
			"bearer_methods_supported": []any{"header"},
			"resource_name":            "Manifold",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("document (-want +got):\n%s", diff)
		}
	})

	t.Run("HEAD", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/", nil))
		body, _ := io.ReadAll(rec.Result().Body)
		if rec.Code != 200 || len(body) != 0 || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("HEAD: status %d, %d body bytes, Content-Type %q; want 200, none, application/json",
				rec.Code, len(body), rec.Header().Get("Content-Type"))
		}
	})

	t.Run("preflight", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodOptions, "/", nil)
		r.Header.Set("Origin", "https://app.example.com")
		r.Header.Set("Access-Control-Request-Method", "GET")
		r.Header.Set("Access-Control-Request-Headers", "mcp-protocol-version")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		want := http.Header{
			"Access-Control-Allow-Origin":  {"*"},
			"Access-Control-Allow-Methods": {"GET, HEAD, OPTIONS"},
			"Access-Control-Allow-Headers": {"Content-Type, MCP-Protocol-Version"},
			"Access-Control-Max-Age":       {"86400"},
		}
		if rec.Code != http.StatusNoContent {
			t.Errorf("status %d, want 204", rec.Code)
		}
		if diff := cmp.Diff(want, rec.Header()); diff != "" {
			t.Errorf("headers (-want +got):\n%s", diff)
		}
	})

	t.Run("POST", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD, OPTIONS" {
			t.Errorf("status %d, Allow %q; want 405, GET, HEAD, OPTIONS", rec.Code, rec.Header().Get("Allow"))
		}
	})

	t.Run("empty lists", func(t *testing.T) {
		rec := httptest.NewRecorder()
		auth.MetadataHandler(auth.ResourceMetadata{Resource: resource}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		want := `{"resource":"` + resource + `","authorization_servers":[],"bearer_methods_supported":["header"]}` + "\n"
		if got := rec.Body.String(); got != want {
			t.Errorf("body = %s, want %s", got, want)
		}
	})
}

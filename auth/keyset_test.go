package auth

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/manifold-mcp/manifold/internal/testissuer"
)

var discardLogger = slog.New(slog.DiscardHandler)

// newTestKeySet is a keySet for the issuer at url, on its own fetch group.
func newTestKeySet(t *testing.T, url string) *keySet {
	g := newFetchGroup()
	t.Cleanup(g.close)
	return &keySet{
		issuer:   url,
		client:   http.DefaultClient,
		now:      time.Now,
		interval: time.Minute,
		logger:   discardLogger,
		group:    g,
	}
}

// docServer serves a discovery document naming itself and jwks_uri, and jwks at /jwks.
func docServer(t *testing.T, jwksURI func(base string) string, jwks string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"issuer":"` + srv.URL + `","jwks_uri":"` + jwksURI(srv.URL) + `"}`))
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jwks))
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestFetchKeysSkipsUnusableKeys(t *testing.T) {
	pub, err := json.Marshal(jose.JSONWebKey{Key: &testissuer.NewRSAKey(t).PublicKey, KeyID: "r", Algorithm: "RS256", Use: "sig"})
	if err != nil {
		t.Fatal(err)
	}
	rsaKey := string(pub)
	tests := []struct {
		name, jwks string
		want       int    // keys kept
		wantErr    string // "" for none
	}{
		{"unknown key types skipped",
			`{"keys":[` + rsaKey + `,{"kty":"OKP","crv":"Ed448","x":"AAAA"},{"kty":"oct","k":"c2VjcmV0"},{"kty":"EC","crv":"P-256K","x":"AA","y":"AA"}]}`, 1, ""},
		{"no usable key", `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`, 0, "no usable signing key"},
		{"empty", `{"keys":[]}`, 0, "no usable signing key"},
		{"not JSON", `<html>`, 0, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := docServer(t, func(base string) string { return base + "/jwks" }, tt.jwks)
			ks := newTestKeySet(t, srv.URL)
			keys, err := ks.fetchKeys(t.Context(), srv.URL+"/jwks")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("fetchKeys error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(keys) != tt.want {
				t.Errorf("fetchKeys = %d keys, %v; want %d keys", len(keys), err, tt.want)
			}
		})
	}
}

func TestDiscoveryChecksJWKSURI(t *testing.T) {
	tests := []struct {
		name    string
		uri     func(base string) string
		wantErr string
	}{
		{"same server", func(base string) string { return base + "/jwks" }, ""},
		{"plain http elsewhere", func(string) string { return "http://keys.example.com/jwks" }, "plain http is allowed only on a loopback host"},
		{"relative", func(string) string { return "/jwks" }, "not an absolute URL"},
		{"missing", func(string) string { return "" }, "no jwks_uri"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := docServer(t, tt.uri, `{"keys":[]}`)
			ks := newTestKeySet(t, srv.URL)
			_, err := ks.discover(t.Context())
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("discover: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("discover error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestGetJSONLimitsSize(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"keys":"` + strings.Repeat("a", maxDocumentBytes) + `"}`))
	}))
	defer srv.Close()
	ks := newTestKeySet(t, srv.URL)
	var v any
	if err := ks.getJSON(t.Context(), srv.URL, &v); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("getJSON error = %v, want a size error", err)
	}
}

// TestVerifierRefusesSymmetricAlgs checks the layers under peekIssuer: the oidc verifier and
// the keySet refuse alg none and HMAC on their own.
func TestVerifierRefusesSymmetricAlgs(t *testing.T) {
	iss := testissuer.New(t)
	a, err := New(Config{Resource: "https://gw.example.com/mcp", Issuers: []Issuer{{URL: iss.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	is := a.issuers[iss.URL]
	claims := map[string]any{"sub": "x", "aud": "https://gw.example.com/mcp"}
	good := iss.Token(t, claims)
	if _, err := is.verifier.Verify(t.Context(), good); err != nil {
		t.Fatalf("valid token: %v", err)
	}
	for name, tok := range map[string]string{
		"none":           iss.SignWith(t, map[string]any{"kid": "k1"}, claims, "none", nil) + "AA",
		"HS256 with PEM": iss.SignWith(t, map[string]any{"kid": "k1"}, claims, "HS256", iss.PublicKeyPEM()),
		"HS256 no kid":   iss.SignWith(t, nil, claims, "HS256", iss.PublicKeyPEM()),
	} {
		if _, err := is.verifier.Verify(t.Context(), tok); err == nil {
			t.Errorf("%s: oidc verifier accepted it", name)
		}
		if _, err := is.keys.VerifySignature(t.Context(), tok); err == nil {
			t.Errorf("%s: keySet accepted it", name)
		}
	}
}

func TestRefreshAfterClose(t *testing.T) {
	ks := newTestKeySet(t, "https://idp.example.com")
	ks.group.close()
	err := ks.refresh(context.Background())
	if !errors.Is(err, errKeysUnavailable) || !errors.Is(err, errClosed) {
		t.Errorf("refresh after close = %v, want errKeysUnavailable and errClosed", err)
	}
}

package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/manifold-mcp/manifold/internal/auth/credential"
)

// TestCredentialsStayWithTheirUpstream: an upstream that redirects elsewhere does not get its
// credentials carried there; a redirect within the upstream's host keeps them.
func TestCredentialsStayWithTheirUpstream(t *testing.T) {
	var elsewhereSaw atomic.Value
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereSaw.Store(r.Header.Get("Authorization"))
	}))
	defer elsewhere.Close()
	var sameHostSaw atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
		case "/moved":
			http.Redirect(w, r, "/mcp", http.StatusTemporaryRedirect)
		default:
			sameHostSaw.Store(r.Header.Get("Authorization"))
		}
	}))
	defer up.Close()
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := credentialedClient(http.DefaultTransport, []credential.Source{credential.FileHeader("Authorization", secret, "Bearer ")})
	get := func(path string) int {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, up.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := get("/away"); status != http.StatusTemporaryRedirect || elsewhereSaw.Load() != nil {
		t.Errorf("redirect to another host: status %d, the other host saw %v; want the redirect answered and nothing sent there", status, elsewhereSaw.Load())
	}
	if status := get("/moved"); status != http.StatusOK || sameHostSaw.Load() != "Bearer s3cret" {
		t.Errorf("redirect within the upstream: status %d, saw %v; want the credential kept", status, sameHostSaw.Load())
	}
}

package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestProbesCheckHostOnlyOnLoopback: on a loopback listener the probes answer loopback names
// only (DNS rebinding); beyond loopback they answer any Host, as Kubernetes probes send the
// pod's address. The handler is driven directly: nothing binds beyond loopback.
func TestProbesCheckHostOnlyOnLoopback(t *testing.T) {
	cases := []struct {
		listen, host string
		want         int
	}{
		{"127.0.0.1:8080", "localhost:8080", http.StatusOK},
		{"127.0.0.1:8080", "10.0.0.5:8080", http.StatusForbidden},
		{"0.0.0.0:8080", "10.0.0.5:8080", http.StatusOK},
		{"0.0.0.0:8080", "gateway.internal", http.StatusOK},
	}
	for _, tc := range cases {
		cfg, err := config.Parse("t.yaml", []byte("listen: "+tc.listen+"\nauth: {allow_unauthenticated: true}\nupstreams: []\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		for _, path := range []string{"/healthz", "/readyz"} {
			req := httptest.NewRequest(http.MethodGet, "http://"+tc.host+path, nil)
			rec := httptest.NewRecorder()
			g.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("listen %s, GET %s with Host %s: %d, want %d", tc.listen, path, tc.host, rec.Code, tc.want)
			}
		}
	}
}

package upstream

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestRedirectsStayOnTheUpstreamsHost: an upstream's headers (a custom secret header, which
// Go itself would carry to another host) never follow a redirect elsewhere; within the host
// a redirect is followed.
func TestRedirectsStayOnTheUpstreamsHost(t *testing.T) {
	var elsewhereCalled atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhereCalled.Store(true) }))
	defer elsewhere.Close()
	var seen atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
		case "/moved":
			http.Redirect(w, r, "/mcp", http.StatusPermanentRedirect)
		default:
			seen.Store(r.Header.Get("X-Api-Key"))
		}
	}))
	defer up.Close()
	c := New(Spec{Name: "u", URL: up.URL + "/mcp", Headers: map[string]string{"X-Api-Key": "k"}}, nil)
	get := func(path string) int {
		req, _ := http.NewRequest(http.MethodGet, up.URL+path, nil)
		req.Header.Set("X-Api-Key", "k")
		resp, err := c.opts.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := get("/away"); status != http.StatusTemporaryRedirect || elsewhereCalled.Load() {
		t.Errorf("redirect to another host: %d, followed %v; want the redirect as the answer", status, elsewhereCalled.Load())
	}
	if status := get("/moved"); status != http.StatusOK || seen.Load() != "k" {
		t.Errorf("redirect within the host: %d, header %v", status, seen.Load())
	}
}

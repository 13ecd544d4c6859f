package adminclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/admin"
	"github.com/manifold-mcp/manifold/internal/grants"
)

// TestStatusErrors: each refusal of the admin API is the admin package's error for it, with
// the API's message; the request carries the key.
func TestStatusErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   error
	}{
		{http.StatusUnauthorized, admin.ErrUnauthorized},
		{http.StatusForbidden, admin.ErrForbidden},
		{http.StatusNotFound, admin.ErrNotFound},
		{http.StatusConflict, admin.ErrConflict},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer mfk_k" {
				t.Errorf("Authorization %q, want the key", r.Header.Get("Authorization"))
			}
			w.WriteHeader(tc.status)
			w.Write([]byte(`{"error":"because"}`))
		}))
		_, err := (&Client{URL: srv.URL, Key: "mfk_k"}).Decide(t.Context(), "id1", admin.Approve)
		srv.Close()
		var se *StatusError
		if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Status != tc.status || se.Message != "because" {
			t.Errorf("status %d: %v, want %v with the message", tc.status, err, tc.want)
		}
		for _, other := range []error{admin.ErrUnauthorized, admin.ErrForbidden, admin.ErrNotFound, admin.ErrConflict} {
			if other != tc.want && errors.Is(err, other) {
				t.Errorf("status %d matches %v too", tc.status, other)
			}
		}
	}
}

// TestNotTheAdminAPI: a 200 that is not the API's JSON (another listener) says so.
func TestNotTheAdminAPI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<html>")) }))
	defer srv.Close()
	if _, err := (&Client{URL: srv.URL}).Pins(t.Context()); err == nil {
		t.Error("an HTML answer was taken for the pins")
	}
}

// TestAllGrantsFollowsNext: AllGrants reads page after page, sending each cursor the last
// page gave, until one gives none.
func TestAllGrantsFollowsNext(t *testing.T) {
	pages := map[string]string{
		"":      `{"grants":[{"principal":{"iss":"https://idp","sub":"alice"},"upstream":"github","refreshable":true}],"next":"p 2&x"}`,
		"p 2&x": `{"grants":[{"principal":{"iss":"https://idp","sub":"bob"},"upstream":"linear","refreshable":false}],"next":"p3"}`,
		"p3":    `{"grants":[],"next":""}`,
	}
	var mu sync.Mutex // guards asked, written by the server's handler
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/grants" || r.Header.Get("Authorization") != "Bearer mfk_k" {
			t.Errorf("%s %s with Authorization %q, want GET /api/grants with the key", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		cursor := r.URL.Query().Get("cursor")
		mu.Lock()
		asked = append(asked, cursor)
		mu.Unlock()
		w.Write([]byte(pages[cursor]))
	}))
	defer srv.Close()
	got, err := (&Client{URL: srv.URL, Key: "mfk_k"}).AllGrants(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []grants.GrantInfo{
		{Principal: grants.Principal{Issuer: "https://idp", Subject: "alice"}, Upstream: "github", Refreshable: true},
		{Principal: grants.Principal{Issuer: "https://idp", Subject: "bob"}, Upstream: "linear"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AllGrants (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"", "p 2&x", "p3"}, asked); diff != "" {
		t.Errorf("cursors sent (-want +got):\n%s", diff)
	}
}

// TestAllGrantsStopsAtALoop: a gateway that answers a cursor it gave already is reported, not
// read for ever.
func TestAllGrantsStopsAtALoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"grants":[],"next":"same"}`))
	}))
	defer srv.Close()
	if got, err := (&Client{URL: srv.URL}).AllGrants(t.Context()); err == nil {
		t.Errorf("AllGrants over a list that does not move on = %v, want an error", got)
	}
}

// TestRevokeGrant: the revocation names the user and the upstream as the API wants them, and
// a grant nobody has is admin.ErrNotFound.
func TestRevokeGrant(t *testing.T) {
	var mu sync.Mutex // guards bodies, written by the server's handler
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Method != http.MethodPost || r.URL.Path != "/api/grants/revoke" || json.NewDecoder(r.Body).Decode(&body) != nil {
			t.Errorf("%s %s, want POST /api/grants/revoke with JSON", r.Method, r.URL.Path)
		}
		mu.Lock()
		bodies = append(bodies, body)
		n := len(bodies)
		mu.Unlock()
		if n > 1 {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"not found: none"}`))
			return
		}
		w.Write([]byte(`{"revoked":{}}`))
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL}
	alice := grants.Principal{Issuer: "https://idp", Subject: "alice"}
	if err := c.RevokeGrant(t.Context(), alice, "github"); err != nil {
		t.Errorf("RevokeGrant: %v", err)
	}
	if err := c.RevokeGrant(t.Context(), alice, "github"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("RevokeGrant of a grant nobody has = %v, want admin.ErrNotFound", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]any{"principal": map[string]any{"iss": "https://idp", "sub": "alice"}, "upstream": "github"}
	if diff := cmp.Diff([]map[string]any{want, want}, bodies); diff != "" {
		t.Errorf("bodies (-want +got):\n%s", diff)
	}
}

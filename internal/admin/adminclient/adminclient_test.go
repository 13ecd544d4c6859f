package adminclient

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/manifold-mcp/manifold/internal/admin"
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

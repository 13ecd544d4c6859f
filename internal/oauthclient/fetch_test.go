package oauthclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestFetcherRefuses: each kind of target inside the network, or reached the wrong way, is
// refused before a byte is sent; names are checked as resolved, at dial time.
func TestFetcherRefuses(t *testing.T) {
	tests := []struct {
		name         string
		url          string
		allowPrivate bool
		want         string
	}{
		{"plain http", "http://example.com/.well-known/oauth-authorization-server", false, "must be https"},
		{"another scheme", "ftp://example.com/x", false, "want https"},
		{"user info", "https://user:pw@example.com/x", false, "user info"},
		{"relative", "/x", false, "not an absolute URL"},
		{"loopback", "https://127.0.0.1:1/x", false, "loopback address"},
		{"loopback by name", "https://localhost:1/x", false, "loopback address"},
		{"loopback v6", "https://[::1]:1/x", false, "loopback address"},
		{"loopback mapped to v6", "https://[::ffff:127.0.0.1]:1/x", false, "loopback address"},
		{"private 10/8", "https://10.0.0.1/x", false, "private address"},
		{"private 172.16/12", "https://172.16.5.4/x", false, "private address"},
		{"private 192.168/16", "https://192.168.1.1/x", false, "private address"},
		{"unique local v6", "https://[fd00::1]/x", false, "private address"},
		{"carrier NAT", "https://100.64.0.1/x", false, "private address"},
		{"cloud metadata", "https://169.254.169.254/latest/meta-data", false, "link-local address"},
		{"cloud metadata with private allowed", "https://169.254.169.254/latest/meta-data", true, "link-local address"},
		{"link-local v6", "https://[fe80::1]/x", true, "link-local address"},
		{"multicast", "https://224.0.0.1/x", true, "multicast address"},
		{"multicast v6", "https://[ff02::1]/x", true, "multicast address"},
		{"unspecified", "https://0.0.0.0/x", true, "unspecified address"},
		{"unspecified v6", "https://[::]/x", true, "unspecified address"},
		{"this network", "https://0.1.2.3/x", true, "reserved address"},
		{"plain http beyond loopback with private allowed", "http://10.0.0.1/x", true, "must be https"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(&FetcherOptions{AllowPrivate: tt.allowPrivate})
			var v any
			err := f.getJSON(context.Background(), tt.url, &v)
			if !errors.Is(err, ErrForbiddenTarget) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("GET %s: %v, want %v naming %q", tt.url, err, ErrForbiddenTarget, tt.want)
			}
			err = f.postForm(context.Background(), tt.url, url.Values{"a": {"b"}}, "", "", nil)
			if !errors.Is(err, ErrForbiddenTarget) {
				t.Errorf("POST %s: %v, want %v", tt.url, err, ErrForbiddenTarget)
			}
		})
	}
}

// TestFetcherAllowsLoopbackWhenAsked: with private targets allowed, a loopback server is
// reached over plain http, by address and by name.
func TestFetcherAllowsLoopbackWhenAsked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"ok":true}`)) }))
	defer srv.Close()
	f := NewFetcher(&FetcherOptions{AllowPrivate: true})
	defer f.CloseIdleConnections()
	for _, u := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		var v struct{ OK bool }
		if err := f.getJSON(context.Background(), u, &v); err != nil || !v.OK {
			t.Errorf("GET %s: %v, %+v", u, err, v)
		}
	}
}

// TestFetcherBoundsAndRedirects: a body past the bound is refused; a GET follows a redirect
// on its own host only, and a POST none at all.
func TestFetcherBoundsAndRedirects(t *testing.T) {
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	otherHost := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`"` + strings.Repeat("x", 200) + `"`)) })
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`"ok"`)) })
	mux.HandleFunc("/same", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, otherHost+"/ok", http.StatusFound) })
	mux.HandleFunc("/post", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect) })
	f := NewFetcher(&FetcherOptions{AllowPrivate: true, MaxBodyBytes: 100})
	defer f.CloseIdleConnections()
	ctx := context.Background()
	var s string
	if err := f.getJSON(ctx, srv.URL+"/big", &s); err == nil || !strings.Contains(err.Error(), "exceeds 100 bytes") {
		t.Errorf("a 202-byte body: %v, want refused", err)
	}
	if err := f.getJSON(ctx, srv.URL+"/same", &s); err != nil || s != "ok" {
		t.Errorf("a redirect on the same host: %v %q, want followed", err, s)
	}
	if err := f.getJSON(ctx, srv.URL+"/other", &s); !errors.Is(err, ErrForbiddenTarget) || !strings.Contains(err.Error(), "another host") {
		t.Errorf("a redirect to another host: %v, want refused", err)
	}
	if err := f.postForm(ctx, srv.URL+"/post", url.Values{}, "", "", &s); !errors.Is(err, ErrForbiddenTarget) {
		t.Errorf("a POST redirected: %v, want refused", err)
	}
}

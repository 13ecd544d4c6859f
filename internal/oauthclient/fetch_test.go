package oauthclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
		{"cloud metadata", "https://169.254.169.254/latest/meta-data", false, "cloud metadata address"},
		{"cloud metadata with private allowed", "https://169.254.169.254/latest/meta-data", true, "cloud metadata address"},
		{"cloud metadata v6 with private allowed", "https://[fd00:ec2::254]/latest/meta-data", true, "cloud metadata address"},
		{"cloud metadata by NAT64", "https://[64:ff9b::a9fe:a9fe]/latest/meta-data", false, "cloud metadata address"},
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

// TestCheckAddrEmbeddedAndMetadata: an IPv4 address carried inside an IPv6 one (NAT64, 6to4)
// is judged as that IPv4 address; the deprecated and tunnel spaces that lead inside, and the
// cloud metadata addresses, are refused whether private targets are allowed or not.
func TestCheckAddrEmbeddedAndMetadata(t *testing.T) {
	tests := []struct {
		name         string
		addr         string
		allowPrivate bool
		want         string // "" means allowed
	}{
		{"NAT64 metadata", "64:ff9b::169.254.169.254", false, "cloud metadata address"},
		{"NAT64 metadata with private allowed", "64:ff9b::a9fe:a9fe", true, "cloud metadata address"},
		{"NAT64 loopback", "64:ff9b::127.0.0.1", false, "loopback address"},
		{"NAT64 private", "64:ff9b::10.0.0.1", false, "private address"},
		{"NAT64 link-local", "64:ff9b::169.254.1.1", true, "link-local address"},
		{"NAT64 public", "64:ff9b::8.8.8.8", false, ""},
		{"local-use NAT64", "64:ff9b:1::a9fe:a9fe", false, "local-use NAT64 address"},
		{"local-use NAT64 with private allowed", "64:ff9b:1:ffff::808:808", true, "local-use NAT64 address"},
		{"6to4 metadata", "2002:a9fe:a9fe::1", false, "cloud metadata address"},
		{"6to4 metadata with private allowed", "2002:a9fe:a9fe::1", true, "cloud metadata address"},
		{"6to4 loopback", "2002:7f00:1::", false, "loopback address"},
		{"6to4 private", "2002:c0a8:101::1", false, "private address"},
		{"6to4 private with private allowed", "2002:c0a8:101::1", true, ""},
		{"6to4 public", "2002:808:808::1", false, ""},
		{"IPv4-compatible metadata", "::169.254.169.254", true, "IPv4-compatible address"},
		{"IPv4-compatible public", "::8.8.8.8", false, "IPv4-compatible address"},
		{"site-local", "fec0::1", false, "site-local address"},
		{"site-local with private allowed", "fec0::1", true, "site-local address"},
		{"Teredo", "2001:0:4136:e378:8000:63bf:3fff:fdd2", false, "Teredo address"},
		{"Teredo with private allowed", "2001::5ef5:79fd", true, "Teredo address"},
		{"AWS metadata", "169.254.169.254", true, "cloud metadata address"},
		{"AWS metadata v6", "fd00:ec2::254", true, "cloud metadata address"},
		{"AWS metadata v6 mapped", "::ffff:169.254.169.254", true, "cloud metadata address"},
		{"Alibaba metadata", "100.100.100.200", true, "cloud metadata address"},
		{"ECS task metadata", "169.254.170.2", true, "cloud metadata address"},
		{"other ULA with private allowed", "fd00:ec2::253", true, ""},
		{"other shared space with private allowed", "100.100.100.201", true, ""},
		{"loopback v6 with private allowed", "::1", true, ""},
		{"public v6", "2606:4700::1111", false, ""},
		{"public v4", "1.1.1.1", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFetcher(&FetcherOptions{AllowPrivate: tt.allowPrivate})
			err := f.CheckAddr(netip.MustParseAddr(tt.addr))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckAddr(%s): %v, want allowed", tt.addr, err)
			case tt.want != "" && (!errors.Is(err, ErrForbiddenTarget) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckAddr(%s): %v, want %v naming %q", tt.addr, err, ErrForbiddenTarget, tt.want)
			}
		})
	}
}

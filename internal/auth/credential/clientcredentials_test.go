package credential

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestClientCredentials(t *testing.T) {
	checkGoroutines(t)
	as := newTokenEndpoint(t, func(tokenRequest) (int, any) { return http.StatusOK, tokenAnswer("cc-token-1", 3600) })
	up := newRecorder(t)
	src := ClientCredentials(ClientCredentialsConfig{
		TokenURL:     as.srv.URL,
		ClientID:     "manifold gw",
		ClientSecret: "s3cret:&=",
		Scopes:       []string{"tools.read", "tools.call"},
		Resource:     "https://search.example.com/mcp",
		Audience:     "search",
	})
	rt := Transport(nil, src)
	for range 2 {
		if err := up.get(t, rt, http.Header{"Authorization": {"Bearer client-token"}}); err != nil {
			t.Fatal(err)
		}
	}

	if diff := cmp.Diff([]string{"Bearer cc-token-1", "Bearer cc-token-1"}, up.authorizations()); diff != "" {
		t.Errorf("Authorization at the upstream (-want +got):\n%s", diff)
	}
	want := []tokenRequest{{
		Form: url.Values{
			"grant_type": {"client_credentials"},
			"scope":      {"tools.read tools.call"},
			"resource":   {"https://search.example.com/mcp"},
			"audience":   {"search"},
		},
		BasicUser:   "manifold gw",
		BasicSecret: "s3cret:&=",
		ContentType: "application/x-www-form-urlencoded",
	}}
	if diff := cmp.Diff(want, as.received()); diff != "" {
		t.Errorf("token requests (-want +got); two upstream requests must share one token:\n%s", diff)
	}
}

// TestClientCredentialsRefreshesNearExpiry: a token within 10s of its expiry is not used.
func TestClientCredentialsRefreshesNearExpiry(t *testing.T) {
	checkGoroutines(t)
	n := 0
	var mu sync.Mutex
	as := newTokenEndpoint(t, func(tokenRequest) (int, any) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return http.StatusOK, tokenAnswer(fmt.Sprintf("short-%d", n), 5)
	})
	up := newRecorder(t)
	rt := Transport(nil, ClientCredentials(ClientCredentialsConfig{TokenURL: as.srv.URL, ClientID: "gw", ClientSecret: "s"}))
	for range 2 {
		if err := up.get(t, rt, nil); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"Bearer short-1", "Bearer short-2"}, up.authorizations()); diff != "" {
		t.Errorf("Authorization at the upstream (-want +got):\n%s", diff)
	}
}

func TestClientCredentialsTokenEndpointRefuses(t *testing.T) {
	checkGoroutines(t)
	as := newTokenEndpoint(t, func(tokenRequest) (int, any) {
		return http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "client authentication failed"}
	})
	up := newRecorder(t)
	rt := Transport(nil, ClientCredentials(ClientCredentialsConfig{TokenURL: as.srv.URL, ClientID: "gw", ClientSecret: "s3cret"}))

	err := up.get(t, rt, http.Header{"Authorization": {"Bearer client-token"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v does not wrap ErrUnavailable", err)
	}
	var te *TokenError
	if !errors.As(err, &te) {
		t.Fatalf("error %v does not wrap a *TokenError", err)
	}
	want := &TokenError{StatusCode: http.StatusUnauthorized, Code: "invalid_client", Description: "client authentication failed"}
	if diff := cmp.Diff(want, te); diff != "" {
		t.Errorf("TokenError (-want +got):\n%s", diff)
	}
	for _, secret := range []string{"s3cret", "client-token"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows %q", err, secret)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
	// Not cached: the next request asks again.
	before := as.count()
	if err := up.get(t, rt, nil); err == nil {
		t.Fatal("second request succeeded")
	}
	if as.count() == before {
		t.Error("a failed token request was cached")
	}
}

// TestClientCredentialsRedirectRefused: the default client does not follow a redirect of the
// token endpoint, which would send the form to another server.
func TestClientCredentialsRedirectRefused(t *testing.T) {
	checkGoroutines(t)
	elsewhere := newTokenEndpoint(t, func(tokenRequest) (int, any) { return http.StatusOK, tokenAnswer("stolen", 3600) })
	redirect := httptest.NewServer(http.RedirectHandler(elsewhere.srv.URL, http.StatusTemporaryRedirect))
	defer redirect.Close()
	src := ClientCredentials(ClientCredentialsConfig{TokenURL: redirect.URL, ClientID: "gw", ClientSecret: "s3cret"})
	_, _, err := src.Header(t.Context())
	var te *TokenError
	if !errors.As(err, &te) || te.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("Header: %v, want a TokenError with status 307", err)
	}
	if n := elsewhere.count(); n != 0 {
		t.Errorf("the redirect target got %d token requests", n)
	}
}

// TestClientCredentialsConcurrent: callers that find no token share one token request; one
// that gives up does not fail the others.
func TestClientCredentialsConcurrent(t *testing.T) {
	checkGoroutines(t)
	release := make(chan struct{})
	as := newTokenEndpoint(t, func(tokenRequest) (int, any) {
		<-release
		return http.StatusOK, tokenAnswer("shared", 3600)
	})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the endpoint closes, which waits for its handlers
	src := ClientCredentials(ClientCredentialsConfig{TokenURL: as.srv.URL, ClientID: "gw", ClientSecret: "s"}).(*clientCredentials)
	const n = 8
	var joined sync.WaitGroup
	joined.Add(n) // all callers but the one that starts the request, the impatient one included
	src.joined = joined.Done

	values := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, values[i], errs[i] = src.Header(t.Context()) })
	}
	ctx, cancel := context.WithCancel(t.Context())
	impatient := make(chan error, 1)
	go func() { _, _, err := src.Header(ctx); impatient <- err }()
	waitWithin(t, &joined, "the callers joining the request in flight")
	cancel()
	if err := <-impatient; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	unblock()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || values[i] != "Bearer shared" {
			t.Errorf("caller %d: %q, %v", i, values[i], errs[i])
		}
	}
	if c := as.count(); c != 1 {
		t.Errorf("%d token requests, want 1", c)
	}
}

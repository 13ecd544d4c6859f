package credential

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

var (
	alice = session.Principal{Issuer: "https://idp.example.com", Subject: "alice", Email: "alice@example.com"}
	bob   = session.Principal{Issuer: "https://idp.example.com", Subject: "bob"}
	t0    = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
)

// exchangeAS is a fake authorization server that exchanges subject token S for "x-S-N", N
// counting its answers, valid for expiresIn seconds.
func exchangeAS(t *testing.T, expiresIn int) *tokenEndpoint {
	var mu sync.Mutex
	n := 0
	return newTokenEndpoint(t, func(r tokenRequest) (int, any) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return http.StatusOK, tokenAnswer(fmt.Sprintf("x-%s-%d", r.Form.Get("subject_token"), n), expiresIn)
	})
}

// header returns the header value of src, failing t on error.
func header(t *testing.T, src Source) string {
	t.Helper()
	name, value, err := src.Header(t.Context())
	if err != nil {
		t.Fatalf("Header: %v", err)
	}
	if name != "Authorization" {
		t.Fatalf("Header name %q, want Authorization", name)
	}
	return value
}

func TestExchangeRequest(t *testing.T) {
	tests := []struct {
		name     string
		cfg      ExchangeConfig
		want     url.Values
		wantUser string // Basic auth, "" for none
	}{
		{
			name: "all options",
			cfg: ExchangeConfig{
				ClientID: "manifold gw", ClientSecret: "s3cret:&=",
				Resource: "https://search.example.com/mcp", Audience: "search",
				Scopes:             []string{"tools.read", "tools.call"},
				RequestedTokenType: "urn:ietf:params:oauth:token-type:jwt",
				SubjectTokenType:   "urn:ietf:params:oauth:token-type:id_token",
			},
			want: url.Values{
				"grant_type":           {"urn:ietf:params:oauth:grant-type:token-exchange"},
				"subject_token":        {"alice-subject"},
				"subject_token_type":   {"urn:ietf:params:oauth:token-type:id_token"},
				"resource":             {"https://search.example.com/mcp"},
				"audience":             {"search"},
				"scope":                {"tools.read tools.call"},
				"requested_token_type": {"urn:ietf:params:oauth:token-type:jwt"},
			},
			wantUser: "manifold gw",
		},
		{
			name: "defaults",
			cfg:  ExchangeConfig{ClientID: "gw", ClientSecret: "s3cret:&=", Resource: "https://search.example.com/mcp"},
			want: url.Values{
				"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
				"subject_token":      {"alice-subject"},
				"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
				"resource":           {"https://search.example.com/mcp"},
			},
			wantUser: "gw",
		},
		{
			name: "public client",
			cfg:  ExchangeConfig{ClientID: "gw"},
			want: url.Values{
				"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
				"subject_token":      {"alice-subject"},
				"subject_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
				"client_id":          {"gw"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			as := exchangeAS(t, 3600)
			clock := testclock.New(t0)
			tt.cfg.TokenURL, tt.cfg.Now = as.srv.URL, clock.Now
			e := NewExchanger(tt.cfg)
			e.Remember(alice, "alice-subject", t0.Add(time.Hour))
			if got := header(t, e.For(alice)); got != "Bearer x-alice-subject-1" {
				t.Errorf("Header value %q", got)
			}
			want := []tokenRequest{{Form: tt.want, ContentType: "application/x-www-form-urlencoded"}}
			if tt.wantUser != "" {
				want[0].BasicUser, want[0].BasicSecret = tt.wantUser, tt.cfg.ClientSecret
			}
			if diff := cmp.Diff(want, as.received()); diff != "" {
				t.Errorf("token requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExchangePerPrincipal: through Transport, each principal's upstream requests carry its
// own exchanged token, never the client's; a second request of a principal uses the cache.
func TestExchangePerPrincipal(t *testing.T) {
	checkGoroutines(t)
	as := exchangeAS(t, 3600)
	up := newRecorder(t)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, ClientID: "gw", ClientSecret: "s", Resource: "https://up.example.com/mcp", Now: clock.Now})
	e.Remember(alice, "alice-subject", t0.Add(time.Hour))
	e.Remember(bob, "bob-subject", t0.Add(time.Hour))
	toAlice, toBob := Transport(nil, e.For(alice)), Transport(nil, e.For(bob))

	for _, step := range []struct {
		rt     http.RoundTripper
		client string
	}{{toAlice, "alice-subject"}, {toBob, "bob-subject"}, {toAlice, "alice-subject"}, {toBob, "bob-subject"}} {
		if err := up.get(t, step.rt, http.Header{"Authorization": {"Bearer " + step.client}}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"Bearer x-alice-subject-1", "Bearer x-bob-subject-2", "Bearer x-alice-subject-1", "Bearer x-bob-subject-2"}
	if diff := cmp.Diff(want, up.authorizations()); diff != "" {
		t.Errorf("Authorization at the upstream (-want +got):\n%s", diff)
	}
	if n := as.count(); n != 2 {
		t.Errorf("%d exchanges, want 2 (one per principal)", n)
	}
}

func TestExchangeExpiry(t *testing.T) {
	tests := []struct {
		name      string
		expiresIn int
		stillUsed time.Duration // the token is still used this long after the exchange
		replaced  time.Duration // and replaced from this long after
	}{
		{"30s margin", 3600, 3570*time.Second - time.Nanosecond, 3570 * time.Second},
		{"a tenth of a short lifetime", 100, 90*time.Second - time.Nanosecond, 90 * time.Second},
		{"no expires_in: 5 minutes", 0, 270*time.Second - time.Nanosecond, 270 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			as := exchangeAS(t, tt.expiresIn)
			clock := testclock.New(t0)
			e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})
			e.Remember(alice, "alice-subject", t0.Add(24*time.Hour))
			src := e.For(alice)
			var got []string
			got = append(got, header(t, src))
			clock.Set(t0.Add(tt.stillUsed))
			got = append(got, header(t, src))
			clock.Set(t0.Add(tt.replaced))
			got = append(got, header(t, src))
			want := []string{"Bearer x-alice-subject-1", "Bearer x-alice-subject-1", "Bearer x-alice-subject-2"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Header values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExchangeNoExpiresInBoundBySubject: without expires_in, an exchanged token is not used
// beyond the subject token it came from.
func TestExchangeNoExpiresInBoundBySubject(t *testing.T) {
	checkGoroutines(t)
	as := exchangeAS(t, 0)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})
	e.Remember(alice, "alice-subject", t0.Add(time.Minute))
	src := e.For(alice)
	header(t, src)
	clock.Advance(time.Minute)
	if _, _, err := src.Header(t.Context()); !errors.Is(err, ErrNoSubjectToken) {
		t.Errorf("Header after the subject token expired: %v, want ErrNoSubjectToken", err)
	}
}

func TestExchangeNoCurrentSubjectToken(t *testing.T) {
	checkGoroutines(t)
	as := exchangeAS(t, 600)
	up := newRecorder(t)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})

	// Never remembered.
	err := up.get(t, Transport(nil, e.For(alice)), http.Header{"Authorization": {"Bearer client-token"}})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNoSubjectToken) {
		t.Errorf("request of a principal never remembered: %v, want ErrUnavailable and ErrNoSubjectToken", err)
	}
	// Remembered, but expired before its first use.
	e.Remember(alice, "alice-subject", t0.Add(time.Minute))
	clock.Advance(time.Minute)
	if _, _, err := e.For(alice).Header(t.Context()); !errors.Is(err, ErrNoSubjectToken) {
		t.Errorf("Header with an expired subject token: %v, want ErrNoSubjectToken", err)
	}
	if n := as.count(); n != 0 {
		t.Errorf("%d exchanges, want none", n)
	}
	if n := len(up.seen()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}

	// A fresh token: exchanged. The exchanged token outlives the subject token.
	e.Remember(alice, "alice-fresh", clock.Now().Add(time.Minute))
	if got := header(t, e.For(alice)); got != "Bearer x-alice-fresh-1" {
		t.Errorf("after a fresh token: %q", got)
	}
	clock.Advance(2 * time.Minute)
	if got := header(t, e.For(alice)); got != "Bearer x-alice-fresh-1" {
		t.Errorf("exchanged token still valid after the subject expired: %q", got)
	}
	// Once both expired: an error again, until a fresh token comes.
	clock.Advance(10 * time.Minute)
	if _, _, err := e.For(alice).Header(t.Context()); !errors.Is(err, ErrNoSubjectToken) {
		t.Errorf("Header with both tokens expired: %v, want ErrNoSubjectToken", err)
	}
}

// TestExchangeLatestSubjectToken: a later Remember replaces the subject token the next
// exchange sends.
func TestExchangeLatestSubjectToken(t *testing.T) {
	checkGoroutines(t)
	as := exchangeAS(t, 600)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})
	e.Remember(alice, "alice-1", t0.Add(time.Hour))
	header(t, e.For(alice))
	e.Remember(alice, "alice-2", t0.Add(2*time.Hour))
	e.Remember(alice, "alice-2", t0.Add(2*time.Hour))
	if got := header(t, e.For(alice)); got != "Bearer x-alice-1-1" {
		t.Errorf("the exchanged token is kept across a new subject token: got %q", got)
	}
	clock.Advance(time.Hour)
	if got := header(t, e.For(alice)); got != "Bearer x-alice-2-2" {
		t.Errorf("after expiry: %q, want the latest subject token's exchange", got)
	}
}

func TestExchangeConcurrent(t *testing.T) {
	checkGoroutines(t)
	release := make(chan struct{})
	var mu sync.Mutex
	n := 0
	as := newTokenEndpoint(t, func(r tokenRequest) (int, any) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		n++
		return http.StatusOK, tokenAnswer(fmt.Sprintf("x-%s-%d", r.Form.Get("subject_token"), n), 600)
	})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // before the endpoint closes, which waits for its handlers
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})
	e.Remember(alice, "alice-subject", t0.Add(time.Hour))
	const callers = 8
	var joined sync.WaitGroup
	joined.Add(callers) // all callers but the one that starts the exchange, the impatient one included
	e.joined = joined.Done

	values := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { _, values[i], errs[i] = e.For(alice).Header(t.Context()) })
	}
	ctx, cancel := context.WithCancel(t.Context())
	impatient := make(chan error, 1)
	go func() { _, _, err := e.For(alice).Header(ctx); impatient <- err }()
	waitWithin(t, &joined, "the callers joining the request in flight")
	cancel()
	if err := <-impatient; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	// Remember during the exchange is not blocked by it.
	e.Remember(alice, "alice-newer", t0.Add(2*time.Hour))
	unblock()
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || values[i] != "Bearer x-alice-subject-1" {
			t.Errorf("caller %d: %q, %v", i, values[i], errs[i])
		}
	}
	if c := as.count(); c != 1 {
		t.Errorf("%d exchanges, want 1", c)
	}
}

func TestExchangeRefused(t *testing.T) {
	checkGoroutines(t)
	as := newTokenEndpoint(t, func(tokenRequest) (int, any) {
		return http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "subject token revoked"}
	})
	up := newRecorder(t)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, ClientID: "gw", ClientSecret: "client-s3cret", Now: clock.Now})
	e.Remember(alice, "alice-subject", t0.Add(time.Hour))

	err := up.get(t, Transport(nil, e.For(alice)), http.Header{"Authorization": {"Bearer alice-subject"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v does not wrap ErrUnavailable", err)
	}
	var te *TokenError
	if !errors.As(err, &te) {
		t.Fatalf("error %v does not wrap a *TokenError", err)
	}
	want := &TokenError{StatusCode: http.StatusBadRequest, Code: "invalid_grant", Description: "subject token revoked"}
	if diff := cmp.Diff(want, te); diff != "" {
		t.Errorf("TokenError (-want +got):\n%s", diff)
	}
	for _, secret := range []string{"alice-subject", "client-s3cret"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows %q", err, secret)
		}
	}
	if n := len(up.seen()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
}

// TestExchangeBadAnswers: answers that are not a usable token fail the exchange.
func TestExchangeBadAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   any
	}{
		{"not JSON error", http.StatusBadGateway, "upstream proxy error"},
		{"no access_token", http.StatusOK, map[string]any{"token_type": "Bearer"}},
		{"DPoP token", http.StatusOK, map[string]any{"access_token": "x", "token_type": "DPoP"}},
		{"error in a 200", http.StatusOK, map[string]any{"error": "invalid_request"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			as := newTokenEndpoint(t, func(tokenRequest) (int, any) { return tt.status, tt.body })
			e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL})
			e.Remember(alice, "alice-subject", time.Now().Add(time.Hour))
			if _, _, err := e.For(alice).Header(t.Context()); err == nil {
				t.Error("Header succeeded")
			}
		})
	}
}

func TestExchangeForget(t *testing.T) {
	checkGoroutines(t)
	as := exchangeAS(t, 600)
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: as.srv.URL, Now: clock.Now})
	e.Remember(alice, "alice-subject", t0.Add(time.Hour))
	e.Remember(bob, "bob-subject", t0.Add(time.Hour))
	header(t, e.For(alice))
	header(t, e.For(bob))

	e.Forget(alice)
	if _, _, err := e.For(alice).Header(t.Context()); !errors.Is(err, ErrNoSubjectToken) {
		t.Errorf("Header after Forget: %v, want ErrNoSubjectToken", err)
	}
	if got := header(t, e.For(bob)); got != "Bearer x-bob-subject-2" {
		t.Errorf("bob after alice was forgotten: %q", got)
	}
	// Remembered again: the exchanged token was dropped, a new exchange is made.
	e.Remember(alice, "alice-subject", t0.Add(time.Hour))
	if got := header(t, e.For(alice)); got != "Bearer x-alice-subject-3" {
		t.Errorf("alice remembered again: %q", got)
	}
	if n := as.count(); n != 3 {
		t.Errorf("%d exchanges, want 3", n)
	}
}

// TestExchangerMemoryBounded: principals whose tokens all expired are dropped as new ones
// come, so the map stays within twice the live principals (and minSweep).
func TestExchangerMemoryBounded(t *testing.T) {
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: "http://127.0.0.1:0/unused", Now: clock.Now})
	for i := range 10_000 {
		p := session.Principal{Issuer: "https://idp.example.com", Subject: fmt.Sprint("user-", i)}
		e.Remember(p, "token", clock.Now().Add(time.Minute))
		clock.Advance(time.Second) // about 60 principals live at any time
		e.mu.Lock()
		n := len(e.entries)
		e.mu.Unlock()
		if limit := 2*61 + minSweep; n > limit {
			t.Fatalf("after %d principals: %d entries kept, want at most %d", i+1, n, limit)
		}
	}
	// Live ones are kept.
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 10_000 - 59; i < 10_000; i++ {
		if _, ok := e.entries[session.Principal{Issuer: "https://idp.example.com", Subject: fmt.Sprint("user-", i)}.Key()]; !ok {
			t.Errorf("live principal user-%d was dropped", i)
		}
	}
}

// TestExchangeSubject: the latest subject token is handed out while it may be exchanged, and
// not once it expired or was forgotten.
func TestExchangeSubject(t *testing.T) {
	clock := testclock.New(t0)
	e := NewExchanger(ExchangeConfig{TokenURL: "https://as.example/token", Now: clock.Now})
	if _, _, ok := e.Subject(alice); ok {
		t.Error("a subject token of a principal never remembered")
	}
	e.Remember(alice, "first", t0.Add(time.Hour))
	e.Remember(alice, "second", t0.Add(2*time.Hour))
	if tok, exp, ok := e.Subject(alice); !ok || tok != "second" || !exp.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("Subject = %q %v %v, want the latest", tok, exp, ok)
	}
	clock.Advance(2 * time.Hour)
	if _, _, ok := e.Subject(alice); ok {
		t.Error("an expired subject token was handed out")
	}
	e.Remember(alice, "third", t0.Add(3*time.Hour))
	e.Forget(alice)
	if _, _, ok := e.Subject(alice); ok {
		t.Error("a forgotten subject token was handed out")
	}
}

package auth_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testissuer"
)

const resource = "https://gw.example.com/mcp"

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is an Authenticator trusting one test issuer, on a fake clock shared by both.
type fixture struct {
	iss   *testissuer.Issuer
	clock *testclock.Clock
	a     *auth.Authenticator
	logs  *syncBuffer
}

// newFixture starts an issuer and an Authenticator trusting it; edit may change the config.
func newFixture(t testing.TB, edit func(*auth.Config)) *fixture {
	t.Helper()
	f := &fixture{
		iss:   testissuer.New(t),
		clock: testclock.New(start),
		logs:  &syncBuffer{},
	}
	f.iss.Now = f.clock.Now
	cfg := auth.Config{
		Resource: resource,
		Issuers:  []auth.Issuer{{URL: f.iss.URL}},
		Now:      f.clock.Now,
		Logger:   slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := auth.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(a.Close)
	f.a = a
	return f
}

// token is a valid token for resource, with claims added (nil deletes one).
func (f *fixture) token(t testing.TB, claims map[string]any) string {
	t.Helper()
	c := map[string]any{"sub": "alice", "aud": resource}
	for k, v := range claims {
		c[k] = v
	}
	return f.iss.Token(t, c)
}

func (f *fixture) auth(t testing.TB, tok string) (*auth.Authenticated, error) {
	t.Helper()
	return f.a.Authenticate(context.Background(), bearer(tok))
}

func bearer(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

// syncBuffer is a log sink that tests may read while fetch goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wantErr checks that err is an *auth.Error with that status, code and description.
func wantErr(t *testing.T, err error, status int, code, desc string) {
	t.Helper()
	var ae *auth.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v (%T), want *auth.Error %s %q", err, err, code, desc)
	}
	if ae.Status != status || ae.Code != code || ae.Description != desc {
		t.Errorf("error = {%d %s %q}, want {%d %s %q} (full: %v)", ae.Status, ae.Code, ae.Description, status, code, desc, err)
	}
	if !errors.Is(err, &auth.Error{Code: code, Description: desc}) {
		t.Errorf("errors.Is(err, &Error{%s, %q}) = false", code, desc)
	}
}

func wantInvalidToken(t *testing.T, err error, desc string) {
	t.Helper()
	wantErr(t, err, http.StatusUnauthorized, "invalid_token", desc)
}

func TestAuthenticateJWT(t *testing.T) {
	now := start.Unix()
	custom := func(c *auth.Config) {
		c.Issuers[0].Claims = auth.ClaimNames{
			Subject: "oid",
			Email:   "https://example.com/email",
			Groups:  "realm_access.groups",
			Roles:   "resource_access.gateway.roles",
			Scopes:  "scp",
		}
	}
	tests := []struct {
		name   string
		config func(*auth.Config)
		claims map[string]any
		want   session.Principal // when wantDesc is ""
		desc   string            // invalid_token description expected
	}{
		{
			name: "valid with groups and scopes",
			claims: map[string]any{
				"email":  "alice@example.com",
				"groups": []string{"eng", "ops"},
				"roles":  "admin",
				"scope":  "tools.read  tools.call",
			},
			want: session.Principal{Subject: "alice", Email: "alice@example.com", Groups: []string{"eng", "ops"},
				Roles: []string{"admin"}, Scopes: []string{"tools.read", "tools.call"}},
		},
		{
			name:   "aud array holding the resource",
			claims: map[string]any{"aud": []string{"https://other.example.com", resource}},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "aud with trailing slash and upper-case host",
			claims: map[string]any{"aud": "HTTPS://GW.Example.COM/mcp/"},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "wrong audience",
			claims: map[string]any{"aud": "https://gw.example.com/other"},
			desc:   "token audience does not include this resource",
		},
		{
			name:   "path case matters in audience",
			claims: map[string]any{"aud": "https://gw.example.com/MCP"},
			desc:   "token audience does not include this resource",
		},
		{
			name:   "no audience",
			claims: map[string]any{"aud": nil},
			desc:   "token audience does not include this resource",
		},
		{
			name:   "configured audience (IdP puts its client id in aud)",
			config: func(c *auth.Config) { c.Issuers[0].Audiences = []string{"client-123"} },
			claims: map[string]any{"aud": "client-123"},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "configured audience replaces the resource",
			config: func(c *auth.Config) { c.Issuers[0].Audiences = []string{"client-123"} },
			claims: map[string]any{"aud": resource},
			desc:   "token audience does not include this resource",
		},
		{
			name:   "untrusted issuer",
			claims: map[string]any{"iss": "https://evil.example.com"},
			desc:   "token issuer is not trusted",
		},
		{
			name:   "issuer with trailing slash is another issuer",
			claims: map[string]any{"iss": "ISSUER/"},
			desc:   "token issuer is not trusted",
		},
		{
			name:   "no issuer",
			claims: map[string]any{"iss": nil},
			desc:   "token has no issuer",
		},
		{
			name:   "expired",
			claims: map[string]any{"iat": now - 7200, "nbf": now - 7200, "exp": now - 3600},
			desc:   "token is expired",
		},
		{
			name:   "expired beyond skew",
			claims: map[string]any{"exp": now - 31},
			desc:   "token is expired",
		},
		{
			name:   "expired within skew",
			claims: map[string]any{"exp": now - 29},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "expired within a larger skew",
			config: func(c *auth.Config) { c.Issuers[0].ClockSkew = 10 * time.Minute },
			claims: map[string]any{"exp": now - 599},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "no expiry",
			claims: map[string]any{"exp": nil},
			desc:   "token has no expiry",
		},
		{
			name:   "exp not a number",
			claims: map[string]any{"exp": "tomorrow"},
			desc:   "token is invalid",
		},
		{
			name:   "not yet valid",
			claims: map[string]any{"nbf": now + 300},
			desc:   "token is not yet valid",
		},
		{
			name:   "not yet valid beyond skew",
			claims: map[string]any{"nbf": now + 31},
			desc:   "token is not yet valid",
		},
		{
			name:   "nbf within skew",
			claims: map[string]any{"nbf": now + 29, "iat": now + 29},
			want:   session.Principal{Subject: "alice"},
		},
		{
			name:   "nbf beyond a small skew",
			config: func(c *auth.Config) { c.Issuers[0].ClockSkew = time.Second },
			claims: map[string]any{"nbf": now + 2},
			desc:   "token is not yet valid",
		},
		{
			name:   "issued in the future",
			claims: map[string]any{"iat": now + 120, "nbf": nil},
			desc:   "token was issued in the future",
		},
		{
			name:   "no subject",
			claims: map[string]any{"sub": nil},
			desc:   "token has no subject",
		},
		{
			name:   "empty subject",
			claims: map[string]any{"sub": ""},
			desc:   "token has no subject",
		},
		{
			name:   "subject not a string",
			claims: map[string]any{"sub": 42},
			desc:   "token is invalid",
		},
		{
			name:   "custom subject not a string",
			config: custom,
			claims: map[string]any{"oid": 42},
			desc:   `token claim "oid" is malformed`,
		},
		{
			name:   "groups hold a number",
			claims: map[string]any{"groups": []any{"eng", 7}},
			desc:   `token claim "groups" is malformed`,
		},
		{
			name:   "scope an object",
			claims: map[string]any{"scope": map[string]any{"a": 1}},
			desc:   `token claim "scope" is malformed`,
		},
		{
			name:   "custom claim names, nested and dotted",
			config: custom,
			claims: map[string]any{
				"sub":                       nil,
				"oid":                       "0000-1111",
				"https://example.com/email": "bob@example.com",
				"realm_access":              map[string]any{"groups": []string{"g1"}},
				"resource_access":           map[string]any{"gateway": map[string]any{"roles": []string{"r1", "r2"}}},
				"scp":                       []string{"s1", "s2"},
				"scope":                     "ignored",
			},
			want: session.Principal{Subject: "0000-1111", Email: "bob@example.com", Groups: []string{"g1"},
				Roles: []string{"r1", "r2"}, Scopes: []string{"s1", "s2"}},
		},
		{
			name:   "custom subject claim missing",
			config: custom,
			claims: map[string]any{"sub": "alice"},
			desc:   "token has no subject",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.config)
			claims := tt.claims
			if iss, ok := claims["iss"].(string); ok && strings.HasPrefix(iss, "ISSUER") {
				claims["iss"] = f.iss.URL + strings.TrimPrefix(iss, "ISSUER")
			}
			tok := f.token(t, claims)
			got, err := f.auth(t, tok)
			if tt.desc != "" {
				wantInvalidToken(t, err, tt.desc)
				if strings.Contains(err.Error(), tok) {
					t.Errorf("error text holds the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authenticate: %v", err)
			}
			want := tt.want
			want.Issuer = f.iss.URL
			if diff := cmp.Diff(want, got.Principal); diff != "" {
				t.Errorf("principal (-want +got):\n%s", diff)
			}
			if got.Token != tok {
				t.Errorf("Token = %.20q…, want the token presented", got.Token)
			}
			wantExp := time.Unix(now+3600, 0)
			if e, ok := tt.claims["exp"].(int64); ok {
				wantExp = time.Unix(e, 0)
			}
			if !got.Expiry.Equal(wantExp) {
				t.Errorf("Expiry = %v, want %v", got.Expiry, wantExp)
			}
		})
	}
}

func TestAuthenticateAttacks(t *testing.T) {
	f := newFixture(t, nil)
	foreign := testissuer.NewRSAKey(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{"sub": "mallory", "aud": resource}
	// Warm the key cache, so that the cases below do not depend on their order.
	if _, err := f.auth(t, f.token(t, nil)); err != nil {
		t.Fatalf("warm-up: %v", err)
	}

	tests := []struct {
		name string
		tok  func() string
		desc string
	}{
		{"foreign key claiming kid k1", func() string {
			return f.iss.SignWith(t, map[string]any{"kid": "k1", "typ": "JWT"}, claims, "RS256", foreign)
		}, "token signature is invalid"},
		{"foreign key and no kid", func() string {
			return f.iss.SignWith(t, nil, claims, "RS256", foreign)
		}, "token signature is invalid"},
		{"kid k1 with an EC signature", func() string {
			return f.iss.SignWith(t, map[string]any{"kid": "k1"}, claims, "ES256", ecKey)
		}, "token signature is invalid"},
		{"alg none", func() string {
			return f.iss.SignWith(t, map[string]any{"kid": "k1"}, claims, "none", nil)
		}, "token signing algorithm is not accepted"},
		{"alg none without kid or signature", func() string {
			tok := f.iss.SignWith(t, nil, claims, "none", nil)
			return strings.TrimSuffix(tok, ".") + ".AA"
		}, "token signing algorithm is not accepted"},
		{"HS256 keyed with the public key PEM", func() string {
			return f.iss.SignWith(t, map[string]any{"kid": "k1"}, claims, "HS256", f.iss.PublicKeyPEM())
		}, "token signing algorithm is not accepted"},
		{"HS512 keyed with the public key PEM, no kid", func() string {
			return f.iss.SignWith(t, nil, claims, "HS512", f.iss.PublicKeyPEM())
		}, "token signing algorithm is not accepted"},
		{"unknown kid", func() string {
			return f.iss.SignWith(t, map[string]any{"kid": "nope"}, claims, "RS256", foreign)
		}, "unknown signing key"},
		{"payload swapped under a valid signature", func() string {
			a := strings.Split(f.token(t, nil), ".")
			b := strings.Split(f.token(t, map[string]any{"sub": "root"}), ".")
			return a[0] + "." + b[1] + "." + a[2]
		}, "token signature is invalid"},
		{"signature stripped", func() string {
			a := strings.Split(f.token(t, nil), ".")
			return a[0] + "." + a[1] + ".AAAA"
		}, "token signature is invalid"},
		{"abc", func() string { return "abc" }, "token is not a well-formed JWT"},
		{"three dots", func() string { return "a.b.c.d" }, "token is not a well-formed JWT"},
		{"empty parts", func() string { return "..." }, "token is not a well-formed JWT"},
		{"two parts", func() string { return "eyJhbGciOiJSUzI1NiJ9.e30" }, "token is not a well-formed JWT"},
		{"bad base64 in header", func() string { return "eyJhbGciOiJSUzI1NiJ9+/.e30.c2ln" }, "token is not a well-formed JWT"},
		{"no signature", func() string {
			a := strings.Split(f.token(t, nil), ".")
			return a[0] + "." + a[1] + "."
		}, "token signature is invalid"},
		{"bad base64 in payload", func() string { return "eyJhbGciOiJSUzI1NiJ9.bad+base/64.c2ln" }, "token is not a well-formed JWT"},
		{"payload not JSON", func() string { return "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln" }, "token is not a well-formed JWT"},
		{"header without alg", func() string { return "e30.e30.c2ln" }, "token signing algorithm is not accepted"},
		{"too long", func() string { return strings.Repeat("a", 40<<10) }, "token is too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.iss.JWKSFetches()
			tok := tt.tok()
			_, err := f.auth(t, tok)
			wantInvalidToken(t, err, tt.desc)
			if len(tok) > 8 && strings.Contains(err.Error(), tok) {
				t.Errorf("error text holds the token: %v", err)
			}
			if n := f.iss.JWKSFetches() - before; n != 0 {
				t.Errorf("%d JWKS fetches, want 0 (keys are cached and the interval has not passed)", n)
			}
		})
	}
}

func TestOtherKeyTypes(t *testing.T) {
	for _, alg := range []string{"PS256", "ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			f := newFixture(t, nil)
			f.iss.RotateAlg(t, alg)
			got, err := f.auth(t, f.token(t, nil))
			if err != nil {
				t.Fatalf("Authenticate: %v", err)
			}
			if got.Principal.Subject != "alice" {
				t.Errorf("Subject = %q, want alice", got.Principal.Subject)
			}
			// Without a kid, every cached key is tried.
			tok := f.iss.SignWith(t, nil, map[string]any{"sub": "bob", "aud": resource}, alg, f.iss.PrivateKey())
			if got, err := f.auth(t, tok); err != nil {
				t.Errorf("token without kid: %v", err)
			} else if got.Principal.Subject != "bob" {
				t.Errorf("Subject = %q, want bob", got.Principal.Subject)
			}
		})
	}
}

func TestKeyFetchesBounded(t *testing.T) {
	f := newFixture(t, func(c *auth.Config) { c.Issuers[0].JWKSRefreshInterval = time.Minute })
	foreign := testissuer.NewRSAKey(t)
	randomKid := func(i int) string {
		return f.iss.SignWith(t, map[string]any{"kid": fmt.Sprintf("rnd-%d-%s", i, rand.Text())},
			map[string]any{"sub": "x", "aud": resource}, "RS256", foreign)
	}
	burst := func(n int) {
		t.Helper()
		toks := make([]string, n)
		for i := range toks {
			toks[i] = randomKid(i)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range toks {
			wg.Go(func() { _, errs[i] = f.a.Authenticate(context.Background(), bearer(toks[i])) })
		}
		wg.Wait()
		for _, err := range errs {
			wantInvalidToken(t, err, "unknown signing key")
		}
	}

	// Cold: a burst of random kids makes at most one fetch, shared by all.
	burst(100)
	if n := f.iss.JWKSFetches(); n > 1 {
		t.Fatalf("cold burst: %d JWKS fetches, want at most 1", n)
	}
	if n := f.iss.DiscoveryFetches(); n != 1 {
		t.Errorf("cold burst: %d discovery fetches, want 1", n)
	}
	if _, err := f.auth(t, f.token(t, nil)); err != nil {
		t.Fatalf("valid token after burst: %v", err)
	}
	warm := f.iss.JWKSFetches()

	// Warm, within the interval: no fetch at all.
	burst(100)
	if n := f.iss.JWKSFetches() - warm; n > 1 {
		t.Errorf("warm burst: %d extra JWKS fetches, want at most 1", n)
	}
	warm = f.iss.JWKSFetches()

	// A rotated key within the interval is not fetched yet.
	f.iss.Rotate(t)
	rotated := f.token(t, nil)
	if _, err := f.auth(t, rotated); err == nil {
		t.Fatal("token of a new key verified within the refresh interval; want refused")
	}
	if n := f.iss.JWKSFetches() - warm; n != 0 {
		t.Errorf("new kid within the interval: %d JWKS fetches, want 0", n)
	}

	// After the interval, the new key is fetched once and verifies.
	f.clock.Advance(time.Minute + time.Second)
	rotated = f.token(t, nil)
	if _, err := f.auth(t, rotated); err != nil {
		t.Fatalf("rotated key after the interval: %v", err)
	}
	if n := f.iss.JWKSFetches() - warm; n != 1 {
		t.Errorf("rotation: %d JWKS fetches, want exactly 1", n)
	}

	// Warm keys: verification makes no network call.
	warm = f.iss.JWKSFetches()
	discoveries := f.iss.DiscoveryFetches()
	for i := range 1000 {
		if _, err := f.auth(t, rotated); err != nil {
			t.Fatalf("verification %d: %v", i, err)
		}
	}
	if n := f.iss.JWKSFetches() - warm; n != 0 {
		t.Errorf("1000 warm verifications: %d JWKS fetches, want 0", n)
	}
	if n := f.iss.DiscoveryFetches() - discoveries; n != 0 {
		t.Errorf("1000 warm verifications: %d discovery fetches, want 0", n)
	}
}

func TestKeyRotation(t *testing.T) {
	f := newFixture(t, nil)
	old := f.token(t, nil)
	if _, err := f.auth(t, old); err != nil {
		t.Fatalf("k1 token: %v", err)
	}
	kid := f.iss.Rotate(t)
	if kid == "k1" {
		t.Fatalf("Rotate returned kid %q again", kid)
	}
	f.iss.DropOldKeys()
	f.clock.Advance(2 * time.Minute)
	fresh := f.token(t, nil)
	if _, err := f.auth(t, fresh); err != nil {
		t.Fatalf("%s token after rotation: %v", kid, err)
	}
	// The refresh dropped k1 from the cache, and the next refresh is an interval away.
	_, err := f.auth(t, old)
	wantInvalidToken(t, err, "unknown signing key")
	if n := f.iss.JWKSFetches(); n != 2 {
		t.Errorf("%d JWKS fetches, want 2", n)
	}
}

func TestDiscoveryFailure(t *testing.T) {
	f := newFixture(t, func(c *auth.Config) { c.Issuers[0].JWKSRefreshInterval = 5 * time.Minute })
	if n := f.iss.DiscoveryFetches(); n != 0 {
		t.Fatalf("New made %d discovery fetches, want none", n)
	}
	f.iss.SetDown(true)
	tok := f.token(t, nil)
	_, err := f.auth(t, tok)
	wantInvalidToken(t, err, "the token issuer's signing keys are unavailable; try again later")
	if !strings.Contains(f.logs.String(), "level=WARN") || !strings.Contains(f.logs.String(), "issuer="+f.iss.URL) {
		t.Errorf("no warning naming the issuer was logged; log:\n%s", f.logs)
	}

	// Within the interval: refused at once, no new attempt.
	f.clock.Advance(4 * time.Minute)
	f.iss.SetDown(false)
	for range 10 {
		_, err = f.auth(t, tok)
		wantInvalidToken(t, err, "the token issuer's signing keys are unavailable; try again later")
	}
	if n := f.iss.DiscoveryFetches(); n != 1 {
		t.Errorf("%d discovery fetches within the interval, want 1", n)
	}

	// After the interval: retried, and it works.
	f.clock.Advance(time.Minute)
	if _, err := f.auth(t, tok); err != nil {
		t.Fatalf("after the interval: %v", err)
	}
	if n, k := f.iss.DiscoveryFetches(), f.iss.JWKSFetches(); n != 2 || k != 1 {
		t.Errorf("discovery fetches %d, JWKS fetches %d; want 2 and 1", n, k)
	}
}

func TestDiscoveryRejectsWrongIssuer(t *testing.T) {
	// The discovery document of an issuer names that issuer; one configured under another
	// identifier (here with a trailing slash) must not be trusted.
	iss := testissuer.New(t)
	logs := &syncBuffer{}
	a, err := auth.New(auth.Config{
		Resource: resource,
		Issuers:  []auth.Issuer{{URL: iss.URL + "/"}},
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tok := iss.Token(t, map[string]any{"iss": iss.URL + "/", "sub": "alice", "aud": resource})
	_, err = a.Authenticate(context.Background(), bearer(tok))
	wantInvalidToken(t, err, "the token issuer's signing keys are unavailable; try again later")
	if !strings.Contains(logs.String(), "names issuer") {
		t.Errorf("log does not say why discovery failed:\n%s", logs)
	}
}

// blockingTransport holds the first request until release is closed.
type blockingTransport struct {
	started chan struct{} // closed when the first request arrives
	release chan struct{}
	once    sync.Once
}

func (b *blockingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	b.once.Do(func() {
		close(b.started)
		<-b.release
	})
	return http.DefaultTransport.RoundTrip(r)
}

func TestImpatientCallerDoesNotCancelFetch(t *testing.T) {
	bt := &blockingTransport{started: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, func(c *auth.Config) { c.HTTPClient = &http.Client{Transport: bt} })
	tok := f.token(t, nil)

	ctx, cancel := context.WithCancel(context.Background())
	impatient := make(chan error, 1)
	go func() {
		_, err := f.a.Authenticate(ctx, bearer(tok))
		impatient <- err
	}()
	<-bt.started
	patient := make(chan error, 1)
	go func() {
		_, err := f.a.Authenticate(context.Background(), bearer(tok))
		patient <- err
	}()
	cancel()
	err := <-impatient
	wantInvalidToken(t, err, "token could not be verified in time; try again")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(err, context.Canceled) = false for %v", err)
	}
	close(bt.release)
	if err := <-patient; err != nil {
		t.Errorf("patient caller: %v", err)
	}
	if n := f.iss.JWKSFetches(); n != 1 {
		t.Errorf("%d JWKS fetches, want 1", n)
	}
}

func TestClose(t *testing.T) {
	f := newFixture(t, nil)
	warm := f.token(t, nil)
	if _, err := f.auth(t, warm); err != nil {
		t.Fatal(err)
	}
	f.a.Close()
	f.a.Close()
	if _, err := f.auth(t, warm); err != nil {
		t.Errorf("cached key after Close: %v", err)
	}
	f.clock.Advance(time.Hour)
	f.iss.Rotate(t)
	_, err := f.auth(t, f.token(t, nil))
	wantInvalidToken(t, err, "the token issuer's signing keys are unavailable; try again later")
}

// stallTransport answers no request: each waits for its context to end.
type stallTransport struct {
	started chan struct{} // closed when the first request arrives
	once    sync.Once
}

func (s *stallTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.once.Do(func() { close(s.started) })
	<-r.Context().Done()
	return nil, r.Context().Err()
}

func TestCloseStopsFetchInFlight(t *testing.T) {
	st := &stallTransport{started: make(chan struct{})}
	f := newFixture(t, func(c *auth.Config) { c.HTTPClient = &http.Client{Transport: st} })
	tok := f.token(t, nil)
	done := make(chan error, 1)
	go func() {
		_, err := f.a.Authenticate(context.Background(), bearer(tok))
		done <- err
	}()
	<-st.started
	f.a.Close() // returns only once the fetch goroutine has ended
	wantInvalidToken(t, <-done, "the token issuer's signing keys are unavailable; try again later")
}

func TestAPIKeys(t *testing.T) {
	key, hash, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	upper := "sha256:" + strings.ToUpper(strings.TrimPrefix(auth.HashAPIKey("mfk_upper"), "sha256:"))
	f := newFixture(t, func(c *auth.Config) {
		c.APIKeys = []auth.APIKey{
			{Name: "ci", Hash: hash, Email: "ci@example.com", Groups: []string{"bots"}, Roles: []string{"runner"}, Scopes: []string{"tools.call"}},
			{Name: "upper", Hash: upper},
		}
	})

	got, err := f.auth(t, key)
	if err != nil {
		t.Fatalf("valid key: %v", err)
	}
	want := &auth.Authenticated{Principal: session.Principal{Issuer: session.APIKeyIssuer, Subject: "ci",
		Email: "ci@example.com", Groups: []string{"bots"}, Roles: []string{"runner"}, Scopes: []string{"tools.call"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Authenticated (-want +got):\n%s", diff)
	}
	got.Principal.Groups[0] = "changed"
	if again, _ := f.auth(t, key); again.Principal.Groups[0] != "bots" {
		t.Errorf("a caller's change to Groups leaked into the next result: %q", again.Principal.Groups)
	}

	if got, err := f.auth(t, "mfk_upper"); err != nil || got.Principal.Subject != "upper" {
		t.Errorf("key with an upper-case hex hash: %v, %v", got, err)
	}

	_, err = f.auth(t, other)
	wantInvalidToken(t, err, "unknown API key")
	_, err = f.auth(t, APIKeyLike())
	wantInvalidToken(t, err, "unknown API key")

	// Without the prefix, the key is taken for a JWT.
	_, err = f.auth(t, strings.TrimPrefix(key, auth.APIKeyPrefix))
	wantInvalidToken(t, err, "token is not a well-formed JWT")
	if n := f.iss.DiscoveryFetches() + f.iss.JWKSFetches(); n != 0 {
		t.Errorf("API keys made %d requests to the issuer, want none", n)
	}
}

// APIKeyLike is a token with the API key prefix that is no key.
func APIKeyLike() string { return auth.APIKeyPrefix + "eyJhbGciOiJSUzI1NiJ9.e30.c2ln" }

func TestAPIKeysOnly(t *testing.T) {
	key, hash, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{APIKeys: []auth.APIKey{{Name: "k", Hash: hash}}})
	if err != nil {
		t.Fatalf("New without issuers or resource: %v", err)
	}
	defer a.Close()
	if got := a.Issuers(); len(got) != 0 {
		t.Errorf("Issuers() = %q, want none", got)
	}
	if _, err := a.Authenticate(context.Background(), bearer(key)); err != nil {
		t.Errorf("API key: %v", err)
	}
	_, err = a.Authenticate(context.Background(), bearer("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL3gifQ.c2ln"))
	wantInvalidToken(t, err, "token issuer is not trusted")
}

func TestBearerHeaderForms(t *testing.T) {
	key, hash, err := auth.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{APIKeys: []auth.APIKey{{Name: "k", Hash: hash}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const (
		notBearer = "the Authorization header must be: Bearer <token>"
		query     = "send the access token in the Authorization header, not in the query string"
	)
	tests := []struct {
		name    string
		target  string
		headers []string // Authorization values
		desc    string   // "" for success; "none" for ErrNoCredentials
	}{
		{"no header", "/mcp", nil, "none"},
		{"bearer", "/mcp", []string{"Bearer " + key}, ""},
		{"lower-case scheme", "/mcp", []string{"bearer " + key}, ""},
		{"extra spaces", "/mcp", []string{"Bearer   " + key}, ""},
		{"basic", "/mcp", []string{"Basic dXNlcjpwYXNz"}, notBearer},
		{"bearer with no token", "/mcp", []string{"Bearer"}, notBearer},
		{"bearer with blank token", "/mcp", []string{"Bearer   "}, notBearer},
		{"empty header", "/mcp", []string{""}, notBearer},
		{"token only", "/mcp", []string{key}, notBearer},
		{"two headers", "/mcp", []string{"Bearer " + key, "Bearer " + key}, "send exactly one Authorization header"},
		{"token with a space", "/mcp", []string{"Bearer " + key + " x"}, "the bearer token has characters a token cannot have"},
		{"padding inside the token", "/mcp", []string{"Bearer eyJhbGciOiJSUzI1NiJ9.e30=.c2ln"}, "the bearer token has characters a token cannot have"},
		{"token with a quote", "/mcp", []string{`Bearer "` + key + `"`}, "the bearer token has characters a token cannot have"},
		{"token in query", "/mcp?access_token=" + key, nil, query},
		{"token in query and header", "/mcp?x=1&access_token=" + key, []string{"Bearer " + key}, query},
		{"query mentions access_token harmlessly", "/mcp?q=access_token", []string{"Bearer " + key}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, tt.target, nil)
			for _, h := range tt.headers {
				r.Header.Add("Authorization", h)
			}
			_, err := a.Authenticate(context.Background(), r)
			switch tt.desc {
			case "":
				if err != nil {
					t.Errorf("Authenticate: %v", err)
				}
			case "none":
				if !errors.Is(err, auth.ErrNoCredentials) {
					t.Errorf("error = %v, want ErrNoCredentials", err)
				}
			default:
				wantErr(t, err, http.StatusBadRequest, "invalid_request", tt.desc)
				if strings.Contains(err.Error(), key) {
					t.Errorf("error text holds the key: %v", err)
				}
			}
		})
	}
}

func TestNewConfigErrors(t *testing.T) {
	good := auth.HashAPIKey("mfk_a")
	tests := []struct {
		name string
		cfg  auth.Config
		want []string // each must appear in the error
	}{
		{"bad hash", auth.Config{APIKeys: []auth.APIKey{{Name: "a", Hash: "md5:abc"}}},
			[]string{`APIKeys[0]: hash: must be "sha256:" followed by 64 hex digits`}},
		{"hash not hex", auth.Config{APIKeys: []auth.APIKey{{Name: "a", Hash: "sha256:" + strings.Repeat("z", 64)}}},
			[]string{`APIKeys[0]: hash: must be "sha256:"`}},
		{"duplicate names", auth.Config{APIKeys: []auth.APIKey{{Name: "a", Hash: good}, {Name: "a", Hash: auth.HashAPIKey("mfk_b")}}},
			[]string{`APIKeys[1]: name: "a" is already the name of APIKeys[0]`}},
		{"duplicate hashes", auth.Config{APIKeys: []auth.APIKey{{Name: "a", Hash: good}, {Name: "b", Hash: good}}},
			[]string{`APIKeys[1]: hash: same as the hash of APIKeys[0]`}},
		{"empty name", auth.Config{APIKeys: []auth.APIKey{{Hash: good}}},
			[]string{`APIKeys[0]: name: must not be empty`}},
		{"empty issuer URL", auth.Config{Resource: resource, Issuers: []auth.Issuer{{}}},
			[]string{"Issuers[0]: URL: must not be empty"}},
		{"http issuer", auth.Config{Resource: resource, Issuers: []auth.Issuer{{URL: "http://idp.example.com"}}},
			[]string{"Issuers[0] (http://idp.example.com): URL: plain http is allowed only on a loopback host"}},
		{"issuer with query", auth.Config{Resource: resource, Issuers: []auth.Issuer{{URL: "https://idp.example.com?x=1"}}},
			[]string{"no query or fragment"}},
		{"duplicate issuer", auth.Config{Resource: resource, Issuers: []auth.Issuer{{URL: "https://idp.example.com"}, {URL: "https://idp.example.com"}}},
			[]string{"Issuers[1] (https://idp.example.com): URL: the issuer is listed twice"}},
		{"no audience", auth.Config{Issuers: []auth.Issuer{{URL: "https://idp.example.com"}}},
			[]string{"Audiences: empty and Resource is not set"}},
		{"bad resource", auth.Config{Resource: "gw.example.com/mcp"},
			[]string{`Resource: "gw.example.com/mcp" is not an absolute http(s) URI`}},
		{"negative durations", auth.Config{Resource: resource, Issuers: []auth.Issuer{{URL: "https://idp.example.com", ClockSkew: -1, JWKSRefreshInterval: -time.Second}}},
			[]string{"ClockSkew: -1ns is negative", "JWKSRefreshInterval: -1s is negative"}},
		{"all problems at once", auth.Config{
			Issuers: []auth.Issuer{{URL: ""}, {URL: "ftp://x"}},
			APIKeys: []auth.APIKey{{Name: "a", Hash: "x"}, {Name: "a", Hash: good}},
		}, []string{"Issuers[0]: URL", "Issuers[1] (ftp://x): URL", "APIKeys[0]: hash", "APIKeys[1]: name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := auth.New(tt.cfg)
			if err == nil {
				a.Close()
				t.Fatal("New succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}

	// Loopback http and AllowHTTP are fine; AllowHTTP is logged.
	logs := &syncBuffer{}
	a, err := auth.New(auth.Config{
		Resource: resource,
		Issuers:  []auth.Issuer{{URL: "http://127.0.0.1:9"}, {URL: "http://localhost:9"}, {URL: "http://idp.internal", AllowHTTP: true}},
		Logger:   slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer a.Close()
	if diff := cmp.Diff([]string{"http://127.0.0.1:9", "http://localhost:9", "http://idp.internal"}, a.Issuers()); diff != "" {
		t.Errorf("Issuers() (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), "AllowHTTP") || strings.Count(logs.String(), "level=WARN") != 1 {
		t.Errorf("want one warning about AllowHTTP, log:\n%s", logs)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	f := newFixture(b, nil)
	tok := f.token(b, map[string]any{"groups": []string{"eng"}, "scope": "tools.read tools.call"})
	r := bearer(tok)
	ctx := context.Background()
	if _, err := f.a.Authenticate(ctx, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.a.Authenticate(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	if n := f.iss.JWKSFetches(); n != 1 {
		b.Errorf("%d JWKS fetches, want 1", n)
	}
}

// BenchmarkAuthenticateFirstUse verifies a token not seen before each time: the signature
// check (BenchmarkAuthenticate measures a token a session sends again, which is remembered).
func BenchmarkAuthenticateFirstUse(b *testing.B) {
	f := newFixture(b, nil)
	ctx := context.Background()
	const distinct = 1024
	reqs := make([]*http.Request, distinct)
	for i := range reqs {
		reqs[i] = bearer(f.token(b, map[string]any{"groups": []string{"eng"}, "jti": fmt.Sprint(i)}))
	}
	if _, err := f.a.Authenticate(ctx, reqs[0]); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// A new fixture's cache after every distinct tokens: each use is a first one.
		if i%distinct == 0 {
			b.StopTimer()
			f.a.ForgetVerified()
			b.StartTimer()
		}
		if _, err := f.a.Authenticate(ctx, reqs[i%distinct]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkAPIKey(b *testing.B) {
	var keys []auth.APIKey
	var key string
	for i := range 20 {
		k, h, err := auth.NewAPIKey()
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, auth.APIKey{Name: fmt.Sprintf("key-%d", i), Hash: h, Scopes: []string{"tools.call"}})
		key = k
	}
	a, err := auth.New(auth.Config{APIKeys: keys})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	r := bearer(key)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Authenticate(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

package connect

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/oauthclient"
	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// harness is a gateway serving the connect pages, with its own issuer and an upstream whose
// authorization server is a fakeAS, on a fake clock.
type harness struct {
	t   *testing.T
	svc *Service
	// replicas are the Services behind the gateway's URL; svc is the first.
	replicas  []*Service
	gw        *httptest.Server
	issuer    *fakeAS
	as        *fakeAS
	clock     *testclock.Clock
	vault     *grants.Vault
	connected chan Request
	// revoked receives the upstream of each grant revoked, as OnRevoked saw it.
	revoked chan revocation

	// mu guards pages.
	mu sync.Mutex
	// pages are the gateway's answers the browsers got, to check their headers.
	pages []*http.Response
}

// harnessOptions vary a harness.
type harnessOptions struct {
	// store makes the replicas' Store; nil: a memory store on the harness's clock.
	store func(clock *testclock.Clock) Store
	// replicas is the number of Services behind the gateway's URL, which take the requests
	// in turn, sharing the store and the vault; 0 means 1.
	replicas int
	// dynamic configures the upstream without a client id, with dynamic registration.
	dynamic bool
}

// newHarness starts a harness.
func newHarness(t *testing.T, ho harnessOptions) *harness {
	testwait.Goroutines(t)
	h := &harness{t: t, clock: testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), connected: make(chan Request, 10),
		revoked: make(chan revocation, 10)}
	h.issuer = newFakeAS(t, h.clock.Now)
	h.as = newFakeAS(t, h.clock.Now)
	keys, err := seal.NewKeys([]seal.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	h.vault, err = grants.NewFileVault(t.TempDir(), keys, &grants.Options{Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.vault.Close() })
	st := NewMemoryStore(0, h.clock.Now)
	if ho.store != nil {
		st = ho.store(h.clock)
	}
	up := Upstream{Name: "github", URL: h.as.URL + "/mcp", ClientID: "gw-client", AllowPrivateNetwork: true}
	if ho.dynamic {
		up.ClientID, up.DynamicRegistration = "", true
	}
	h.gw = httptest.NewUnstartedServer(nil)
	var handlers []http.Handler
	for range max(ho.replicas, 1) {
		svc, err := New(Options{
			PublicURL: "http://" + h.gw.Listener.Addr().String(),
			Login:     Login{Issuer: h.issuer.URL, ClientID: "gw-login", ClientSecret: "login-secret"},
			Keys:      keys,
			Store:     st,
			Vault:     h.vault,
			Upstreams: []Upstream{up},
			OnConnected: func(ctx context.Context, r Request) {
				h.connected <- r
			},
			OnRevoked: func(ctx context.Context, p grants.Principal, upstream string) {
				h.revoked <- revocation{p, upstream}
			},
			Now:    h.clock.Now,
			Logger: slog.New(slog.NewTextHandler(secretCheck{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		h.replicas = append(h.replicas, svc)
		handlers = append(handlers, svc.Handler())
	}
	h.svc = h.replicas[0]
	var turn atomic.Int64
	h.gw.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers[int(turn.Add(1))%len(handlers)].ServeHTTP(w, r)
	})
	h.gw.Start()
	t.Cleanup(func() {
		h.gw.Close()
		h.checkHeaders()
	})
	return h
}

// revocation is one call of OnRevoked.
type revocation struct {
	principal grants.Principal
	upstream  string
}

// wantRevoked fails the test unless OnRevoked was called for exactly want since the last call.
func (h *harness) wantRevoked(want ...revocation) {
	h.t.Helper()
	var got []revocation
	for len(h.revoked) > 0 {
		got = append(got, <-h.revoked)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(revocation{})); diff != "" {
		h.t.Errorf("OnRevoked calls mismatch (-want +got):\n%s", diff)
	}
}

// secretInLog matches the codes and tokens the fake servers issue.
var secretInLog = regexp.MustCompile(`\b(code|at|rt)-\d+\b`)

// secretCheck is the Services' log: it fails the test at a line that shows a code or token.
type secretCheck struct{ t *testing.T }

func (c secretCheck) Write(p []byte) (int, error) {
	if m := secretInLog.Find(p); m != nil {
		c.t.Errorf("the log shows %q: %s", m, p)
	}
	return len(p), nil
}

// alice is the principal of the tests: a user of the gateway's issuer.
func (h *harness) principal(sub string) grants.Principal {
	return grants.Principal{Issuer: h.issuer.URL, Subject: sub}
}

// ask asks sub to connect github and returns the link.
func (h *harness) ask(sub string) string {
	link, id, err := h.svc.Ask(context.Background(), Request{Principal: h.principal(sub),
		Upstream: "github", SessionID: "s1"})
	if err != nil {
		h.t.Fatal(err)
	}
	if want := h.gw.URL + PathConnect + id; link != want {
		h.t.Fatalf("link = %q, want %q", link, want)
	}
	return link
}

// wantNoGrant fails the test if p has a grant at github.
func (h *harness) wantNoGrant(p grants.Principal) {
	h.t.Helper()
	if _, err := h.vault.Get(context.Background(), p, "github"); !errors.Is(err, grants.ErrNotFound) {
		h.t.Errorf("%s's grant: %v, want none", p, err)
	}
}

// browser is a user's browser: the fake servers approve as user (their fake_user cookie).
type browser struct {
	h      *harness
	client *http.Client
	// stopAt, if set, stops the following of redirects at a URL whose path it is.
	stopAt string
}

func (h *harness) browser(user string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	b := &browser{h: h}
	b.setUser(user, jar)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	h.t.Cleanup(tr.CloseIdleConnections)
	b.client = &http.Client{Jar: jar, Transport: recorder{h, tr}, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if b.stopAt != "" && req.URL.Path == b.stopAt {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

// setUser makes the fake servers approve as user from now on.
func (b *browser) setUser(user string, jar http.CookieJar) {
	u, _ := url.Parse(b.h.as.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: "fake_user", Value: user, Path: "/"}})
}

// recorder keeps the gateway's answers for checkHeaders.
type recorder struct {
	h  *harness
	tr http.RoundTripper
}

func (rt recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.tr.RoundTrip(req)
	if err == nil && strings.HasPrefix(req.URL.String(), rt.h.gw.URL) {
		rt.h.mu.Lock()
		rt.h.pages = append(rt.h.pages, resp)
		rt.h.mu.Unlock()
	}
	return resp, err
}

// checkHeaders checks that every answer of the gateway carried the pages' headers.
func (h *harness) checkHeaders() {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[string]string{
		"X-Frame-Options":         "DENY",
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
		"Cache-Control":           "no-store",
		"Referrer-Policy":         "no-referrer",
	}
	if len(h.pages) == 0 {
		return
	}
	for _, resp := range h.pages {
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				h.t.Errorf("%s %s answered %d with %s %q, want %q", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, k, got, v)
			}
		}
	}
}

// result is a page as the browser got it.
type result struct {
	status   int
	body     string
	location string
	url      *url.URL
}

func (b *browser) do(req *http.Request) result {
	b.h.t.Helper()
	resp, err := b.client.Do(req)
	if err != nil {
		b.h.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.h.t.Fatal(err)
	}
	return result{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location"), url: resp.Request.URL}
}

func (b *browser) get(link string) result {
	b.h.t.Helper()
	req, err := http.NewRequest(http.MethodGet, link, nil)
	if err != nil {
		b.h.t.Fatal(err)
	}
	return b.do(req)
}

func (b *browser) post(link string, form url.Values) result {
	b.h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, link, strings.NewReader(form.Encode()))
	if err != nil {
		b.h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the page's first form.
func (r result) csrf(t *testing.T) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(r.body)
	if m == nil {
		t.Fatalf("no csrf field in the page (%d): %s", r.status, r.body)
	}
	return m[1]
}

// want fails the test unless r has status and its body holds each of texts.
func (r result) want(t *testing.T, status int, texts ...string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("%s answered %d, want %d: %s", r.url, r.status, status, r.body)
	}
	for _, s := range texts {
		if !strings.Contains(r.body, s) {
			t.Errorf("%s's page lacks %q: %s", r.url, s, r.body)
		}
	}
}

// open asks sub to connect github, and opens the link in a new browser of sub's: it returns
// the browser, the link and the consent page.
func (h *harness) open(sub string) (*browser, string, result) {
	h.t.Helper()
	b := h.browser(sub)
	link := h.ask(sub)
	consent := b.get(link)
	consent.want(h.t, http.StatusOK, "Connect github", sub+"@example.com")
	return b, link, consent
}

// connect runs the whole flow as sub and returns the final page.
func (h *harness) connect(sub string) result {
	h.t.Helper()
	b, link, consent := h.open(sub)
	return b.post(link, url.Values{"csrf": {consent.csrf(h.t)}, "action": {"connect"}})
}

func TestConnectFlow(t *testing.T) {
	stores := map[string]func(*testclock.Clock) Store{
		"memory": nil,
		"redis": func(*testclock.Clock) Store {
			addr := testredis.Addr(t)
			client := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { client.Close() })
			return NewRedisStore(client, testredis.Prefix(t, addr))
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{store: store})
			b := h.browser("alice")
			link := h.ask("alice")
			consent := b.get(link)
			consent.want(t, http.StatusOK, "Connect github", "alice@example.com", "Authorization server", h.as.URL, "repo read:user", "Connect</button>", "Cancel</button>")
			done := b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}})
			done.want(t, http.StatusOK, "Connected github", "Return to your client")
			if strings.Contains(done.body, "at-") || strings.Contains(done.body, "rt-") {
				t.Errorf("the page shows a token: %s", done.body)
			}

			g, err := h.vault.Get(context.Background(), h.principal("alice"), "github")
			if err != nil {
				t.Fatal(err)
			}
			if g.Issuer != h.as.URL || !strings.HasPrefix(g.Token.AccessToken, "at-") || !strings.HasPrefix(g.Token.RefreshToken, "rt-") {
				t.Errorf("grant = %+v, want one from %s with tokens", g.Info(), h.as.URL)
			}
			if diff := cmp.Diff([]string{"repo", "read:user"}, g.Token.Scopes); diff != "" {
				t.Errorf("scopes (-want +got):\n%s", diff)
			}
			select {
			case r := <-h.connected:
				if r.Principal != h.principal("alice") || r.Upstream != "github" || r.SessionID != "s1" {
					t.Errorf("OnConnected got %+v", r)
				}
			default:
				t.Error("OnConnected was not called")
			}

			// The link was used: it is gone, for a second answer of the form too.
			b.get(link).want(t, http.StatusNotFound, "expired or was already used")
			b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusNotFound, "expired or was already used")
			// The grants page lists it, without its token, with a revoke form.
			list := b.get(h.gw.URL + PathGrants)
			list.want(t, http.StatusOK, "github", "repo read:user", "/grants/github/revoke")
			if strings.Contains(list.body, g.Token.AccessToken) || strings.Contains(list.body, g.Token.RefreshToken) {
				t.Errorf("the grants page shows a token: %s", list.body)
			}
		})
	}
}

func TestStepUpScopes(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	link, _, err := h.svc.Ask(context.Background(), Request{Principal: h.principal("alice"), Upstream: "github", Scopes: []string{"admin:org"}})
	if err != nil {
		t.Fatal(err)
	}
	consent := b.get(link)
	consent.want(t, http.StatusOK, "admin:org")
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusOK, "Connected github")
	g, err := h.vault.Get(context.Background(), h.principal("alice"), "github")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"admin:org"}, g.Token.Scopes); diff != "" {
		t.Errorf("scopes (-want +got):\n%s", diff)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b, link, consent := h.open("alice")
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"cancel"}}).want(t, http.StatusOK, "Not connected")
	b.get(link).want(t, http.StatusNotFound)
	h.wantNoGrant(h.principal("alice"))
}

func TestAnotherUserOpensTheLink(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	link := h.ask("alice")
	jar, _ := cookiejar.New(nil)
	b := h.browser("bob")
	b.client.Jar = jar
	b.setUser("bob", jar)
	page := b.get(link)
	page.want(t, http.StatusForbidden, "bob@example.com", "made for another user", "Sign in as another user")
	if strings.Contains(page.body, "alice") {
		t.Errorf("the page shown to bob names the user who asked: %s", page.body)
	}
	// Bob has no consent token for this link; a forged one is refused.
	b.post(link, url.Values{"csrf": {page.csrf(t)}, "action": {"connect"}}).want(t, http.StatusForbidden)
	h.wantNoGrant(h.principal("bob"))
	h.wantNoGrant(h.principal("alice"))

	// Sign in as another user: the issuer now signs alice in, and the link works for her.
	b.setUser("alice", jar)
	consent := b.post(h.gw.URL+PathLogout, url.Values{"csrf": {page.csrf(t)}, "next": {strings.TrimPrefix(link, h.gw.URL)}})
	consent.want(t, http.StatusOK, "Connect github", "alice@example.com")
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusOK, "Connected github")
}

func TestCSRF(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	link := h.ask("alice")
	other := h.ask("alice")
	consent := b.get(link)
	consent.want(t, http.StatusOK)
	otherToken := b.get(other).csrf(t)
	for name, form := range map[string]url.Values{
		"missing":            {"action": {"connect"}},
		"garbage":            {"action": {"connect"}, "csrf": {"AAAA"}},
		"another link's":     {"action": {"connect"}, "csrf": {otherToken}},
		"missing, on cancel": {"action": {"cancel"}},
	} {
		t.Run(name, func(t *testing.T) {
			b.post(link, form).want(t, http.StatusForbidden)
		})
	}
	// Another browser (another sign-in) cannot use alice's token either.
	b2 := h.browser("alice")
	b2.get(h.gw.URL+PathGrants).want(t, http.StatusOK)
	b2.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusForbidden)
	// The refused forms did not use the link up.
	b.get(link).want(t, http.StatusOK, "Connect github")
	// Revoke and logout forms need theirs too.
	b.post(h.gw.URL+PathGrants+"/github/revoke", nil).want(t, http.StatusForbidden)
	b.post(h.gw.URL+PathLogout, url.Values{"csrf": {consent.csrf(t)}}).want(t, http.StatusForbidden)
}

func TestCallbackReplayIsRefused(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	b.stopAt = PathCallback
	first := h.connect("alice") // another browser, followed to the end, for comparison
	first.want(t, http.StatusOK, "Connected github")
	link := h.ask("alice")
	consent := b.get(link)
	atCallback := b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}})
	if atCallback.status != http.StatusFound || !strings.Contains(atCallback.location, PathCallback) {
		t.Fatalf("the authorization server answered %d to %q", atCallback.status, atCallback.location)
	}
	b.stopAt = ""
	b.get(atCallback.location).want(t, http.StatusOK, "Connected github")
	b.get(atCallback.location).want(t, http.StatusBadRequest, "used or")
	if n := h.as.tokenRequests("authorization_code"); n != 2 {
		t.Errorf("%d codes redeemed, want 2 (the replay must not reach the server)", n)
	}
}

func TestCallbackOfAnotherUserIsRefused(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	alice, link, consent := h.open("alice")
	alice.stopAt = "/authorize" // stop before the authorization server answers
	atAS := alice.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}})
	if atAS.status != http.StatusSeeOther || !strings.HasPrefix(atAS.location, h.as.URL+"/authorize") {
		t.Fatalf("the consent answered %d to %q, want 303 to the authorization server", atAS.status, atAS.location)
	}
	// Bob, signed in at the gateway as himself, is lured into the authorization alice
	// started: his answer is refused before the code is redeemed.
	bob := h.browser("bob")
	bob.get(h.gw.URL+PathGrants).want(t, http.StatusOK, "bob@example.com")
	bob.get(atAS.location).want(t, http.StatusForbidden, "another user")
	if n := h.as.tokenRequests("authorization_code"); n != 0 {
		t.Errorf("%d codes redeemed, want 0", n)
	}
	for _, sub := range []string{"alice", "bob"} {
		h.wantNoGrant(h.principal(sub))
	}
}

func TestAccessDenied(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.as.denyAll()
	h.connect("alice").want(t, http.StatusForbidden, "access_denied", "Nothing was connected")
	h.wantNoGrant(h.principal("alice"))
}

func TestExpiredLink(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	b.get(h.gw.URL+PathGrants).want(t, http.StatusOK)
	link := h.ask("alice")
	consent := b.get(link)
	consent.want(t, http.StatusOK)
	h.clock.Advance(DefaultRequestTTL)
	b.get(link).want(t, http.StatusNotFound, "expired or was already used", "Ask your client again")
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusNotFound)
	b.get(h.gw.URL+PathConnect+"nosuchlink").want(t, http.StatusNotFound)
}

func TestLoginStateReplay(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	b.stopAt = PathLoginCallback
	atLogin := b.get(h.gw.URL + PathGrants)
	if atLogin.status != http.StatusFound || !strings.Contains(atLogin.location, PathLoginCallback) {
		t.Fatalf("the issuer answered %d to %q", atLogin.status, atLogin.location)
	}
	// Another browser, which did not start this sign-in, is refused (no state cookie).
	h.browser("alice").get(atLogin.location).want(t, http.StatusBadRequest, "started in another browser")
	// The sign-in is kept in the browser that started it, which can still finish it.
	b.stopAt = ""
	b.get(atLogin.location).want(t, http.StatusOK, "Connected upstreams", "alice@example.com")
	b.get(atLogin.location).want(t, http.StatusBadRequest, "already used")

	// A copy of the state cookie taken before the callback does not make it replayable: the
	// code is spent, and only its sign-in's nonce and verifier would go with it.
	c := h.browser("carol")
	c.stopAt = PathLoginCallback
	atLogin = c.get(h.gw.URL + PathGrants)
	gw, _ := url.Parse(h.gw.URL)
	stolen := c.client.Jar.Cookies(gw)
	c.stopAt = ""
	c.get(atLogin.location).want(t, http.StatusOK, "Connected upstreams", "carol@example.com")
	thief := h.browser("mallory")
	thief.client.Jar.SetCookies(gw, stolen)
	thief.get(atLogin.location).want(t, http.StatusForbidden, "could not be verified")
}

// TestLinksPerPrincipal: one user's failed calls cannot fill the store with connect links.
func TestLinksPerPrincipal(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	ask := func(sub string) error {
		_, _, err := h.svc.Ask(ctx, Request{Principal: h.principal(sub), Upstream: "github"})
		return err
	}
	for i := range MaxLinksPerPrincipal {
		if err := ask("alice"); err != nil {
			t.Fatalf("Ask %d: %v", i, err)
		}
	}
	if err := ask("alice"); !errors.Is(err, ErrStoreFull) {
		t.Errorf("Ask beyond MaxLinksPerPrincipal: %v, want ErrStoreFull", err)
	}
	if err := ask("bob"); err != nil {
		t.Errorf("another user's Ask: %v", err)
	}
	h.clock.Advance(DefaultRequestTTL)
	if err := ask("alice"); err != nil {
		t.Errorf("Ask once the links expired: %v", err)
	}
}

func TestLoginCookieExpires(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	b.stopAt = "/authorize"
	if r := b.get(h.gw.URL + PathGrants); r.status != http.StatusFound {
		t.Fatalf("not signed in: %d, want a redirect to the issuer", r.status)
	}
	b.stopAt = ""
	b.get(h.gw.URL+PathGrants).want(t, http.StatusOK)
	b.stopAt = "/authorize"
	if r := b.get(h.gw.URL + PathGrants); r.status != http.StatusOK {
		t.Fatalf("signed in: %d, want the page", r.status)
	}
	h.clock.Advance(loginLife)
	if r := b.get(h.gw.URL + PathGrants); r.status != http.StatusFound || !strings.HasPrefix(r.location, h.issuer.URL) {
		t.Fatalf("after the sign-in's life: %d to %q, want a redirect to the issuer", r.status, r.location)
	}
}

func TestTokenRefresh(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	alice := h.principal("alice")
	if _, err := h.svc.Token(ctx, alice, "github"); !NeedsConnect(err) {
		t.Fatalf("Token before connecting: %v, want NeedsConnect", err)
	}
	h.connect("alice").want(t, http.StatusOK, "Connected github")
	first, err := h.svc.Token(ctx, alice, "github")
	if err != nil {
		t.Fatal(err)
	}
	if n := h.as.tokenRequests("refresh_token"); n != 0 {
		t.Errorf("a fresh token was refreshed (%d)", n)
	}
	h.clock.Advance(2 * time.Hour)
	second, err := h.svc.Token(ctx, alice, "github")
	if err != nil {
		t.Fatal(err)
	}
	if second.AccessToken == first.AccessToken || h.as.tokenRequests("refresh_token") != 1 {
		t.Errorf("expired token not refreshed: %v then %v, %d refreshes", first, second, h.as.tokenRequests("refresh_token"))
	}
	if diff := cmp.Diff(first.Scopes, second.Scopes); diff != "" {
		t.Errorf("scopes changed by the refresh (-before +after):\n%s", diff)
	}
	// The upstream refused the token before its expiry: it is refreshed, once.
	third, err := h.svc.TokenRejected(ctx, alice, "github", second.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if third.AccessToken == second.AccessToken {
		t.Error("TokenRejected returned the rejected token")
	}
	again, err := h.svc.TokenRejected(ctx, alice, "github", second.AccessToken)
	if err != nil || again.AccessToken != third.AccessToken || h.as.tokenRequests("refresh_token") != 2 {
		t.Errorf("a second refusal of the same token: %v, %v, %d refreshes; want the new token, no refresh", again, err, h.as.tokenRequests("refresh_token"))
	}

	// The user revoked the grant at the server: the refresh is refused, the user must connect.
	h.as.forgetRefreshTokens()
	h.clock.Advance(2 * time.Hour)
	_, err = h.svc.Token(ctx, alice, "github")
	if !NeedsConnect(err) || !errors.Is(err, grants.ErrInvalidGrant) {
		t.Fatalf("Token after invalid_grant: %v, want NeedsConnect (ErrInvalidGrant)", err)
	}
	h.wantNoGrant(alice)
	if _, err := h.svc.Token(ctx, alice, "gitlab"); !errors.Is(err, ErrUnknownUpstream) || NeedsConnect(err) {
		t.Errorf("Token of an unknown upstream: %v, want ErrUnknownUpstream", err)
	}
}

func TestRevoke(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	alice := h.principal("alice")
	h.connect("alice").want(t, http.StatusOK)
	g, err := h.vault.Get(ctx, alice, "github")
	if err != nil {
		t.Fatal(err)
	}
	h.wantRevoked()
	if err := h.svc.Revoke(ctx, alice, "github"); err != nil {
		t.Fatal(err)
	}
	h.wantRevoked(revocation{alice, "github"})
	if diff := cmp.Diff([]string{g.Token.RefreshToken}, h.as.revokedTokens()); diff != "" {
		t.Errorf("revoked at the server (-want +got):\n%s", diff)
	}
	h.wantNoGrant(alice)
	if err := h.svc.Revoke(ctx, alice, "github"); !errors.Is(err, grants.ErrNotFound) {
		t.Errorf("Revoke of no grant: %v, want ErrNotFound", err)
	}
	h.wantRevoked() // nothing was revoked
}

func TestRevokeFromTheGrantsPage(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b, link, consent := h.open("alice")
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusOK)
	list := b.get(h.gw.URL + PathGrants)
	list.want(t, http.StatusOK, "github")
	b.post(h.gw.URL+PathGrants+"/github/revoke", url.Values{"csrf": {list.csrf(t)}}).want(t, http.StatusOK, "You have connected no upstream")
	if len(h.as.revokedTokens()) != 1 {
		t.Errorf("revoked at the server: %q, want one token", h.as.revokedTokens())
	}
	h.wantRevoked(revocation{h.principal("alice"), "github"})
}

func TestClientMetadataDocument(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b := h.browser("alice")
	b.get(h.gw.URL+PathClientMetadata).want(t, http.StatusNotFound) // no document over http

	svc, err := New(Options{PublicURL: "https://gw.example.com", Login: Login{Issuer: h.issuer.URL, ClientID: "c"},
		Keys: h.svc.opts.Keys, Store: NewMemoryStore(0, nil), Vault: h.vault})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathClientMetadata, nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"client_id":"https://gw.example.com/oauth/client-metadata.json"`) ||
		!strings.Contains(rec.Body.String(), "https://gw.example.com/oauth/callback") {
		t.Errorf("document: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options = %q", got)
	}
}

func TestSecureCookies(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	svc, err := New(Options{PublicURL: "https://gw.example.com", Login: Login{Issuer: h.issuer.URL, ClientID: "gw-login"},
		Keys: h.svc.opts.Keys, Store: NewMemoryStore(0, h.clock.Now), Vault: h.vault, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	rec := httptest.NewRecorder()
	svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathGrants, nil))
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies = %v, want the sign-in's state cookie", cookies)
	}
	c := cookies[0]
	if c.Name != "__Host-"+stateCookieName || !c.Secure || !c.HttpOnly || c.Path != "/" || c.SameSite != http.SameSiteLaxMode || c.Domain != "" {
		t.Errorf("cookie = %+v, want __Host-, Secure, HttpOnly, Path=/, SameSite=Lax", c)
	}
}

func TestNew(t *testing.T) {
	keys, err := seal.NewKeys([]seal.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	good := Options{PublicURL: "https://gw.example.com", Login: Login{Issuer: "https://id.example.com", ClientID: "c"},
		Keys: keys, Store: NewMemoryStore(0, nil), Vault: &grants.Vault{}}
	tests := map[string]func(o *Options){
		"no public url":   func(o *Options) { o.PublicURL = "" },
		"trailing slash":  func(o *Options) { o.PublicURL += "/" },
		"not http":        func(o *Options) { o.PublicURL = "ftp://gw.example.com" },
		"no login issuer": func(o *Options) { o.Login.Issuer = "" },
		"no keys":         func(o *Options) { o.Keys = nil },
		"no store":        func(o *Options) { o.Store = nil },
		"no vault":        func(o *Options) { o.Vault = nil },
		"upstream twice": func(o *Options) {
			o.Upstreams = []Upstream{{Name: "a", URL: "https://a"}, {Name: "a", URL: "https://b"}}
		},
		"upstream with no url": func(o *Options) { o.Upstreams = []Upstream{{Name: "a"}} },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			o := good
			change(&o)
			if _, err := New(o); err == nil {
				t.Error("New succeeded")
			}
		})
	}
	svc, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svc.opts.Login.Scopes, []string{"openid"}) || svc.opts.RequestTTL != DefaultRequestTTL || svc.opts.ClientName != DefaultClientName {
		t.Errorf("defaults not applied: %+v", svc.opts)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, _, err := svc.Ask(context.Background(), Request{Principal: grants.Principal{Issuer: "i", Subject: "s"}, Upstream: "x"}); !errors.Is(err, ErrUnknownUpstream) {
		t.Errorf("Ask for an unknown upstream: %v", err)
	}
}

func TestSetUpstreams(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.connect("alice").want(t, http.StatusOK)
	if _, ok := h.svc.flows.knownFlow("github"); !ok {
		t.Fatal("the flow was not kept")
	}
	ups := []Upstream{{Name: "github", URL: h.as.URL + "/mcp", ClientID: "gw-client", AllowPrivateNetwork: true}}
	h.svc.SetUpstreams(ups)
	if _, ok := h.svc.flows.knownFlow("github"); !ok {
		t.Error("an unchanged upstream's flow was dropped")
	}
	ups[0].Scopes = []string{"repo"}
	h.svc.SetUpstreams(ups)
	if _, ok := h.svc.flows.knownFlow("github"); ok {
		t.Error("a changed upstream's flow was kept")
	}
	h.svc.SetUpstreams(nil)
	if _, err := h.svc.Token(context.Background(), h.principal("alice"), "github"); !errors.Is(err, ErrUnknownUpstream) {
		t.Errorf("Token of a removed upstream: %v", err)
	}
}

// TestGrantOfAnotherURL: a grant made for the upstream's URL is not handed out once the
// upstream's URL has changed (a reload, or a new upstream under a removed one's name): it is
// deleted, the user must connect again, and its tokens go nowhere.
func TestGrantOfAnotherURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		// due advances the clock past the token's expiry, so that it would be refreshed.
		due      bool
		rejected bool
	}{
		{name: "fresh"},
		{name: "due", due: true},
		{name: "rejected", rejected: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			ctx := context.Background()
			alice := h.principal("alice")
			h.connect("alice").want(t, http.StatusOK, "Connected github")
			g, err := h.vault.Get(ctx, alice, "github")
			if err != nil {
				t.Fatal(err)
			}
			if want := h.as.URL + "/mcp"; g.Resource != want || g.Info().Resource != want {
				t.Errorf("the grant was made for %q (info %q), want %q", g.Resource, g.Info().Resource, want)
			}
			h.svc.SetUpstreams([]Upstream{{Name: "github", URL: h.as.URL + "/other/mcp", ClientID: "gw-client", AllowPrivateNetwork: true}})
			if tc.due {
				h.clock.Advance(2 * time.Hour)
			}
			var tok grants.Token
			if tc.rejected {
				tok, err = h.svc.TokenRejected(ctx, alice, "github", g.Token.AccessToken)
			} else {
				tok, err = h.svc.Token(ctx, alice, "github")
			}
			if !NeedsConnect(err) || tok.AccessToken != "" {
				t.Fatalf("token of a grant made for another URL: %v, %v; want none, NeedsConnect", tok, err)
			}
			h.wantNoGrant(alice)
			if n := h.as.tokenRequests("refresh_token"); n != 0 {
				t.Errorf("the grant's refresh token was sent %d times, want never", n)
			}
		})
	}
}

// TestURLChangedDuringTheAuthorization: the callback of an authorization started before the
// upstream's URL changed stores no grant.
func TestURLChangedDuringTheAuthorization(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	b, link, consent := h.open("alice")
	b.stopAt = PathCallback
	atCallback := b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}})
	if atCallback.status != http.StatusFound || !strings.Contains(atCallback.location, PathCallback) {
		t.Fatalf("the authorization server answered %d to %q", atCallback.status, atCallback.location)
	}
	h.svc.SetUpstreams([]Upstream{{Name: "github", URL: h.as.URL + "/other/mcp", ClientID: "gw-client", AllowPrivateNetwork: true}})
	b.stopAt = ""
	b.get(atCallback.location).want(t, http.StatusNotFound, "Nothing was connected")
	h.wantNoGrant(h.principal("alice"))
}

// TestReplicas: each request lands on another replica, which share the store and the vault: the
// sign-in, consent and callback of one flow each work wherever they land, and the replicas
// register one client dynamically, not one each.
func TestReplicas(t *testing.T) {
	h := newHarness(t, harnessOptions{replicas: 3, dynamic: true})
	h.connect("alice").want(t, http.StatusOK, "Connected github")
	h.connect("bob").want(t, http.StatusOK, "Connected github")
	if n := h.as.registrations(); n != 1 {
		t.Errorf("%d dynamic registrations, want 1 shared by the replicas", n)
	}
	// Each replica refreshes with the client the grant was issued to.
	for i, svc := range h.replicas {
		h.clock.Advance(2 * time.Hour)
		if _, err := svc.Token(context.Background(), h.principal("alice"), "github"); err != nil {
			t.Errorf("replica %d: Token: %v", i, err)
		}
	}
}

// TestUnreachableAuthorizationServer: the consent cannot start while the upstream's server
// cannot be found; the link stays usable, and a later try finds it.
func TestUnreachableAuthorizationServer(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.as.setDown(true)
	b, link, consent := h.open("alice")
	if strings.Contains(consent.body, h.as.URL) {
		t.Errorf("the consent page names a server that was not found: %s", consent.body)
	}
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusBadGateway, "Try again")
	h.as.setDown(false)
	// The failure is remembered for a while, then the discovery is tried again.
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusBadGateway)
	h.clock.Advance(retryAfter)
	consent = b.get(link)
	consent.want(t, http.StatusOK, "Authorization server", h.as.URL)
	b.post(link, url.Values{"csrf": {consent.csrf(t)}, "action": {"connect"}}).want(t, http.StatusOK, "Connected github")
}

func TestLocalPath(t *testing.T) {
	for path, want := range map[string]bool{
		"/connect/abc":             true,
		"/grants":                  true,
		"/connect/":                false,
		"/connect/a/b":             false,
		"//evil.example.com/x":     false,
		"/connect//evil.example":   false,
		"https://evil.example.com": false,
		"/connect/a?x=1":           false,
		"/connect/a\\evil":         false,
		"/grants/x":                false,
		"":                         false,
	} {
		if got := localPath(path); got != want {
			t.Errorf("localPath(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestGrantTokenScopes(t *testing.T) {
	asked := []string{"repo"}
	if got := grantToken(&oauthclient.Token{AccessToken: "a", Scope: "repo read:org"}, asked).Scopes; !slices.Equal(got, []string{"repo", "read:org"}) {
		t.Errorf("scopes of an answer that names them = %q", got)
	}
	if got := grantToken(&oauthclient.Token{AccessToken: "a"}, asked).Scopes; !slices.Equal(got, asked) {
		t.Errorf("scopes of an answer that names none = %q, want the asked ones", got)
	}
}

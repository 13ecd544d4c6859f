package grants

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/testclock"
)

// The contract of Vault, run on both stores (TestRedisVault, TestFileVault).

// backing is a store under test, seen from outside the Vault.
type backing struct {
	// open opens a Vault on the storage, as another replica (or process) would: each call
	// gives a new one, on the same storage, closed when the test ends.
	open func(t *testing.T, opts *Options) *Vault
	// raw returns the stored form of the grant of p and upstream; setRaw replaces it.
	raw    func(t *testing.T, p Principal, upstream string) []byte
	setRaw func(t *testing.T, p Principal, upstream string, v []byte)
	// everything returns every byte string the storage holds: values, fields, names.
	everything func(t *testing.T) [][]byte
}

var (
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	alice = Principal{Issuer: "https://idp.example.com", Subject: "alice"}
	bob   = Principal{Issuer: "https://idp.example.com", Subject: "bob"}
	// mallory has alice's subject at another issuer: another user.
	mallory = Principal{Issuer: "https://other.example.com", Subject: "alice"}
)

func testKeys(t testing.TB) *seal.Keys {
	t.Helper()
	k, err := seal.NewKeys([]seal.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, seal.MinSecretLen)}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// grant returns a grant of p at upstream whose tokens name them, expiring in exp.
func grant(p Principal, upstream string, exp time.Duration) Grant {
	return Grant{Principal: p, Upstream: upstream, Issuer: "https://as." + upstream + ".example.com",
		Token: Token{AccessToken: "at-" + p.Subject + "-" + upstream + "-0123456789abcdef", RefreshToken: "rt-" + p.Subject + "-" + upstream + "-fedcba9876543210",
			TokenType: "Bearer", Expiry: t0.Add(exp), Scopes: []string{"repo", "read:user"}},
		Granted: t0}
}

// runContract runs the contract on storage newBacking makes, new for each test.
func runContract(t *testing.T, newBacking func(t *testing.T) backing) {
	t.Run("PutGetListDelete", func(t *testing.T) { testPutGetListDelete(t, newBacking(t)) })
	t.Run("PrincipalIsIssuerAndSubject", func(t *testing.T) { testPrincipalIsIssuerAndSubject(t, newBacking(t)) })
	t.Run("ListAllPages", func(t *testing.T) { testListAllPages(t, newBacking(t)) })
	t.Run("Tampered", func(t *testing.T) { testTampered(t, newBacking(t)) })
	t.Run("MovedToAnotherPrincipal", func(t *testing.T) { testMoved(t, newBacking(t)) })
	t.Run("NoSecretsStored", func(t *testing.T) { testNoSecretsStored(t, newBacking(t)) })
	t.Run("RefreshDue", func(t *testing.T) { testRefreshDue(t, newBacking(t)) })
	t.Run("RefreshOnceInProcess", func(t *testing.T) { testRefreshOnceInProcess(t, newBacking(t)) })
	t.Run("RefreshOnceAcrossReplicas", func(t *testing.T) { testRefreshOnceAcrossReplicas(t, newBacking(t)) })
	t.Run("RefreshFailedElsewhere", func(t *testing.T) { testRefreshFailedElsewhere(t, newBacking(t)) })
	t.Run("RefreshRejected", func(t *testing.T) { testRefreshRejected(t, newBacking(t)) })
	t.Run("InvalidGrantDeletes", func(t *testing.T) { testInvalidGrantDeletes(t, newBacking(t)) })
	t.Run("RevokedDuringRefresh", func(t *testing.T) { testRevokedDuringRefresh(t, newBacking(t)) })
	t.Run("ImpatientCallerDoesNotCancel", func(t *testing.T) { testImpatientCaller(t, newBacking(t)) })
	t.Run("Resource", func(t *testing.T) { testResource(t, newBacking(t)) })
	t.Run("DeleteIf", func(t *testing.T) { testDeleteIf(t, newBacking(t)) })
}

// testResource: a grant keeps the URL it was made for, and a grant sealed before the URL was
// recorded still opens, without one.
func testResource(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	g := grant(alice, "github", time.Hour)
	g.Resource = "https://mcp.github.example.com/mcp"
	if err := v.Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	got, err := v.Get(ctx, alice, "github")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(g, got); diff != "" {
		t.Errorf("Get mismatch (-want +got):\n%s", diff)
	}
	list, err := v.List(ctx, alice)
	if err != nil || len(list) != 1 || list[0].Resource != g.Resource {
		t.Errorf("List = %v, %v; want the grant with its resource", list, err)
	}
	// A grant as sealed before the resource was recorded.
	old := grant(alice, "gitlab", time.Hour)
	wire, err := json.Marshal(map[string]any{"v": 1, "iss": alice.Issuer, "sub": alice.Subject, "upstream": "gitlab",
		"token": tokenWire(old.Token), "as": old.Issuer, "granted": old.Granted})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, old); err != nil {
		t.Fatal(err)
	}
	b.setRaw(t, alice, "gitlab", newCodec(testKeys(t)).sealer.Seal(wire, associated(alice, "gitlab")))
	got, err = v.Get(ctx, alice, "gitlab")
	if err != nil {
		t.Fatalf("Get of a grant sealed without a resource: %v", err)
	}
	if diff := cmp.Diff(old, got); diff != "" {
		t.Errorf("Get of a grant sealed without a resource mismatch (-want +got):\n%s", diff)
	}
}

// testDeleteIf: DeleteIf deletes only a grant its test says is stale.
func testDeleteIf(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	if _, err := v.DeleteIf(ctx, alice, "github", func(Grant) bool { return true }); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteIf of no grant: %v, want ErrNotFound", err)
	}
	if err := v.Put(ctx, grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if deleted, err := v.DeleteIf(ctx, alice, "github", func(Grant) bool { return false }); deleted || err != nil {
		t.Errorf("DeleteIf of a grant not stale = %v, %v; want false, nil", deleted, err)
	}
	if _, err := v.Get(ctx, alice, "github"); err != nil {
		t.Errorf("the grant not stale is gone: %v", err)
	}
	if deleted, err := v.DeleteIf(ctx, alice, "github", func(g Grant) bool { return g.Upstream == "github" }); !deleted || err != nil {
		t.Errorf("DeleteIf of a stale grant = %v, %v; want true, nil", deleted, err)
	}
	if _, err := v.Get(ctx, alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the stale grant is still there: %v", err)
	}
}

func clockOpts() (*testclock.Clock, *Options) {
	c := testclock.New(t0)
	return c, &Options{Now: c.Now, PollInterval: time.Millisecond}
}

func testPutGetListDelete(t *testing.T, b backing) {
	ctx := context.Background()
	_, opts := clockOpts()
	v := b.open(t, opts)
	if _, err := v.Get(ctx, alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get before Put: %v, want ErrNotFound", err)
	}
	g := grant(alice, "github", time.Hour)
	g.Granted = time.Time{}
	if err := v.Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, grant(alice, "atlassian", time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := v.Get(ctx, alice, "github")
	if err != nil {
		t.Fatal(err)
	}
	g.Granted = t0 // Put stamps it with the clock
	if diff := cmp.Diff(g, got); diff != "" {
		t.Errorf("Get mismatch (-want +got):\n%s", diff)
	}
	// Another replica reads what this one put.
	if got, err := b.open(t, opts).Get(ctx, alice, "github"); err != nil || got.Token.AccessToken != g.Token.AccessToken {
		t.Errorf("another vault's Get = %v, %v", got, err)
	}
	list, err := v.List(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	want := []GrantInfo{grant(alice, "atlassian", time.Hour).Info(), g.Info()}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("List mismatch (-want +got):\n%s", diff)
	}
	if err := v.Delete(ctx, alice, "github"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := v.Get(ctx, alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := v.Delete(ctx, alice, "atlassian"); err != nil {
		t.Fatal(err)
	}
	if list, err := v.List(ctx, alice); err != nil || len(list) != 0 {
		t.Errorf("List after deleting all = %v, %v; want none", list, err)
	}
	if all, next, err := v.ListAll(ctx, "", 0); err != nil || len(all) != 0 || next != "" {
		t.Errorf("ListAll after deleting all = %v, %q, %v; want none", all, next, err)
	}
}

func testPrincipalIsIssuerAndSubject(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	if err := v.Put(ctx, grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, mallory, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the same subject at another issuer: Get = %v, want ErrNotFound", err)
	}
	for _, p := range []Principal{{Subject: "alice"}, {Issuer: alice.Issuer}, {Issuer: "a\x00b", Subject: "c"}} {
		if err := v.Put(ctx, grant(p, "github", time.Hour)); err == nil {
			t.Errorf("Put for principal %q succeeded, want it refused", p)
		}
		if _, err := v.List(ctx, p); err == nil {
			t.Errorf("List for principal %q succeeded, want it refused", p)
		}
	}
	g := grant(alice, "github", time.Hour)
	g.Token.AccessToken = ""
	if err := v.Put(ctx, g); err == nil {
		t.Error("Put without an access token succeeded")
	}
}

func testListAllPages(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	want := map[string]bool{}
	for i := range 5 {
		p := Principal{Issuer: "https://idp.example.com", Subject: fmt.Sprintf("user%d", i)}
		for _, up := range []string{"github", "jira"} {
			if err := v.Put(ctx, grant(p, up, time.Hour)); err != nil {
				t.Fatal(err)
			}
			want[p.Subject+"/"+up] = true
		}
	}
	got := map[string]bool{}
	cursor, pages := "", 0
	for {
		page, next, err := v.ListAll(ctx, cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page) > 4 {
			t.Errorf("a page of 2 principals holds %d grants", len(page))
		}
		for _, gi := range page {
			k := gi.Principal.Subject + "/" + gi.Upstream
			if got[k] {
				t.Errorf("%s listed twice", k)
			}
			got[k] = true
			if gi.Principal.Issuer != "https://idp.example.com" || gi.Unreadable {
				t.Errorf("listed %+v", gi)
			}
		}
		b, _ := json.Marshal(page)
		if bytes.Contains(b, []byte("at-")) || bytes.Contains(b, []byte("rt-")) {
			t.Errorf("a page shows a token: %s", b)
		}
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("ListAll does not end")
		}
		cursor = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListAll mismatch (-want +got):\n%s", diff)
	}
	if _, _, err := v.ListAll(ctx, "not-a-cursor", 2); err == nil {
		t.Error("ListAll with a forged cursor succeeded")
	}
}

func testTampered(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	if err := v.Put(ctx, grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	raw := b.raw(t, alice, "github")
	raw[len(raw)-20] ^= 1
	b.setRaw(t, alice, "github", raw)
	_, err := v.Get(ctx, alice, "github")
	if !errors.Is(err, ErrUnreadable) || !errors.Is(err, seal.ErrTampered) {
		t.Fatalf("Get of a changed grant: %v, want ErrUnreadable (ErrTampered)", err)
	}
	t.Logf("the error says: %v", err)
	list, err := v.List(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]GrantInfo{{Principal: alice, Upstream: "github", Unreadable: true}}, list); diff != "" {
		t.Errorf("List mismatch (-want +got):\n%s", diff)
	}
	if _, err := v.Refresh(ctx, alice, "github", (&refresher{}).fn); !errors.Is(err, ErrUnreadable) {
		t.Errorf("Refresh of a changed grant: %v, want ErrUnreadable", err)
	}
	// What the error says to do works: revoke, and connect again.
	if err := v.Delete(ctx, alice, "github"); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, grant(alice, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, alice, "github"); err != nil {
		t.Errorf("Get after connecting again: %v", err)
	}
}

func testMoved(t *testing.T, b backing) {
	ctx := context.Background()
	v := b.open(t, nil)
	for _, g := range []Grant{grant(alice, "github", time.Hour), grant(bob, "github", time.Hour), grant(bob, "jira", time.Hour)} {
		if err := v.Put(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	// Bob's own grant replaced by alice's sealed one: he must not get her token.
	b.setRaw(t, bob, "github", b.raw(t, alice, "github"))
	// The seal's associated data refuses it (what the grant says inside is checked too).
	if g, err := v.Get(ctx, bob, "github"); !errors.Is(err, ErrUnreadable) || !errors.Is(err, seal.ErrTampered) {
		t.Errorf("Get of alice's grant moved under bob: %v, %v; want ErrUnreadable (ErrTampered)", g, err)
	}
	// Nor under another upstream of the same principal.
	b.setRaw(t, bob, "jira", b.raw(t, alice, "github"))
	if _, err := v.Get(ctx, bob, "jira"); !errors.Is(err, ErrUnreadable) {
		t.Errorf("Get of a grant moved to another upstream: %v, want ErrUnreadable", err)
	}
	// Nor under the same subject at another issuer.
	if err := v.Put(ctx, grant(mallory, "github", time.Hour)); err != nil {
		t.Fatal(err)
	}
	b.setRaw(t, mallory, "github", b.raw(t, alice, "github"))
	if _, err := v.Get(ctx, mallory, "github"); !errors.Is(err, ErrUnreadable) {
		t.Errorf("Get of alice's grant moved to her subject at another issuer: %v, want ErrUnreadable", err)
	}
	if _, err := v.Get(ctx, alice, "github"); err != nil {
		t.Errorf("alice's own grant: %v", err)
	}
}

// windows returns every run of 8 bytes of s: none may be stored.
func windows(s string) []string {
	var out []string
	for i := 0; i+8 <= len(s); i++ {
		out = append(out, s[i:i+8])
	}
	return out
}

func testNoSecretsStored(t *testing.T, b backing) {
	ctx := context.Background()
	clock, opts := clockOpts()
	v := b.open(t, opts)
	g := grant(alice, "github", 30*time.Second)
	if err := v.Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	secrets := []string{g.Token.AccessToken, g.Token.RefreshToken}
	clock.Advance(time.Second)
	if _, err := v.Refresh(ctx, alice, "github", func(context.Context, Grant) (Token, error) {
		return Token{AccessToken: "at-new-00112233445566778899", RefreshToken: "rt-new-99887766554433221100", Expiry: clock.Now().Add(time.Hour)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, "at-new-00112233445566778899", "rt-new-99887766554433221100")
	stored := b.everything(t)
	if len(stored) == 0 {
		t.Fatal("nothing stored to scan")
	}
	for _, s := range secrets {
		for _, w := range windows(s) {
			for _, v := range stored {
				if bytes.Contains(v, []byte(w)) {
					t.Fatalf("%q of a token is stored in the clear: %q", w, v)
				}
			}
		}
	}
	// Nor do the errors and prints of a grant show one.
	for _, s := range []string{fmt.Sprint(g), fmt.Sprintf("%+v", g), fmt.Sprintf("%#v", g)} {
		if bytes.Contains([]byte(s), []byte("at-")) || bytes.Contains([]byte(s), []byte("rt-")) {
			t.Errorf("a printed grant shows a token: %s", s)
		}
	}
}

// refresher counts its calls and returns a new token valid an hour on clock.
type refresher struct {
	clock *testclock.Clock
	calls atomic.Int32
	// entered, if not nil, receives a value when a call begins; release, if not nil, is
	// waited for before it returns.
	entered chan struct{}
	release chan struct{}
	err     error
}

func (r *refresher) fn(ctx context.Context, g Grant) (Token, error) {
	n := r.calls.Add(1)
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.release != nil {
		select {
		case <-r.release:
		case <-ctx.Done():
			return Token{}, ctx.Err()
		}
	}
	if r.err != nil {
		return Token{}, r.err
	}
	if g.Token.RefreshToken == "" {
		return Token{}, errors.New("no refresh token given")
	}
	return Token{AccessToken: fmt.Sprintf("at-refreshed-%d", n), Expiry: r.clock.Now().Add(time.Hour)}, nil
}

// concurrently makes n calls of refresh at once, with the blocking refresher r, releases r
// once a call of it began, and checks that every call got its token.
func concurrently(t *testing.T, r *refresher, n int, refresh func(i int) (Grant, error)) {
	t.Helper()
	results := make([]Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = refresh(i) })
	}
	<-r.entered
	close(r.release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i].Token.AccessToken != "at-refreshed-1" {
			t.Errorf("caller %d: %v, %v", i, results[i].Token, errs[i])
		}
	}
}

func testRefreshDue(t *testing.T, b backing) {
	ctx := context.Background()
	clock, opts := clockOpts()
	v := b.open(t, opts)
	g := grant(alice, "github", 10*time.Minute)
	if err := v.Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	r := &refresher{clock: clock}
	got, err := v.Refresh(ctx, alice, "github", r.fn)
	if err != nil || r.calls.Load() != 0 || got.Token.AccessToken != g.Token.AccessToken {
		t.Fatalf("Refresh of a token valid 10 minutes: %v, %v, %d calls; want it as stored, no call", got, err, r.calls.Load())
	}
	clock.Advance(9*time.Minute + time.Second) // within RefreshBefore (a minute) of expiry
	got, err = v.Refresh(ctx, alice, "github", r.fn)
	if err != nil {
		t.Fatal(err)
	}
	want := g
	want.Token.AccessToken, want.Token.Expiry = "at-refreshed-1", clock.Now().Add(time.Hour)
	want.Refreshed = clock.Now() // the refresh token and scopes not returned are kept
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Refresh mismatch (-want +got):\n%s", diff)
	}
	if stored, err := v.Get(ctx, alice, "github"); err != nil || !cmp.Equal(want, stored) {
		t.Errorf("stored after Refresh: %v, %v; want %v", stored, err, want)
	}
	if _, err := v.Refresh(ctx, bob, "github", r.fn); !errors.Is(err, ErrNotFound) {
		t.Errorf("Refresh without a grant: %v, want ErrNotFound", err)
	}
	noRT := grant(bob, "github", 0)
	noRT.Token.RefreshToken = ""
	if err := v.Put(ctx, noRT); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Refresh(ctx, bob, "github", r.fn); !errors.Is(err, ErrNoRefreshToken) {
		t.Errorf("Refresh of an expired grant without a refresh token: %v, want ErrNoRefreshToken", err)
	}
	if n := r.calls.Load(); n != 1 {
		t.Errorf("refreshFunc called %d times, want 1", n)
	}
}

func testRefreshOnceInProcess(t *testing.T, b backing) {
	ctx := context.Background()
	clock, opts := clockOpts()
	v := b.open(t, opts)
	var waited atomic.Int32
	v.waiting = func() { waited.Add(1) }
	if err := v.Put(ctx, grant(alice, "github", 0)); err != nil {
		t.Fatal(err)
	}
	r := blocking(clock, nil)
	const n = 16
	concurrently(t, r, n, func(int) (Grant, error) { return v.Refresh(ctx, alice, "github", r.fn) })
	if c := r.calls.Load(); c != 1 {
		t.Errorf("refreshFunc called %d times by %d callers, want once", c, n)
	}
	if w := waited.Load(); w != 0 {
		t.Errorf("%d callers of one process waited on the cross-replica lock: the process did not share its refresh", w)
	}
}

// dueGrant opens a Vault on b, and another (a replica) that reports when it waits for the
// first's refresh, puts alice's github grant, due for a refresh, and returns them.
func dueGrant(t *testing.T, b backing) (v, other *Vault, waiting chan struct{}, clock *testclock.Clock) {
	clock, opts := clockOpts()
	v, other = b.open(t, opts), b.open(t, opts)
	waiting = make(chan struct{}, 1)
	other.waiting = func() { waiting <- struct{}{} }
	if err := v.Put(context.Background(), grant(alice, "github", 0)); err != nil {
		t.Fatal(err)
	}
	return v, other, waiting, clock
}

// blocking returns a refresher whose call reports that it began and waits for release, and
// fails with err if not nil.
func blocking(clock *testclock.Clock, err error) *refresher {
	return &refresher{clock: clock, entered: make(chan struct{}, 1), release: make(chan struct{}), err: err}
}

// whileHeld runs v's refresh with the blocking refresher r, and, once r holds the lock,
// other's with r2, which must wait for it; then releases r and returns both results.
func whileHeld(t *testing.T, v, other *Vault, waiting chan struct{}, r, r2 *refresher) (g, g2 Grant, err, err2 error) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { g, err = v.Refresh(ctx, alice, "github", r.fn) })
	<-r.entered
	otherDone := make(chan struct{})
	wg.Go(func() { defer close(otherDone); g2, err2 = other.Refresh(ctx, alice, "github", r2.fn) })
	select {
	case <-waiting:
	case <-otherDone:
		t.Errorf("the other replica did not wait for the refresh in flight: %v, %v", g2.Token, err2)
	}
	close(r.release)
	wg.Wait()
	return g, g2, err, err2
}

func testRefreshOnceAcrossReplicas(t *testing.T, b backing) {
	a, other, waiting, clock := dueGrant(t, b)
	ra, rb := blocking(clock, nil), &refresher{clock: clock}
	ga, gb, ea, eb := whileHeld(t, a, other, waiting, ra, rb)
	if ea != nil || eb != nil {
		t.Fatalf("Refresh: %v; on the other replica: %v", ea, eb)
	}
	if ga.Token.AccessToken != "at-refreshed-1" || gb.Token.AccessToken != "at-refreshed-1" {
		t.Errorf("tokens %q and %q, want both at-refreshed-1", ga.Token.AccessToken, gb.Token.AccessToken)
	}
	if ca, cb := ra.calls.Load(), rb.calls.Load(); ca+cb != 1 {
		t.Errorf("refreshFunc called %d + %d times by two replicas, want once", ca, cb)
	}
}

func testRefreshFailedElsewhere(t *testing.T, b backing) {
	a, other, waiting, clock := dueGrant(t, b)
	unavailable := errors.New("the authorization server is unavailable")
	ra, rb := blocking(clock, unavailable), &refresher{clock: clock}
	_, _, ea, eb := whileHeld(t, a, other, waiting, ra, rb)
	if !errors.Is(ea, unavailable) {
		t.Errorf("Refresh: %v, want the refreshFunc's error", ea)
	}
	if !errors.Is(eb, ErrRefreshElsewhere) || rb.calls.Load() != 0 {
		t.Errorf("the other replica: %v, %d calls; want ErrRefreshElsewhere, none", eb, rb.calls.Load())
	}
	// The grant stays; a later refresh succeeds.
	if g, err := other.Refresh(context.Background(), alice, "github", rb.fn); err != nil || g.Token.AccessToken != "at-refreshed-1" {
		t.Errorf("Refresh again: %v, %v", g.Token, err)
	}
}

func testInvalidGrantDeletes(t *testing.T, b backing) {
	ctx := context.Background()
	clock, opts := clockOpts()
	v := b.open(t, opts)
	if err := v.Put(ctx, grant(alice, "github", 0)); err != nil {
		t.Fatal(err)
	}
	r := &refresher{clock: clock, err: fmt.Errorf("token endpoint: %w", ErrInvalidGrant)}
	_, err := v.Refresh(ctx, alice, "github", r.fn)
	if !errors.Is(err, ErrInvalidGrant) {
		t.Fatalf("Refresh: %v, want ErrInvalidGrant", err)
	}
	t.Logf("the error says: %v", err)
	if _, err := v.Get(ctx, alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after invalid_grant: %v, want ErrNotFound", err)
	}
	if all, _, err := v.ListAll(ctx, "", 0); err != nil || len(all) != 0 {
		t.Errorf("ListAll after invalid_grant = %v, %v; want none", all, err)
	}
}

func testRevokedDuringRefresh(t *testing.T, b backing) {
	v, _, _, clock := dueGrant(t, b)
	r := blocking(clock, nil)
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { _, err = v.Refresh(context.Background(), alice, "github", r.fn) })
	<-r.entered
	if err := v.Delete(context.Background(), alice, "github"); err != nil { // the user revokes meanwhile
		t.Fatal(err)
	}
	close(r.release)
	wg.Wait()
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Refresh of a grant revoked meanwhile: %v, want ErrNotFound", err)
	}
	if g, err := v.Get(context.Background(), alice, "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the revoked grant came back: %v, %v", g.Token, err)
	}
}

func testImpatientCaller(t *testing.T, b backing) {
	v, _, _, clock := dueGrant(t, b)
	r := blocking(clock, nil)
	short, cancel := context.WithCancel(context.Background())
	var err error
	var wg sync.WaitGroup
	wg.Go(func() { _, err = v.Refresh(short, alice, "github", r.fn) })
	<-r.entered
	cancel()
	wg.Wait()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Refresh of a caller that gave up: %v, want context.Canceled", err)
	}
	close(r.release) // the refresh went on for others
	g, err := v.Refresh(context.Background(), alice, "github", r.fn)
	if err != nil || g.Token.AccessToken != "at-refreshed-1" || r.calls.Load() != 1 {
		t.Errorf("Refresh after: %v, %v, %d calls; want the refresh the first caller started, once", g.Token, err, r.calls.Load())
	}
}

func testRefreshRejected(t *testing.T, b backing) {
	ctx := context.Background()
	clock, opts := clockOpts()
	v, other := b.open(t, opts), b.open(t, opts)
	g := grant(alice, "github", time.Hour) // not due
	if err := v.Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	r := blocking(clock, nil)
	// Callers on two replicas see the upstream refuse the token at once.
	concurrently(t, r, 8, func(i int) (Grant, error) {
		return []*Vault{v, other}[i%2].RefreshRejected(ctx, alice, "github", g.Token.AccessToken, r.fn)
	})
	// A caller that saw the old token refused late gets the new one, without a refresh.
	if got, err := v.RefreshRejected(ctx, alice, "github", g.Token.AccessToken, r.fn); err != nil || got.Token.AccessToken != "at-refreshed-1" {
		t.Errorf("RefreshRejected of a token already replaced: %v, %v", got.Token, err)
	}
	if c := r.calls.Load(); c != 1 {
		t.Errorf("refreshFunc called %d times, want once", c)
	}
	// The new token refused too is refreshed again.
	r.entered = nil
	if got, err := v.RefreshRejected(ctx, alice, "github", "at-refreshed-1", r.fn); err != nil || got.Token.AccessToken != "at-refreshed-2" {
		t.Errorf("RefreshRejected of the current token: %v, %v; want at-refreshed-2", got.Token, err)
	}
}

package oauthclient

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Flow runs the authorization code flow with PKCE (OAuth 2.1 §4.1, RFC 7636 S256) toward one
// upstream's authorization server for one client identity, and refreshes and revokes the
// tokens it yields. Its fields are set once; it is then safe for concurrent use.
type Flow struct {
	Fetcher   *Fetcher
	Discovery *Discovery
	Client    *Client
	// RedirectURI is the gateway's callback URL, registered for Client.
	RedirectURI string
	// Scopes are the configured scopes; nil means Discovery.Scopes.
	Scopes []string
	// Now gives the time against which expiry is computed; nil means time.Now.
	Now func() time.Time
}

// Pending is an authorization request sent and not yet answered: what the callback needs.
// Keep it server-side (PendingStore), keyed by State; never hand it to the browser.
type Pending struct {
	// URL is the authorization URL to send the user's browser to.
	URL string
	// State is the request's state parameter, unguessable and used once.
	State    string
	Verifier string
	// Owner is the caller's name for whom the flow runs (the gateway's principal); Callback
	// refuses the answer unless the user at the callback is this owner.
	Owner   string
	Expires time.Time
}

// Token is an access token with what it takes to renew it.
type Token struct {
	AccessToken  string
	TokenType    string
	RefreshToken string
	// Expiry is when the access token expires; zero means the server did not say.
	Expiry time.Time
	Scope  string
}

// Valid reports whether t holds an access token not expired at now, with a margin of
// skew for the request in flight.
func (t *Token) Valid(now time.Time, skew time.Duration) bool {
	return t != nil && t.AccessToken != "" && (t.Expiry.IsZero() || now.Add(skew).Before(t.Expiry))
}

// pendingLifetime is how long a user has to come back from the authorization server.
const pendingLifetime = 10 * time.Minute

func (fl *Flow) now() time.Time {
	if fl.Now == nil {
		return time.Now()
	}
	return fl.Now()
}

// Start begins an authorization for owner: it returns the Pending request whose URL the
// user's browser should open. The URL carries state, the S256 code_challenge, the resource
// indicator (RFC 8707) and the scopes (Flow.Scopes, else Discovery.Scopes, else none).
func (fl *Flow) Start(owner string) (*Pending, error) {
	if fl.RedirectURI == "" {
		return nil, errors.New("the flow has no redirect URI; configure the gateway's callback URL")
	}
	u, err := url.Parse(fl.Discovery.Server.AuthorizationEndpoint)
	if err != nil {
		return nil, fmt.Errorf("authorization endpoint %q: %w", fl.Discovery.Server.AuthorizationEndpoint, err)
	}
	p := &Pending{State: random(24), Verifier: random(32), Owner: owner, Expires: fl.now().Add(pendingLifetime)}
	sum := sha256.Sum256([]byte(p.Verifier))
	q := u.Query()
	q.Set("response_type", "code")
	q.Set("client_id", fl.Client.ID)
	q.Set("redirect_uri", fl.RedirectURI)
	q.Set("state", p.State)
	q.Set("code_challenge", base64.RawURLEncoding.EncodeToString(sum[:]))
	q.Set("code_challenge_method", "S256")
	q.Set("resource", fl.Discovery.Resource)
	scopes := fl.Scopes
	if scopes == nil {
		scopes = fl.Discovery.Scopes
	}
	if len(scopes) > 0 {
		q.Set("scope", strings.Join(scopes, " "))
	}
	u.RawQuery = q.Encode()
	p.URL = u.String()
	return p, nil
}

// Exchange finishes the authorization p with the query of the request that came back to the
// redirect URI: it checks the state, the error, and the iss (RFC 9207: required when the
// server advertises authorization_response_iss_parameter_supported, and equal to its issuer
// whenever present), then redeems the code with the PKCE verifier.
func (fl *Flow) Exchange(ctx context.Context, p *Pending, query url.Values) (*Token, error) {
	if query.Get("state") != p.State {
		return nil, fmt.Errorf("%w: the authorization response's state is not the request's; start the authorization again", ErrMismatch)
	}
	if fl.now().After(p.Expires) {
		return nil, errors.New("the authorization request expired before its answer came back; start it again")
	}
	md := &fl.Discovery.Server
	iss, has := query["iss"]
	switch {
	case has && (len(iss) != 1 || iss[0] != md.Issuer):
		return nil, fmt.Errorf("%w: the authorization response comes from issuer %q, not %s (RFC 9207); start the authorization again", ErrMismatch, query.Get("iss"), md.Issuer)
	case !has && md.AuthorizationResponseIssParameterSupported:
		return nil, fmt.Errorf("%w: the authorization response lacks the iss that %s advertises (RFC 9207)", ErrMismatch, md.Issuer)
	}
	if code := query.Get("error"); code != "" {
		return nil, fmt.Errorf("the authorization server refused: %w", &OAuthError{Code: code, Description: query.Get("error_description")})
	}
	code := query.Get("code")
	if code == "" {
		return nil, errors.New("the authorization response carries neither code nor error")
	}
	return fl.token(ctx, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {fl.RedirectURI}, "code_verifier": {p.Verifier}}, "")
}

// Callback takes the pending authorization named by the query's state out of store (so that
// a replayed answer finds nothing), checks that owner, the user at the callback, is the one
// who started it, and exchanges its code. A mismatch is refused (ErrMismatch) before the code
// is redeemed, and the pending authorization is gone: otherwise one user could start a flow
// and have another complete it, binding the victim's upstream account to the starter's grant
// or the starter's account to the victim. It returns the Pending too.
func (fl *Flow) Callback(ctx context.Context, store *PendingStore, owner string, query url.Values) (*Token, *Pending, error) {
	p, ok := store.Take(query.Get("state"))
	if !ok {
		return nil, nil, fmt.Errorf("%w: no authorization is waiting for this state (unknown, expired or already used); start the authorization again", ErrMismatch)
	}
	if p.Owner != owner {
		return nil, nil, fmt.Errorf("%w: this authorization was started by another user than the one completing it; start the authorization again from your own session", ErrMismatch)
	}
	t, err := fl.Exchange(ctx, p, query)
	return t, p, err
}

// Refresh renews t by its refresh token (OAuth 2.1 §4.3). The answer's refresh token replaces
// t's when the server rotates it; otherwise t's is kept.
func (fl *Flow) Refresh(ctx context.Context, t *Token) (*Token, error) {
	if t.RefreshToken == "" {
		return nil, errors.New("the token has no refresh token; authorize again")
	}
	return fl.token(ctx, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {t.RefreshToken}}, t.RefreshToken)
}

// Revoke revokes t's refresh token, or its access token when it has none, at the server's
// revocation endpoint (RFC 7009). It does nothing where the server has no such endpoint.
func (fl *Flow) Revoke(ctx context.Context, t *Token) error {
	endpoint := fl.Discovery.Server.RevocationEndpoint
	if endpoint == "" {
		return nil
	}
	form := url.Values{"token": {t.RefreshToken}, "token_type_hint": {"refresh_token"}}
	if t.RefreshToken == "" {
		form = url.Values{"token": {t.AccessToken}, "token_type_hint": {"access_token"}}
	}
	user, password := fl.authenticate(form)
	if err := fl.Fetcher.postForm(ctx, endpoint, form, user, password, nil); err != nil {
		return fmt.Errorf("revoke at %s: %w", endpoint, err)
	}
	return nil
}

// authenticate adds the client's identity to form, or returns it for basic auth.
func (fl *Flow) authenticate(form url.Values) (user, password string) {
	switch fl.Client.Method {
	case "client_secret_basic":
		return fl.Client.ID, fl.Client.Secret
	case "client_secret_post":
		form.Set("client_secret", fl.Client.Secret)
	}
	form.Set("client_id", fl.Client.ID)
	return "", ""
}

// token makes a token request with the resource indicator and parses its answer; keep is the
// refresh token to keep when the answer has none.
func (fl *Flow) token(ctx context.Context, form url.Values, keep string) (*Token, error) {
	form.Set("resource", fl.Discovery.Resource)
	user, password := fl.authenticate(form)
	var answer struct {
		AccessToken  string      `json:"access_token"`
		TokenType    string      `json:"token_type"`
		RefreshToken string      `json:"refresh_token"`
		ExpiresIn    json.Number `json:"expires_in"`
		Scope        string      `json:"scope"`
	}
	endpoint := fl.Discovery.Server.TokenEndpoint
	if err := fl.Fetcher.postForm(ctx, endpoint, form, user, password, &answer); err != nil {
		return nil, fmt.Errorf("token request (%s) at %s: %w", form.Get("grant_type"), endpoint, err)
	}
	if answer.AccessToken == "" || !strings.EqualFold(answer.TokenType, "bearer") {
		return nil, fmt.Errorf("token request at %s: the answer has no access_token of token_type Bearer (got %q)", endpoint, answer.TokenType)
	}
	t := &Token{AccessToken: answer.AccessToken, TokenType: "Bearer", RefreshToken: answer.RefreshToken, Scope: answer.Scope}
	if t.RefreshToken == "" {
		t.RefreshToken = keep
	}
	if answer.ExpiresIn != "" {
		secs, err := answer.ExpiresIn.Int64()
		if err != nil || secs < 0 {
			return nil, fmt.Errorf("token request at %s: expires_in %q is not a number of seconds", endpoint, answer.ExpiresIn)
		}
		t.Expiry = fl.now().Add(time.Duration(secs) * time.Second)
	}
	return t, nil
}

// PendingStore keeps pending authorizations by state, each taken at most once, for at most
// the request's lifetime; it holds at most a bounded number. It is safe for concurrent use.
// A gateway of several replicas needs a shared store in its place.
type PendingStore struct {
	now func() time.Time
	max int

	// mu guards pending.
	mu      sync.Mutex
	pending map[string]*Pending
}

// NewPendingStore returns a store of at most max pending authorizations (0 means 10000)
// whose clock is now (nil means time.Now).
func NewPendingStore(max int, now func() time.Time) *PendingStore {
	if max <= 0 {
		max = 10000
	}
	if now == nil {
		now = time.Now
	}
	return &PendingStore{now: now, max: max, pending: map[string]*Pending{}}
}

// ErrTooManyPending is returned by Put when the store is full of unexpired requests.
var ErrTooManyPending = errors.New("too many authorizations are waiting for their answer; try again in a few minutes")

// Put keeps p until it is taken or expires.
func (s *PendingStore) Put(p *Pending) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) >= s.max {
		now := s.now()
		for k, v := range s.pending {
			if now.After(v.Expires) {
				delete(s.pending, k)
			}
		}
	}
	if len(s.pending) >= s.max {
		return ErrTooManyPending
	}
	s.pending[p.State] = p
	return nil
}

// Take removes and returns the unexpired pending authorization of state.
func (s *PendingStore) Take(state string) (*Pending, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pending[state]
	delete(s.pending, state)
	if !ok || s.now().After(p.Expires) {
		return nil, false
	}
	return p, true
}

// random is n random bytes, base64url without padding.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

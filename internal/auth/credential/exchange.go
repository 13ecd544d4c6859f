package credential

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
)

// Token exchange vocabulary (RFC 8693 §2.1, §3).
const (
	grantTypeTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeAccessToken   = "urn:ietf:params:oauth:token-type:access_token"
)

const (
	// exchangeMargin is how long before its expiry an exchanged token is replaced, unless a
	// tenth of its lifetime is shorter.
	exchangeMargin = 30 * time.Second
	// defaultExchangedLifetime is how long an exchanged token whose answer had no expires_in
	// is used, at most: no longer than the subject token it came from either.
	defaultExchangedLifetime = 5 * time.Minute
	// minSweep is the number of entries below which an Exchanger does not sweep.
	minSweep = 64
	// maxTokenResponse is the largest token endpoint answer read.
	maxTokenResponse = 1 << 20
)

// ExchangeConfig configures an Exchanger.
type ExchangeConfig struct {
	// TokenURL is the token endpoint of the upstream's authorization server. Required.
	TokenURL string
	// ClientID and ClientSecret authenticate the gateway at the token endpoint with HTTP
	// Basic (client_secret_basic, RFC 6749 §2.3.1). If ClientSecret is empty, ClientID is
	// sent as `client_id` in the form (a public client); if both are empty, the request has no
	// client authentication (HTTPClient may do it, with mTLS say).
	ClientID, ClientSecret string
	// Resource is the upstream's canonical URI, sent as `resource` (RFC 8693 §2.1, RFC 8707).
	// If empty, none is sent.
	Resource string
	// Audience is sent as `audience`; if empty, none is sent.
	Audience string
	// Scopes are sent as `scope`; if empty, none is sent.
	Scopes []string
	// SubjectTokenType is the type of the principal's token. If empty, defaults to
	// "urn:ietf:params:oauth:token-type:access_token".
	SubjectTokenType string
	// RequestedTokenType is sent as `requested_token_type`; if empty, none is sent.
	RequestedTokenType string
	// HTTPClient sends the token requests. If nil, a client with a 10s timeout that does not
	// follow redirects (a redirect fails the request: the form carries the subject token).
	HTTPClient *http.Client
	// Now is the clock of expiries. If nil, time.Now.
	Now func() time.Time
	// Lifetime ends the token requests in flight when it is done (the gateway's lifetime);
	// if nil, they end by their own timeout only.
	Lifetime context.Context
}

// Exchanger performs RFC 8693 token exchange toward one upstream: it trades a principal's own
// access token (the subject token the gateway got from the client, sent to this authorization
// server only, never to an upstream) for a token for the upstream, and keeps the latter per
// principal until shortly before it expires (30s, or a tenth of its lifetime if that is
// shorter). An exchanged token is used until then even if the subject token it came from
// expired or was replaced meanwhile: it was issued for the same principal.
//
// Memory: an Exchanger keeps one entry per principal remembered and not forgotten (Forget, on
// the end of the principal's last session). Besides, whenever a new principal is remembered
// and the map holds at least twice as many entries as after the previous sweep (and at least
// 64), entries whose subject token and exchanged token have both expired are dropped. So
// the map holds at most 64 entries, or twice the principals that had a live token at the last
// sweep, at an amortised constant cost per new principal. A subject token
// remembered with a zero expiry never expires by itself: its entry stays until Forget.
//
// An Exchanger is safe for concurrent use. Its zero value is not usable: use NewExchanger.
type Exchanger struct {
	cfg    ExchangeConfig // defaults applied, Scopes copied; never modified
	client *http.Client
	now    func() time.Time

	// mu guards entries and sweepAt.
	mu sync.Mutex
	// entries holds the principals remembered, by session.Principal.Key.
	entries map[string]*exchangeEntry
	// sweepAt is the number of entries at which Remember of a new principal sweeps.
	sweepAt int

	// joined, if set (tests), is called when a caller waits for an exchange another started.
	joined func()
}

// exchangeEntry is what an Exchanger keeps of one principal; its Exchanger's mu guards it.
type exchangeEntry struct {
	// subject is the principal's latest subject token; subjectExpiry its expiry (zero:
	// unknown, taken as never).
	subject       string
	subjectExpiry time.Time
	// tok is the exchanged token and the exchange in flight.
	tok cell
}

// NewExchanger returns an Exchanger for cfg, which it copies. A missing TokenURL is reported
// by the Sources' Header.
func NewExchanger(cfg ExchangeConfig) *Exchanger {
	cfg.Scopes = append([]string(nil), cfg.Scopes...)
	if cfg.SubjectTokenType == "" {
		cfg.SubjectTokenType = tokenTypeAccessToken
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultTokenClient()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Exchanger{
		cfg:     cfg,
		client:  cfg.HTTPClient,
		now:     cfg.Now,
		entries: map[string]*exchangeEntry{},
		sweepAt: minSweep,
	}
}

// Remember records p's latest subject token and its expiry (zero: unknown, taken as never).
// The gateway calls it on each authenticated request: when the token did not change it is one
// map look-up under a mutex. A later token replaces an earlier one; the exchanged token, if
// any, is kept. The anonymous principal and an empty token are ignored.
func (e *Exchanger) Remember(p session.Principal, subjectToken string, expiry time.Time) {
	key := p.Key()
	if key == "" || subjectToken == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent, ok := e.entries[key]; ok {
		ent.subject, ent.subjectExpiry = subjectToken, expiry
		return
	}
	if len(e.entries) >= e.sweepAt {
		e.sweepLocked(e.now())
		e.sweepAt = max(2*len(e.entries), minSweep)
	}
	e.entries[key] = &exchangeEntry{subject: subjectToken, subjectExpiry: expiry}
}

// Subject returns p's latest remembered subject token and its expiry, if it may still be
// exchanged: for a gateway replica that hands a call to the replica holding p's connection,
// which then remembers it too.
func (e *Exchanger) Subject(p session.Principal) (token string, expiry time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent := e.entries[p.Key()]
	if ent == nil || !ent.subjectCurrent(e.now()) {
		return "", time.Time{}, false
	}
	return ent.subject, ent.subjectExpiry, true
}

// sweepLocked drops the entries whose subject and exchanged tokens have both expired at now
// and that have no exchange in flight.
func (e *Exchanger) sweepLocked(now time.Time) {
	for key, ent := range e.entries {
		if ent.tok.inflight == nil && !ent.subjectCurrent(now) && !ent.tok.validLocked(now) {
			delete(e.entries, key)
		}
	}
}

// subjectCurrent reports whether ent's subject token may be exchanged at now.
func (ent *exchangeEntry) subjectCurrent(now time.Time) bool {
	return ent.subject != "" && (ent.subjectExpiry.IsZero() || now.Before(ent.subjectExpiry))
}

// Forget drops what is kept of p: its subject token and exchanged token. An exchange in
// flight for p still answers its waiters, but its token is not kept.
func (e *Exchanger) Forget(p session.Principal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.entries, p.Key())
}

// For returns the Source of p's exchanged token, sent as "Authorization: Bearer <token>".
// Its Header returns the cached token if it is still valid; otherwise it exchanges p's latest
// remembered subject token, which must not have expired: if there is none current it fails
// with ErrNoSubjectToken. Concurrent Headers for one principal share one token request, each
// waiting only as long as its own ctx allows. A failed exchange is not cached; the error of
// an answer the endpoint refused wraps a *TokenError.
func (e *Exchanger) For(p session.Principal) Source {
	return exchangerSource{e: e, key: p.Key()}
}

// exchangerSource is what For returns.
type exchangerSource struct {
	e   *Exchanger
	key string
}

func (s exchangerSource) Header(ctx context.Context) (string, string, error) {
	token, err := s.e.token(ctx, s.key)
	if err != nil {
		return "", "", fmt.Errorf("token exchange: %w", err)
	}
	return "Authorization", "Bearer " + token, nil
}

// token returns the exchanged token of the principal of key, exchanging if needed.
func (e *Exchanger) token(ctx context.Context, key string) (string, error) {
	if e.cfg.TokenURL == "" {
		return "", errors.New("no token URL configured")
	}
	e.mu.Lock()
	ent := e.entries[key]
	if ent == nil {
		e.mu.Unlock()
		return "", ErrNoSubjectToken
	}
	now := e.now()
	if ent.tok.validLocked(now) {
		token := ent.tok.token
		e.mu.Unlock()
		return token, nil
	}
	f := ent.tok.inflight
	joined := f != nil
	if f == nil {
		if !ent.subjectCurrent(now) {
			e.mu.Unlock()
			return "", ErrNoSubjectToken
		}
		f = newFlight()
		ent.tok.inflight = f
		go e.exchange(ctx, ent, f, ent.subject, ent.subjectExpiry)
	}
	e.mu.Unlock()
	if joined && e.joined != nil {
		e.joined()
	}
	return f.wait(ctx)
}

// exchange runs the token request of f for ent, started by a caller with ctx, and keeps its
// token in ent unless ent was forgotten meanwhile.
func (e *Exchanger) exchange(ctx context.Context, ent *exchangeEntry, f *flight, subject string, subjectExpiry time.Time) {
	ctx, cancel := detach(ctx, e.cfg.Lifetime)
	defer cancel()
	start := e.now()
	token, lifetime, err := e.request(ctx, subject)
	if err != nil {
		f.err = err
	} else {
		if lifetime <= 0 {
			lifetime = defaultExchangedLifetime
			if !subjectExpiry.IsZero() {
				lifetime = min(lifetime, subjectExpiry.Sub(start))
			}
		}
		// The lifetime counts from before the request: the token expires no earlier.
		f.token = token
		f.refreshAt = start.Add(lifetime - min(exchangeMargin, lifetime/10))
	}
	e.mu.Lock()
	if ent.tok.inflight == f {
		ent.tok.inflight = nil
	}
	if f.err == nil {
		ent.tok.token, ent.tok.refreshAt = f.token, f.refreshAt
	}
	e.mu.Unlock()
	close(f.done)
}

// exchangeResponse is a token endpoint's answer (RFC 8693 §2.2), success or error.
type exchangeResponse struct {
	AccessToken      string    `json:"access_token"`
	IssuedTokenType  string    `json:"issued_token_type"`
	TokenType        string    `json:"token_type"`
	ExpiresIn        expiresIn `json:"expires_in"`
	Error            string    `json:"error"`
	ErrorDescription string    `json:"error_description"`
}

// expiresIn is a number of seconds, sent as a JSON number or, by some servers, a string.
type expiresIn int64

func (x *expiresIn) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	s := strings.Trim(string(b), `"`)
	if s == "" {
		return nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("expires_in is not a number")
	}
	*x = expiresIn(min(n, float64(1<<31)))
	return nil
}

// request sends one token exchange request for subject and returns the issued token and its
// lifetime (zero if the answer did not say). Its errors hold neither token.
func (e *Exchanger) request(ctx context.Context, subject string) (string, time.Duration, error) {
	form := url.Values{
		"grant_type":         {grantTypeTokenExchange},
		"subject_token":      {subject},
		"subject_token_type": {e.cfg.SubjectTokenType},
	}
	if e.cfg.Resource != "" {
		form.Set("resource", e.cfg.Resource)
	}
	if e.cfg.Audience != "" {
		form.Set("audience", e.cfg.Audience)
	}
	if len(e.cfg.Scopes) > 0 {
		form.Set("scope", strings.Join(e.cfg.Scopes, " "))
	}
	if e.cfg.RequestedTokenType != "" {
		form.Set("requested_token_type", e.cfg.RequestedTokenType)
	}
	if e.cfg.ClientID != "" && e.cfg.ClientSecret == "" {
		form.Set("client_id", e.cfg.ClientID)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if e.cfg.ClientID != "" && e.cfg.ClientSecret != "" {
		// RFC 6749 §2.3.1: both form-encoded before Basic encoding.
		req.SetBasicAuth(url.QueryEscape(e.cfg.ClientID), url.QueryEscape(e.cfg.ClientSecret))
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse))
	if err != nil {
		return "", 0, fmt.Errorf("token response: %w", err)
	}
	var r exchangeResponse
	jsonErr := json.Unmarshal(body, &r)
	if resp.StatusCode != http.StatusOK || r.Error != "" {
		// An error answer that is not OAuth error JSON still gives its status.
		return "", 0, newTokenError(resp.StatusCode, r.Error, r.ErrorDescription)
	}
	if jsonErr != nil {
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		return "", 0, fmt.Errorf("token response (%s) is not token JSON: %w", ct, jsonErr)
	}
	if r.AccessToken == "" {
		return "", 0, errors.New("token response has no access_token")
	}
	// RFC 8693 §2.2.1: "N_A" when the issued token is not an access token; it is still sent
	// as a bearer token. Another type (DPoP, say) needs more than a header.
	if tt := r.TokenType; tt != "" && !strings.EqualFold(tt, "bearer") && !strings.EqualFold(tt, "N_A") {
		return "", 0, fmt.Errorf("token response has token_type %q, not Bearer", tt)
	}
	return r.AccessToken, time.Duration(r.ExpiresIn) * time.Second, nil
}

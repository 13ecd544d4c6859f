package credential

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tokenClientTimeout bounds a token endpoint request of the default HTTP client.
const tokenClientTimeout = 10 * time.Second

// ccExpiryDelta is how long before its expiry a client credentials token is replaced: the
// delta oauth2's ReuseTokenSource uses.
const ccExpiryDelta = 10 * time.Second

// ClientCredentialsConfig configures ClientCredentials.
type ClientCredentialsConfig struct {
	// TokenURL is the token endpoint of the upstream's authorization server. Required.
	TokenURL string
	// ClientID and ClientSecret authenticate the gateway at the token endpoint: HTTP Basic
	// first, and if the endpoint refuses that, in the form (oauth2's auto-detection; the
	// style that worked is then kept).
	ClientID, ClientSecret string
	// Scopes are sent as `scope`; if empty, no scope is sent.
	Scopes []string
	// Resource is the upstream's canonical URI, sent as the RFC 8707 `resource` parameter
	// (MCP 2025-11-25, Authorization, "Resource Parameter Implementation"). If empty, none
	// is sent.
	Resource string
	// Audience is sent as `audience`, which some authorization servers want; if empty, none
	// is sent.
	Audience string
	// HTTPClient sends the token requests. If nil, a client with a 10s timeout that does not
	// follow redirects (a redirect fails the request: the form carries secrets).
	HTTPClient *http.Client
	// Lifetime ends the token requests in flight when it is done (the gateway's lifetime);
	// if nil, they end by their own timeout only.
	Lifetime context.Context
}

// ClientCredentials returns a Source of "Authorization: Bearer <token>" with a token of the
// OAuth 2.0 client credentials grant (RFC 6749 §4.4) toward the upstream's authorization
// server. The token is cached and reused until 10s before its expiry (forever if the answer
// had no expires_in), as oauth2's ReuseTokenSource does; callers that find no valid token
// share one token request, each waiting only as long as its own ctx allows. A failed request
// is not cached: the next use asks again. The error of an answer the endpoint refused wraps
// a *TokenError.
//
// cfg is copied. A missing TokenURL is reported by Header.
func ClientCredentials(cfg ClientCredentialsConfig) Source {
	params := url.Values{}
	if cfg.Resource != "" {
		params.Set("resource", cfg.Resource)
	}
	if cfg.Audience != "" {
		params.Set("audience", cfg.Audience)
	}
	client := cfg.HTTPClient
	if client == nil {
		client = defaultTokenClient()
	}
	return &clientCredentials{
		conf: &clientcredentials.Config{
			ClientID:       cfg.ClientID,
			ClientSecret:   cfg.ClientSecret,
			TokenURL:       cfg.TokenURL,
			Scopes:         append([]string(nil), cfg.Scopes...),
			EndpointParams: params,
		},
		client:   client,
		now:      time.Now,
		lifetime: cfg.Lifetime,
	}
}

// defaultTokenClient is the HTTP client of token requests when the config names none.
func defaultTokenClient() *http.Client {
	return &http.Client{
		Timeout: tokenClientTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// clientCredentials is what ClientCredentials returns.
type clientCredentials struct {
	// conf is never modified after construction (it holds oauth2's auth-style cache, which
	// is safe for concurrent use).
	conf   *clientcredentials.Config
	client *http.Client
	now    func() time.Time
	// lifetime ends the fetches in flight (ClientCredentialsConfig.Lifetime); nil: none.
	lifetime context.Context

	// mu guards the cached token and the fetch in flight.
	mu  sync.Mutex
	tok cell

	// joined, if set (tests), is called when a caller waits for a fetch another one started.
	joined func()
}

func (c *clientCredentials) Header(ctx context.Context) (string, string, error) {
	if c.conf.TokenURL == "" {
		return "", "", errors.New("client credentials: no token URL configured")
	}
	c.mu.Lock()
	if c.tok.validLocked(c.now()) {
		token := c.tok.token
		c.mu.Unlock()
		return "Authorization", "Bearer " + token, nil
	}
	f := c.tok.inflight
	joined := f != nil
	if f == nil {
		f = newFlight()
		c.tok.inflight = f
		go c.fetch(ctx, f)
	}
	c.mu.Unlock()
	if joined && c.joined != nil {
		c.joined()
	}
	token, err := f.wait(ctx)
	if err != nil {
		return "", "", fmt.Errorf("client credentials: %w", err)
	}
	return "Authorization", "Bearer " + token, nil
}

// fetch runs the token request of f, started by a caller with ctx, and caches its token.
func (c *clientCredentials) fetch(ctx context.Context, f *flight) {
	ctx, cancel := detach(ctx, c.lifetime)
	defer cancel()
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.client)
	tok, err := c.conf.Token(ctx)
	if err != nil {
		f.err = tokenRequestError(err)
	} else {
		f.token = tok.AccessToken
		if !tok.Expiry.IsZero() {
			f.refreshAt = tok.Expiry.Add(-ccExpiryDelta)
		}
	}
	c.mu.Lock()
	c.tok.inflight = nil
	if f.err == nil {
		c.tok.token, c.tok.refreshAt = f.token, f.refreshAt
	}
	c.mu.Unlock()
	close(f.done)
}

// tokenRequestError turns oauth2's error for a refused token request into a *TokenError,
// whose text has no response body (an endpoint may echo what it was sent).
func tokenRequestError(err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		return err
	}
	status := 0
	if re.Response != nil {
		status = re.Response.StatusCode
	}
	return newTokenError(status, re.ErrorCode, re.ErrorDescription)
}

package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgs are the JWS algorithms a token may be signed with: asymmetric ones only, so
// "none" and HMAC (including HMAC keyed with an issuer's public key) never verify.
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

const (
	// fetchTimeout bounds one discovery-plus-JWKS refresh, whatever the HTTP client's timeout.
	fetchTimeout = 10 * time.Second
	// maxDocumentBytes bounds a discovery document or a JWKS.
	maxDocumentBytes = 1 << 20
)

// Outcomes of keySet.verify that the caller turns into client messages.
var (
	errUnknownKey      = errors.New("no signing key with the token's kid")
	errBadSignature    = errors.New("signature does not verify")
	errKeysUnavailable = errors.New("signing keys unavailable")
	errClosed          = errors.New("authenticator closed")
)

// fetchGroup owns the goroutines that fetch discovery documents and key sets, for all the
// issuers of an Authenticator. Lifecycle: go starts fetches until close; close cancels them
// and waits for them.
type fetchGroup struct {
	ctx    context.Context // lifetime: cancelled by close
	cancel context.CancelFunc

	// mu guards closed and orders wg.Add before the wg.Wait of close.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newFetchGroup() *fetchGroup {
	ctx, cancel := context.WithCancel(context.Background())
	return &fetchGroup{ctx: ctx, cancel: cancel}
}

// start runs f in a new goroutine with the group's lifetime context, unless the group is
// closed; it reports whether f was started.
func (g *fetchGroup) start(f func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f(g.ctx)
	}()
	return true
}

func (g *fetchGroup) close() {
	g.mu.Lock()
	g.closed = true
	g.cancel()
	g.mu.Unlock()
	g.wg.Wait()
}

// keySet is the oidc.KeySet of one issuer. It discovers the issuer's jwks_uri on first use,
// caches the keys, and verifies a token with the cached key that has the token's kid (or with
// every cached key when the token has none), so that once keys are cached, verification makes
// no network call. A kid it does not know makes it refresh (discovery if needed, then the
// JWKS), but at most once per interval, and one refresh at a time: tokens that arrive while
// one runs wait for it, each as long as its own ctx allows; tokens that arrive after a recent
// refresh are refused at once. A refresh that fails keeps the keys held before.
type keySet struct {
	issuer    string
	client    *http.Client
	now       func() time.Time
	interval  time.Duration
	allowHTTP bool
	logger    *slog.Logger
	group     *fetchGroup

	// generation counts the successful refreshes: a token verified with an earlier
	// generation's keys is verified again (verifiedTokens).
	generation keyGeneration

	// mu guards the fields below.
	mu sync.Mutex
	// jwksURL is the jwks_uri from discovery; "" until discovery succeeds, and again after a
	// refresh fails (the next one discovers afresh).
	jwksURL string
	// keys are the keys of the last successful refresh. Invariant: replaced whole, never
	// modified in place, so a reader may use the slice after unlocking.
	keys []jose.JSONWebKey
	// lastAttempt is when the last refresh started (by now); zero before the first.
	lastAttempt time.Time
	// lastErr is the error of the last refresh that ended; nil after a success.
	lastErr error
	// inflight is the refresh running now, nil when none is. Lifecycle: set when a refresh
	// starts, set back to nil by that refresh when it ends.
	inflight *refresh
}

var _ oidc.KeySet = (*keySet)(nil)

// refresh is one run of discovery and JWKS fetch that several verifications may wait for.
type refresh struct {
	done chan struct{} // closed when the refresh ended
	err  error         // written before done is closed
}

// verifyStateKey is the context key of a *verifyState: VerifySignature's outcome, for its
// caller, because the oidc verifier flattens the errors of a KeySet into strings.
type verifyStateKey struct{}

type verifyState struct{ err error }

// VerifySignature implements oidc.KeySet: it returns the payload of jwt if a key of the
// issuer signed it. Safe for concurrent use.
func (ks *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	payload, err := ks.verify(ctx, jwt)
	if st, ok := ctx.Value(verifyStateKey{}).(*verifyState); ok {
		st.err = err
	}
	return payload, err
}

func (ks *keySet) verify(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(jwt, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("parse token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, fmt.Errorf("token has %d signatures, want 1", len(jws.Signatures))
	}
	h := jws.Signatures[0].Header
	kid, alg := h.KeyID, jose.SignatureAlgorithm(h.Algorithm)

	ks.mu.Lock()
	keys := ks.keys
	ks.mu.Unlock()
	if payload, known, err := verifyWith(jws, keys, kid, alg); known {
		return payload, err
	}

	// The kid is not among the cached keys (or, without a kid, no cached key verifies):
	// the issuer may have rotated its keys.
	if err := ks.refresh(ctx); err != nil && !errors.Is(err, errTooSoon) {
		return nil, err
	}
	// Try again with the keys held now: those of our refresh, or of one that ended after
	// we looked.
	ks.mu.Lock()
	keys = ks.keys
	ks.mu.Unlock()
	if payload, known, err := verifyWith(jws, keys, kid, alg); known {
		return payload, err
	}
	return nil, unknownKey(kid)
}

func unknownKey(kid string) error {
	if kid == "" {
		return fmt.Errorf("no key verifies the token (it has no kid): %w", errBadSignature)
	}
	return errUnknownKey
}

// verifyWith verifies jws with the key of keys that has kid, or with every key when kid is
// "". known reports whether the outcome is final: a key with kid exists (then err says
// whether it verified), or, without a kid, a key verified.
func verifyWith(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string, alg jose.SignatureAlgorithm) (payload []byte, known bool, err error) {
	for i := range keys {
		k := &keys[i]
		if kid != "" && k.KeyID != kid {
			continue
		}
		if kid != "" {
			known = true
		}
		if !usableFor(k, alg) {
			continue
		}
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, true, nil
		}
	}
	if known {
		return nil, true, errBadSignature
	}
	return nil, false, nil
}

// usableFor reports whether k may verify a signature made with alg: a signing key (use "sig"
// or unset), for alg if it names one, of the key type alg needs.
func usableFor(k *jose.JSONWebKey, alg jose.SignatureAlgorithm) bool {
	if k.Use != "" && k.Use != "sig" {
		return false
	}
	if k.Algorithm != "" && k.Algorithm != string(alg) {
		return false
	}
	switch k.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(string(alg), "RS") || strings.HasPrefix(string(alg), "PS")
	case *ecdsa.PublicKey:
		return strings.HasPrefix(string(alg), "ES")
	case ed25519.PublicKey:
		return alg == jose.EdDSA
	}
	return false
}

// errTooSoon is refresh's answer when the last refresh started less than an interval ago.
var errTooSoon = errors.New("keys were refreshed less than a refresh interval ago")

// refresh starts a refresh unless one started less than ks.interval ago, or joins the one in
// flight, and waits for it as long as ctx allows. A caller that gives up does not stop the
// refresh: the others may still wait for it.
func (ks *keySet) refresh(ctx context.Context) error {
	ks.mu.Lock()
	r := ks.inflight
	if r == nil {
		now := ks.now()
		if !ks.lastAttempt.IsZero() && now.Before(ks.lastAttempt.Add(ks.interval)) {
			lastErr := ks.lastErr
			ks.mu.Unlock()
			if lastErr != nil {
				return fmt.Errorf("%w: last refresh failed, next allowed after %v: %w", errKeysUnavailable, ks.interval, lastErr)
			}
			return errTooSoon
		}
		r = &refresh{done: make(chan struct{})}
		if !ks.group.start(func(ctx context.Context) { ks.run(ctx, r) }) {
			ks.mu.Unlock()
			return fmt.Errorf("%w: %w", errKeysUnavailable, errClosed)
		}
		ks.inflight = r
		ks.lastAttempt = now
	}
	ks.mu.Unlock()

	select {
	case <-ctx.Done():
		return fmt.Errorf("wait for the issuer's keys: %w", ctx.Err())
	case <-r.done:
		if r.err != nil {
			return fmt.Errorf("%w: %w", errKeysUnavailable, r.err)
		}
		return nil
	}
}

// run is the goroutine of one refresh: discovery if the jwks_uri is not known, then the JWKS.
func (ks *keySet) run(ctx context.Context, r *refresh) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()

	ks.mu.Lock()
	jwksURL := ks.jwksURL
	ks.mu.Unlock()
	var keys []jose.JSONWebKey
	var err error
	if jwksURL == "" {
		jwksURL, err = ks.discover(ctx)
	}
	if err == nil {
		keys, err = ks.fetchKeys(ctx, jwksURL)
	}

	ks.mu.Lock()
	if err == nil {
		ks.keys = keys
		ks.jwksURL = jwksURL
		ks.generation.Add(1)
	} else {
		ks.jwksURL = ""
	}
	ks.lastErr = err
	ks.inflight = nil
	ks.mu.Unlock()

	// Log before waking the waiters, so that the log is written when they return.
	if err != nil {
		ks.logger.Warn("cannot get the signing keys of a token issuer; its tokens are refused until a later refresh succeeds",
			"issuer", ks.issuer, "retry_after", ks.interval, "error", err)
	} else {
		ks.logger.Debug("fetched the signing keys of a token issuer", "issuer", ks.issuer, "keys", len(keys))
	}
	r.err = err
	close(r.done)
}

// discover fetches the issuer's OpenID Connect discovery document and returns its jwks_uri
// (OpenID Connect Discovery 1.0 §4; the issuer it names must be ours, §4.3).
func (ks *keySet) discover(ctx context.Context) (string, error) {
	u := strings.TrimSuffix(ks.issuer, "/") + "/.well-known/openid-configuration"
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := ks.getJSON(ctx, u, &doc); err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	if doc.Issuer != ks.issuer {
		return "", fmt.Errorf("discovery: document names issuer %q, want %q", doc.Issuer, ks.issuer)
	}
	if doc.JWKSURI == "" {
		return "", errors.New("discovery: document has no jwks_uri")
	}
	ju, err := url.Parse(doc.JWKSURI)
	if err == nil {
		err = checkFetchURL(ju, ks.allowHTTP)
	}
	if err != nil {
		return "", fmt.Errorf("discovery: jwks_uri %q: %w", doc.JWKSURI, err)
	}
	return doc.JWKSURI, nil
}

// fetchKeys fetches the JWKS at u and returns its public signing keys. Keys of types that
// go-jose does not know, or that are not public asymmetric keys, are skipped (RFC 7517 §5:
// implementations should ignore keys they do not understand).
func (ks *keySet) fetchKeys(ctx context.Context, u string) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := ks.getJSON(ctx, u, &raw); err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	var set jose.JSONWebKeySet
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			set.Keys = append(set.Keys, k)
		}
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("fetch JWKS: the key set has no usable signing key (%d keys)", len(raw.Keys))
	}
	return set.Keys, nil
}

func (ks *keySet) getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := ks.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocumentBytes))
		return fmt.Errorf("GET %s: status %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: document larger than %d bytes", u, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: decode: %w", u, err)
	}
	return nil
}

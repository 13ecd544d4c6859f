// Package grants keeps the tokens users obtain when they connect their own accounts at an
// upstream through the gateway (OAuth): one Grant per principal and upstream, in a Vault
// that every replica reads. A caller that finds a grant's token about to expire (or refused)
// has it refreshed, once, whichever replicas ask at the same time.
//
//	keys, _ := seal.NewKeys(cfgKeys)
//	v := grants.NewRedisVault(client, "manifold", keys, nil) // or NewFileVault(stateDir, keys, nil)
//	defer v.Close()
//	err := v.Put(ctx, grants.Grant{Principal: p, Upstream: "github", Token: tok, Issuer: asIssuer})
//	g, err := v.Refresh(ctx, p, "github", refreshWithTheAS) // the stored grant, refreshed if due
//	if errors.Is(err, grants.ErrInvalidGrant) || errors.Is(err, grants.ErrNotFound) {
//		... the user must connect the upstream again ...
//	}
//	// The upstream answered 401 to g's token before its expiry: refresh it, once for all
//	// the callers it refused.
//	g, err = v.RefreshRejected(ctx, p, "github", g.Token.AccessToken, refreshWithTheAS)
//	infos, err := v.List(ctx, p) // what a user (or the admin API) sees: never a token
//
// What is stored where:
//
//   - With Redis (NewRedisVault), under the key prefix of the gateway's session store:
//     <prefix>:grants:{<principal hash>} is a hash of the principal's grants, one field per
//     upstream name, each value a grant sealed with the gateway's keys (seal.PurposeGrants),
//     and the field "" the principal itself, sealed (for ListAll, which knows only hashes);
//     <prefix>:grants:{<principal hash>}:refresh:<upstream> is the lock of a refresh in
//     flight (a random token, with a ttl of twice Options.RefreshTimeout);
//     <prefix>:grants:index is a sorted set of the principal hashes that have grants, for
//     ListAll. The principal hash is the first 32 hex digits of the SHA-256 of the
//     principal's issuer and subject, so no key names a user, and the hash tag keeps all of a
//     principal's keys in one cluster slot.
//   - Without Redis (NewFileVault), in the state directory: <state_dir>/grants/<principal
//     hash>.json holds the principal and its grants, each sealed as above (base64 in JSON),
//     mode 0600, replaced whole (temporary file, sync, rename) under an exclusive flock of
//     <principal hash>.lock beside it, so that processes sharing the directory lose no
//     write; <principal hash>.<upstream hash>.refresh is flocked while a refresh runs. The
//     lock files are empty, and stay.
//
// Each sealed grant is bound (associated data) to its principal's issuer and subject and its
// upstream: a value copied under another principal's or upstream's key does not open, nor
// does one changed in place; both are reported as ErrUnreadable. No token is ever stored, sent
// or logged in the clear by this package, and GrantInfo, what lists return, holds none.
package grants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Errors callers branch on. Test them with errors.Is.
var (
	// ErrNotFound: the principal has no grant for that upstream; the user must connect it.
	ErrNotFound = errors.New("no grant for this principal and upstream: connect the upstream")
	// ErrUnreadable: a stored grant does not open: it was changed, moved under another key,
	// or sealed with a key no longer in the gateway's keys. Delete it (revoke) and connect
	// the upstream again; if every grant is unreadable, put the old key back in keys.
	ErrUnreadable = errors.New("the stored grant cannot be opened (changed, moved, or sealed with a key no longer in keys): revoke it and connect the upstream again")
	// ErrInvalidGrant is what a RefreshFunc returns (wrapped) when the authorization server
	// answered invalid_grant (RFC 6749 §5.2): the refresh token is revoked or expired.
	// Refresh then deletes the grant and returns an error that wraps it: the user must
	// connect the upstream again.
	ErrInvalidGrant = errors.New("the authorization server refused the refresh token (invalid_grant)")
	// ErrNoRefreshToken: the grant is due for a refresh but has no refresh token; the user
	// must connect the upstream again once its access token has expired.
	ErrNoRefreshToken = errors.New("the grant has no refresh token: connect the upstream again when its token expires")
	// ErrRefreshElsewhere: another replica (or process) held the refresh of the grant and
	// did not store a new token within its bound; the caller may try again.
	ErrRefreshElsewhere = errors.New("another replica was refreshing the grant and did not finish: try again")
	// ErrClosed: the Vault is closed.
	ErrClosed = errors.New("the grant vault is closed")
)

// Principal names a user as the gateway authenticated it: the issuer of its token (or the
// gateway's API-key issuer) and the subject. Both are required: a subject alone is not a
// user, as two issuers may give the same one.
type Principal struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
}

// String names the principal in errors: subject@issuer.
func (p Principal) String() string { return p.Subject + "@" + p.Issuer }

// Hash is the principal's name in keys and file names, which names no user: the first 32
// hex digits of the SHA-256 of issuer, NUL, subject.
func (p Principal) Hash() string {
	sum := sha256.Sum256([]byte(p.Issuer + "\x00" + p.Subject))
	return hex.EncodeToString(sum[:16])
}

// Token is what an authorization server issued (RFC 6749 §5.1). Its String, GoString,
// LogValue and MarshalJSON never show the tokens: only the Vault's sealed storage holds them.
type Token struct {
	AccessToken  string
	RefreshToken string
	// TokenType is the token's type, as the server named it ("Bearer", "DPoP").
	TokenType string
	// Expiry is when the access token expires; zero if the server did not say.
	Expiry time.Time
	// Scopes are the scopes granted.
	Scopes []string
}

// String shows what the token is, never the token.
func (t Token) String() string {
	return fmt.Sprintf("token{type: %q, expiry: %s, scopes: %q, refreshable: %v}", t.TokenType, t.Expiry.Format(time.RFC3339), t.Scopes, t.RefreshToken != "")
}

// GoString is String: %#v does not show the tokens either.
func (t Token) GoString() string { return t.String() }

// LogValue is String, for slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// tokenShown is what MarshalJSON shows of a Token.
type tokenShown struct {
	TokenType   string    `json:"token_type,omitempty"`
	Expiry      time.Time `json:"expiry,omitzero"`
	Scopes      []string  `json:"scopes,omitempty"`
	Refreshable bool      `json:"refreshable"`
}

// MarshalJSON shows what the token is, never the token, so that a Token put in a JSON log
// or answer carries no secret.
func (t Token) MarshalJSON() ([]byte, error) {
	return json.Marshal(tokenShown{TokenType: t.TokenType, Expiry: t.Expiry, Scopes: t.Scopes, Refreshable: t.RefreshToken != ""})
}

// Grant is one principal's grant at one upstream. Grants the Vault returns are copies.
type Grant struct {
	Principal Principal
	// Upstream is the upstream's name in the gateway's config.
	Upstream string
	Token    Token
	// Issuer is the authorization server's issuer identifier the token came from.
	Issuer string
	// Resource is the URL of the upstream the grant was made for (the resource whose
	// authorization server issued the token, RFC 9728); "" for a grant stored before it was
	// recorded. A grant whose Resource is not the upstream's URL now is not to be used.
	Resource string
	// Granted is when the user connected the upstream; Put sets it to now if zero.
	Granted time.Time
	// Refreshed is when the token was last refreshed; zero if never.
	Refreshed time.Time
}

// Info is what may be shown of g: everything but its tokens.
func (g Grant) Info() GrantInfo {
	return GrantInfo{Principal: g.Principal, Upstream: g.Upstream, Issuer: g.Issuer, Resource: g.Resource,
		Scopes: slices.Clone(g.Token.Scopes), Expiry: g.Token.Expiry, Refreshable: g.Token.RefreshToken != "",
		Granted: g.Granted, Refreshed: g.Refreshed}
}

// String shows g's Info, never its tokens.
func (g Grant) String() string { return fmt.Sprintf("grant%+v", g.Info()) }

// GoString is String: %#v does not show the tokens either.
func (g Grant) GoString() string { return g.String() }

// LogValue is g's Info, for slog: no handler, text or JSON, shows its tokens.
func (g Grant) LogValue() slog.Value { return slog.AnyValue(g.Info()) }

// MarshalJSON is g's Info: a Grant encoded as JSON carries no token.
func (g Grant) MarshalJSON() ([]byte, error) { return json.Marshal(g.Info()) }

// GrantInfo is a grant as lists show it, to its user and to operators: no token.
type GrantInfo struct {
	Principal Principal `json:"principal"`
	Upstream  string    `json:"upstream"`
	Issuer    string    `json:"issuer,omitempty"`
	// Resource is the URL of the upstream the grant was made for; "" if not recorded.
	Resource string   `json:"resource,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	// Expiry is when the access token expires; zero if unknown.
	Expiry time.Time `json:"expiry,omitzero"`
	// Refreshable is set when the grant has a refresh token.
	Refreshable bool      `json:"refreshable"`
	Granted     time.Time `json:"granted,omitzero"`
	Refreshed   time.Time `json:"refreshed,omitzero"`
	// Unreadable is set for a stored grant that does not open (ErrUnreadable): only its
	// upstream is known, and its principal when the list was of one principal. Revoke it.
	Unreadable bool `json:"unreadable,omitempty"`
}

// Options configure a Vault. The zero value (or nil) is usable.
type Options struct {
	// Now is the clock that decides when a token is due for a refresh and stamps Granted
	// and Refreshed. If nil, time.Now.
	Now func() time.Time
	// RefreshBefore is how long before its expiry a token is refreshed. If zero, a minute.
	RefreshBefore time.Duration
	// RefreshTimeout bounds one refresh (the RefreshFunc and the writes around it), and
	// how long a replica waits for another's. The cross-replica lock lives twice as long,
	// so that it outlasts the refresh it guards. If zero, 15s.
	RefreshTimeout time.Duration
	// PollInterval is how often a replica waiting for another's refresh reads the grant
	// again. If zero, 100ms.
	PollInterval time.Duration
}

const (
	defaultRefreshBefore  = time.Minute
	defaultRefreshTimeout = 15 * time.Second
	defaultPollInterval   = 100 * time.Millisecond
	// DefaultListLimit is the number of principals a ListAll page holds when asked for 0;
	// MaxListLimit is the most it holds.
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// store is where a Vault keeps its grants: Redis or files. A stored grant's rev is its
// sealed form, different at each write: swap writes only over the rev it was given.
type store interface {
	// get returns the grant and its rev; ErrNotFound, or ErrUnreadable (with its rev).
	get(ctx context.Context, p Principal, upstream string) (Grant, string, error)
	// put stores g whatever was there.
	put(ctx context.Context, g Grant) error
	// swap replaces the grant of p and upstream with next (nil: deletes it) if its rev is
	// still rev, and reports whether it did.
	swap(ctx context.Context, p Principal, upstream, rev string, next *Grant) (bool, error)
	// del deletes the grant, ErrNotFound if none.
	del(ctx context.Context, p Principal, upstream string) error
	// list returns the principal's grants, ordered by upstream.
	list(ctx context.Context, p Principal) ([]GrantInfo, error)
	// listAll returns the grants of up to limit principals whose hashes follow after, and
	// the last hash returned ("" when there are no more).
	listAll(ctx context.Context, after string, limit int) ([]GrantInfo, string, error)
	// tryLock takes the refresh lock of p and upstream for ttl if it is free; release
	// frees it (if still held).
	tryLock(ctx context.Context, p Principal, upstream string, ttl time.Duration) (release func(), ok bool, err error)
	// locked reports whether the refresh lock is held (by anyone).
	locked(ctx context.Context, p Principal, upstream string) (bool, error)
	close() error
}

// Vault keeps the grants. It is safe for concurrent use; Close stops the refreshes in flight.
type Vault struct {
	st   store
	opts Options
	// life ends at Close: the refreshes run under it, not under their callers' contexts.
	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// waiting, if set (tests), is called when a refresh starts waiting for another
	// replica's.
	waiting func()

	mu sync.Mutex
	// flights holds the refreshes in flight in this process, by principal hash and
	// upstream. Guarded by mu. Invariant: an entry goes when its refresh ends.
	flights map[string]*flight
	// closed is set by Close. Guarded by mu.
	closed bool
}

func newVault(st store, opts *Options) *Vault {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefreshBefore == 0 {
		o.RefreshBefore = defaultRefreshBefore
	}
	if o.RefreshTimeout == 0 {
		o.RefreshTimeout = defaultRefreshTimeout
	}
	if o.PollInterval == 0 {
		o.PollInterval = defaultPollInterval
	}
	life, cancel := context.WithCancel(context.Background())
	return &Vault{st: st, opts: o, life: life, cancel: cancel, flights: map[string]*flight{}}
}

// Close stops the refreshes in flight, waits for them, and closes what the Vault opened
// (not a Redis client it was given). It may be called more than once.
func (v *Vault) Close() error {
	v.mu.Lock()
	already := v.closed
	v.closed = true
	v.mu.Unlock()
	v.cancel()
	v.wg.Wait()
	if already {
		return nil
	}
	return v.st.close()
}

// checkKey refuses a principal or upstream that cannot name a grant.
func checkKey(p Principal, upstream string) error {
	switch {
	case p.Issuer == "" || p.Subject == "":
		return fmt.Errorf("grants: principal %q: both issuer and subject are required", p)
	case upstream == "":
		return errors.New("grants: no upstream name")
	case strings.Contains(p.Issuer+p.Subject+upstream, "\x00"):
		return fmt.Errorf("grants: principal %q, upstream %q: names must not contain NUL", p, upstream)
	}
	return nil
}

// Put stores g, replacing the principal's grant at that upstream if any. Granted is set to
// now if zero. It needs a principal (issuer and subject), an upstream and an access token.
func (v *Vault) Put(ctx context.Context, g Grant) error {
	if err := checkKey(g.Principal, g.Upstream); err != nil {
		return err
	}
	if g.Token.AccessToken == "" {
		return fmt.Errorf("grants: put %s for %s: no access token", g.Upstream, g.Principal)
	}
	if g.Granted.IsZero() {
		g.Granted = v.opts.Now()
	}
	g.Token.Scopes = slices.Clone(g.Token.Scopes)
	if err := v.st.put(ctx, g); err != nil {
		return fmt.Errorf("grants: put %s for %s: %w", g.Upstream, g.Principal, err)
	}
	return nil
}

// Get returns the principal's grant at upstream, as stored (Refresh returns it refreshed if
// due). It fails with ErrNotFound or ErrUnreadable.
func (v *Vault) Get(ctx context.Context, p Principal, upstream string) (Grant, error) {
	if err := checkKey(p, upstream); err != nil {
		return Grant{}, err
	}
	g, _, err := v.st.get(ctx, p, upstream)
	if err != nil {
		return Grant{}, fmt.Errorf("grants: get %s for %s: %w", upstream, p, err)
	}
	return g, nil
}

// Delete deletes (revokes) the principal's grant at upstream, readable or not. It fails
// with ErrNotFound when there is none. It does not tell the authorization server.
func (v *Vault) Delete(ctx context.Context, p Principal, upstream string) error {
	if err := checkKey(p, upstream); err != nil {
		return err
	}
	if err := v.st.del(ctx, p, upstream); err != nil {
		return fmt.Errorf("grants: delete %s for %s: %w", upstream, p, err)
	}
	return nil
}

// DeleteIf deletes the principal's grant at upstream if stale reports true of it, unless it
// is replaced meanwhile (a grant put again is kept), and reports whether it deleted it. It
// fails with ErrNotFound or ErrUnreadable when there is no grant to test.
func (v *Vault) DeleteIf(ctx context.Context, p Principal, upstream string, stale func(Grant) bool) (bool, error) {
	if err := checkKey(p, upstream); err != nil {
		return false, err
	}
	g, rev, err := v.st.get(ctx, p, upstream)
	if err != nil {
		return false, fmt.Errorf("grants: delete %s for %s: %w", upstream, p, err)
	}
	if !stale(g) {
		return false, nil
	}
	deleted, err := v.st.swap(ctx, p, upstream, rev, nil)
	if err != nil {
		return false, fmt.Errorf("grants: delete %s for %s: %w", upstream, p, err)
	}
	return deleted, nil
}

// List returns what may be shown of the principal's grants, ordered by upstream; a grant
// that does not open is listed Unreadable.
func (v *Vault) List(ctx context.Context, p Principal) ([]GrantInfo, error) {
	if err := checkKey(p, "-"); err != nil {
		return nil, err
	}
	out, err := v.st.list(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("grants: list for %s: %w", p, err)
	}
	return out, nil
}

// ListAll returns what may be shown of every principal's grants, a page at a time: the
// grants of up to limit principals (if zero, DefaultListLimit; at most MaxListLimit) after
// cursor ("" for the first page), and the cursor of the next page, "" after the last. Pages
// are ordered by an opaque hash of the principal, then by upstream; a grant that does not
// open is listed Unreadable, without its principal.
func (v *Vault) ListAll(ctx context.Context, cursor string, limit int) ([]GrantInfo, string, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	out, next, err := v.st.listAll(ctx, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("grants: list all: %w", err)
	}
	return out, next, nil
}

// sortInfos orders infos by upstream.
func sortInfos(infos []GrantInfo) {
	slices.SortFunc(infos, func(a, b GrantInfo) int { return strings.Compare(a.Upstream, b.Upstream) })
}

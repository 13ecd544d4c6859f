package grants

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"
)

// RefreshFunc asks the authorization server for a new token with the grant's refresh token
// (RFC 6749 §6). A RefreshToken or Scopes left empty in its result keep the grant's (the
// server need not send them again). When the server answers invalid_grant it returns an
// error that wraps ErrInvalidGrant. It runs under a context of the Vault's, bounded by
// Options.RefreshTimeout, not under its caller's.
type RefreshFunc func(ctx context.Context, g Grant) (Token, error)

// flight is a refresh in flight in this process, shared by all who ask for it.
type flight struct {
	// done is closed when the refresh ends; g and err are set before.
	done chan struct{}
	g    Grant
	err  error
}

// Refresh returns the principal's grant at upstream, refreshed by fn first when its token
// expires within Options.RefreshBefore (a token of unknown expiry never does); otherwise as
// stored. One refresh of a grant runs at a time: in this process, callers that ask while
// one runs wait for it and get its result (their fn is not called); across replicas (and
// processes sharing a state directory), the refresh holds a lock, and a replica that finds
// it held waits, at most RefreshTimeout, for the new token to be stored, and does not
// refresh itself.
//
// Each caller waits as long as its ctx allows; the refresh itself goes on for the others.
// It fails with ErrNotFound when there is no grant; with an error that wraps
// ErrInvalidGrant when the server refused the refresh token, after deleting the grant; with
// ErrNoRefreshToken, ErrRefreshElsewhere, or fn's error otherwise. A grant revoked or put
// again while it is refreshed keeps what was stored meanwhile.
func (v *Vault) Refresh(ctx context.Context, p Principal, upstream string, fn RefreshFunc) (Grant, error) {
	return v.refreshShared(ctx, p, upstream, "", fn)
}

// RefreshRejected is Refresh for a caller whose upstream refused the access token rejected
// (HTTP 401) before its expiry: the grant is refreshed if its access token is still that
// one, or if it is due; a grant whose token another caller has replaced meanwhile is
// returned as it is now, so that many callers refused at once refresh it once.
func (v *Vault) RefreshRejected(ctx context.Context, p Principal, upstream, rejected string, fn RefreshFunc) (Grant, error) {
	if rejected == "" {
		return Grant{}, errors.New("grants: RefreshRejected: no rejected token given")
	}
	return v.refreshShared(ctx, p, upstream, rejected, fn)
}

// refreshShared is Refresh and RefreshRejected: rejected is the access token a caller saw
// refused, "" for none.
func (v *Vault) refreshShared(ctx context.Context, p Principal, upstream, rejected string, fn RefreshFunc) (Grant, error) {
	if err := checkKey(p, upstream); err != nil {
		return Grant{}, err
	}
	if fn == nil {
		return Grant{}, errors.New("grants: refresh: no RefreshFunc given")
	}
	g, _, err := v.st.get(ctx, p, upstream)
	if err != nil {
		return Grant{}, fmt.Errorf("grants: refresh %s for %s: %w", upstream, p, err)
	}
	if !v.due(g, rejected) {
		return g, nil
	}
	k := p.Hash() + "\x00" + upstream
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return Grant{}, ErrClosed
	}
	f, ok := v.flights[k]
	if !ok {
		f = &flight{done: make(chan struct{})}
		v.flights[k] = f
		v.wg.Add(1)
		go v.fly(k, f, p, upstream, rejected, fn)
	}
	v.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return Grant{}, f.err
		}
		g := f.g
		g.Token.Scopes = append([]string(nil), g.Token.Scopes...)
		return g, nil
	case <-ctx.Done():
		return Grant{}, fmt.Errorf("grants: refresh %s for %s: %w", upstream, p, context.Cause(ctx))
	}
}

// fly runs the refresh of flight f, under the Vault's lifetime, and ends it.
func (v *Vault) fly(k string, f *flight, p Principal, upstream, rejected string, fn RefreshFunc) {
	defer v.wg.Done()
	ctx, cancel := context.WithTimeout(v.life, v.opts.RefreshTimeout)
	defer cancel()
	f.g, f.err = v.refresh(ctx, p, upstream, rejected, fn)
	if f.err != nil {
		f.err = fmt.Errorf("grants: refresh %s for %s: %w", upstream, p, f.err)
	}
	v.mu.Lock()
	delete(v.flights, k)
	v.mu.Unlock()
	close(f.done)
}

// due reports whether g's token is to be refreshed: it expires within RefreshBefore, or it
// is rejected (if not "").
func (v *Vault) due(g Grant, rejected string) bool {
	if rejected != "" && subtle.ConstantTimeCompare([]byte(rejected), []byte(g.Token.AccessToken)) == 1 {
		return true
	}
	return !g.Token.Expiry.IsZero() && !v.opts.Now().Before(g.Token.Expiry.Add(-v.opts.RefreshBefore))
}

// refresh refreshes the grant if it is due, holding the cross-replica lock, or waits for the
// replica that holds it.
func (v *Vault) refresh(ctx context.Context, p Principal, upstream, rejected string, fn RefreshFunc) (Grant, error) {
	g, rev, err := v.st.get(ctx, p, upstream)
	if err != nil || !v.due(g, rejected) {
		return g, err
	}
	if g.Token.RefreshToken == "" {
		return Grant{}, ErrNoRefreshToken
	}
	release, ok, err := v.st.tryLock(ctx, p, upstream, 2*v.opts.RefreshTimeout)
	if err != nil {
		return Grant{}, fmt.Errorf("take the refresh lock: %w", err)
	}
	if !ok {
		return v.await(ctx, p, upstream, rev)
	}
	defer release()
	// Read again under the lock: a refresh elsewhere may have ended since.
	if g, rev, err = v.st.get(ctx, p, upstream); err != nil || !v.due(g, rejected) {
		return g, err
	}
	tok, err := fn(ctx, g)
	if errors.Is(err, ErrInvalidGrant) {
		deleted, derr := v.st.swap(ctx, p, upstream, rev, nil)
		switch {
		case derr != nil:
			return Grant{}, fmt.Errorf("%w; deleting the grant failed too: %w", err, derr)
		case !deleted: // revoked, or connected again, meanwhile: what is stored now stays
			return Grant{}, fmt.Errorf("the grant changed while it was refreshed: try again: %w", err)
		}
		return Grant{}, fmt.Errorf("the grant is deleted: connect %s again: %w", upstream, err)
	}
	if err != nil {
		return Grant{}, err
	}
	if tok.AccessToken == "" {
		return Grant{}, errors.New("the authorization server returned no access token")
	}
	next := g
	next.Token.AccessToken, next.Token.Expiry = tok.AccessToken, tok.Expiry
	if tok.TokenType != "" {
		next.Token.TokenType = tok.TokenType
	}
	if tok.RefreshToken != "" {
		next.Token.RefreshToken = tok.RefreshToken
	}
	if tok.Scopes != nil {
		next.Token.Scopes = append([]string(nil), tok.Scopes...)
	}
	next.Refreshed = v.opts.Now()
	swapped, err := v.st.swap(ctx, p, upstream, rev, &next)
	if err != nil {
		return Grant{}, fmt.Errorf("store the new token: %w", err)
	}
	if !swapped {
		// Revoked, or put again, meanwhile: what is stored now wins.
		g, _, err := v.st.get(ctx, p, upstream)
		return g, err
	}
	return next, nil
}

// await waits for the refresh another replica holds the lock of: until the grant stored is
// no longer the one of rev (it returns the new one), the grant is gone, or the lock is free
// with the grant unchanged (that refresh failed), or ctx (bounded by RefreshTimeout, as the
// holder's refresh is) ends.
func (v *Vault) await(ctx context.Context, p Principal, upstream, rev string) (Grant, error) {
	if v.waiting != nil {
		v.waiting()
	}
	tick := time.NewTicker(v.opts.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return Grant{}, fmt.Errorf("%w (%w)", ErrRefreshElsewhere, ctx.Err())
		case <-tick.C:
		}
		// The lock first: a refresh that ends between the two reads has stored its
		// token before it freed the lock.
		held, err := v.st.locked(ctx, p, upstream)
		if err != nil {
			return Grant{}, err
		}
		g, cur, err := v.st.get(ctx, p, upstream)
		if err != nil && !errors.Is(err, ErrUnreadable) {
			return Grant{}, err
		}
		if cur != rev {
			return g, err
		}
		if !held {
			return Grant{}, ErrRefreshElsewhere
		}
	}
}

package auth

import (
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the cache of verified tokens.
const (
	// maxVerified is the most tokens remembered at once; past it the oldest half go.
	maxVerified = 8192
	// maxVerifiedAge is the longest a verification is relied on without being done again.
	maxVerifiedAge = 5 * time.Minute
)

// verifiedTokens remembers the tokens this Authenticator verified, so that a client sending
// the same token with every request (every request of a session does) costs a map lookup
// instead of a signature verification, the dearest step of a request. A remembered token is
// still checked on each use against its own expiry (with the issuer's leeway); it is verified
// again after maxVerifiedAge, and as soon as its issuer's keys were refreshed, so that a key
// the issuer withdrew stops vouching for tokens at once. Only successes are remembered:
// refusals are cheap, and an attacker's made-up tokens must not fill the cache.
type verifiedTokens struct {
	mu      sync.RWMutex
	entries map[string]*verifiedToken // by the token itself
}

// verifiedToken is one remembered verification.
type verifiedToken struct {
	result *Authenticated
	// keys and generation are the issuer's key set and its generation when the token was
	// verified: a refresh since then invalidates the entry.
	keys       *keySet
	generation uint64
	// until is when the entry stops being relied on: the token's exp plus leeway, or
	// maxVerifiedAge after verification, whichever comes first.
	until time.Time
	// added orders entries for eviction.
	added time.Time
}

// lookup returns the remembered verification of tok, if it still holds at now.
func (c *verifiedTokens) lookup(tok string, now time.Time) (*Authenticated, bool) {
	c.mu.RLock()
	e := c.entries[tok]
	c.mu.RUnlock()
	if e == nil || !now.Before(e.until) || e.keys.generation.Load() != e.generation {
		return nil, false
	}
	return e.result, true
}

// remember records that tok verified as result with keys at generation, at now.
func (c *verifiedTokens) remember(tok string, result *Authenticated, keys *keySet, generation uint64, skew time.Duration, now time.Time) {
	until := now.Add(maxVerifiedAge)
	if exp := result.Expiry.Add(skew); exp.Before(until) {
		until = exp
	}
	if !now.Before(until) {
		return
	}
	e := &verifiedToken{result: result, keys: keys, generation: generation, until: until, added: now}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = make(map[string]*verifiedToken)
	}
	if len(c.entries) >= maxVerified {
		c.evictLocked(now)
	}
	c.entries[tok] = e
}

// evictLocked makes room: it drops the entries that no longer hold, then those older than
// half the longest age, then any, until at most half the cache is left (each eviction then
// buys maxVerified/2 cheap insertions).
func (c *verifiedTokens) evictLocked(now time.Time) {
	cutoff := now.Add(-maxVerifiedAge / 2)
	for _, drop := range []func(*verifiedToken) bool{
		func(e *verifiedToken) bool { return !now.Before(e.until) },
		func(e *verifiedToken) bool { return e.added.Before(cutoff) },
		func(*verifiedToken) bool { return true },
	} {
		for tok, e := range c.entries {
			if len(c.entries) <= maxVerified/2 {
				return
			}
			if drop(e) {
				delete(c.entries, tok)
			}
		}
	}
}

// keyGeneration counts a key set's successful refreshes.
type keyGeneration = atomic.Uint64

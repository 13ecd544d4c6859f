package approval

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Nonces spends single-use tokens: the nonce of an approval a 2026-07-28 client answers
// with a retry, so that one answer lets its call run once, whichever replica the retry
// reaches. In this process's memory, or, with Shared set, for every replica. It is safe for
// concurrent use; set its fields before the first use.
type Nonces struct {
	// Shared, when set, spends the nonces for every replica (RedisApprovals) instead of in
	// this process's memory.
	Shared NonceSpender
	// Now returns the current time. If nil, time.Now.
	Now func() time.Time

	mu    sync.Mutex
	spent map[string]time.Time // nonce → until when it is remembered. Guarded by mu.
	// swept is when spent was last rid of what expired: at most once a sweepEvery, so that
	// a spend does not walk every nonce. Guarded by mu.
	swept time.Time
}

// sweepEvery is how often spending a nonce also forgets those that expired; one kept longer
// stays spent longer, which refuses nothing that would have passed.
const sweepEvery = 10 * time.Second

// NonceSpender spends nonces for all replicas (RedisApprovals): an optional ability of the
// shared approvals, found by type assertion.
type NonceSpender interface {
	// Spend reports whether nonce was not spent before, and spends it for ttl; of callers
	// spending one nonce at once, one alone gets true.
	Spend(ctx context.Context, nonce string, ttl time.Duration) (bool, error)
}

var _ NonceSpender = (*RedisApprovals)(nil)

// Spend reports whether nonce was not spent before, and spends it until until (when what it
// guards stops being valid anyway, so that it need not be remembered longer). An error (the
// shared store failed) spends nothing: the caller refuses what the nonce guards.
func (n *Nonces) Spend(ctx context.Context, nonce string, until time.Time) (bool, error) {
	now := clock(n.Now)
	ttl := until.Sub(now)
	if ttl <= 0 {
		return false, nil
	}
	if n.Shared != nil {
		ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
		defer cancel()
		return n.Shared.Spend(ctx, nonce, ttl)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if now.Sub(n.swept) >= sweepEvery {
		n.swept = now
		for k, u := range n.spent {
			if !now.Before(u) {
				delete(n.spent, k)
			}
		}
	}
	if _, ok := n.spent[nonce]; ok {
		return false, nil
	}
	if n.spent == nil {
		n.spent = map[string]time.Time{}
	}
	n.spent[nonce] = until
	return true, nil
}

// Spend implements NonceSpender with a SET NX of the nonce, which expires by itself.
func (a *RedisApprovals) Spend(ctx context.Context, nonce string, ttl time.Duration) (bool, error) {
	ok, err := a.client.SetNX(ctx, a.nonces+nonce, 1, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("approvals: spend a nonce: %w", err)
	}
	return ok, nil
}

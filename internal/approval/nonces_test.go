package approval

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestNoncesSpendOnce: a nonce is spent once, in memory and in Redis, even by callers that
// spend it at once; a nonce past its end is not spent; in memory, it is forgotten after.
func TestNoncesSpendOnce(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) *Nonces
	}{
		{"memory", func(*testing.T) *Nonces { return &Nonces{Now: clock} }},
		{"redis", func(t *testing.T) *Nonces {
			client, prefix := openRedis(t)
			return &Nonces{Shared: NewRedisApprovals(client, prefix), Now: clock}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.store(t)
			ctx := context.Background()
			var won atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					ok, err := n.Spend(ctx, "n1", now.Add(time.Minute))
					if err != nil {
						t.Error(err)
					}
					if ok {
						won.Add(1)
					}
				})
			}
			wg.Wait()
			if won.Load() != 1 {
				t.Errorf("%d of 8 spent one nonce, want 1", won.Load())
			}
			if ok, _ := n.Spend(ctx, "n2", now); ok {
				t.Errorf("a nonce spent at its end was accepted")
			}
			if ok, _ := n.Spend(ctx, "n3", now.Add(time.Minute)); !ok {
				t.Errorf("another nonce was refused")
			}
		})
	}
}

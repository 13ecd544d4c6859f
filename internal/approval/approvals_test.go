package approval

import (
	"testing"
	"time"
)

// TestRedisApprovals: an approval granted through one client is seen through another (as by
// another replica), for its time to live only; other keys are not granted.
func TestRedisApprovals(t *testing.T) {
	client, prefix := openRedis(t)
	other, _ := openRedis(t)
	a, b := NewRedisApprovals(client, prefix), NewRedisApprovals(other, prefix)
	ctx := t.Context()
	if err := a.Grant(ctx, "k1", time.Minute); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"k1": true, "k2": false} {
		if got, err := b.Granted(ctx, key); err != nil || got != want {
			t.Errorf("Granted(%s) = %v, %v; want %v", key, got, err, want)
		}
	}
	ttl, err := client.PTTL(ctx, prefix+":approved:k1").Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("the approval's time to live: %v, %v; want up to a minute", ttl, err)
	}
}

package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestRedisActivityIndexForgetsExpiredSessions: the index of activity (EvictIdle) kept the
// member of every session that expired: Expire drops it, and keeps those of live sessions.
func TestRedisActivityIndexForgetsExpiredSessions(t *testing.T) {
	const idle = 400 * time.Millisecond
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: idle, EvictIdle: time.Minute})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	gone, err := s.Create(ctx, Record{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := s.Create(ctx, Record{})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 5*time.Second, "the unused session to expire", func() bool {
		if err := s.Keep(ctx, kept.ID); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, gone.ID)
		return errors.Is(err, ErrNotFound)
	})
	// Its member is older than the idle timeout on the store's clock too.
	testwait.Until(t, 5*time.Second, "the idle timeout to pass on the store's clock", func() bool {
		if err := s.Keep(ctx, kept.ID); err != nil {
			t.Fatal(err)
		}
		return time.Since(gone.CreatedAt) > idle
	})
	if _, err := s.Expire(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := raw.ZScore(ctx, s.activeKey, sessionHash(gone.ID)).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("the expired session's member of the index of activity: %v, want none", err)
	}
	if err := raw.ZScore(ctx, s.activeKey, sessionHash(kept.ID)).Err(); err != nil {
		t.Errorf("the kept session's member of the index of activity: %v", err)
	}
}

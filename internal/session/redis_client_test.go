package session

import (
	"context"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testredis"
)

// TestStoreOnASharedClient: a store given a client uses it and leaves it open when it
// closes, for the other state on it; a client and a server together are refused.
func TestStoreOnASharedClient(t *testing.T) {
	addr := redisAddr(t)
	client, err := NewRedisClient(&RedisOptions{URL: "redis://" + addr, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := NewRedisStore(&RedisOptions{Client: client, URL: "redis://" + addr, IdleTimeout: time.Minute}); err == nil {
		t.Error("NewRedisStore with a Client and a URL succeeded")
	}
	if _, err := NewRedisClient(&RedisOptions{Client: client, IdleTimeout: time.Minute}); err == nil {
		t.Error("NewRedisClient with a Client succeeded")
	}
	s, err := NewRedisStore(&RedisOptions{Client: client, KeyPrefix: testredis.Prefix(t, addr), IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("the shared client after the store closed: %v", err)
	}
}

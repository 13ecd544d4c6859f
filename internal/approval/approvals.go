package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisApprovals remembers approved calls for a while, in Redis, so that every replica
// sharing it honours an approval one of them granted. A key names what was approved (the
// gateway hashes the principal, or an anonymous caller's session, the tool and the arguments
// into it); it expires by itself.
type RedisApprovals struct {
	client redis.UniversalClient
	prefix string
	// nonces prefixes the keys of spent nonces (Spend).
	nonces string
}

// NewRedisApprovals returns the approvals kept in client under keyPrefix ("" for
// "manifold").
func NewRedisApprovals(client redis.UniversalClient, keyPrefix string) *RedisApprovals {
	if keyPrefix == "" {
		keyPrefix = "manifold"
	}
	return &RedisApprovals{client: client, prefix: keyPrefix + ":approved:", nonces: keyPrefix + ":nonce:"}
}

// Grant remembers an approval of key for ttl.
func (a *RedisApprovals) Grant(ctx context.Context, key string, ttl time.Duration) error {
	if err := a.client.Set(ctx, a.prefix+key, 1, ttl).Err(); err != nil {
		return fmt.Errorf("approvals: remember: %w", err)
	}
	return nil
}

// Granted reports whether an approval of key is remembered.
func (a *RedisApprovals) Granted(ctx context.Context, key string) (bool, error) {
	err := a.client.Get(ctx, a.prefix+key).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("approvals: look up: %w", err)
	}
	return true, nil
}

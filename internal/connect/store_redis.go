package connect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedisStore returns a Store in Redis on client, shared by every replica on the same server
// and prefix (if empty, "manifold"; the session store's prefix): each record is the string
// key <prefix>:connect:<key>, with the record's ttl. Take is GETDEL (Redis 6.2 or later), so
// that a record is taken once whichever replicas ask. Its PutOwned (OwnedPutter) counts an
// owner's records in <prefix>:connect:owner:<owner>, a counter that lives for the ttl of the
// first record it counted: an owner puts at most max records in each such window (so holds
// fewer than twice max unexpired). It does not connect, and does not close client. It panics
// if client is nil (a programming error).
func NewRedisStore(client redis.UniversalClient, prefix string) Store {
	if client == nil {
		panic("connect: NewRedisStore with a nil client")
	}
	if prefix == "" {
		prefix = "manifold"
	}
	return &redisStore{client: client, prefix: prefix + ":connect:"}
}

// redisStore is the Store of NewRedisStore.
type redisStore struct {
	client redis.UniversalClient
	// prefix begins every key: <prefix>:connect:.
	prefix string
}

// Put sets the key with its ttl.
func (s *redisStore) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("put connect record: ttl %v is not positive", ttl)
	}
	if err := s.client.Set(ctx, s.prefix+key, value, ttl).Err(); err != nil {
		return fmt.Errorf("put connect record in redis: %w", err)
	}
	return nil
}

// countOwned increments the counter KEYS[1], giving it the ttl ARGV[1] (milliseconds) when
// it is new, and returns its value.
var countOwned = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
`)

// PutOwned counts the record against owner, refuses it if that makes more than max in the
// counter's window, and sets the key with its ttl.
func (s *redisStore) PutOwned(ctx context.Context, owner, key string, value []byte, ttl time.Duration, max int) error {
	if ttl <= 0 {
		return fmt.Errorf("put connect record: ttl %v is not positive", ttl)
	}
	n, err := countOwned.Run(ctx, s.client, []string{s.prefix + "owner:" + owner}, ttl.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("count the connect records of one user in redis: %w", err)
	}
	if n > max {
		return fmt.Errorf("%w (%d records of one user)", ErrStoreFull, max)
	}
	return s.Put(ctx, key, value, ttl)
}

// Get reads the key.
func (s *redisStore) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := s.client.Get(ctx, s.prefix+key).Bytes()
	return v, redisResult("get", err)
}

// Take reads and deletes the key in one command.
func (s *redisStore) Take(ctx context.Context, key string) ([]byte, error) {
	v, err := s.client.GetDel(ctx, s.prefix+key).Bytes()
	return v, redisResult("take", err)
}

// redisResult maps a missing key to ErrNotFound and wraps other errors with op.
func redisResult(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.Nil):
		return ErrNotFound
	default:
		return fmt.Errorf("%s connect record in redis: %w", op, err)
	}
}

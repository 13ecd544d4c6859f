package session

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

func TestMain(m *testing.M) {
	// go-redis logs each failed dial; the tests that cut Redis off check the errors.
	redis.SetLogger(quietRedisLog{})
	code := m.Run()
	testredis.Stop()
	os.Exit(code)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// redisAddr returns the address of the test Redis (package testredis), or skips t.
func redisAddr(t testing.TB) string {
	t.Helper()
	return testredis.Addr(t)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// checkGoroutines is testwait.Goroutines.
func checkGoroutines(t testing.TB) {
	t.Helper()
	testwait.Goroutines(t)
}

func rawClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, ReadTimeout: 5 * time.Second})
}

// OpenTestRedisStore opens a RedisStore on the test Redis with opts (URL and KeyPrefix set
// here, unless given), closed when the test ends. It skips t when there is no Redis.
func OpenTestRedisStore(t testing.TB, opts RedisOptions) *RedisStore {
	t.Helper()
	if opts.URL == "" {
		opts.URL = "redis://" + redisAddr(t)
	}
	checkGoroutines(t)
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = testredis.Prefix(t, redisAddr(t))
	}
	s, err := NewRedisStore(&opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// scanKeys lists the keys under prefix, a store's key prefix or one of its kinds.
func scanKeys(t testing.TB, prefix string) ([]string, error) {
	t.Helper()
	return testredis.Keys(redisAddr(t), prefix+":")
}

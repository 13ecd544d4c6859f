package session

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
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

// startRedisServer starts a redis-server that keeps nothing on disk on a free loopback
// port, with extra arguments, and waits until it answers.
func startRedisServer(bin string, extra ...string) (string, *exec.Cmd, error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitRedis(addr, 5*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", nil, err
	}
	return addr, cmd, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitRedis(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := pingRedis(addr, 200*time.Millisecond)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pingRedis(addr string, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, DialerRetries: 1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*timeout)
	defer cancel()
	return c.Ping(ctx).Err()
}

// scanKeys lists the keys under prefix.
func scanKeys(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	var keys []string
	it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	return keys, it.Err()
}

// checkGoroutines fails t if, once its cleanups registered later have run, more
// goroutines run than now: what a test starts, it stops. go-redis's probe of a server that
// stopped answering sleeps 1s between tries, hence the wait.
func checkGoroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
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

package pin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

func TestMain(m *testing.M) {
	// go-redis logs each failed dial; TestRedisUnavailable checks the errors.
	redis.SetLogger(quietRedisLog{})
	code := m.Run()
	testredis.Stop()
	os.Exit(code)
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// redisClient returns a client of the test Redis (package testredis) and a key prefix of
// t's own, whose keys are deleted when t ends; it skips t when there is no Redis. The
// client is closed when t ends, and t fails if goroutines are left running then.
func redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !testwait.Within(3*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	})
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c, prefix
}

// openRedisStore opens a RedisStore of t's own on the test Redis.
func openRedisStore(t testing.TB) *RedisStore {
	t.Helper()
	c, prefix := redisClient(t)
	return NewRedisStore(c, prefix)
}

// TestRedisKeys: the store keeps one hash, under its prefix.
func TestRedisKeys(t *testing.T) {
	ctx := context.Background()
	c, prefix := redisClient(t)
	s := NewRedisStore(c, prefix)
	v := newVersion(t, `{"name": "a"}`)
	for _, tool := range []string{"a", "b"} {
		if _, _, err := s.Observe(ctx, "up", tool, v.def, current, t0); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := testredis.Keys(testredis.Addr(t), prefix)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{prefix + ":pins"}, keys); diff != "" {
		t.Errorf("keys mismatch (-want +got):\n%s", diff)
	}
	fields, err := c.HKeys(ctx, prefix+":pins").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(fields) != 2 || (fields[0] != "up\x00a" && fields[0] != "up\x00b") {
		t.Errorf("fields = %q, want up\\x00a and up\\x00b", fields)
	}
}

// TestRedisReplicasShare: stores on the same server and prefix see one set of pins; a store
// of another prefix sees none of them.
func TestRedisReplicasShare(t *testing.T) {
	ctx := context.Background()
	c1, prefix := redisClient(t)
	c2 := redis.NewClient(&redis.Options{Addr: testredis.Addr(t)})
	t.Cleanup(func() { _ = c2.Close() })
	a, b := NewRedisStore(c1, prefix), NewRedisStore(c2, prefix)
	v1, v2 := newVersion(t, `{"name": "a"}`), newVersion(t, `{"name": "a", "description": "changed"}`)

	if _, changed, err := a.Observe(ctx, "up", "a", v1.def, current, tick(0)); err != nil || !changed {
		t.Fatalf("first sight on a: %v, %v", changed, err)
	}
	if _, changed, err := b.Observe(ctx, "up", "a", v1.def, current, tick(1)); err != nil || changed {
		t.Fatalf("the same on b: changed %v, %v; want no change", changed, err)
	}
	if _, _, err := a.Observe(ctx, "up", "a", v2.def, current, tick(2)); err != nil {
		t.Fatal(err)
	}
	p, err := b.Accept(ctx, "up", "a", v2.h, "alice", tick(3))
	if err != nil {
		t.Fatalf("Accept on b of a change seen on a: %v", err)
	}
	list, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Pin{p}, list); diff != "" {
		t.Errorf("a's List mismatch (-want +got):\n%s", diff)
	}

	other := openRedisStore(t)
	if list, err := other.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List of another prefix = %v, %v; want none", list, err)
	}
}

// TestRedisCorruptPin: a stored value that is not a pin is an error, not a new pin.
func TestRedisCorruptPin(t *testing.T) {
	ctx := context.Background()
	c, prefix := redisClient(t)
	s := NewRedisStore(c, prefix)
	if err := c.HSet(ctx, prefix+":pins", "up\x00a", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	v := newVersion(t, `{"name": "a"}`)
	if _, _, err := s.Observe(ctx, "up", "a", v.def, current, t0); err == nil {
		t.Error("Observe over a corrupt pin succeeded")
	}
	if _, err := s.List(ctx); err == nil {
		t.Error("List with a corrupt pin succeeded")
	}
	if _, err := s.Accept(ctx, "up", "a", v.h, "alice", t0); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Accept of a corrupt pin = %v, want an error other than ErrNotFound", err)
	}
}

// TestRedisUnavailable: a Redis that does not answer is an error of each operation.
func TestRedisUnavailable(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	s := NewRedisStore(c, "mftest-unavailable")
	v := newVersion(t, `{"name": "a"}`)
	if _, _, err := s.Observe(ctx, "up", "a", v.def, current, t0); err == nil {
		t.Error("Observe succeeded")
	}
	if _, err := s.List(ctx); err == nil {
		t.Error("List succeeded")
	}
	if _, err := s.Accept(ctx, "up", "a", v.h, "alice", t0); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Accept = %v, want an error other than ErrNotFound", err)
	}
}

// TestRedisConflict: when another replica changes the pin between a store's read and its
// write, the store starts again from the other's pin, and gives up after maxConflicts.
func TestRedisConflict(t *testing.T) {
	ctx := context.Background()
	c, prefix := redisClient(t)
	s, other := NewRedisStore(c, prefix), NewRedisStore(c, prefix)
	v1, v2 := newVersion(t, `{"name": "a"}`), newVersion(t, `{"name": "a", "description": "changed"}`)

	calls := 0
	p, err := s.update(ctx, "observe", "up", "a", func(cur *Pin) (Pin, bool, error) {
		calls++
		if calls == 1 {
			// Another replica pins the tool, as it lists v1, meanwhile.
			if _, _, err := other.Observe(ctx, "up", "a", v1.def, current, tick(0)); err != nil {
				t.Fatal(err)
			}
		}
		return observe(cur, "up", "a", v2.def, current, tick(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("the change was computed %d times, want 2", calls)
	}
	want := Pin{Upstream: "up", Tool: "a", Hash: v1.h, Scheme: current, Definition: v1.def, Pinned: tick(0),
		Change: &Change{Hash: v2.h, Scheme: current, Definition: v2.def, Seen: tick(1)}}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("pin mismatch (-want +got):\n%s", diff)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Pin{want}, list); diff != "" {
		t.Errorf("List mismatch (-want +got):\n%s", diff)
	}

	// A pin that changes under every try.
	calls = 0
	_, err = s.update(ctx, "observe", "up", "b", func(cur *Pin) (Pin, bool, error) {
		calls++
		if err := c.HSet(ctx, prefix+":pins", field("up", "b"), fmt.Sprintf(`{"hash":"sha256:%d"}`, calls)).Err(); err != nil {
			t.Fatal(err)
		}
		return observe(cur, "up", "b", v1.def, current, tick(2))
	})
	if err == nil || calls != maxConflicts {
		t.Errorf("update under constant conflict = %v after %d tries, want an error after %d", err, calls, maxConflicts)
	}
}

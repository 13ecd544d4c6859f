package connect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

func TestMain(m *testing.M) { testredis.Main(m) }

// testStoreBasics checks what every Store does: Get keeps, Take takes once, Put replaces.
func testStoreBasics(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(absent) = %v, want ErrNotFound", err)
	}
	if _, err := s.Take(ctx, "absent"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Take(absent) = %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, "k", []byte("one"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "k", []byte("two"), time.Minute); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if v, err := s.Get(ctx, "k"); err != nil || string(v) != "two" {
			t.Errorf("Get = %q, %v; want two", v, err)
		}
	}
	if v, err := s.Take(ctx, "k"); err != nil || string(v) != "two" {
		t.Errorf("Take = %q, %v; want two", v, err)
	}
	if _, err := s.Take(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Take = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Take = %v, want ErrNotFound", err)
	}
}

// testStoreTakeOnce: of many callers taking the same record at once, exactly one gets it.
func testStoreTakeOnce(t *testing.T, s Store) {
	ctx := context.Background()
	for round := range 20 {
		key := fmt.Sprintf("once-%d", round)
		if err := s.Put(ctx, key, []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		const callers = 16
		got := make([]bool, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range callers {
			wg.Go(func() {
				<-start
				_, err := s.Take(ctx, key)
				got[i] = err == nil
				if err != nil && !errors.Is(err, ErrNotFound) {
					errs[i] = err
				}
			})
		}
		close(start)
		wg.Wait()
		n := 0
		for i := range callers {
			if got[i] {
				n++
			}
			if errs[i] != nil {
				t.Errorf("Take: %v", errs[i])
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d callers took the record, want 1", round, n)
		}
	}
}

func TestMemoryStore(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t.Run("basics", func(t *testing.T) { testStoreBasics(t, NewMemoryStore(0, clock.Now)) })
	t.Run("take once", func(t *testing.T) { testStoreTakeOnce(t, NewMemoryStore(0, clock.Now)) })
	t.Run("owned", func(t *testing.T) { testStoreOwned(t, NewMemoryStore(0, clock.Now), clock.Advance) })
	t.Run("owned, taken", func(t *testing.T) {
		ctx := context.Background()
		s := NewMemoryStore(0, clock.Now).(OwnedPutter)
		for _, k := range []string{"a", "b"} {
			if err := s.PutOwned(ctx, "alice", k, nil, time.Minute, 2); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutOwned(ctx, "alice", "a", []byte("again"), time.Minute, 2); err != nil {
			t.Errorf("PutOwned replacing the owner's own record: %v", err)
		}
		if _, err := s.(Store).Take(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := s.PutOwned(ctx, "alice", "c", nil, time.Minute, 2); err != nil {
			t.Errorf("PutOwned once one of the owner's records was taken: %v", err)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		ctx := context.Background()
		s := NewMemoryStore(0, clock.Now)
		if err := s.Put(ctx, "k", []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		clock.Advance(59 * time.Second)
		if _, err := s.Get(ctx, "k"); err != nil {
			t.Errorf("Get before the ttl: %v", err)
		}
		clock.Advance(time.Second)
		if _, err := s.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get at the ttl = %v, want ErrNotFound", err)
		}
		if err := s.Put(ctx, "k", []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if _, err := s.Take(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Take at the ttl = %v, want ErrNotFound", err)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		ctx := context.Background()
		s := NewMemoryStore(2, clock.Now)
		for _, k := range []string{"a", "b"} {
			if err := s.Put(ctx, k, nil, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Put(ctx, "c", nil, time.Minute); !errors.Is(err, ErrStoreFull) {
			t.Errorf("Put into a full store = %v, want ErrStoreFull", err)
		}
		if err := s.Put(ctx, "a", []byte("again"), time.Minute); err != nil {
			t.Errorf("Put replacing in a full store: %v", err)
		}
		clock.Advance(time.Minute)
		if err := s.Put(ctx, "c", nil, time.Minute); err != nil {
			t.Errorf("Put once the others expired: %v", err)
		}
	})
}

// testStoreOwned checks PutOwned's bound of one owner's records, in a Store whose clock
// advance moves (nil: a Store on another clock, whose window test is skipped).
func testStoreOwned(t *testing.T, s Store, advance func(time.Duration)) {
	ctx := context.Background()
	op := s.(OwnedPutter)
	for i := range 3 {
		if err := op.PutOwned(ctx, "alice", fmt.Sprintf("a%d", i), []byte("v"), time.Minute, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := op.PutOwned(ctx, "alice", "a3", []byte("v"), time.Minute, 3); !errors.Is(err, ErrStoreFull) {
		t.Errorf("PutOwned beyond the owner's max = %v, want ErrStoreFull", err)
	}
	if _, err := s.Get(ctx, "a3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused record was kept: %v", err)
	}
	if err := op.PutOwned(ctx, "bob", "b0", []byte("v"), time.Minute, 3); err != nil {
		t.Errorf("PutOwned of another owner: %v", err)
	}
	if err := s.Put(ctx, "unowned", []byte("v"), time.Minute); err != nil {
		t.Errorf("Put while an owner is at its max: %v", err)
	}
	if advance == nil {
		return
	}
	advance(time.Minute)
	if err := op.PutOwned(ctx, "alice", "a4", []byte("v"), time.Minute, 3); err != nil {
		t.Errorf("PutOwned once the owner's records expired: %v", err)
	}
}

func TestRedisStore(t *testing.T) {
	addr := testredis.Addr(t)
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	newStore := func(t *testing.T) (Store, string) {
		prefix := testredis.Prefix(t, addr)
		return NewRedisStore(client, prefix), prefix
	}
	t.Run("basics", func(t *testing.T) { s, _ := newStore(t); testStoreBasics(t, s) })
	t.Run("take once", func(t *testing.T) { s, _ := newStore(t); testStoreTakeOnce(t, s) })
	t.Run("owned", func(t *testing.T) {
		s, prefix := newStore(t)
		testStoreOwned(t, s, nil)
		ttl, err := client.PTTL(context.Background(), prefix+":connect:owner:alice").Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL of the owner's count = %v, %v; want within a minute", ttl, err)
		}
	})
	t.Run("keys", func(t *testing.T) {
		s, prefix := newStore(t)
		if err := s.Put(context.Background(), "request:x", []byte("v"), time.Minute); err != nil {
			t.Fatal(err)
		}
		keys, err := testredis.Keys(addr, prefix)
		if err != nil {
			t.Fatal(err)
		}
		if want := prefix + ":connect:request:x"; len(keys) != 1 || keys[0] != want {
			t.Errorf("keys = %q, want [%s]", keys, want)
		}
		ttl, err := client.PTTL(context.Background(), prefix+":connect:request:x").Result()
		if err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL = %v, %v; want within a minute", ttl, err)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		s, _ := newStore(t)
		ctx := context.Background()
		if err := s.Put(ctx, "k", []byte("v"), 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// Redis expires the key on its own clock.
		testwait.Until(t, 5*time.Second, "the record to expire", func() bool {
			_, err := s.Get(ctx, "k")
			return errors.Is(err, ErrNotFound)
		})
		if err := s.Put(ctx, "k", []byte("v"), 0); err == nil {
			t.Error("Put with no ttl succeeded; a record must expire")
		}
	})
}

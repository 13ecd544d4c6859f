package approval

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testredis.Stop()
	os.Exit(code)
}

// openRedis returns a client of the test Redis, closed when t ends, and a key prefix of t's
// own, whose keys are deleted when it ends. It skips t when there is no Redis.
func openRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	client := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = client.Close() })
	return client, prefix
}

func openRedisStore(t *testing.T) *RedisHeldCalls {
	t.Helper()
	client, prefix := openRedis(t)
	return NewRedisHeldCalls(client, prefix, testSealer)
}

func TestRedisStore(t *testing.T) {
	testStore(t, func(t *testing.T) HeldCalls { return openRedisStore(t) })
}

// TestRedisStoreKeys: a call is <prefix>:hold:<id>, its JSON, expiring Grace after its deadline
// (a decision keeps that expiry), and a member of <prefix>:holds scored by its deadline, which
// expires too; Release deletes both.
func TestRedisStoreKeys(t *testing.T) {
	ctx := t.Context()
	client, prefix := openRedis(t)
	s := NewRedisHeldCalls(client, prefix, testSealer)
	base := now()
	c := mustHold(t, s, call(base, base.Add(10*time.Minute)))
	later := mustHold(t, s, call(base, base.Add(20*time.Minute)))
	key, index := prefix+":hold:"+c.ID, prefix+":holds"

	checkTTL := func(what, key string, deadline time.Time) {
		t.Helper()
		ttl, err := client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Not more than the time to deadline + Grace; less by no more than a minute of test.
		if most := time.Until(deadline.Add(Grace)) + time.Second; ttl <= 0 || ttl > most || ttl < most-time.Minute {
			t.Errorf("%s: the key %s expires in %v, want about %v", what, key, ttl, most)
		}
	}
	checkTTL("held", key, c.Deadline)
	checkTTL("held", index, later.Deadline)

	val, err := client.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var stored HeldCall
	if err := json.Unmarshal(val, &stored); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, stored); diff != "" {
		t.Errorf("the key holds (-want +got):\n%s", diff)
	}
	score, err := client.ZScore(ctx, index, c.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(c.Deadline.UnixMilli()); score != want {
		t.Errorf("the index scores the call %v, want its deadline %v", score, want)
	}

	if _, err := s.Decide(ctx, c.ID, Approve, "alice", base); err != nil {
		t.Fatal(err)
	}
	checkTTL("decided", key, c.Deadline)

	if err := s.Release(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("the key of a released call: exists %d, %v", n, err)
	}
	if err := client.ZScore(ctx, index, c.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("the released call in the index: %v, want none", err)
	}
	if err := s.Release(ctx, later.ID); err != nil {
		t.Fatal(err)
	}
	if keys, err := testredis.Keys(testredis.Addr(t), prefix); err != nil || len(keys) != 0 {
		t.Errorf("keys left when all is released: %q, %v", keys, err)
	}
}

// TestRedisStoreGoneAtOnce: a call held Grace past its deadline is gone at once.
func TestRedisStoreGoneAtOnce(t *testing.T) {
	s := openRedisStore(t)
	base := now()
	c := mustHold(t, s, call(base.Add(-time.Hour), base.Add(-Grace-time.Second)))
	if _, err := s.Get(t.Context(), c.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: %v, want ErrNotFound", err)
	}
	if got, err := s.HeldBy(t.Context(), ""); err != nil || len(got) != 0 {
		t.Errorf("HeldBy = %v, %v; want none", ids(got), err)
	}
}

// TestRedisStoreTrimsIndex: listing the calls drops the index's members Grace past their
// deadline, and skips those whose call is gone.
func TestRedisStoreTrimsIndex(t *testing.T) {
	ctx := t.Context()
	client, prefix := openRedis(t)
	s := NewRedisHeldCalls(client, prefix, testSealer)
	index := prefix + ":holds"
	base := now()
	c := mustHold(t, s, call(base, base.Add(time.Hour)))
	stale, lost := NewID(), NewID()
	if err := client.ZAdd(ctx, index,
		redis.Z{Score: float64(base.Add(-Grace - time.Second).UnixMilli()), Member: stale},
		redis.Z{Score: float64(base.Add(time.Hour).UnixMilli()), Member: lost},
	).Err(); err != nil {
		t.Fatal(err)
	}

	for _, list := range []func() ([]HeldCall, error){
		func() ([]HeldCall, error) { return s.Pending(ctx, base) },
		func() ([]HeldCall, error) { return s.HeldBy(ctx, "") },
	} {
		got, err := list()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{c.ID}, ids(got)); diff != "" {
			t.Errorf("listed (-want +got):\n%s", diff)
		}
	}
	if err := client.ZScore(ctx, index, stale).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("the stale member is still in the index: %v", err)
	}
}

// TestRedisStoreDecideAcrossReplicas: replicas, each with its own client, deciding one call at
// once: exactly one wins.
func TestRedisStoreDecideAcrossReplicas(t *testing.T) {
	_, prefix := openRedis(t)
	var stores []*RedisHeldCalls
	for range 4 {
		client := redis.NewClient(&redis.Options{Addr: testredis.Addr(t), DisableIdentity: true})
		t.Cleanup(func() { _ = client.Close() })
		stores = append(stores, NewRedisHeldCalls(client, prefix, testSealer))
	}
	base := now()
	for round := range 5 {
		c := mustHold(t, stores[0], call(base, base.Add(time.Minute)))
		errs := make([]error, 16)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = stores[i%len(stores)].Decide(t.Context(), c.ID, Approve, "op-"+strconv.Itoa(i), base)
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ErrDecided):
				t.Errorf("round %d: Decide: %v, want ErrDecided", round, err)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d decisions won, want 1", round, won)
		}
	}
}

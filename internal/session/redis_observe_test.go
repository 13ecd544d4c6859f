package session

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// roundTrips records what RedisOptions.Observe is told.
type roundTrips struct {
	mu            sync.Mutex
	count, failed int
}

func (r *roundTrips) observe(_ time.Duration, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if failed {
		r.failed++
	}
}

func (r *roundTrips) get() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count, r.failed
}

// TestObserveTimesRoundTrips: a client made with Observe reports each command and each
// pipeline once; a key not found is an answer, a server that does not answer a failure.
func TestObserveTimesRoundTrips(t *testing.T) {
	addr := redisAddr(t)
	var seen roundTrips
	client, err := NewRedisClient(&RedisOptions{URL: "redis://" + addr, IdleTimeout: time.Minute, Observe: seen.observe})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	for range 2 {
		if err := client.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Get(ctx, "manifold-test:no-such-key").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
	if _, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Ping(ctx)
		p.Ping(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, failed := seen.get(); n != 4 || failed != 0 {
		t.Errorf("round trips %d, failed %d; want 4 (ping, ping, get, one pipeline), none failed", n, failed)
	}

	// A port nobody listens on: the command fails, and is reported so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	var down roundTrips
	client2, err := NewRedisClient(&RedisOptions{URL: "redis://" + closed, IdleTimeout: time.Minute, Observe: down.observe})
	if err != nil {
		t.Fatal(err)
	}
	defer client2.Close()
	if err := client2.Ping(ctx).Err(); err == nil {
		t.Fatal("PING of a closed port succeeded")
	}
	if n, failed := down.get(); n < 1 || failed != n {
		t.Errorf("round trips %d, failed %d; want each failed", n, failed)
	}
}

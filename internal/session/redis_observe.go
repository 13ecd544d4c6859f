package session

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// observeHook times each round trip of a client to Redis, a command or a pipeline, for
// RedisOptions.Observe. A key not found (redis.Nil) is an answer, not a failure. The HELLO
// that sets up each new connection is part of dialing, not counted.
type observeHook func(d time.Duration, failed bool)

var _ redis.Hook = observeHook(nil)

func (h observeHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h observeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hello" {
			return next(ctx, cmd)
		}
		began := time.Now()
		err := next(ctx, cmd)
		h(time.Since(began), err != nil && !errors.Is(err, redis.Nil))
		return err
	}
}

func (h observeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		began := time.Now()
		err := next(ctx, cmds)
		h(time.Since(began), err != nil && !errors.Is(err, redis.Nil))
		return err
	}
}

// observed adds o.Observe's hook to a client made for o.
func observed(client redis.UniversalClient, o *RedisOptions) redis.UniversalClient {
	if o.Observe != nil {
		client.AddHook(observeHook(o.Observe))
	}
	return client
}

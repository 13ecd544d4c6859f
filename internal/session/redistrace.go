package session

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// RedisTrace is called around each command (op is its name, like "get" or "evalsha") or
// pipeline (op "pipeline") sent to Redis: it returns the context to send it under, and the
// function to call with its outcome (nil for success, redis.Nil included).
type RedisTrace func(ctx context.Context, op string) (context.Context, func(error))

// traced adds trace's hook to client; nothing when trace is nil. Client given in
// RedisOptions.Client is its owner's to trace, and is not passed here.
func traced(client redis.UniversalClient, trace RedisTrace) {
	if trace != nil && client != nil {
		client.AddHook(traceHook{trace})
	}
}

// traceHook is the go-redis hook of a RedisTrace.
type traceHook struct{ trace RedisTrace }

// DialHook implements redis.Hook: dials pass untraced.
func (h traceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h traceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, end := h.trace(ctx, cmd.Name())
		err := next(ctx, cmd)
		end(outcome(err))
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h traceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, end := h.trace(ctx, "pipeline")
		err := next(ctx, cmds)
		end(outcome(err))
		return err
	}
}

// outcome is err for a trace: redis.Nil (no such key) is an answer, not a failure.
func outcome(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

// Interface guard.
var _ redis.Hook = traceHook{}

package session

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// endedChannel is the pub/sub channel on which a RedisStore announces the sessions deleted
// through it, by hash: the replicas that serve them end what they hold of them at once.
func (s *redisConn) endedChannel() string { return s.opts.KeyPrefix + ":ended" }

// RedisEndedWatch reports the sessions of a RedisStore that end other than by its own
// Delete: deleted through another store on the same Redis, or evicted to make room. It is
// safe for concurrent use.
type RedisEndedWatch struct{ *redisConn }

// NewRedisEndedWatch returns the watch of the sessions s knows.
func NewRedisEndedWatch(s *RedisStore) *RedisEndedWatch { return &RedisEndedWatch{s.redisConn} }

// WatchEnded calls ended with the id of each session this store knows (it created or read
// it) that a store on the same Redis deleted, until ctx ends. Announcements travel by Redis
// pub/sub, at most once: one missed while the subscription was down is caught by Expire.
// It returns when ctx ends.
func (s *RedisEndedWatch) WatchEnded(ctx context.Context, ended func(id string)) {
	for ctx.Err() == nil {
		sub := s.client.Subscribe(ctx, s.endedChannel())
		// A receive blocked on the connection does not see ctx end: closing the
		// subscription ends it.
		stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
		s.watch(ctx, sub, ended)
		stop()
		_ = sub.Close()
		select { // Redis gone: try again shortly, without spinning
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watch reads one subscription until it fails or ctx ends.
func (s *RedisEndedWatch) watch(ctx context.Context, sub *redis.PubSub, ended func(id string)) {
	for {
		msg, err := sub.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, redis.ErrClosed) {
				s.logger.Debug("session store: the subscription to ended sessions broke; subscribing again", "error", err.Error())
			}
			return
		}
		if id := s.idOf(msg.Payload); id != "" {
			s.forget(msg.Payload)
			ended(id)
		}
	}
}

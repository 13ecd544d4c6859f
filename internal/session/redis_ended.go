package session

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// endedChannel is the pub/sub channel on which a RedisStore announces the sessions deleted
// through it, by hash: the replicas that serve them end what they hold of them at once.
func (s *RedisStore) endedChannel() string { return s.opts.KeyPrefix + ":ended" }

// WatchEnded calls ended with the id of each session this store knows (it created or read
// it) that a store on the same Redis deleted, until ctx ends. Announcements travel by Redis
// pub/sub, at most once: one missed while the subscription was down is caught by Expire.
// It returns when ctx ends.
func (s *RedisStore) WatchEnded(ctx context.Context, ended func(id string)) {
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
func (s *RedisStore) watch(ctx context.Context, sub *redis.PubSub, ended func(id string)) {
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

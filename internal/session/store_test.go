package session_test

import (
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/session/storetest"
)

// The behaviour suite of session.Store, run against both stores.

func TestMemoryStoreBehaviour(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
		const idle = 30 * time.Minute
		s := session.NewMemoryStore(&session.MemoryOptions{
			MaxSessions: opts.MaxSessions, MaxPerPrincipal: opts.MaxPerPrincipal, MaxPerAnonymousAddr: opts.MaxPerAnonymousAddr,
			EvictIdle: opts.EvictIdle, Now: opts.Clock.Now,
		})
		return storetest.Harness{Store: s, IdleTimeout: idle, PassIdle: storetest.ClockPassIdle(opts.Clock, idle)}
	})
}

// TestRedisStoreBehaviour runs the suite against the test Redis: sessions expire there in
// real time, in 400ms where a test lets them, and otherwise not while a test runs.
func TestRedisStoreBehaviour(t *testing.T) {
	storetest.Run(t, func(t *testing.T, opts storetest.Options) storetest.Harness {
		idle := time.Minute
		if opts.ShortIdle {
			idle = 400 * time.Millisecond
		}
		s := session.OpenTestRedisStore(t, session.RedisOptions{
			MaxSessions: opts.MaxSessions, MaxPerPrincipal: opts.MaxPerPrincipal, MaxPerAnonymousAddr: opts.MaxPerAnonymousAddr,
			IdleTimeout: idle, EvictIdle: opts.EvictIdle, Now: opts.Clock.Now,
		})
		return storetest.Harness{Store: s, IdleTimeout: idle, PassIdle: storetest.PollPassIdle(s, idle, 5*time.Second)}
	})
}

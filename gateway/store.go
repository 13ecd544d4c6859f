package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/session"
)

// openStore opens the session store the config names: in this process's memory, or in Redis
// (connected lazily: a Redis that is down at start makes requests fail fast and /readyz say
// so, and the gateway recovers by itself when it returns), with an event log there so that a
// stream resumes wherever it is asked for. close releases them.
func openStore(cfg *config.Config, keys *seal.Keys, now func() time.Time, logger *slog.Logger) (store session.Store, events hub.EventLog, close func() error, err error) {
	s := cfg.SessionStore
	if s.Type != config.StoreRedis {
		return session.NewMemoryStore(&session.MemoryOptions{MaxSessions: cfg.MaxSessions, Now: now,
			MaxPerPrincipal: cfg.Auth.MaxSessionsPerPrincipal, MaxPerAnonymousAddr: cfg.Auth.MaxSessionsPerAddress,
			EvictIdle: cfg.SessionEvictIdle, Logger: logger}), nil, func() error { return nil }, nil
	}
	opts := &session.RedisOptions{
		URL:                 s.URL,
		SentinelMaster:      s.SentinelMaster,
		SentinelAddrs:       s.SentinelAddrs,
		ClusterAddrs:        s.ClusterAddrs,
		Username:            s.Username,
		Password:            s.Password,
		KeyPrefix:           s.KeyPrefix,
		DialTimeout:         s.DialTimeout,
		ReadTimeout:         s.ReadTimeout,
		WriteTimeout:        s.WriteTimeout,
		PoolSize:            s.PoolSize,
		MaxSessions:         cfg.MaxSessions,
		IdleTimeout:         cfg.SessionIdleTimeout,
		EvictIdle:           cfg.SessionEvictIdle,
		MaxPerPrincipal:     cfg.Auth.MaxSessionsPerPrincipal,
		MaxPerAnonymousAddr: cfg.Auth.MaxSessionsPerAddress,
		Now:                 now,
		Logger:              logger,
	}
	if s.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	rs, err := session.NewRedisStore(opts)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("session store (redis): %w", err)
	}
	log := rs.NewEventLog(&session.EventLogOptions{Retention: max(cfg.StreamRetention, minLogRetention), Budget: cfg.EventLogBudgetBytes, Sealer: keys.Sealer(seal.PurposeBus)})
	return rs, redisEvents{log}, func() error { return errors.Join(log.Close(), rs.Close()) }, nil
}

// minLogRetention is the least time the event log keeps a stream after its last event or
// touch, whatever stream_retention says: the time for a client to resume it on another
// replica after its own died. A quiet standalone stream's log is touched by the keep-alives
// of the connection reading it (keepAliveInterval), which come more than twice within it, so
// that one lost to a blip of the store does not let it expire.
const minLogRetention = time.Minute

// storeOutageInterval is how often a failure of the session store of one kind is logged
// while the store is down, with the count of those held back since.
const storeOutageInterval = time.Minute

// storeError logs a failure of the session store on a request's path, or counts it while
// the store is down (loglimit.Outage): the client was told that the store is unavailable,
// with no request id to look up. storeWarn is the same at warning level.
func (g *Gateway) storeError(ctx context.Context, msg string, args ...any) {
	g.storeOutage.Failed(ctx, slog.LevelError, msg, args...)
}

func (g *Gateway) storeWarn(ctx context.Context, msg string, args ...any) {
	g.storeOutage.Failed(ctx, slog.LevelWarn, msg, args...)
}

// storeOK notes that the session store answered: an outage ends, logged once.
func (g *Gateway) storeOK(ctx context.Context) { g.storeOutage.OK(ctx) }

// redisEvents is the Redis event log as the hub uses it.
type redisEvents struct{ log *session.RedisEventLog }

func (r redisEvents) Append(sessionID, streamID string, events []hub.Event, complete bool) {
	logged := make([]session.LoggedEvent, len(events))
	for i, e := range events {
		logged[i] = session.LoggedEvent{Seq: e.Seq, Data: e.Data}
	}
	r.log.Append(sessionID, streamID, logged, complete)
}

func (r redisEvents) Start(sessionID, streamID string, requests []protocol.ID, standalone bool) {
	if standalone {
		r.log.StartStandalone(sessionID, streamID)
		return
	}
	var ids json.RawMessage
	if len(requests) > 0 {
		ids, _ = json.Marshal(requests)
	}
	r.log.Start(sessionID, streamID, ids)
}

func (r redisEvents) Claim(ctx context.Context, sessionID, streamID, from, to string) (string, error) {
	owner, err := r.log.Claim(ctx, sessionID, streamID, from, to)
	if errors.Is(err, session.ErrStreamReplaced) {
		return "", hub.ErrStreamDone
	}
	return owner, err
}

func (r redisEvents) Touch(sessionID, streamID string) { r.log.Touch(sessionID, streamID) }

func (r redisEvents) Replay(ctx context.Context, sessionID, streamID string, after uint64) (*hub.Replayed, error) {
	logged, err := r.log.Replay(ctx, sessionID, streamID, after)
	switch {
	case errors.Is(err, session.ErrEventsLost):
		return nil, hub.ErrEventsLost
	case err != nil:
		return nil, err
	case logged == nil:
		return nil, nil
	}
	replayed := &hub.Replayed{Events: make([]hub.Event, len(logged.Events)), Complete: logged.Complete, More: logged.More,
		Standalone: logged.Standalone, Producer: logged.Producer}
	for i, e := range logged.Events {
		replayed.Events[i] = hub.Event{Seq: e.Seq, Data: e.Data}
	}
	if logged.Requests != nil {
		if err := json.Unmarshal(logged.Requests, &replayed.Requests); err != nil {
			replayed.Requests = nil
		}
	}
	return replayed, nil
}

var (
	_ hub.RequestLog  = redisEvents{}
	_ hub.TakeoverLog = redisEvents{}
)

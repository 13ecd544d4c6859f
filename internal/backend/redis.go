package backend

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/connect"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/policy/limit"
	"github.com/manifold-mcp/manifold/internal/replicabus"
	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Open returns the Set cfg's session_store names: in this process's memory, or on one Redis
// (connected lazily: a Redis that is down at start makes requests fail fast and /readyz say
// so, and the gateway recovers by itself when it returns), with an event log there so that a
// stream resumes wherever it is asked for. now is the clock of the sessions' records; logger
// receives the stores' warnings. The caller closes the Set after the gateway that uses it.
func Open(cfg *config.Config, now func() time.Time, logger *slog.Logger) (*Set, error) {
	return OpenInstrumented(cfg, now, logger, Instruments{})
}

// Instruments watch a Set's round trips to Redis, when it is on Redis: Trace is called
// around each command (session.RedisOptions.Trace), Observe is told how long each took and
// whether it failed (session.RedisOptions.Observe). A nil field watches nothing.
type Instruments struct {
	Trace   session.RedisTrace
	Observe func(d time.Duration, failed bool)
}

// OpenInstrumented is Open, with the Set's round trips to Redis watched by in.
func OpenInstrumented(cfg *config.Config, now func() time.Time, logger *slog.Logger, in Instruments) (*Set, error) {
	s := cfg.SessionStore
	keys, err := keysOf(cfg, s.Type == config.StoreRedis)
	if err != nil {
		return nil, err
	}
	if s.Type != config.StoreRedis {
		set := NewMemory(session.NewMemoryStore(&session.MemoryOptions{MaxSessions: cfg.MaxSessions, Now: now,
			MaxPerPrincipal: cfg.Auth.MaxSessionsPerPrincipal, MaxPerAnonymousAddr: cfg.Auth.MaxSessionsPerAddress,
			EvictIdle: cfg.SessionEvictIdle, Logger: logger}))
		set.Keys = keys
		return set, nil
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
		Trace:               in.Trace,
		Observe:             in.Observe,
	}
	if s.TLS {
		opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	events := &session.EventLogOptions{Retention: max(cfg.StreamRetention, MinLogRetention), Budget: cfg.EventLogBudgetBytes}
	set, err := NewRedis(opts, events, keys)
	if err != nil {
		return nil, fmt.Errorf("session store (redis): %w", err)
	}
	return set, nil
}

// MinLogRetention is the least time the event log keeps a stream after its last event or
// touch, whatever stream_retention says: the time for a client to resume it on another
// replica after its own died. A quiet standalone stream's log is touched by the keep-alives
// of the connection reading it, which must come more than twice within it, so that one lost
// to a blip of the store does not let it expire.
const MinLogRetention = time.Minute

// NewRedis returns the Set of a gateway that shares its state with other replicas on the
// Redis opts names, under opts.KeyPrefix (if empty, "manifold"): one client for every store,
// closed by Close. The event log of streams has the options events gives (its sealer aside).
// keys seal what crosses the bus and what the held calls keep of their sessions: required.
// It does not connect (Ping does); it fails if opts are incomplete or contradictory.
func NewRedis(opts *session.RedisOptions, events *session.EventLogOptions, keys *seal.Keys) (*Set, error) {
	if keys == nil {
		return nil, errNoKeys
	}
	client, err := session.NewRedisClient(opts)
	if err != nil {
		return nil, err
	}
	// The store on the shared client: every option but the server's.
	rs, err := session.NewRedisStore(&session.RedisOptions{
		Client:              client,
		KeyPrefix:           opts.KeyPrefix,
		DialTimeout:         opts.DialTimeout,
		ReadTimeout:         opts.ReadTimeout,
		WriteTimeout:        opts.WriteTimeout,
		MaxSessions:         opts.MaxSessions,
		MaxPerPrincipal:     opts.MaxPerPrincipal,
		MaxPerAnonymousAddr: opts.MaxPerAnonymousAddr,
		IdleTimeout:         opts.IdleTimeout,
		EvictIdle:           opts.EvictIdle,
		Now:                 opts.Now,
		Logger:              opts.Logger,
	})
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	prefix := cmp.Or(opts.KeyPrefix, defaultKeyPrefix)
	bus := keys.Sealer(seal.PurposeBus)
	logOpts := *events
	logOpts.Sealer = bus // the log publishes on the bus too
	log := rs.NewEventLog(&logOpts)
	vault := grants.NewRedisVault(client, prefix, keys, &grants.Options{Now: opts.Now})
	return &Set{
		Sessions: rs,
		Ended:    session.NewRedisEndedWatch(rs),
		Events:   redisEvents{log},
		Bus: func(o *replicabus.BusOptions) *replicabus.RedisBus {
			var sealed replicabus.BusOptions
			if o != nil {
				sealed = *o
			}
			sealed.Sealer = bus
			return replicabus.NewBus(replicabus.Shared{Client: client, KeyPrefix: prefix, OpTimeout: opts.OpTimeout(), Logger: opts.Logger, IDOf: rs.IDOf}, &sealed)
		},
		Digests:     rs,
		Connections: rs,
		Holds:       approval.NewRedisHeldCalls(client, prefix, keys.Sealer(seal.PurposeHold)),
		Approvals:   approval.NewRedisApprovals(client, prefix),
		Pins:        pin.NewRedisStore(client, prefix),
		Limits:      limit.NewShared(client, prefix),
		Grants:      vault,
		Connects:    connect.NewRedisStore(client, prefix),
		Keys:        keys,
		Ping:        rs.Ping,
		closers:     []func() error{client.Close, log.Close, vault.Close},
	}, nil
}

// defaultKeyPrefix begins the keys of a Set on Redis given no prefix.
const defaultKeyPrefix = "manifold"

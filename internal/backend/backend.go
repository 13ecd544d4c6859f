// Package backend builds the state backends of the gateway as one Set: where the sessions,
// the events of resumable streams, the bus between replicas, the calls held for an operator,
// the remembered approvals, the tool pins, the shared rate limits and the users' grants at
// upstreams live. A Set is all in
// this process's memory (NewMemory), or all on one Redis, with one client and one key prefix
// (NewRedis); Open builds the one a config names. Nothing outside this package gets a raw
// Redis client: the gateway learns that it runs with other replicas from the Set (Bus not
// nil), never from the concrete type of a store, so that any store may be wrapped.
//
//	set, err := backend.Open(cfg, time.Now, logger)
//	gw, err := gateway.New(cfg, &gateway.Options{Backends: set})
//	...
//	gw.Close()
//	set.Close()
package backend

import (
	"context"
	"errors"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/connect"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/policy/limit"
	"github.com/manifold-mcp/manifold/internal/replicabus"
	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Set is every state backend of one gateway. Its fields are set by the constructors and may
// be replaced before the Set is given to the gateway (a store wrapped in a decorator, say);
// a nil field means what its doc says. The stores are safe for concurrent use.
type Set struct {
	// Sessions keeps the sessions' records and routing tables. Required.
	Sessions session.Store
	// Ended reports the sessions that end other than by this gateway's own Delete: evicted
	// to make room, or, shared, deleted through another replica. If nil, none is reported
	// but by Sessions' Expire.
	Ended EndedWatcher
	// Events is the event log of resumable streams, shared by the replicas, so that a
	// stream resumes on any of them. If nil, each stream's events stay in the process that
	// produced them.
	Events EventLog
	// Bus opens this replica's end of the bus between the replicas that share the Set's
	// state. If nil, the gateway is the only replica. The fields below that only replicas
	// need (Digests, Connections) are set with it.
	Bus func(opts *replicabus.BusOptions) *replicabus.RedisBus
	// Digests reads sessions by their digest, for a replica taking over what another owned.
	// Set with Bus.
	Digests DigestReader
	// Connections records which replica holds a session's own upstream connection. Set with
	// Bus.
	Connections ConnectionRecorder
	// Holds keeps the calls held for an operator's decision. Required.
	Holds approval.HeldCalls
	// Approvals remembers what a person approved, for every replica. If nil, each gateway
	// remembers its own.
	Approvals Approvals
	// Pins keeps the pinned tools' definitions. If nil, the gateway keeps them in its own
	// memory (and in a file under state_dir, if set).
	Pins pin.Store
	// Limits is where shared rate limits count. If nil, a shared limit is a config error.
	Limits *limit.Shared
	// Keys are the gateway's keys (config `keys`), which seal what the state shared by
	// replicas must not show or let be forged; nil when there are none (one replica).
	Keys *seal.Keys
	// Grants keeps the grants users give the gateway at upstreams (credentials.user_oauth),
	// sealed with Keys, for every replica. If nil, a gateway that needs them keeps them in a
	// file under state_dir.
	Grants *grants.Vault
	// Connects keeps the connect links and the authorizations in progress at upstreams, each
	// taken once, whichever replica the browser reaches. If nil, a gateway that needs them
	// keeps them in its own memory.
	Connects connect.Store
	// Ping reports whether the shared backend answers, for readiness. If nil, there is
	// nothing to ask: the state is in this process.
	Ping func(ctx context.Context) error

	// closers release what the constructor opened, last first.
	closers []func() error
}

// EventLog is a shared event log as the hub uses it, with each of its optional parts: the
// requests a stream answers (hub.RequestLog), the takeover of a stream whose producer
// stopped (hub.TakeoverLog), and appends waited for (hub.DurableLog).
type EventLog interface {
	hub.RequestLog
	hub.TakeoverLog
	hub.DurableLog
}

// EndedWatcher reports ended sessions (session.MemoryStore, session.RedisStore).
type EndedWatcher interface {
	// WatchEnded calls ended with each ended session's id until ctx ends, and returns then.
	WatchEnded(ctx context.Context, ended func(id string))
}

// DigestReader reads sessions by digest (session.Digest), and tells which still exist.
type DigestReader interface {
	GetByDigest(ctx context.Context, digest string) (*session.Record, error)
	Existing(ctx context.Context, digests []string) ([]bool, error)
}

// ConnectionRecorder records which replica holds a session's own connection to an upstream.
type ConnectionRecorder interface {
	SetConnection(ctx context.Context, id, upstream, replica string) error
	ClearConnection(ctx context.Context, id, upstream, replica string) error
}

// Approvals remembers approvals for a while (approval.RedisApprovals).
type Approvals interface {
	Grant(ctx context.Context, key string, ttl time.Duration) error
	Granted(ctx context.Context, key string) (bool, error)
}

// NewMemory returns the Set of one gateway that keeps its state in this process: its
// sessions in sessions, everything else in fresh stores of its own. Close releases nothing.
func NewMemory(sessions *session.MemoryStore) *Set {
	return &Set{Sessions: sessions, Ended: sessions, Holds: approval.NewMemoryHeldCalls()}
}

// Close releases what the Set's constructor opened (its Redis connections). It is called
// once, after the last use of the Set's stores.
func (s *Set) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

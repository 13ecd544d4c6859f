package gateway_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pin"
	"github.com/manifold-mcp/manifold/internal/replicabus"
	"github.com/manifold-mcp/manifold/internal/session"
)

// wrapBackends, when set, makes startConfigured give a gateway on a shared (Redis) config
// backends whose stores are wrapped in decorators that only delegate (wrapped). Set only by
// TestReplicationSurvivesWrappedBackends; the tests of this package do not run in parallel.
var wrapBackends bool

// Decorators that only delegate: what a metrics or tracing wrapper around a store is. The
// gateway must work the same through them.
type (
	passSessions    struct{ session.Store }
	passEnded       struct{ backend.EndedWatcher }
	passEvents      struct{ backend.EventLog }
	passDigests     struct{ backend.DigestReader }
	passConnections struct{ backend.ConnectionRecorder }
	passHolds       struct{ approval.HeldCalls }
	passApprovals   struct{ backend.Approvals }
	passPins        struct{ pin.Store }
)

// wrapped opens the backends cfg names, as the binary does, and wraps every store of them
// that is an interface in a decorator that only delegates. They close after the gateway.
func wrapped(t testing.TB, cfg *config.Config, opts *gateway.Options) *backend.Set {
	t.Helper()
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	set, err := backend.Open(cfg, now, logger)
	if err != nil {
		t.Fatalf("backend.Open: %v", err)
	}
	t.Cleanup(func() { _ = set.Close() })
	set.Sessions = passSessions{set.Sessions}
	if set.Ended != nil {
		set.Ended = passEnded{set.Ended}
	}
	if set.Events != nil {
		set.Events = passEvents{set.Events}
	}
	if set.Digests != nil {
		set.Digests = passDigests{set.Digests}
	}
	if set.Connections != nil {
		set.Connections = passConnections{set.Connections}
	}
	set.Holds = passHolds{set.Holds}
	if set.Approvals != nil {
		set.Approvals = passApprovals{set.Approvals}
	}
	if set.Pins != nil {
		set.Pins = passPins{set.Pins}
	}
	if bus := set.Bus; bus != nil {
		set.Bus = func(o *replicabus.BusOptions) *replicabus.RedisBus { return bus(o) }
	}
	return set
}

// TestReplicationSurvivesWrappedBackends runs the scenarios of replicas sharing one Redis
// with every store of their backends wrapped in a decorator that only delegates: forwarding
// to the replica that holds a session's own connection, streams and subscriptions taken over,
// eviction across replicas, held calls decided on another replica, shared approvals and rate
// limits. Nothing in the gateway may learn that it has replicas from a store's concrete type:
// a wrapped store would turn replication off.
func TestReplicationSurvivesWrappedBackends(t *testing.T) {
	wrapBackends = true
	t.Cleanup(func() { wrapBackends = false })
	scenarios := []struct {
		name string
		run  func(*testing.T)
	}{
		{"SDK client without affinity", TestSDKClientAcrossReplicasWithoutAffinity},
		{"forwarding to the connection's replica", TestIsolatedSessionCallsRunWhereItsConnectionIs},
		{"forwarded progress", TestForwardedCallProgressComesBeforeItsResult},
		{"standalone stream takeover", TestStandaloneStreamMovesToAnotherReplica},
		{"subscription takeover", TestTakenOverSubscriptionEndsWithItsSession},
		{"eviction across replicas", TestEvictedSessionEndsOnTheReplicaHoldingIt},
		{"held call decided elsewhere", TestDecisionOnAnotherReplicaReleasesTheCall},
		{"shared approvals", TestRememberedApprovalHoldsOnEveryReplica},
		{"shared rate limits", TestSharedRateLimitAcrossReplicas},
	}
	for _, s := range scenarios {
		t.Run(s.name, s.run)
	}
}

// TestNewRefusesIncompleteBackends: a backend set without what the gateway needs is refused
// when the gateway is built, naming what is missing, not met later as a nil store; a set
// with a bus to other replicas needs what replicas need (digests, connections, keys).
func TestNewRefusesIncompleteBackends(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte("upstreams: []\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	memory := func() *backend.Set { return backend.NewMemory(session.NewMemoryStore(nil)) }
	bus := func(*replicabus.BusOptions) *replicabus.RedisBus { return nil }
	tests := []struct {
		name string
		set  func() *backend.Set
		want string // "" when New succeeds
	}{
		{"in memory", memory, ""},
		{"no sessions", func() *backend.Set { s := memory(); s.Sessions = nil; return s }, "no sessions or held-calls store"},
		{"no held calls", func() *backend.Set { s := memory(); s.Holds = nil; return s }, "no sessions or held-calls store"},
		{"a bus alone", func() *backend.Set { s := memory(); s.Bus = bus; return s }, "digest reader, connection recorder or keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, err := gateway.New(cfg, &gateway.Options{Backends: tt.set()})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = gw.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				if gw != nil {
					_ = gw.Close()
				}
				t.Fatalf("New = %v; want an error naming %q", err, tt.want)
			}
		})
	}
}

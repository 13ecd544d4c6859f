package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// upstreamClient is what the gateway needs of a connection to one upstream; *upstream.Client
// is the real one.
type upstreamClient interface {
	Name() string
	Catalog() *upstream.Catalog
	Server() *protocol.InitializeResult
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
	Notify(ctx context.Context, method string, params json.RawMessage) error
	State() upstream.State
	Status() upstream.Status
	Run(ctx context.Context)
	Close() error
	// Refresh refetches the upstream's lists (another replica heard them change).
	Refresh()
}

var _ upstreamClient = (*upstream.Client)(nil)

// upstreamEntry is one configured upstream: where it sits in the merged catalog, its shared
// connection, and for an isolated upstream the connections of the sessions that use it.
// Lifecycle: made by New, in config order, or by a reload that adds or changes an upstream;
// a reload that removes or changes one drains and closes its entry (reload.go). The
// gateway's upstreamOf(ns) is the entry of namespace ns.
type upstreamEntry struct {
	ns *catalog.Namespace
	// shared is the connection every session's calls share, unless pool is set; it always
	// serves the catalog.
	shared *conn
	// pool holds the sessions' own connections when the upstream is isolated; nil when shared.
	pool *connPool
	// broadcastLogs sends log messages of the shared connection that belong to no call to
	// every session.
	broadcastLogs bool
	// inputBridge is config.Upstream.InputBridge: whether a 2026-07-28 call this upstream
	// asks for input waits for it (parking.go).
	inputBridge string
	// requestTimeout is the upstream's request_timeout, which bounds the wait for the
	// acknowledgement of an upstream listen the gateway makes for its clients (as it bounds
	// each call); zero means no bound but the client's.
	requestTimeout time.Duration
	// transport and isolation are the upstream's as configured, for the admin API and its
	// calls' spans.
	transport, isolation string

	// calls counts the calls in flight to the upstream, which a reload that removes or
	// replaces it lets finish (reload.go); runOnce runs its shared client once.
	calls   inFlight
	runOnce sync.Once
	// retired is set once a reload removed or replaced the upstream: a request resolved
	// before, which reaches forward only now (held for approval, say), is refused.
	retired atomic.Bool
}

func newUpstreamEntry(ns *catalog.Namespace, client upstreamClient, broadcastLogs bool) *upstreamEntry {
	u := &upstreamEntry{ns: ns, broadcastLogs: broadcastLogs}
	u.shared = &conn{upstream: u, client: client}
	return u
}

// The catalog reads an upstream through its shared connection.
var _ catalog.Source = (*upstreamEntry)(nil)

func (u *upstreamEntry) Namespace() *catalog.Namespace      { return u.ns }
func (u *upstreamEntry) Catalog() *upstream.Catalog         { return u.shared.client.Catalog() }
func (u *upstreamEntry) Server() *protocol.InitializeResult { return u.shared.client.Server() }
func (u *upstreamEntry) Status() upstream.Status            { return u.shared.client.Status() }

// conn is one connection to an upstream: its shared one, made with its upstreamEntry, or a
// session's own (isolation: session), opened and closed by the upstream's connPool. It holds
// what the gateway keeps per connection; Gateway.conns finds it by its client, for what the
// upstream sends on it.
type conn struct {
	// upstream is the upstream the connection is to.
	upstream *upstreamEntry
	client   upstreamClient
	// session is the id of the session whose own connection this is; "" for the shared one
	// and for a principal's own.
	session string
	// pooled is the pool key of an isolated connection (a session id, or a principal's key
	// under isolation: principal); "" for the shared one.
	pooled string
	// noOwnerOnce logs once that requests on this connection cannot be routed to one client.
	noOwnerOnce sync.Once
	// progress maps the progress tokens the gateway gave this connection to the calls they
	// are about: token → progressRoute.
	progress sync.Map

	logMu sync.Mutex
	// sentLevel is the log level last set on the upstream, and sentTo the connection (its
	// initialize result) it was set on. Guarded by logMu.
	sentLevel string
	sentTo    *protocol.InitializeResult
}

// connKey names a connection in the routing records (progress tokens, requests to clients,
// tasks): the upstream's name for a shared connection, and name plus session id for a
// session's own one, so that ids two children hand out alike never meet. Asked of the shared
// connection of an isolated upstream for a session, it names that session's own connection,
// on which the session's calls go.
func (c *conn) connKey(sessionID string) string {
	name := c.upstream.ns.Name
	switch {
	case c.pooled != "":
		return name + "\x00" + c.pooled
	case c.session != "":
		return name + "\x00" + c.session
	case c.upstream.pool != nil && sessionID != "":
		return name + "\x00" + c.upstream.pool.keyOf(sessionID)
	}
	return name
}

// connKey names the connection that calls of session sessionID to u travel on: the session's
// own for an isolated upstream, else the shared one.
func (u *upstreamEntry) connKey(sessionID string) string { return u.shared.connKey(sessionID) }

// CatalogView is the merged catalog at one moment: every item with its owner, and what name
// collisions left out.
type CatalogView = catalog.View

// CatalogItem is one item of the merged catalog as clients see it.
type CatalogItem = catalog.Item

// Collision is an item left out of the merged catalog because an upstream listed earlier in
// the config exposes the same final name or URI.
type Collision = catalog.Collision

// Catalog returns the merged catalog as clients of /mcp see it now.
func (g *Gateway) Catalog() CatalogView { return g.snapshot.Load().View() }

// ProfileCatalog returns the catalog as clients of /mcp/<profile> see it now; ok is false
// when the config has no such profile.
func (g *Gateway) ProfileCatalog(profile string) (view CatalogView, ok bool) {
	ps := g.snapshot.Load().Profile(profile)
	if ps == nil {
		return CatalogView{}, false
	}
	return ps.View(), true
}

// commandOf returns the program a stdio upstream runs: its command, or for command "@self"
// the gateway's own program (Options.Executable), which serves its demo server.
func commandOf(u *config.Upstream, executable string) (string, error) {
	if u.Command != config.SelfCommand {
		return u.Command, nil
	}
	if executable != "" {
		return executable, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("upstream %s: command %q: the gateway cannot find its own program: %w", u.Name, config.SelfCommand, err)
	}
	return exe, nil
}

package gateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/manifold-mcp/manifold/catalog"
	"github.com/manifold-mcp/manifold/protocol"
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
}

var _ upstreamClient = (*upstream.Client)(nil)

// connKey names the connection a route's messages travel on, for the routing records: the
// upstream's name for a shared connection, and name plus session for a session's own one, so
// that ids two children hand out alike never meet.
func (r *route) connKey(sessionID string) string {
	switch {
	case r.boundSession != nil:
		return r.ns.Name + "\x00" + r.boundSession.id
	case r.pool != nil && sessionID != "":
		return r.ns.Name + "\x00" + sessionID
	}
	return r.ns.Name
}

// route is one upstream connection, in the catalog's namespace ns.
type route struct {
	ns     *catalog.Namespace
	client upstreamClient
	// noOwnerOnce logs once that requests of this upstream cannot be routed to one client.
	noOwnerOnce sync.Once
	// pool holds per-session connections when the upstream is isolated; nil when shared.
	pool *connPool
	// boundSession is the session a per-session connection belongs to; nil when shared.
	boundSession *liveSession
	// broadcastLogs sends log messages that belong to no call to every session.
	broadcastLogs bool

	logMu sync.Mutex
	// sentLevel is the log level last set on the upstream, and sentTo the connection (its
	// initialize result) it was set on. Guarded by logMu.
	sentLevel string
	sentTo    *protocol.InitializeResult
}

// A shared route is what the catalog reads of its upstream.
var _ catalog.Source = (*route)(nil)

func (r *route) Namespace() *catalog.Namespace      { return r.ns }
func (r *route) Catalog() *upstream.Catalog         { return r.client.Catalog() }
func (r *route) Server() *protocol.InitializeResult { return r.client.Server() }
func (r *route) Status() upstream.Status            { return r.client.Status() }

// routeFor returns the shared route of a catalog namespace.
func (g *Gateway) routeFor(ns *catalog.Namespace) *route { return g.routes[ns.Index] }

// CatalogView is the merged catalog at one moment: every item with its owner, and what name
// collisions left out.
type CatalogView = catalog.View

// CatalogItem is one item of the merged catalog as clients see it.
type CatalogItem = catalog.Item

// Collision is an item left out of the merged catalog because an upstream listed earlier in
// the config exposes the same final name or URI.
type Collision = catalog.Collision

// Catalog returns the merged catalog as clients see it now.
func (g *Gateway) Catalog() CatalogView { return g.snapshot.Load().View() }

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// borrowedCatalog stands in for the shared connection of a user_oauth upstream that has no
// catalog_credentials: an upstream that lists nothing to a caller without a user's token.
// Its catalog is the listing of the first user's own connection that becomes ready (the
// catalog's owner), followed as that connection's lists change; the owner's token never
// leaves its connection. Every user sees that listing, and calls each tool with their own
// grant: the upstream decides what each may do.
//
// At start, when some user has a grant there already, that user's connection is opened to
// list (ownerFor finds one); otherwise the catalog is empty until a user connects the
// upstream (the /grants page offers it).
type borrowedCatalog struct {
	name string
	// find returns a principal with a grant at the upstream, to list with; ok false when
	// none has one.
	find func(ctx context.Context) (session.Principal, bool, error)
	// open opens (and releases) a principal's own connection, whose listing is offered here.
	open func(ctx context.Context, who session.Principal) error
	// changed rebuilds the gateway's catalog after the listing changed, and tells the gateway
	// this upstream has made its first start.
	changed func()
	logger  interface {
		Info(msg string, args ...any)
		Warn(msg string, args ...any)
	}

	catalog atomic.Pointer[upstream.Catalog]
	server  atomic.Pointer[protocol.InitializeResult]

	mu sync.Mutex
	// owner is whose connection the listing is borrowed from ("" until one). Guarded by mu.
	owner string
	// since is when the state last changed. Guarded by mu.
	since time.Time
	// stop ends Run; closed is set by Close. Guarded by mu.
	stop   context.CancelFunc
	closed bool
}

var _ upstreamClient = (*borrowedCatalog)(nil)

func (b *borrowedCatalog) Name() string { return b.name }

// Catalog is the borrowed listing; empty until a user's connection lent one.
func (b *borrowedCatalog) Catalog() *upstream.Catalog {
	if c := b.catalog.Load(); c != nil {
		return c
	}
	return upstream.NewCatalog(nil)
}

func (b *borrowedCatalog) Server() *protocol.InitializeResult { return b.server.Load() }

// Call is refused: every call of a user_oauth upstream runs on its caller's own connection.
func (b *borrowedCatalog) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return nil, fmt.Errorf("upstream %s is called on each user's own connection only: %w", b.name, upstream.ErrUnavailable)
}

func (b *borrowedCatalog) Notify(ctx context.Context, method string, params json.RawMessage) error {
	return nil
}

// State is ready: the upstream has no connection of its own to be down, and its listing,
// empty or borrowed, is what the catalog serves.
func (b *borrowedCatalog) State() upstream.State { return upstream.StateReady }

func (b *borrowedCatalog) Status() upstream.Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return upstream.Status{State: upstream.StateReady, Since: b.since}
}

// Run looks, once, for a user with a grant whose connection can lend the listing, and
// returns when ctx ends or Close is called.
func (b *borrowedCatalog) Run(ctx context.Context) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	ctx, b.stop = context.WithCancel(ctx)
	b.since = time.Now()
	b.mu.Unlock()
	// Its first start is made: a first list need not wait for it.
	b.changed()
	if b.catalog.Load() == nil {
		b.lendFromAGrant(ctx)
	}
	<-ctx.Done()
}

// lendFromAGrant opens the connection of a user who has a grant at the upstream, whose
// listing the catalog then borrows.
func (b *borrowedCatalog) lendFromAGrant(ctx context.Context) {
	who, ok, err := b.find(ctx)
	switch {
	case err != nil:
		b.logger.Warn("the grants could not be read to list a user_oauth upstream without catalog_credentials; its catalog stays empty until a user connects it", "upstream", b.name, "error", err.Error())
		return
	case !ok:
		b.logger.Info("no user has connected a user_oauth upstream without catalog_credentials yet: its catalog is empty until one does", "upstream", b.name)
		return
	}
	if err := b.open(ctx, who); err != nil && ctx.Err() == nil {
		b.logger.Warn("a user's connection to a user_oauth upstream could not list it; its catalog stays empty until a user connects it", "upstream", b.name, "error", err.Error())
	}
}

// offer is told that a user's own connection c is ready or changed: the first becomes the
// listing's owner, whose later lists replace it.
func (b *borrowedCatalog) offer(c upstreamClient, who session.Principal) {
	if c.State() != upstream.StateReady || who.Anonymous() {
		return
	}
	b.mu.Lock()
	if b.owner != "" && b.owner != who.Key() {
		b.mu.Unlock()
		return
	}
	first := b.owner == ""
	b.owner = who.Key()
	b.since = time.Now()
	b.mu.Unlock()
	b.catalog.Store(shareable(c.Catalog()))
	if info := c.Server(); info != nil {
		shown := *info
		shown.Instructions = "" // written for the user whose session it is
		b.server.Store(&shown)
	}
	if first {
		b.logger.Info("a user_oauth upstream's catalog is the listing of a connected user's own connection", "upstream", b.name, "principal", who.String())
	}
	b.changed()
}

// shareable is what of a user's listing every user may see: the tools, prompts and resource
// templates the upstream offers, which name what can be done. Its resources name the user's
// own data (repositories, files), and stay out.
func shareable(c *upstream.Catalog) *upstream.Catalog {
	if c == nil {
		return nil
	}
	return upstream.NewCatalog(map[upstream.Kind][]upstream.Item{
		upstream.Tools:             c.List(upstream.Tools),
		upstream.Prompts:           c.List(upstream.Prompts),
		upstream.ResourceTemplates: c.List(upstream.ResourceTemplates),
	})
}

// release is told that who's grant was revoked: when who owns the listing, another user's
// connection lends it instead, one open already (connPool.relend) or the next to become
// ready or to connect (the listing stays until then).
func (b *borrowedCatalog) release(who session.Principal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.owner == who.Key() {
		b.owner = ""
	}
}

// wantsLender reports whether no user's connection lends the listing now.
func (b *borrowedCatalog) wantsLender() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.owner == ""
}

// Refresh does nothing: the owner's connection refreshes its own lists.
func (b *borrowedCatalog) Refresh() {}

// Close ends Run.
func (b *borrowedCatalog) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.stop != nil {
		b.stop()
	}
	return nil
}

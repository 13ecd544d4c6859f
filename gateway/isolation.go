package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/hub"
	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// errConnectionLimit is returned when an isolated upstream already has its maximum of
// connections open.
var errConnectionLimit = errors.New("connection limit reached")

// connPool holds the connections of an upstream configured with isolation session (or
// principal, which is per session until authentication exists): one per client session,
// opened on its first call or subscribe, closed with the session or when idle (not while it
// has subscriptions). The upstream's shared connection still serves the catalog.
type connPool struct {
	g        *Gateway
	upstream *upstreamEntry
	spec     upstream.Spec
	opts     upstream.Options
	idle     time.Duration
	max      int

	mu sync.Mutex
	// conns holds the open connections by client session id. Guarded by mu.
	conns map[string]*pooledConn
}

// pooledConn is one session's own connection to the upstream, with what the pool keeps of it.
type pooledConn struct {
	conn  *conn
	ready chan struct{} // closed once the connection is ready
	// lastUsed is the unix nano time of the last call; inUse counts calls in flight.
	lastUsed atomic.Int64
	inUse    atomic.Int32
	// levelOnce sets the session's log level on the connection once it is ready.
	levelOnce sync.Once
}

// existing returns the session's connection if it has one.
func (p *connPool) existing(sessionID string) *pooledConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[sessionID]
}

// get returns the session's own connection to the upstream, opening it on first use. The
// caller must call release when its call is done.
func (p *connPool) get(ctx context.Context, sessionID string) (*pooledConn, error) {
	p.mu.Lock()
	pc, ok := p.conns[sessionID]
	if !ok && !p.g.router.sessionLive(sessionID) {
		// The session ended (a request raced its end): no child is started for it.
		p.mu.Unlock()
		return nil, fmt.Errorf("upstream %s: %w", p.upstream.ns.Name, hub.ErrSessionEnded)
	}
	if !ok {
		if len(p.conns) >= p.max {
			p.mu.Unlock()
			return nil, fmt.Errorf("upstream %s: %w (max_connections %d)", p.upstream.ns.Name, errConnectionLimit, p.max)
		}
		pc = p.openLocked(sessionID)
	}
	pc.inUse.Add(1)
	pc.lastUsed.Store(time.Now().UnixNano())
	p.mu.Unlock()
	if !ok && p.g.replicas != nil {
		// The other replicas send the session's calls to this upstream here from now on.
		p.g.replicas.recordConnection(ctx, sessionID, p.upstream.ns.Name, true)
	}

	wait, cancel := context.WithTimeout(ctx, p.spec.InitializeTimeout)
	defer cancel()
	select {
	case <-pc.ready:
		pc.levelOnce.Do(func() {
			// A new connection starts at the session's log level.
			if rec, err := p.g.store.Get(ctx, sessionID); err == nil && rec.LogLevel != "" {
				p.g.logs.setUpstreamLevel(ctx, pc.conn, rec.LogLevel)
			}
		})
		return pc, nil
	case <-wait.Done():
		p.release(pc)
		return nil, fmt.Errorf("upstream %s: session connection did not become ready: %w", p.upstream.ns.Name, upstream.ErrUnavailable)
	}
}

func (p *connPool) release(pc *pooledConn) {
	pc.lastUsed.Store(time.Now().UnixNano())
	pc.inUse.Add(-1)
}

// openLocked starts a connection for the session; it runs on a goroutine the gateway owns.
func (p *connPool) openLocked(sessionID string) *pooledConn {
	pc := &pooledConn{ready: make(chan struct{})}
	var readyOnce sync.Once
	opts := p.opts
	opts.OnChange = func(c *upstream.Client) {
		if c.State() == upstream.StateReady {
			readyOnce.Do(func() { close(pc.ready) })
			p.g.subs.renew(pc.conn) // after a restart of the session's child
		}
	}
	client := upstream.New(p.spec, &opts)
	pc.conn = &conn{upstream: p.upstream, client: client, session: sessionID}
	p.conns[sessionID] = pc
	p.g.conns.Store(upstreamClient(client), pc.conn)
	// Refused once the gateway closes: the connection then never becomes ready, the call
	// waiting for it ends with its session, and closeAll closes it.
	p.g.goWorker(func() { client.Run(p.g.ctx) })
	p.g.logger.Info("opened a session's own upstream connection", "upstream", p.upstream.ns.Name, "session", fingerprint(sessionID))
	return pc
}

// closeSession closes the session's connection, if any, in the background.
func (p *connPool) closeSession(sessionID string) {
	p.mu.Lock()
	pc, ok := p.conns[sessionID]
	delete(p.conns, sessionID)
	p.mu.Unlock()
	if ok {
		p.closeConn(pc, sessionID)
	}
}

func (p *connPool) closeConn(pc *pooledConn, sessionID string) {
	closeIt := func() {
		pc.conn.client.Close()
		p.g.conns.Delete(pc.conn.client)
		if p.g.replicas != nil {
			ctx, cancel := context.WithTimeout(context.Background(), subscriptionCallTimeout)
			p.g.replicas.recordConnection(ctx, sessionID, p.upstream.ns.Name, false)
			cancel()
		}
		p.g.logger.Info("closed a session's own upstream connection", "upstream", p.upstream.ns.Name, "session", fingerprint(sessionID))
	}
	if !p.g.goWorker(closeIt) {
		closeIt() // the gateway is closing: at once, on the caller's goroutine
	}
}

// sweep closes connections idle for longer than the idle time. Idleness is decided and the
// connection removed in one critical section, so a call cannot pick it up meanwhile. A
// connection with subscriptions is in use: closing it would stop the session's updates. (Lock
// order: p.mu, then the subscription table's; a subscribe holds the connection in use.)
func (p *connPool) sweep(now time.Time) {
	cutoff := now.Add(-p.idle).UnixNano()
	p.mu.Lock()
	idle := map[string]*pooledConn{}
	for id, pc := range p.conns {
		if pc.inUse.Load() == 0 && pc.lastUsed.Load() < cutoff && !p.g.subs.holds(pc.conn) {
			idle[id] = pc
			delete(p.conns, id)
		}
	}
	p.mu.Unlock()
	for id, pc := range idle {
		p.closeConn(pc, id)
	}
}

// closeAll closes every connection; used at shutdown.
func (p *connPool) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*pooledConn{}
	p.mu.Unlock()
	for id, pc := range conns {
		p.closeConn(pc, id)
	}
}

// open reports how many connections are open.
func (p *connPool) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// notifyOwnConnections passes a client's notification to the session's own upstream
// connections (isolation session). Only this client's POST waits for the writes.
func (g *Gateway) notifyOwnConnections(ctx context.Context, sessionID string, n *protocol.Notification) {
	for _, u := range g.upstreams {
		if u.pool == nil {
			continue
		}
		pc := u.pool.existing(sessionID)
		if pc == nil {
			continue
		}
		if err := pc.conn.client.Notify(ctx, n.Method, n.Params); err != nil {
			g.logger.Debug("passing a client's notification to its own upstream connection failed", "upstream", u.ns.Name, "method", n.Method, "error", err.Error())
		}
	}
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// errConnectionLimit is returned when an isolated upstream already has its maximum of
// connections open.
var errConnectionLimit = errors.New("connection limit reached")

// connPool holds the connections of an upstream configured with isolation session or
// principal: one per client session, or one per authenticated principal on this replica
// (an anonymous session gets its own), opened on the first call or subscribe, closed with
// the (last) session using it or when idle (not while it has subscriptions). The upstream's
// shared connection still serves the catalog.
type connPool struct {
	g        *Gateway
	upstream *upstreamEntry
	spec     upstream.Spec
	opts     upstream.Options
	idle     time.Duration
	max      int
	// perPrincipal is set for isolation: principal. Each replica holds its own connection
	// per principal; a session's calls run on the replica where it first called the
	// upstream (as under isolation: session), on that replica's connection of its principal.
	perPrincipal bool
	// credentials are the upstream's own credentials: a principal's connection carries its
	// exchanged token (perPrincipal), which the exchanger forgets when the connection closes.
	credentials upstreamAuth
	// borrowed is the upstream's catalog when it borrows a user's listing (a user_oauth
	// upstream without catalog_credentials): each principal's connection offers it its lists.
	borrowed *borrowedCatalog

	mu sync.Mutex
	// conns holds the open connections by pool key: the session id, or under isolation
	// principal "p:" and the principal's key. Guarded by mu.
	conns map[string]*pooledConn
	// keys maps each session using a connection of the pool to that connection's key (under
	// isolation: session, the session id itself). Guarded by mu.
	keys map[string]string
	// closed is set by closeAll: the pool opens no connection after. Guarded by mu.
	closed bool
}

// keyFor is the pool key of sessionID's connection when principal who calls. A principal's
// key names this replica too: what the store keeps of a connection (tasks, requests sent to
// clients) is keyed by it, and each replica has its own connection of the principal.
func (p *connPool) keyFor(sessionID string, who session.Principal) string {
	if !p.perPrincipal || who.Anonymous() {
		return sessionID
	}
	return "p:" + p.g.hub.Tag() + ":" + who.Key()
}

// keyOf is the pool key of the connection sessionID's calls use; the session id itself
// when it has none yet.
func (p *connPool) keyOf(sessionID string) string {
	if !p.perPrincipal {
		return sessionID
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[sessionID]; ok {
		return k
	}
	return sessionID
}

// pooledConn is one session's own connection to the upstream, with what the pool keeps of it.
type pooledConn struct {
	conn  *conn
	ready chan struct{} // closed once the connection is ready
	// principal is whose connection it is under isolation: principal; zero otherwise.
	principal session.Principal
	// lastUsed is the unix nano time of the last call; inUse counts calls in flight.
	lastUsed atomic.Int64
	inUse    atomic.Int32
	// levelOnce sets the session's log level on the connection once it is ready.
	levelOnce sync.Once
	// forCall is set for a connection opened for one 2026-07-28 call (getForCall): it closes
	// when that call releases it.
	forCall bool
}

// existing returns the connection the session's calls use, if it has one.
func (p *connPool) existing(sessionID string) *pooledConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[sessionID]; ok {
		return p.conns[k]
	}
	return p.conns[sessionID]
}

// get returns the connection of the session (or of its principal, who) to the upstream,
// opening it on first use. The caller must call release when its call is done.
func (p *connPool) get(ctx context.Context, sessionID string, who session.Principal) (*pooledConn, error) {
	if err := p.refuses(who); err != nil {
		return nil, err
	}
	key := p.keyFor(sessionID, who)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, p.closedError()
	}
	pc, ok := p.conns[key]
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
		pc = p.openLocked(key, sessionID, who)
	}
	firstUse := !ok // of the session's own connection
	if p.perPrincipal {
		_, mapped := p.keys[sessionID]
		firstUse = !mapped && p.g.router.sessionLive(sessionID)
		if firstUse {
			p.keys[sessionID] = key
		}
	}
	pc.inUse.Add(1)
	pc.lastUsed.Store(time.Now().UnixNano())
	p.mu.Unlock()
	if firstUse && p.g.replicas != nil {
		// The other replicas send the session's calls to this upstream here from now on.
		p.g.replicas.RecordConnection(ctx, sessionID, p.upstream.ns.Name, true)
	}
	if err := p.awaitReady(ctx, pc); err != nil {
		return nil, err
	}
	pc.levelOnce.Do(func() {
		// A new connection starts at the session's log level.
		if rec, err := p.g.store.Get(ctx, sessionID); err == nil && rec.LogLevel != "" {
			p.g.logs.setUpstreamLevel(ctx, pc.conn, rec.LogLevel)
		}
	})
	return pc, nil
}

// refuses returns why a call of who may not use a connection of the pool: an upstream called
// with each user's own token, exchanged or granted, cannot be called by an API key (nor,
// with grants, by an anonymous client), which has none.
func (p *connPool) refuses(who session.Principal) error {
	switch {
	case p.credentials.userOAuth && (who.Anonymous() || who.Issuer == session.APIKeyIssuer):
		return errNoBrowserIdentity(p.upstream.ns.Name, who)
	case p.credentials.exchanger != nil && who.Issuer == session.APIKeyIssuer:
		return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: p.upstream.ns.Name,
			Message: fmt.Sprintf("upstream %s is called with each user's own token (token exchange), and an API key has none: call it as a user signed in with the identity provider", p.upstream.ns.Name)}
	}
	return nil
}

// callKeyPrefix begins the pool key of a connection opened for one 2026-07-28 call.
const callKeyPrefix = "call:"

// getForCall returns the connection a 2026-07-28 request uses, which has no session to
// hold one: under isolation: principal, its principal's connection on this replica; else
// (isolation: session, or an anonymous caller) a connection of its own, opened for the call
// and closed when the call ends, so that what the upstream asks in the middle of the call
// goes to this call alone. A call waiting for its client's input (parking.go) keeps its
// connection until its client's retry ends it, or its wait expires. The caller must call
// release when its call is done.
func (p *connPool) getForCall(ctx context.Context, who session.Principal) (*pooledConn, error) {
	if err := p.refuses(who); err != nil {
		return nil, err
	}
	key := callKeyPrefix + randomToken(12)
	if p.perPrincipal && !who.Anonymous() {
		key = p.keyFor("", who)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, p.closedError()
	}
	pc, ok := p.conns[key]
	if !ok {
		if len(p.conns) >= p.max {
			p.mu.Unlock()
			return nil, fmt.Errorf("upstream %s: %w (max_connections %d)", p.upstream.ns.Name, errConnectionLimit, p.max)
		}
		pc = p.openLocked(key, "", who)
	}
	pc.inUse.Add(1)
	pc.lastUsed.Store(time.Now().UnixNano())
	p.mu.Unlock()
	if err := p.awaitReady(ctx, pc); err != nil {
		return nil, err
	}
	return pc, nil
}

// relend offers the borrowed listing from a ready connection of another user than who, the
// user whose grant was revoked, when one is open here.
func (p *connPool) relend(who session.Principal) {
	p.mu.Lock()
	var next *pooledConn
	for _, pc := range p.conns {
		if !pc.forCall && !pc.principal.Anonymous() && !pc.principal.Same(who) && pc.conn.client.State() == upstream.StateReady {
			next = pc
			break
		}
	}
	p.mu.Unlock()
	if next != nil {
		p.borrowed.offer(next.conn.client, next.principal)
	}
}

// openToList opens who's own connection, waits until it is ready (it then offers its
// listing to the borrowed catalog) and releases it: it closes when idle, as any other.
func (p *connPool) openToList(ctx context.Context, who session.Principal) error {
	pc, err := p.getForCall(ctx, who)
	if err != nil {
		return err
	}
	p.release(pc)
	return nil
}

// closedError is what a call gets from a pool closed at shutdown, or by a reload that
// removed or replaced its upstream.
func (p *connPool) closedError() error {
	return fmt.Errorf("upstream %s: its connections are closed (the gateway stops, or a reload removed it): %w", p.upstream.ns.Name, upstream.ErrUnavailable)
}

// awaitReady waits until pc is ready, within the upstream's initialize bound (the longer one
// of its first start while that runs); past it, it releases pc.
func (p *connPool) awaitReady(ctx context.Context, pc *pooledConn) error {
	limit := p.spec.InitializeTimeout
	if !p.opts.FirstStart.Over() {
		limit = max(limit, p.spec.FirstInitializeTimeout)
	}
	wait, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case <-pc.ready:
		return nil
	case <-wait.Done():
		p.release(pc)
		return fmt.Errorf("upstream %s: the connection of this session or call did not become ready: %w", p.upstream.ns.Name, upstream.ErrUnavailable)
	}
}

// release ends a call's use of pc; a connection opened for one call closes with it.
func (p *connPool) release(pc *pooledConn) {
	pc.lastUsed.Store(time.Now().UnixNano())
	if pc.inUse.Add(-1) > 0 || !pc.forCall {
		return
	}
	key := pc.conn.pooled
	p.mu.Lock()
	mine := p.conns[key] == pc
	if mine {
		delete(p.conns, key)
	}
	p.mu.Unlock()
	if mine { // else closeAll has it
		p.closeConn(pc, key)
	}
}

// openLocked starts the connection of pool key key, for the session or its principal who;
// it runs on a goroutine the gateway owns.
func (p *connPool) openLocked(key, sessionID string, who session.Principal) *pooledConn {
	pc := &pooledConn{ready: make(chan struct{}), forCall: strings.HasPrefix(key, callKeyPrefix)}
	var readyOnce sync.Once
	opts := p.opts
	if p.credentials.perPrincipal != nil && key != sessionID && !pc.forCall {
		opts.HTTPClient = p.credentials.perPrincipal(who)
	}
	opts.OnChange = func(c *upstream.Client) {
		if c.State() == upstream.StateReady {
			readyOnce.Do(func() { close(pc.ready) })
			p.g.subs.renew(pc.conn) // after a restart of the session's child
			if p.borrowed != nil && !pc.forCall && key != sessionID {
				p.borrowed.offer(c, who)
			}
		}
	}
	client := upstream.New(p.spec, &opts)
	pc.conn = &conn{upstream: p.upstream, client: client, pooled: key}
	switch {
	case key == sessionID:
		pc.conn.session = sessionID
	case !pc.forCall:
		pc.principal = who
	}
	p.conns[key] = pc
	p.g.conns.Store(upstreamClient(client), pc.conn)
	// Refused once the gateway closes: the connection then never becomes ready, the call
	// waiting for it ends with its session, and closeAll closes it.
	p.g.goWorker(func() { client.Run(p.g.ctx) })
	switch {
	case pc.forCall:
		p.g.logger.Info("opened an upstream connection for one 2026-07-28 call", "upstream", p.upstream.ns.Name, "connection", fingerprint(key))
	case key == sessionID:
		p.g.logger.Info("opened a session's own upstream connection", "upstream", p.upstream.ns.Name, "session", fingerprint(sessionID))
	default:
		p.g.logger.Info("opened a principal's own upstream connection", "upstream", p.upstream.ns.Name, "principal", who.String())
	}
	return pc
}

// closeSession closes the session's connection, if any, in the background; a principal's
// connection closes with the last session using it.
func (p *connPool) closeSession(sessionID string) {
	p.mu.Lock()
	key, mapped := p.keys[sessionID]
	delete(p.keys, sessionID)
	if !mapped {
		key = sessionID
	}
	if key != sessionID {
		for _, k := range p.keys {
			if k == key {
				p.mu.Unlock()
				p.unrecord([]string{sessionID})
				return // another session of the principal still uses the connection
			}
		}
	}
	pc, ok := p.conns[key]
	if ok && key != sessionID && pc.inUse.Load() > 0 {
		// A principal's connection that 2026-07-28 calls, which no session holds, still use:
		// closed once idle (sweep).
		ok = false
	} else {
		delete(p.conns, key)
	}
	p.mu.Unlock()
	if ok || mapped {
		p.unrecord([]string{sessionID})
	}
	if ok {
		p.closeConn(pc, key)
	}
}

// unrecord tells the other replicas, in the background, that these sessions' calls to the
// upstream no longer run here.
func (p *connPool) unrecord(sessionIDs []string) {
	if p.g.replicas == nil || len(sessionIDs) == 0 {
		return
	}
	unrecordIt := func() {
		for _, id := range sessionIDs {
			ctx, cancel := context.WithTimeout(context.Background(), subscriptionCallTimeout)
			p.g.replicas.RecordConnection(ctx, id, p.upstream.ns.Name, false)
			cancel()
		}
	}
	if !p.g.goWorker(unrecordIt) {
		unrecordIt()
	}
}

// usersLocked returns the sessions whose calls use the connection of key: the session itself
// under isolation: session, the principal's sessions here under isolation: principal. The
// caller holds p.mu.
func (p *connPool) usersLocked(key string) []string {
	if strings.HasPrefix(key, callKeyPrefix) {
		return nil // a 2026-07-28 call's: no session's
	}
	if !p.perPrincipal {
		return []string{key}
	}
	var ids []string
	for id, k := range p.keys {
		if k == key {
			ids = append(ids, id)
		}
	}
	return ids
}

// closeConn closes the connection of pool key key.
func (p *connPool) closeConn(pc *pooledConn, key string) {
	closeIt := func() {
		pc.conn.client.Close()
		p.g.conns.Delete(pc.conn.client)
		if ex := p.credentials.exchanger; ex != nil && !pc.principal.Anonymous() {
			// The principal's tokens are kept no longer than its connection.
			ex.Forget(pc.principal)
		}
		switch {
		case pc.forCall:
			p.g.logger.Info("closed the upstream connection of a 2026-07-28 call", "upstream", p.upstream.ns.Name, "connection", fingerprint(key))
		case pc.conn.session != "":
			p.g.logger.Info("closed a session's own upstream connection", "upstream", p.upstream.ns.Name, "session", fingerprint(key))
		default:
			p.g.logger.Info("closed a principal's own upstream connection", "upstream", p.upstream.ns.Name, "connection", fingerprint(key))
		}
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
	var users []string
	for id, pc := range p.conns {
		if pc.inUse.Load() == 0 && pc.lastUsed.Load() < cutoff && !p.g.subs.holds(pc.conn) {
			idle[id] = pc
			delete(p.conns, id)
			users = append(users, p.usersLocked(id)...)
		}
	}
	for sid, key := range p.keys {
		if idle[key] != nil {
			delete(p.keys, sid)
		}
	}
	p.mu.Unlock()
	p.unrecord(users)
	for id, pc := range idle {
		p.closeConn(pc, id)
	}
}

// closeAll closes every connection; used at shutdown.
func (p *connPool) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.closed = true
	var users []string
	for id := range conns {
		users = append(users, p.usersLocked(id)...)
	}
	p.conns = map[string]*pooledConn{}
	p.keys = map[string]string{}
	p.mu.Unlock()
	p.unrecord(users)
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
	for _, u := range g.upstreamList() {
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

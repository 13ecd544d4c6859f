package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// What the protocol scopes to a session stays scoped to it when sessions share an upstream
// connection (design decision 5): log levels and log messages here, resource subscriptions in
// subscriptions.go, tasks in tasks.go.

// sessionLogs keeps each session's log level over shared upstream connections: an upstream
// logs at the most verbose level any session asked for, and each session receives only the
// messages its own level admits, of its own calls.
type sessionLogs struct {
	router    *messageRouter
	upstreams func() []*upstreamEntry
	// serves reports whether the endpoint of a session's group (a profile, "" for /mcp)
	// shows anything of an upstream, whose broadcast logs then reach its sessions.
	serves func(group string, ns *catalog.Namespace) bool
	// listeners are the sessions served here with their levels: what a log line and a
	// logging/setLevel read instead of the store.
	listeners logListeners
}

// levelRank orders the RFC 5424 levels, debug lowest; -1 for an unknown level.
func levelRank(level string) int { return slices.Index(protocol.LogLevels, level) }

// levelAllows reports whether a message at level reaches a session that asked for min; a
// session that set no level gets everything (the server may choose, mcp-notes §6.5).
func levelAllows(min, level string) bool {
	return min == "" || levelRank(level) >= levelRank(min)
}

// syncLevels sets each shared upstream that logs to the most verbose level any session
// served here asked for, when that changed. It reads the index of listeners, not the store.
func (l *sessionLogs) syncLevels(ctx context.Context) {
	want := l.listeners.lowest()
	if want == "" {
		return
	}
	// All upstreams at once: a slow one delays this sync by its own time only, not by the sum.
	var wg sync.WaitGroup
	for _, u := range l.upstreams() {
		wg.Go(func() { l.setUpstreamLevel(ctx, u.shared, want) })
	}
	wg.Wait()
}

// setLevel applies the level a session set here (its record already holds it): the index of
// listeners, the other replicas' (which may hold its stream), and the upstreams.
func (l *sessionLogs) setLevel(ctx context.Context, sessionID, level string) {
	l.listeners.setLevel(sessionID, level)
	if l.router.replicas != nil {
		l.router.replicas.LevelSet(ctx, sessionID, level)
	}
	l.syncLevels(ctx)
	l.syncSession(ctx, sessionID, level)
}

// syncSessionLogLevel sets a session's own upstream connections (isolation session) to the
// session's level.
func (l *sessionLogs) syncSession(ctx context.Context, sessionID string, level string) {
	for _, u := range l.upstreams() {
		if u.pool == nil {
			continue
		}
		if pc := u.pool.existing(sessionID); pc != nil {
			l.setUpstreamLevel(ctx, pc.conn, level)
		}
	}
}

// setUpstreamLevel sends logging/setLevel on one upstream connection when its level differs.
func (l *sessionLogs) setUpstreamLevel(ctx context.Context, c *conn, level string) {
	info := c.client.Server()
	if info == nil || info.Capabilities.Logging == nil {
		return
	}
	c.logMu.Lock()
	defer c.logMu.Unlock()
	if c.sentLevel == level && c.sentTo == info {
		return
	}
	params, _ := json.Marshal(map[string]string{"level": level})
	if _, err := c.client.Call(ctx, protocol.MethodSetLogLevel, params); err != nil {
		l.router.logger.Warn("setting an upstream's log level failed", "upstream", c.upstream.ns.Name, "level", level, "error", err.Error())
		return
	}
	c.sentLevel, c.sentTo = level, info
}

// admitLevel makes an upstream connection log at level or more verbosely, for a 2026-07-28
// request that asked for messages at level: such a request has no session, so syncLevels
// does not know its level. A later syncLevels may make the connection less verbose again; the
// next such request makes it verbose enough once more. Each client still gets only what its
// own level admits (deliver).
func (l *sessionLogs) admitLevel(ctx context.Context, c *conn, level string) {
	info := c.client.Server()
	c.logMu.Lock()
	current, sentTo := c.sentLevel, c.sentTo
	c.logMu.Unlock()
	if sentTo == info && current != "" && levelRank(current) <= levelRank(level) {
		return
	}
	l.setUpstreamLevel(ctx, c, level)
}

// deliverLog sends an upstream's log message to the session it belongs to, if its level
// admits it; a message that cannot be attributed reaches no one unless it came on the shared
// connection of an upstream configured to broadcast its logs (a session's own connection
// never broadcasts: its messages are that session's).
func (l *sessionLogs) deliver(c *conn, n *protocol.Notification, origin upstream.Origin) {
	level, _, _ := protocol.StringMember(n.Params, "level")
	if owner, _ := l.router.ownerOf(c, origin); owner != nil {
		if owner.admitsLog(level) {
			_ = l.router.send(owner.forSession(l.router.hub), n)
		}
		return
	}
	if !c.upstream.broadcastLogs || c.pooled != "" {
		return
	}
	data, err := protocol.Encode(n)
	if err != nil {
		return
	}
	// Only the sessions whose level admits the message, from the index: no store read.
	served := map[string]bool{} // group → whether it shows anything of this upstream
	l.listeners.each(levelRank(level), func(id, group string) {
		ok, known := served[group]
		if !known {
			ok = l.serves(group, c.upstream.ns)
			served[group] = ok
		}
		if ok {
			_ = l.router.deliver(id, "", data)
		}
	})
}

// logListeners indexes the sessions this replica serves (those live in its hub) by the log
// level each asked for, kept up to date when a session sets its level (here or on another
// replica), starts or comes back here, and ends; so that neither an upstream's log line nor a
// logging/setLevel reads every session's record. Across replicas a session's level lives in
// the store; each replica indexes the sessions it serves.
type logListeners struct {
	mu sync.Mutex
	// byLevel holds the sessions by the rank of their level plus one (0: no level set, which
	// admits everything), each with its group. Guarded by mu.
	byLevel []map[string]string
	// entries holds each indexed session's place in byLevel, by id; digests finds a
	// session's id from its digest (a level set on another replica). Guarded by mu.
	// Invariant: a session is in entries, digests and byLevel[entries[id].bucket] or in none.
	entries map[string]listenerEntry
	digests map[string]string
}

// listenerEntry is where the index holds a session.
type listenerEntry struct {
	bucket int
	// set marks a level set (setLevel) since the session's record was last read (track): a
	// record read before may not have it yet, and is not trusted over it once.
	set bool
}

// bucket is the bucket of level in byLevel.
func bucket(level string) int { return levelRank(level) + 1 }

// track indexes session id of group at level, from its record read for a request, or moves
// it there; it reports whether the lowest level of the sessions indexed changed. A record
// that disagrees with a level set since the last one was read may have been read before it
// was set: it is passed over, once, and the next record read decides.
func (x *logListeners) track(id, group, level string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e, ok := x.entries[id]; ok && (e.bucket == bucket(level) || e.set) {
		x.entries[id] = listenerEntry{bucket: e.bucket}
		return false
	}
	return x.moveLocked(id, group, level, false)
}

// moveLocked puts session id of group at level; it reports whether the lowest level of the
// sessions indexed changed.
func (x *logListeners) moveLocked(id, group, level string, set bool) bool {
	before := x.lowestLocked()
	if e, ok := x.entries[id]; ok {
		delete(x.byLevel[e.bucket], id)
	}
	if x.entries == nil {
		x.entries, x.digests = map[string]listenerEntry{}, map[string]string{}
		x.byLevel = make([]map[string]string, len(protocol.LogLevels)+1)
	}
	if x.byLevel[bucket(level)] == nil {
		x.byLevel[bucket(level)] = map[string]string{}
	}
	x.entries[id] = listenerEntry{bucket: bucket(level), set: set}
	x.digests[session.Digest(id)] = id
	x.byLevel[bucket(level)][id] = group
	return x.lowestLocked() != before
}

// setLevel moves an indexed session to the level it set (here or on another replica); a
// session not served here stays out. It reports whether the lowest level changed.
func (x *logListeners) setLevel(id, level string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[id]
	if !ok {
		return false
	}
	return x.moveLocked(id, x.byLevel[e.bucket][id], level, true)
}

// byDigest returns the id of the indexed session of that digest, or "".
func (x *logListeners) byDigest(digest string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.digests[digest]
}

// drop forgets a session that ended here; it reports whether the lowest level changed.
func (x *logListeners) drop(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e, ok := x.entries[id]
	if !ok {
		return false
	}
	before := x.lowestLocked()
	delete(x.byLevel[e.bucket], id)
	delete(x.entries, id)
	delete(x.digests, session.Digest(id))
	return x.lowestLocked() != before
}

// lowest returns the most verbose level a session asked for, "" when none did.
func (x *logListeners) lowest() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lowestLocked()
}

func (x *logListeners) lowestLocked() string {
	for b := 1; b < len(x.byLevel); b++ {
		if len(x.byLevel[b]) > 0 {
			return protocol.LogLevels[b-1]
		}
	}
	return ""
}

// each calls f, outside the lock, for every session whose level admits a message of rank
// (levelRank: -1 for an unknown level, which only sessions that set none receive).
func (x *logListeners) each(rank int, f func(id, group string)) {
	type listener struct{ id, group string }
	var them []listener
	x.mu.Lock()
	for b := 0; b <= rank+1 && b < len(x.byLevel); b++ {
		for id, group := range x.byLevel[b] {
			them = append(them, listener{id, group})
		}
	}
	x.mu.Unlock()
	for _, l := range them {
		f(l.id, l.group)
	}
}

// openLive returns the live part of a session in the hub, as hub.Open does, and indexes it
// with its level for the log fan-out. Every request of the session opens it, so that a level
// set on another replica whose notice was lost is up to date here after its next requests.
func (g *Gateway) openLive(rec *session.Record) (*hub.Session, error) {
	ls, err := g.hub.Open(rec.ID, rec.Profile)
	if err != nil {
		return nil, err
	}
	l := g.logs
	if l.listeners.track(rec.ID, rec.Profile, rec.LogLevel) {
		g.resyncLogLevels()
	}
	if g.hub.Lookup(rec.ID) == nil {
		// Ended meanwhile, perhaps before it was indexed: not indexed then.
		l.listeners.drop(rec.ID)
	}
	return ls, nil
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// subscriptionCallTimeout bounds the upstream calls the gateway makes for subscriptions on its
// own, outside any client request.
const subscriptionCallTimeout = 10 * time.Second

// subscriptions fans resources/updated out to the sessions that subscribed and the listen
// streams that asked for the URI (listenresources.go): one upstream subscription per key,
// dropped when its last holder, session or listen, leaves.
//
// The upstream calls of one key take turns, so that the key is subscribed upstream once and
// unsubscribed when its last subscriber leaves; calls of different keys never wait for each
// other. mu is never held across an upstream call, so the upstream's read loop, delivering
// updates, never waits for one.
type subscriptions struct {
	router *messageRouter
	// goWorker runs a background call on a goroutine the gateway owns; false once it closes.
	goWorker func(func()) bool

	mu sync.Mutex
	// entries holds each key's subscription. Invariant: an entry stays in the table while it
	// has subscribers, is subscribed upstream, or a goroutine holds or waits for its turn, so
	// that a waiter never holds an entry the table has replaced. Guarded by mu.
	entries map[subKey]*subEntry
	// stamps order, across replicas, the subscribes and unsubscribes of a session to a URI:
	// the latest holds it, whichever replica got it (replica.Replicas.Subscribed). Guarded by mu.
	stamps map[subStamp]uint64
	// modern holds the upstream listen of each key of a 2026-07-28 upstream that listen
	// streams hold (upstreamlisten.go). Guarded by mu.
	modern map[subKey]*upstreamListen
}

// subStamp names a session's subscription to an upstream's URI, for its stamp.
type subStamp struct {
	session, upstream, uri string
}

// subKey is a subscription to one URI on one connection, shared or a session's own.
type subKey struct {
	conn *conn
	uri  string // the upstream's own URI
}

// subEntry is one key's subscription.
type subEntry struct {
	// turn holds a token while a goroutine calls the upstream for the key; a channel, so that
	// waiting for it honours a context.
	turn chan struct{}

	// The fields below are guarded by subscriptions.mu.

	// sessions holds the ids of the subscribed sessions.
	sessions map[string]bool
	// listens holds the listen streams of this replica that asked for the key's URI; a
	// listen is only ever held on the shared connection.
	listens map[*listenStream]bool
	// on is the connection the upstream subscription was made on (its initialize result, new
	// with every connection), nil when there is none. A subscription made on an earlier
	// connection is lost: the upstream restarted or re-initialized.
	on *protocol.InitializeResult
	// refs counts the goroutines holding or waiting for turn.
	refs int
}

// heldLocked reports whether a session or a listen holds the subscription; subscriptions.mu
// must be held.
func (e *subEntry) heldLocked() bool { return len(e.sessions) > 0 || len(e.listens) > 0 }

// acquire waits for key's turn, making its entry when there is none. The caller must release
// the entry when its upstream calls are done.
func (s *subscriptions) acquire(ctx context.Context, key subKey) (*subEntry, error) {
	s.mu.Lock()
	e := s.entries[key]
	if e == nil {
		e = &subEntry{turn: make(chan struct{}, 1), sessions: map[string]bool{}, listens: map[*listenStream]bool{}}
		s.entries[key] = e
	}
	e.refs++
	s.mu.Unlock()
	select {
	case e.turn <- struct{}{}:
		return e, nil
	case <-ctx.Done():
		s.leave(key, e)
		return nil, ctx.Err()
	}
}

// release ends the holder's turn.
func (s *subscriptions) release(key subKey, e *subEntry) {
	<-e.turn
	s.leave(key, e)
}

// leave drops a reference to e, and e from the table once nothing keeps it there.
func (s *subscriptions) leave(key subKey, e *subEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.refs--
	if e.refs == 0 && !e.heldLocked() && e.on == nil {
		delete(s.entries, key)
	}
}

// subscribe serves resources/subscribe (on) and resources/unsubscribe for a session. The
// subscription is made on the connection whose server notifies the session: the shared one,
// or for an isolated upstream the session's own, which then stays open while it has
// subscriptions (connPool.sweep).
func (s *subscriptions) subscribe(ctx context.Context, rq *request, res *resolved, on bool) (json.RawMessage, error) {
	sessionID := rq.Client.SessionID
	if sessionID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s needs a session: updates go to the session's stream", rq.Method)
	}
	if r := s.router.replicas; r != nil && res.upstream.pool != nil {
		// The session's own connection is on another replica: the subscription is made there.
		if holder := holderOf(r, rq, res.upstream); holder != "" {
			result, err, forwarded := forward(ctx, r, rq, res.upstream, holder, replica.Call{Method: rq.Method, Params: res.params, Exposed: res.target.Exposed, Original: res.target.Original})
			if forwarded {
				return result, err
			}
		}
	}
	return s.subscribeHere(ctx, rq, res, on)
}

// subscribeHere is subscribe on this replica's connections.
func (s *subscriptions) subscribeHere(ctx context.Context, rq *request, res *resolved, on bool) (json.RawMessage, error) {
	sessionID := rq.Client.SessionID
	u, original, forward := res.upstream, res.target.Original, res.params
	failed := func(err error) error {
		var rpcErr *protocol.Error
		if errors.As(err, &rpcErr) {
			return &pipeline.UpstreamError{Upstream: u.ns.Name, Err: rpcErr}
		}
		return unavailable(rq, u.ns.Name, res.target.Exposed, err)
	}
	if info := u.Server(); info == nil || info.Capabilities.Resources == nil || !info.Capabilities.Resources.Subscribe {
		if info == nil {
			return nil, failed(upstream.ErrUnavailable)
		}
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream serving %s offers no subscriptions", res.target.Exposed)
	}
	c := u.shared // the connection the subscription lives on
	if u.pool != nil {
		if on {
			pc, err := u.pool.get(ctx, sessionID, rq.Client.Principal)
			if err != nil {
				return nil, failed(err)
			}
			defer u.pool.release(pc)
			c = pc.conn
		} else {
			pc := u.pool.existing(sessionID)
			if pc == nil {
				return json.RawMessage(`{}`), nil // no connection, so no subscription on it
			}
			c = pc.conn
		}
	}
	var seq uint64
	if r := s.router.replicas; r != nil {
		// Stamped before the upstream hears of it: a replica that got an earlier one drops
		// its own when it hears of this one, and this one outlives an earlier one's news.
		seq = r.Sequence(ctx)
		s.setStamp(subStamp{sessionID, u.ns.Name, original}, seq)
	}
	key := subKey{c, original}
	e, err := s.acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	defer s.release(key, e)
	// The upstream has the subscription only if it was made on the current connection.
	info := c.client.Server()
	s.mu.Lock()
	current := e.on != nil && e.on == info
	mine, count := e.sessions[sessionID], len(e.sessions)+len(e.listens)
	s.mu.Unlock()
	switch {
	case on && !current:
		if info == nil {
			return nil, failed(upstream.ErrUnavailable)
		}
		if _, err := c.client.Call(ctx, protocol.MethodSubscribe, forward); err != nil {
			return nil, failed(err)
		}
	case !on && mine && count == 1 && current:
		if _, err := c.client.Call(ctx, protocol.MethodUnsubscribe, forward); err != nil {
			return nil, failed(err)
		}
	}
	s.mu.Lock()
	if on && !s.router.sessionLive(sessionID) {
		// The session ended while the upstream subscribed: its subscriptions were already
		// dropped, so this one is not added back (the upstream's is left to lapse).
		s.mu.Unlock()
		return nil, hub.ErrSessionEnded
	}
	if on {
		e.sessions[sessionID] = true
		e.on = info
	} else if mine {
		delete(e.sessions, sessionID)
		if !e.heldLocked() {
			e.on = nil
		}
	}
	s.mu.Unlock()
	s.record(ctx, sessionID, res.target.Exposed, on)
	if r := s.router.replicas; r != nil {
		r.Subscribed(ctx, session.Digest(sessionID), u.ns.Name, original, on, seq)
	}
	return json.RawMessage(`{}`), nil
}

// dropElsewhere drops a session's subscription to an upstream's uri that this replica holds,
// because another now does (or the session unsubscribed there): the session is named by its
// digest, and by its id when this replica knows it. Unsubscribed upstream when it was the
// last subscriber.
func (s *subscriptions) dropElsewhere(digest, sessionID, upstreamName, uri string, seq uint64) {
	s.mu.Lock()
	// A subscription made here after the one announced stays.
	byDigest := subStamp{digestKey + digest, upstreamName, uri}
	byID := subStamp{sessionID, upstreamName, uri}
	keepDigest := s.stamps[byDigest] > seq
	keepID := sessionID != "" && s.stamps[byID] > seq
	if !keepDigest {
		delete(s.stamps, byDigest)
	}
	if sessionID != "" && !keepID {
		delete(s.stamps, byID)
	}
	var last []subKey
	for key, e := range s.entries {
		if key.uri != uri || key.conn.upstream.ns.Name != upstreamName {
			continue
		}
		mine := !keepDigest && e.sessions[digestKey+digest] || sessionID != "" && !keepID && e.sessions[sessionID]
		if !mine {
			continue
		}
		if !keepDigest {
			delete(e.sessions, digestKey+digest)
		}
		if sessionID != "" && !keepID {
			delete(e.sessions, sessionID)
		}
		if !e.heldLocked() && e.on != nil {
			last = append(last, key)
		}
	}
	s.mu.Unlock()
	for _, key := range last {
		s.goWorker(func() { s.unsubscribeUnused(key) })
	}
}

// takeOver subscribes, on this replica's shared connection, a session known by its digest to
// an exposed uri, for a replica that stopped; it reports whether it did. The other replicas
// are told, so that one holds it.
func (s *subscriptions) takeOver(ctx context.Context, digest string, u *upstreamEntry, original string) bool {
	ns := u.ns
	if u.pool != nil {
		// The session's own connection went with the replica; a new one opens with the
		// session's next call, without this subscription.
		return false
	}
	seq := s.router.replicas.Sequence(ctx)
	s.setStamp(subStamp{digestKey + digest, ns.Name, original}, seq)
	key := subKey{u.shared, original}
	e, err := s.acquire(ctx, key)
	if err != nil {
		return false
	}
	defer s.release(key, e)
	info, err := s.subscribeTurn(ctx, key, e)
	if err != nil {
		s.router.logger.Warn("taking over a subscription failed", "upstream", ns.Name, "error", err.Error())
		return false
	}
	s.mu.Lock()
	e.sessions[digestKey+digest] = true
	e.on = info
	s.mu.Unlock()
	s.router.replicas.Subscribed(ctx, digest, ns.Name, original, true, seq)
	return true
}

// subscribeTurn subscribes key upstream unless it is subscribed on the connection as it is
// now, and returns that connection's initialize result, for subEntry.on. The caller holds
// key's turn (acquire).
func (s *subscriptions) subscribeTurn(ctx context.Context, key subKey, e *subEntry) (*protocol.InitializeResult, error) {
	info := key.conn.client.Server()
	if info == nil {
		return nil, upstream.ErrUnavailable
	}
	s.mu.Lock()
	current := e.on == info
	s.mu.Unlock()
	if !current {
		params, _ := json.Marshal(map[string]string{"uri": key.uri})
		if _, err := key.conn.client.Call(ctx, protocol.MethodSubscribe, params); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// setStamp records the stamp of a subscribe or unsubscribe made here.
func (s *subscriptions) setStamp(k subStamp, seq uint64) {
	s.mu.Lock()
	if s.stamps == nil {
		s.stamps = map[subStamp]uint64{}
	}
	s.stamps[k] = seq
	s.mu.Unlock()
}

// recordSubscription keeps the session record's list of subscriptions, which says what the
// session is to whoever loads it; the live fan-out is the table above.
func (s *subscriptions) record(ctx context.Context, sessionID, uri string, on bool) {
	_, err := s.router.store.Update(ctx, sessionID, func(r *session.Record) {
		i := slices.Index(r.Subscriptions, uri)
		switch {
		case on && i < 0:
			r.Subscriptions = append(slices.Clip(r.Subscriptions), uri)
		case !on && i >= 0:
			r.Subscriptions = slices.Delete(slices.Clone(r.Subscriptions), i, i+1)
		}
	})
	if err != nil {
		s.router.logger.Warn("recording a subscription in the session failed", "session", fingerprint(sessionID), "error", err.Error())
	}
}

// takenOver lists the digests of the sessions subscribed here by digest only (taken over from
// a stopped replica).
func (s *subscriptions) takenOver() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var digests []string
	for _, e := range s.entries {
		for key := range e.sessions {
			if d, ok := strings.CutPrefix(key, digestKey); ok && !seen[d] {
				seen[d] = true
				digests = append(digests, d)
			}
		}
	}
	return digests
}

// dropSubscriptions removes an ended session's subscriptions, unsubscribing upstream where it
// was the last subscriber.
func (s *subscriptions) drop(sessionID string) {
	s.dropKeys(sessionID, digestKey+session.Digest(sessionID))
}

// dropDigest removes the subscriptions of an ended session known here by its digest only.
func (s *subscriptions) dropDigest(digest string) { s.dropKeys(digestKey+digest, digestKey+digest) }

// dropKeys removes the subscriptions of a session under its id and digest keys.
func (s *subscriptions) dropKeys(sessionID, byDigest string) {
	s.mu.Lock()
	for k := range s.stamps {
		if k.session == sessionID || k.session == byDigest {
			delete(s.stamps, k)
		}
	}
	var last []subKey
	for key, e := range s.entries {
		if !e.sessions[sessionID] && !e.sessions[byDigest] {
			continue
		}
		delete(e.sessions, sessionID)
		delete(e.sessions, byDigest)
		if e.heldLocked() {
			continue
		}
		if key.conn.session != "" {
			e.on = nil // the session's own connection closes with it, and its subscriptions
		}
		switch {
		case e.on != nil:
			last = append(last, key)
		case e.refs == 0:
			delete(s.entries, key)
		}
	}
	s.mu.Unlock()
	// One goroutine per key: a slow upstream delays only its own unsubscribe. None once the
	// gateway closes: the upstreams are stopping.
	for _, key := range last {
		s.goWorker(func() { s.unsubscribeUnused(key) })
	}
}

// unsubscribeUnused unsubscribes key upstream unless a session subscribed to it meanwhile.
func (s *subscriptions) unsubscribeUnused(key subKey) {
	ctx, cancel := context.WithTimeout(s.router.ctx, subscriptionCallTimeout)
	defer cancel()
	e, err := s.acquire(ctx, key)
	if err != nil {
		return // still subscribed upstream: the next subscriber reuses it
	}
	defer s.release(key, e)
	s.mu.Lock()
	unused, current := !e.heldLocked() && e.on != nil, e.on == key.conn.client.Server()
	s.mu.Unlock()
	if !unused {
		return
	}
	// When the subscription was made on a connection since replaced, it went with it.
	if current {
		params, _ := json.Marshal(map[string]string{"uri": key.uri})
		if _, err := key.conn.client.Call(ctx, protocol.MethodUnsubscribe, params); err != nil && ctx.Err() == nil {
			s.router.logger.Debug("unsubscribing after a session ended failed", "upstream", key.conn.upstream.ns.Name, "error", err.Error())
		}
	}
	s.mu.Lock()
	e.on = nil
	s.mu.Unlock()
}

// holds reports whether a session is subscribed to anything on connection c.
func (s *subscriptions) holds(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, e := range s.entries {
		if key.conn == c && e.heldLocked() {
			return true
		}
	}
	return false
}

// renewSubscriptions subscribes connection c, in the background, to every URI that has
// subscribers but was subscribed on an earlier connection: the upstream restarted or
// re-initialized and forgot them. It is called whenever c is ready, which is also after a
// mere catalog refresh; then nothing is stale and nothing is sent.
func (s *subscriptions) renew(c *conn) {
	info := c.client.Server()
	if info == nil || s.router.ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	var stale []subKey
	for key, e := range s.entries {
		if key.conn == c && e.heldLocked() && e.on != info {
			stale = append(stale, key)
		}
	}
	s.mu.Unlock()
	if len(stale) == 0 {
		return
	}
	s.goWorker(func() { s.renewKeys(stale) })
}

// renewKeys renews subscriptions, all within one timeout. Each key is renewed on its own, so
// that one the upstream is slow to answer does not hold up the others; a failure is logged,
// and the key is tried again the next time the upstream is ready or a client subscribes.
func (s *subscriptions) renewKeys(keys []subKey) {
	ctx, cancel := context.WithTimeout(s.router.ctx, subscriptionCallTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			if err := s.renewKey(ctx, key); err != nil && s.router.ctx.Err() == nil {
				s.router.logger.Warn("renewing a resource subscription after the upstream reconnected failed", "upstream", key.conn.upstream.ns.Name, "error", err.Error())
			}
		})
	}
	wg.Wait()
}

// renewKey subscribes key on its connection as it is now, unless that is done already or
// nobody is subscribed any more.
func (s *subscriptions) renewKey(ctx context.Context, key subKey) error {
	e, err := s.acquire(ctx, key)
	if err != nil {
		return err
	}
	defer s.release(key, e)
	info := key.conn.client.Server()
	s.mu.Lock()
	stale := info != nil && e.heldLocked() && e.on != info
	s.mu.Unlock()
	if !stale {
		return nil
	}
	params, _ := json.Marshal(map[string]string{"uri": key.uri})
	if _, err := key.conn.client.Call(ctx, protocol.MethodSubscribe, params); err != nil {
		return err
	}
	s.mu.Lock()
	e.on = info
	s.mu.Unlock()
	return nil
}

// deliverUpdated fans notifications/resources/updated out to the subscribed sessions and
// the listen streams that asked for it, with the URI in the gateway's namespaced form.
func (s *subscriptions) deliverUpdated(c *conn, n *protocol.Notification) {
	uri, ok, err := protocol.StringMember(n.Params, "uri")
	if err != nil || !ok {
		return
	}
	s.tellListensUpdated(c, uri)
	// Subscriptions are keyed by connection: an update from a session's own connection
	// reaches only that session, the only one that can subscribe there.
	s.mu.Lock()
	var ids []string
	if e := s.entries[subKey{c, uri}]; e != nil {
		ids = make([]string, 0, len(e.sessions))
		for id := range e.sessions {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	params, err := withMember(n.Params, "uri", catalog.ExposeURI(c.upstream.ns.Scheme, uri))
	if err != nil {
		return
	}
	s.router.notifySessions(&protocol.Notification{Method: n.Method, Params: params}, ids...)
}

package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// What the protocol scopes to a session stays scoped to it when sessions share an upstream
// connection (design decision 5): log levels and log messages, and resource subscriptions.

// levelRank orders the RFC 5424 levels, debug lowest; -1 for an unknown level.
func levelRank(level string) int { return slices.Index(protocol.LogLevels, level) }

// levelAllows reports whether a message at level reaches a session that asked for min; a
// session that set no level gets everything (the server may choose, mcp-notes §6.5).
func levelAllows(min, level string) bool {
	return min == "" || levelRank(level) >= levelRank(min)
}

// syncLogLevels sets each shared upstream that logs to the most verbose level any live
// session asked for, when that changed.
func (g *Gateway) syncLogLevels(ctx context.Context) {
	want := ""
	for _, ls := range g.liveSessions() {
		rec, err := g.store.Get(ctx, ls.id)
		if err != nil || rec.LogLevel == "" {
			continue
		}
		if want == "" || levelRank(rec.LogLevel) < levelRank(want) {
			want = rec.LogLevel
		}
	}
	if want == "" {
		return
	}
	for _, r := range g.routes {
		g.setUpstreamLevel(ctx, r, want)
	}
}

// syncSessionLogLevel sets a session's own upstream connections (isolation session) to the
// session's level.
func (g *Gateway) syncSessionLogLevel(ctx context.Context, ls *liveSession, level string) {
	for _, r := range g.routes {
		if r.pool == nil {
			continue
		}
		if pc := r.pool.existing(ls.id); pc != nil {
			g.setUpstreamLevel(ctx, pc.route, level)
		}
	}
}

// setUpstreamLevel sends logging/setLevel to one upstream when its level differs.
func (g *Gateway) setUpstreamLevel(ctx context.Context, r *route, level string) {
	info := r.client.Server()
	if info == nil || info.Capabilities.Logging == nil {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.sentLevel == level && r.sentTo == info {
		return
	}
	params, _ := json.Marshal(map[string]string{"level": level})
	if _, err := r.client.Call(ctx, protocol.MethodSetLogLevel, params); err != nil {
		g.logger.Warn("setting an upstream's log level failed", "upstream", r.name, "level", level, "error", err.Error())
		return
	}
	r.sentLevel, r.sentTo = level, info
}

// deliverLog sends an upstream's log message to the session it belongs to, if its level
// admits it; a message that cannot be attributed reaches no one unless the upstream is
// configured to broadcast its logs.
func (g *Gateway) deliverLog(r *route, n *protocol.Notification, origin upstream.Origin) {
	level, _, _ := protocol.StringMember(n.Params, "level")
	if owner, _ := g.ownerOf(r, origin); owner != nil {
		if levelAllows(owner.logLevel, level) {
			if err := owner.out.send(n); err != nil {
				_ = standaloneSink{owner.session, g}.send(n)
			}
		}
		return
	}
	if !r.broadcastLogs {
		return
	}
	data, err := protocol.Encode(n)
	if err != nil {
		return
	}
	for _, ls := range g.liveSessions() {
		rec, err := g.store.Get(g.ctx, ls.id)
		if err == nil && levelAllows(rec.LogLevel, level) {
			ls.notify(data, g.logger)
		}
	}
}

// subscriptions fans resources/updated out to the sessions that subscribed: one upstream
// subscription per URI, dropped when its last subscriber leaves.
type subscriptions struct {
	// callMu is held across the upstream subscribe and unsubscribe calls, so that a URI is
	// subscribed upstream once; subscriptions change rarely.
	callMu sync.Mutex
	mu     sync.Mutex
	// byURI holds the subscribers of each upstream URI. Guarded by mu.
	byURI map[subKey]map[string]bool
}

type subKey struct {
	route *route
	uri   string // the upstream's own URI
}

func (g *Gateway) subscribe(ctx context.Context, cc *clientContext, snap *snapshot, params json.RawMessage, on bool) (json.RawMessage, error) {
	uri, ok, err := protocol.StringMember(params, "uri")
	if err != nil || !ok || uri == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"uri\" must be a non-empty string")
	}
	r, original, ok := snap.resolveURI(uri)
	if !ok {
		return nil, resourceNotFound(uri)
	}
	if info := r.client.Server(); info == nil || info.Capabilities.Resources == nil || !info.Capabilities.Resources.Subscribe {
		if info == nil {
			return nil, &unavailableError{upstream: r.name, cause: upstream.ErrUnavailable}
		}
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream serving %s offers no subscriptions", uri)
	}
	forward, err := withMember(params, "uri", original)
	if err != nil {
		return nil, err
	}
	key := subKey{r, original}
	s := &g.subs
	// callMu serializes the upstream calls; mu guards the table only briefly, so that the
	// upstream's read loop, delivering updates, never waits for an upstream call.
	s.callMu.Lock()
	defer s.callMu.Unlock()
	s.mu.Lock()
	count := len(s.byURI[key])
	mine := s.byURI[key][cc.SessionID]
	s.mu.Unlock()
	switch {
	case on && count == 0:
		if _, err := r.client.Call(ctx, protocol.MethodSubscribe, forward); err != nil {
			return nil, err
		}
	case !on && mine && count == 1:
		if _, err := r.client.Call(ctx, protocol.MethodUnsubscribe, forward); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		if s.byURI[key] == nil {
			s.byURI[key] = map[string]bool{}
		}
		s.byURI[key][cc.SessionID] = true
	} else if subscribers := s.byURI[key]; subscribers != nil {
		delete(subscribers, cc.SessionID)
		if len(subscribers) == 0 {
			delete(s.byURI, key)
		}
	}
	return json.RawMessage(`{}`), nil
}

// dropSubscriptions removes an ended session's subscriptions, unsubscribing upstream where it
// was the last subscriber.
func (g *Gateway) dropSubscriptions(sessionID string) {
	s := &g.subs
	s.mu.Lock()
	var last []subKey
	for key, subscribers := range s.byURI {
		if subscribers[sessionID] {
			delete(subscribers, sessionID)
			if len(subscribers) == 0 {
				delete(s.byURI, key)
				last = append(last, key)
			}
		}
	}
	s.mu.Unlock()
	if len(last) == 0 {
		return
	}
	g.workers.Add(1)
	go func() {
		defer g.workers.Done()
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		defer cancel()
		s.callMu.Lock()
		defer s.callMu.Unlock()
		for _, key := range last {
			s.mu.Lock()
			resubscribed := len(s.byURI[key]) > 0
			s.mu.Unlock()
			if resubscribed {
				continue // another session subscribed again meanwhile
			}
			params, _ := json.Marshal(map[string]string{"uri": key.uri})
			if _, err := key.route.client.Call(ctx, protocol.MethodUnsubscribe, params); err != nil && ctx.Err() == nil {
				g.logger.Debug("unsubscribing after a session ended failed", "upstream", key.route.name, "error", err.Error())
			}
		}
	}()
}

// deliverUpdated fans notifications/resources/updated out to the subscribed sessions, with
// the URI in the gateway's namespaced form.
func (g *Gateway) deliverUpdated(r *route, n *protocol.Notification) {
	uri, ok, err := protocol.StringMember(n.Params, "uri")
	if err != nil || !ok {
		return
	}
	base := r
	if r.boundSession != nil && r.pool == nil {
		// A session's own connection: its subscriptions were made on the shared one.
		for _, br := range g.routes {
			if br.name == r.name {
				base = br
			}
		}
	}
	s := &g.subs
	s.mu.Lock()
	ids := make([]string, 0, len(s.byURI[subKey{base, uri}]))
	for id := range s.byURI[subKey{base, uri}] {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	params, err := withMember(n.Params, "uri", exposeURI(r.scheme, uri))
	if err != nil {
		return
	}
	data, err := protocol.Encode(&protocol.Notification{Method: n.Method, Params: params})
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		if ls := g.live[id]; ls != nil {
			ls.notify(data, g.logger)
		}
	}
}

// exposeContentURIs rewrites the URIs of resource_link and embedded resource blocks in a
// tools/call result (content[]) or a prompts/get result (messages[].content) into the
// gateway's namespaced form, so the client can read them through the gateway.
// structuredContent is left alone: its shape belongs to the tool.
func exposeContentURIs(result json.RawMessage, scheme string) json.RawMessage {
	if scheme == "" || !bytes.Contains(result, []byte(`"resource`)) {
		return result
	}
	return mapContentBlocks(result, func(b json.RawMessage) (json.RawMessage, bool) { return exposeBlock(b, scheme) })
}

// exposeBlock rewrites one content block's URI, reporting whether it changed.
func exposeBlock(block json.RawMessage, scheme string) (json.RawMessage, bool) {
	typ, _, _ := protocol.StringMember(block, "type")
	switch typ {
	case "resource_link":
		uri, ok, _ := protocol.StringMember(block, "uri")
		if !ok {
			return block, false
		}
		out, err := withMember(block, "uri", exposeURI(scheme, uri))
		return out, err == nil
	case "resource":
		res, ok, _ := protocol.Member(block, "resource")
		if !ok {
			return block, false
		}
		uri, ok, _ := protocol.StringMember(res, "uri")
		if !ok {
			return block, false
		}
		nres, err := withMember(res, "uri", exposeURI(scheme, uri))
		if err != nil {
			return block, false
		}
		out, err := protocol.SetMember(block, "resource", nres)
		return out, err == nil
	}
	return block, false
}

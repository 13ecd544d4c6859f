package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

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

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// A 2026-07-28 client hears of list changes and resource updates on a subscriptions/listen
// stream (mcp-2026-notes §1.8, §2.8): the gateway acknowledges the list changes and the
// resource subscriptions it honours, then sends notifications/*/list_changed, each with the
// listen's id as subscriptionId, whenever a catalog rebuild changes a list the caller sees
// (the rebuilds that tell 2025-11-25 sessions, tellListsChanged), and
// notifications/resources/updated, with it too, whenever an upstream updates a resource the
// listen subscribed to and the caller may read (listenresources.go).
//
// No bus between replicas is needed for this: every replica has its own connections to the
// upstreams, hears their list changes itself and rebuilds its own catalog, so a listen stream
// on any replica learns of every change; and the replica that holds a listen subscribes to
// its resources on its own connection to the upstream, which sends the updates there.

// listenKeepAliveInterval is how often an idle listen stream gets an SSE comment, so that
// proxies and clients can tell it is alive.
const listenKeepAliveInterval = 15 * time.Second

// listChangedFlags are the members of a listen's params.notifications that the gateway
// honours, with the notification each asks for.
var listChangedFlags = []struct{ flag, method string }{
	{"toolsListChanged", protocol.NotificationToolsChanged},
	{"promptsListChanged", protocol.NotificationPromptsChanged},
	{"resourcesListChanged", protocol.NotificationResourcesChanged},
}

// listenStreams are the listen streams open on this replica, and how many each caller holds
// (max_listens_per_principal). A listen counts toward neither max_calls nor
// max_calls_per_principal: it lasts as long as its client keeps it, and would starve the
// caller's calls. Safe for concurrent use.
type listenStreams struct {
	perCaller *callersInFlight
	// keepAlive is how often an idle stream gets a comment (listenKeepAliveInterval; tests
	// set it before Start).
	keepAlive time.Duration

	mu   sync.Mutex
	open map[*listenStream]struct{} // guarded by mu
}

func newListenStreams(limit int) *listenStreams {
	return &listenStreams{perCaller: newCallersInFlight(limit), keepAlive: listenKeepAliveInterval, open: map[*listenStream]struct{}{}}
}

// listenStream is one open listen: whose it is, what it asked for, and the notifications
// waiting for its handler to write them.
type listenStream struct {
	profile   string
	principal session.Principal
	// wants are the list_changed methods the stream honours.
	wants map[string]bool

	mu sync.Mutex
	// pending are the list_changed methods to write, each at most once: a second change of
	// a list before the first was written says nothing more. Guarded by mu.
	pending []string
	// updates are the namespaced URIs of the resource updates to write, each at most once,
	// as pending. Guarded by mu.
	updates []string
	// overflow is set when updates reached listenUpdatesLimit: the client is not reading, and
	// the stream ends. Guarded by mu.
	overflow bool
	// wake has room for one signal: the handler looks at pending.
	wake chan struct{}
	// ended is closed (once, by end) when the stream's endpoint is gone: a reload removed
	// its profile. The handler then completes the listen, as at a drain.
	ended   chan struct{}
	endOnce sync.Once
}

// end completes the listen, what is pending written first. It never blocks; more than once
// is the same as once.
func (s *listenStream) end() { s.endOnce.Do(func() { close(s.ended) }) }

// endProfile ends the listen streams here of profile.
func (ls *listenStreams) endProfile(profile string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for s := range ls.open {
		if s.profile == profile {
			s.end()
		}
	}
}

// add registers s; remove must follow.
func (ls *listenStreams) add(s *listenStream) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.open[s] = struct{}{}
}

func (ls *listenStreams) remove(s *listenStream) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	delete(ls.open, s)
}

// count is how many listen streams are open here.
func (ls *listenStreams) count() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.open)
}

// queue adds the methods s wants to its pending ones and wakes its handler. It never blocks.
func (s *listenStream) queue(methods []string) {
	s.mu.Lock()
	added := false
	for _, m := range methods {
		if !s.wants[m] || slices.Contains(s.pending, m) {
			continue
		}
		s.pending = append(s.pending, m)
		added = true
	}
	s.mu.Unlock()
	if added {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// queueUpdate adds a resource update, by its namespaced URI, to the pending ones and wakes
// the handler. It never blocks.
func (s *listenStream) queueUpdate(uri string) {
	s.mu.Lock()
	switch {
	case slices.Contains(s.updates, uri):
		s.mu.Unlock()
		return
	case len(s.updates) >= listenUpdatesLimit:
		s.overflow = true
	default:
		s.updates = append(s.updates, uri)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns the pending methods and resource updates and empties them; overflow says the
// client stopped reading.
func (s *listenStream) take() (methods, updates []string, overflow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	methods, updates = s.pending, s.updates
	s.pending, s.updates = nil, nil
	return methods, updates, s.overflow
}

// tellListens tells the listen streams here whose lists changed from prev to next, as
// tellListsChanged tells sessions: changed are the list_changed methods of each profile
// whose catalog changed ("" for /mcp). With a policy, a stream hears only of changes to what
// its principal sees. It runs under the rebuild's lock.
func tellListens(g *Gateway, prev, next *catalog.Snapshot, changed map[string][]string) {
	ls := g.streamable.stateless.listens
	ls.mu.Lock()
	streams := make([]*listenStream, 0, len(ls.open))
	for s := range ls.open {
		if _, ok := changed[s.profile]; ok {
			streams = append(streams, s)
		}
	}
	ls.mu.Unlock()
	memo := map[string][]string{} // profile + view key → what that view saw change
	for _, s := range streams {
		methods := changed[s.profile]
		if gt := g.gate; gt != nil {
			rules := gt.current().rules
			key := s.profile + "\x00" + rules.ViewKey(s.principal)
			own, done := memo[key]
			if !done {
				own = listsChanged(filterView(rules, profileOf(prev, s.profile), s.principal), filterView(rules, profileOf(next, s.profile), s.principal))
				memo[key] = own
			}
			methods = own
		}
		s.queue(methods)
	}
}

// listenAsk is what a listen's params.notifications ask for that the gateway may honour.
type listenAsk struct {
	// flags are the flags of listChangedFlags set to true, in that order.
	flags []string
	// resources are the URIs of resourceSubscriptions, each once, in the order given.
	resources []string
}

// listenFilter reads what a listen's params ask for; what else they ask for (taskIds) is not
// honoured.
func listenFilter(params json.RawMessage) (listenAsk, error) {
	var p struct {
		Notifications map[string]json.RawMessage `json:"notifications"`
	}
	var ask listenAsk
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return ask, fmt.Errorf("read the listen's params: %w", err)
		}
	}
	for _, f := range listChangedFlags {
		var on bool
		if raw, ok := p.Notifications[f.flag]; ok {
			if err := json.Unmarshal(raw, &on); err != nil {
				return ask, fmt.Errorf("notifications.%s: want true or false: %w", f.flag, err)
			}
		}
		if on {
			ask.flags = append(ask.flags, f.flag)
		}
	}
	if raw, ok := p.Notifications[resourceSubscriptionsMember]; ok {
		var uris []string
		if err := json.Unmarshal(raw, &uris); err != nil {
			return ask, fmt.Errorf("notifications.%s: want an array of resource URIs: %w", resourceSubscriptionsMember, err)
		}
		for _, uri := range uris {
			if !slices.Contains(ask.resources, uri) {
				ask.resources = append(ask.resources, uri)
			}
		}
	}
	return ask, nil
}

// resourceSubscriptionsMember is the member of a listen's notifications that lists the
// resources it subscribes to.
const resourceSubscriptionsMember = "resourceSubscriptions"

// serveListen answers subscriptions/listen (mcp-2026-notes §1.8). The response is an SSE
// stream: first notifications/subscriptions/acknowledged with the list changes and resource
// subscriptions honoured, then a list_changed for each change of a list the caller sees and a
// resources/updated for each update of a resource it subscribed to and may read, each with
// the listen's id as subscriptionId; keep-alive comments while nothing happens. The client
// closing the stream ends it, and its resource subscriptions; the gateway draining or closing
// ends it with the listen's completion result. A listen that asks for nothing the gateway
// honours is answered with the completion result at once, after an empty acknowledgement.
//
// A caller holds at most max_listens_per_principal listens here: the next is refused with
// HTTP 429, Retry-After and a -32007 JSON-RPC error. 429 says what happened (too many
// requests from this caller) and the Go SDK's clients take a 4xx with a JSON-RPC body as a
// failure of that request alone.
func (g *statelessFace) serveListen(w http.ResponseWriter, r *http.Request, preq *pipeline.Request) {
	subscription := json.RawMessage(preq.ID.String())
	if raw, err := json.Marshal(preq.ID); err == nil {
		subscription = raw
	}
	meta := map[string]json.RawMessage{protocol.MetaSubscriptionID: subscription}
	ask, err := listenFilter(preq.Params)
	if err != nil {
		writeHTTPError(w, http.StatusBadRequest, &preq.ID, invalidParams(err))
		return
	}
	honoured := map[string]any{}
	wants := map[string]bool{}
	for _, f := range listChangedFlags {
		if slices.Contains(ask.flags, f.flag) {
			honoured[f.flag] = true
			wants[f.method] = true
		}
	}
	client := pipeline.ClientContext{Principal: preq.Client.Principal, Profile: preq.Client.Profile}
	candidates := g.listenCandidates(client, ask.resources)
	done, _ := json.Marshal(map[string]any{"resultType": protocol.ResultTypeComplete, "_meta": map[string]any{
		protocol.MetaSubscriptionID: subscription, protocol.MetaServerInfo: g.serverInfo(),
	}})
	out := &modernWriter{w: w, rc: http.NewResponseController(w)}
	// The audit trail records the listen once it ends, however it ends (the client's
	// context may be over by then).
	auditCtx := context.WithoutCancel(r.Context())
	acknowledge := func() {
		ack, _ := json.Marshal(map[string]any{"notifications": honoured, "_meta": meta})
		if data, err := protocol.Encode(&protocol.Notification{Method: protocol.NotificationSubscriptionsAcknowledged, Params: ack}); err == nil {
			out.event(data)
		}
	}
	answerAtOnce := func() {
		result, wireErr := g.requests.finish(auditCtx, preq, &pipeline.Target{Kind: pipeline.Gateway}, done, nil)
		acknowledge()
		out.final(&protocol.Response{ID: preq.ID, Result: result, Error: wireErr})
	}
	if len(honoured) == 0 && len(candidates) == 0 {
		answerAtOnce()
		return
	}

	caller := callerOf(r, preq.Client.Principal)
	if !g.listens.perCaller.admit(caller) {
		g.logger.Warn("listen refused: too many listen streams", "scope", "caller", "limit", g.cfg.MaxListensPerPrincipal)
		msg := fmt.Sprintf("you already hold %d subscriptions/listen streams on this gateway (max_listens_per_principal): close one, then retry", g.cfg.MaxListensPerPrincipal)
		_, wireErr := g.requests.finish(r.Context(), preq, nil, nil, &pipeline.Refusal{Reason: pipeline.ReasonTooManyCalls, Message: msg, RetryAfter: time.Second})
		w.Header().Set("Retry-After", "1")
		writeHTTPError(w, http.StatusTooManyRequests, &preq.ID, wireErr)
		return
	}
	defer g.listens.perCaller.release(caller)
	stream := &listenStream{profile: preq.Client.Profile, principal: preq.Client.Principal, wants: wants, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	// Registered before the acknowledgement is written: a change from now on is not missed,
	// and goes after it. So is each resource subscription once the upstream has it.
	g.listens.add(stream)
	defer g.listens.remove(stream)
	held := g.holdListenResources(r.Context(), stream, candidates)
	defer g.releaseListenResources(stream, held)
	if len(held) > 0 {
		uris := make([]string, len(held))
		for i, h := range held {
			uris[i] = h.exposed
		}
		honoured[resourceSubscriptionsMember] = uris
	}
	if len(honoured) == 0 {
		answerAtOnce()
		return
	}

	acknowledge()
	keepAlive := time.NewTicker(g.listens.keepAlive)
	defer keepAlive.Stop()
	notify := func(method string, params map[string]any) {
		params["_meta"] = meta
		raw, _ := json.Marshal(params)
		if data, err := protocol.Encode(&protocol.Notification{Method: method, Params: raw}); err == nil {
			out.event(data)
		}
	}
	// writePending writes what is pending, and reports whether the client still reads.
	writePending := func() bool {
		methods, updates, overflow := stream.take()
		for _, method := range methods {
			notify(method, map[string]any{})
		}
		for _, uri := range updates {
			// The caller's view is judged as the update is written: a URI it may not read
			// (now) is never sent, whichever subscription covered it.
			if _, _, ok := g.readableURI(client, uri); ok {
				notify(protocol.NotificationResourceUpdated, map[string]any{"uri": uri})
			}
		}
		return !overflow
	}
	// complete ends the listen with its completion result, the changes already heard of
	// written before it.
	complete := func() {
		writePending()
		result, wireErr := g.requests.finish(auditCtx, preq, &pipeline.Target{Kind: pipeline.Gateway}, done, nil)
		out.final(&protocol.Response{ID: preq.ID, Result: result, Error: wireErr})
	}
	for !out.broken {
		select {
		case <-stream.wake:
			if !writePending() {
				g.logger.Warn("a listen stream ended: its client left resource updates unread", "limit", listenUpdatesLimit)
				out.broken = true
			}
		case <-keepAlive.C:
			if err := writeWithDeadline(w, out.rc, []byte(": keep-alive\n\n")); err != nil {
				out.broken = true
			}
		case <-r.Context().Done(): // the client closed the stream
			out.broken = true
		case <-g.draining: // Drain, and Close, which drains first
			complete()
			return
		case <-stream.ended: // a reload removed the stream's profile
			complete()
			return
		}
	}
	// The client left, or stopped reading.
	_, _ = g.requests.finish(auditCtx, preq, &pipeline.Target{Kind: pipeline.Gateway}, done, nil)
}

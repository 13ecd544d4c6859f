package gateway

import (
	"context"
	"strings"
	"sync"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/policy"
)

// Resource subscriptions on a listen (mcp-2026-notes §1.8, §2.8, §3.4): a listen's
// notifications.resourceSubscriptions names URIs as the gateway lists them. Each one the
// caller may read, whose upstream offers subscriptions, makes the listen a holder of a
// refcounted upstream subscription on this replica's shared connection to the upstream:
//
//   - of 2025-11-25: the same one that 2025-11-25 sessions hold (subscriptions.go):
//     resources/subscribe goes upstream once per connection and URI on this replica, and
//     resources/unsubscribe once its last holder, session or listen, lets go;
//   - of 2026-07-28: an upstream subscriptions/listen for that URI alone, shared by the
//     listens here that asked for it and ended when the last lets go (upstreamlisten.go).
//
// The listen is acknowledged once the upstream answered each subscribe, or acknowledged each
// upstream listen, each bounded by the upstream's request_timeout: a URI the acknowledgement
// lists is subscribed upstream, so an update from then on is not missed. A URI whose subscribe failed is left
// out, as is one of an isolated upstream (its connections belong to sessions, which a listen
// has none of).

// listenUpdatesLimit bounds the distinct URIs whose update waits for a listen stream's
// writer. Past it the client is not reading: its stream ends without a completion result, a
// drop that tells it to listen again.
const listenUpdatesLimit = 1024

// listenResource is a resource a listen asked for and may hold: the URI as the client gave it
// and the upstream subscription it takes a reference on.
type listenResource struct {
	exposed string
	key     subKey
}

// readableURI resolves an exposed URI as client may read it, with the checks resources/read
// passes before the rate limits: its profile's catalog and the policy's view must have it,
// and the rules must not hide or deny it. It returns the owning upstream and the upstream's
// own URI; ok is false when client may not read it.
func (g *Gateway) readableURI(client pipeline.ClientContext, uri string) (u *upstreamEntry, original string, ok bool) {
	ns, original, ok := g.viewOf(client).ResolveURI(uri)
	if !ok {
		return nil, "", false
	}
	if gt := g.gate; gt != nil {
		d := gt.current().rules.Decide(policy.Input{Principal: client.Principal, Upstream: ns.Name, Kind: pipeline.Resource, Name: original})
		if !d.DryRun && d.Effect != config.EffectAllow {
			return nil, "", false
		}
	}
	return g.upstreamOf(ns), original, true
}

// listenSubscribable reports whether a listen can hold a subscription to u's resources: u is
// up, offers subscriptions, and shares its connection.
func listenSubscribable(u *upstreamEntry) bool {
	info := u.Server()
	return u.pool == nil && info != nil && info.Capabilities.Resources != nil && info.Capabilities.Resources.Subscribe
}

// listenCandidates are the URIs of a listen's resourceSubscriptions that it may hold, in the
// order asked; the others are left out of its acknowledgement.
func (g *Gateway) listenCandidates(client pipeline.ClientContext, uris []string) []listenResource {
	var out []listenResource
	for _, uri := range uris {
		u, original, ok := g.readableURI(client, uri)
		if !ok || !listenSubscribable(u) {
			continue
		}
		out = append(out, listenResource{exposed: uri, key: subKey{u.shared, original}})
	}
	return out
}

// holdListenResources makes stream a holder of the upstream subscription of each candidate,
// and returns those it holds, in order; the caller releases them with
// releaseListenResources. The upstreams are asked at once: a failure, or a slow upstream,
// leaves only its own URIs out (logged), and ctx ending leaves out those not answered yet.
func (g *Gateway) holdListenResources(ctx context.Context, stream *listenStream, candidates []listenResource) []listenResource {
	var keys []subKey // each once: two exposed forms of one URI share its subscription
	for _, c := range candidates {
		if !containsKey(keys, c.key) {
			keys = append(keys, c.key)
		}
	}
	held := make([]bool, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() {
			if err := g.holdListenResource(ctx, key, stream); err != nil {
				if ctx.Err() == nil {
					g.logger.Warn("a listen's resource subscription failed; it is left out of the acknowledgement",
						"upstream", key.conn.upstream.ns.Name, "error", err.Error())
				}
				return
			}
			held[i] = true
		})
	}
	wg.Wait()
	var out []listenResource
	for _, c := range candidates {
		for i, key := range keys {
			if key == c.key && held[i] {
				out = append(out, c)
			}
		}
	}
	return out
}

// holdListenResource makes stream a holder of key's upstream subscription: a
// resources/subscribe for a 2025-11-25 upstream, an upstream listen for a 2026-07-28 one.
func (g *Gateway) holdListenResource(ctx context.Context, key subKey, stream *listenStream) error {
	if info := key.conn.client.Server(); info == nil || !isModernVersion(info.ProtocolVersion) {
		return g.subs.listen(ctx, key, stream)
	}
	// Bounded as a subscribe is: the upstream listen lasts, its acknowledgement is awaited no
	// longer than the upstream's request_timeout.
	if d := key.conn.upstream.requestTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return g.subs.listenModern(ctx, key, stream)
}

func containsKey(keys []subKey, key subKey) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}

// releaseListenResources lets go of what holdListenResources held for stream; an upstream
// subscription nobody else holds is unsubscribed in the background.
func (g *Gateway) releaseListenResources(stream *listenStream, held []listenResource) {
	var done []subKey
	for _, r := range held {
		if !containsKey(done, r.key) {
			done = append(done, r.key)
			g.subs.unlisten(r.key, stream)
		}
	}
}

// listen makes stream a holder of key's upstream subscription, subscribing upstream unless
// the subscription is made already on the connection as it is now.
func (s *subscriptions) listen(ctx context.Context, key subKey, stream *listenStream) error {
	e, err := s.acquire(ctx, key)
	if err != nil {
		return err
	}
	defer s.release(key, e)
	info, err := s.subscribeTurn(ctx, key, e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	e.listens[stream] = true
	e.on = info
	s.mu.Unlock()
	return nil
}

// unlisten drops stream's hold on key; when it was the last holder, the upstream is
// unsubscribed in the background (unsubscribeUnused, which leaves it if another holder came
// meanwhile), or its upstream listen ended.
func (s *subscriptions) unlisten(key subKey, stream *listenStream) {
	if s.unlistenModern(key, stream) {
		return
	}
	s.mu.Lock()
	e := s.entries[key]
	if e == nil {
		s.mu.Unlock()
		return
	}
	delete(e.listens, stream)
	last := !e.heldLocked() && e.on != nil
	if !e.heldLocked() && e.on == nil && e.refs == 0 {
		delete(s.entries, key)
	}
	s.mu.Unlock()
	if last {
		s.goWorker(func() { s.unsubscribeUnused(key) })
	}
}

// listensCoveringLocked returns the listen streams that hold a subscription on c covering an
// upstream's uri: to uri itself, or to a resource uri is a sub-resource of
// (mcp-2026-notes §1.8). subscriptions.mu must be held.
func (s *subscriptions) listensCoveringLocked(c *conn, uri string) []*listenStream {
	var out []*listenStream
	for key, e := range s.entries {
		if key.conn != c || len(e.listens) == 0 || !coversURI(key.uri, uri) {
			continue
		}
		for stream := range e.listens {
			out = append(out, stream)
		}
	}
	for key, l := range s.modern {
		if key.conn != c || !coversURI(key.uri, uri) {
			continue
		}
		for stream := range l.holders {
			out = append(out, stream)
		}
	}
	return out
}

// coversURI reports whether a subscription to subscribed covers an update of uri: the same
// URI, or one below it in its path ("file:///dir" covers "file:///dir/a.txt", not
// "file:///dir2").
func coversURI(subscribed, uri string) bool {
	rest, ok := strings.CutPrefix(uri, subscribed)
	switch {
	case !ok:
		return false
	case rest == "":
		return true
	}
	return strings.HasSuffix(subscribed, "/") || rest[0] == '/'
}

// tellListensUpdated queues an upstream's resources/updated, for uri on c, on the listen
// streams whose subscriptions cover it; their handlers check the caller may read it before
// they write it. It never blocks: it runs on the upstream's read loop.
func (s *subscriptions) tellListensUpdated(c *conn, uri string) {
	s.mu.Lock()
	streams := s.listensCoveringLocked(c, uri)
	s.mu.Unlock()
	if len(streams) == 0 {
		return
	}
	exposed := catalog.ExposeURI(c.upstream.ns.Scheme, uri)
	for _, stream := range streams {
		stream.queueUpdate(exposed)
	}
}

package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// callOwner is one client request being served: the session it belongs to and the POST
// stream its related messages go on. It rides with the upstream call (upstream.WithCaller),
// so that the upstream's requests and notifications about that call reach this client only
// (design decision 4).
type callOwner struct {
	session *liveSession
	// caps are the client capabilities the session declared at initialize.
	caps clientCaps
	// out is where messages about the call go: the request's POST stream, or the session's
	// standalone stream for a session-bound upstream's messages outside any call.
	out messageSink
	// ctx ends when the client request does (or the session, for the standalone stream).
	ctx context.Context
	// clientID is the id of the client request; zero for the standalone stream.
	clientID protocol.ID
	// logLevel is the session's log level when the request came; "" for none set.
	logLevel string
}

// forSession is the owner of a message known to be for o's session but not for o's call:
// it goes on o's stream while that is open, else on the session's standalone stream, and
// lives as long as the session.
func (o *callOwner) forSession(g *Gateway) *callOwner {
	so := *o
	so.out = fallbackSink{first: o.out, then: standaloneSink{o.session, g}}
	so.ctx = o.session.ctx
	so.clientID = protocol.ID{}
	return &so
}

// fallbackSink sends on first, or on then once first has ended.
type fallbackSink struct{ first, then messageSink }

func (s fallbackSink) send(m protocol.Message) error {
	if err := s.first.send(m); err == nil {
		return nil
	}
	return s.then.send(m)
}

// messageSink takes messages for a client.
type messageSink interface {
	send(protocol.Message) error
}

// standaloneSink sends on a session's standalone GET stream.
type standaloneSink struct {
	session *liveSession
	g       *Gateway
}

func (s standaloneSink) send(m protocol.Message) error {
	data, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	if !s.session.notify(data, s.g.logger) {
		return errStreamDone
	}
	return nil
}

// boundOwner is the owner of a message from a session's own upstream connection that came
// outside any call: that session, on its standalone stream, while this process serves it.
func (g *Gateway) boundOwner(r *conn) *callOwner {
	if r.session == "" {
		return nil
	}
	g.mu.Lock()
	ls := g.live[r.session]
	g.mu.Unlock()
	if ls == nil {
		return nil
	}
	rec, err := g.store.Get(ls.ctx, ls.id)
	if err != nil {
		return nil
	}
	return &callOwner{session: ls, caps: parseClientCaps(rec.ClientCapabilities, rec.ProtocolVersion), out: standaloneSink{ls, g}, ctx: ls.ctx, logLevel: rec.LogLevel}
}

// clientCaps are the client capabilities a reverse request needs.
type clientCaps struct {
	sampling, samplingTools, elicitForm, elicitURL, roots bool
}

// parseClientCaps reads what a client declared, narrowed to what its protocol version has:
// elicitation from 2025-06-18, its URL mode from 2025-11-25.
func parseClientCaps(raw json.RawMessage, version string) clientCaps {
	var c struct {
		Sampling *struct {
			Tools *struct{} `json:"tools"`
		} `json:"sampling"`
		Elicitation *struct {
			Form *struct{} `json:"form"`
			URL  *struct{} `json:"url"`
		} `json:"elicitation"`
		Roots *struct{} `json:"roots"`
	}
	_ = json.Unmarshal(raw, &c)
	caps := clientCaps{sampling: c.Sampling != nil, roots: c.Roots != nil}
	if c.Sampling != nil {
		caps.samplingTools = c.Sampling.Tools != nil
	}
	if e := c.Elicitation; e != nil {
		// An empty elicitation capability means form mode only (mcp-notes §1.3).
		caps.elicitForm = e.Form != nil || e.URL == nil
		caps.elicitURL = e.URL != nil
	}
	if olderThan(version, protocol.Version20250618) {
		caps.elicitForm, caps.elicitURL = false, false
	}
	if olderThan(version, protocol.Version20251125) {
		caps.elicitURL = false
	}
	return caps
}

// replicaTag makes the ids of requests the gateway sends to clients unique across replicas.
var replicaTag = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}()

// noOwner says why a message from an upstream has no client session to go to.
type noOwner int

const (
	// outsideCalls: the message belongs to no call, and no session has calls in flight on the
	// shared connection (or the call it came about has ended).
	outsideCalls noOwner = iota + 1
	// onSharedStandalone: the message came on a shared connection's standalone stream, which
	// belongs to no session.
	onSharedStandalone
	// ambiguous: several sessions had calls in flight on the shared connection, or had one end
	// within the attribution window, when the message was read.
	ambiguous
)

// refusal is the error an upstream gets for a request that cannot go to one client.
func (why noOwner) refusal(r *conn, method string, origin upstream.Origin) *protocol.Error {
	switch why {
	case onSharedStandalone:
		return protocol.Errorf(protocol.CodeInternalError,
			"the gateway does not forward %s sent on the standalone stream of its shared connection to upstream %q: that stream belongs to no client session (set isolation: session for it to route such requests)",
			method, r.upstream.ns.Name)
	case ambiguous:
		return protocol.Errorf(protocol.CodeInternalError,
			"the gateway cannot tell which client %s is for: %d client sessions have calls in flight, or just finished one, on its shared connection to upstream %q (set isolation: session for it to route such requests)",
			method, origin.Parties, r.upstream.ns.Name)
	}
	return protocol.Errorf(protocol.CodeInternalError,
		"the gateway does not forward %s sent outside any client's call on its shared connection to upstream %q (set isolation: session for it to route such requests)",
		method, r.upstream.ns.Name)
}

// onUpstreamRequest routes a request from an upstream to the client session whose call caused
// it, as decided when the request was read: the call whose stream carried it, or the only
// session with calls in flight there; a session's own connection always goes to its session.
// Never a guess: without an owner the upstream gets an error, except roots/list outside any
// call, which gets the config's roots.
func (g *Gateway) onUpstreamRequest(ctx context.Context, c *upstream.Client, req *protocol.Request, origin upstream.Origin) (json.RawMessage, error) {
	r := g.connOf(c)
	if r == nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "unknown upstream")
	}
	owner, why := g.ownerOf(r, origin)
	if owner == nil {
		if req.Method == protocol.MethodListRoots && why != ambiguous {
			// roots/list that belongs to no session: the gateway's own roots (the config's),
			// never an arbitrary client's.
			return g.rootsResult, nil
		}
		r.noOwnerOnce.Do(func() {
			g.logger.Warn("an upstream sent a request the gateway cannot route to one client; set isolation: session for it",
				"upstream", r.upstream.ns.Name, "method", req.Method, "sessions", origin.Parties)
		})
		return nil, why.refusal(r, req.Method, origin)
	}
	params := req.Params
	switch req.Method {
	case protocol.MethodCreateMessage:
		if !owner.caps.sampling {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the sampling capability")
		}
		if _, hasTools, _ := protocol.Member(params, "tools"); hasTools && !owner.caps.samplingTools {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare sampling with tools")
		}
		params = narrowIncludeContext(params)
	case protocol.MethodElicit:
		mode, _, _ := protocol.StringMember(params, "mode")
		if mode == "url" && !owner.caps.elicitURL || mode != "url" && !owner.caps.elicitForm {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the elicitation capability for this mode")
		}
		if id, _, _ := protocol.StringMember(params, "elicitationId"); mode == "url" && id != "" {
			g.elicitations.remember(r.connKey(""), id, owner.session, g.opts.Now())
		}
	case protocol.MethodListRoots:
		if !owner.caps.roots {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the roots capability")
		}
	default:
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the gateway does not forward %s to clients", req.Method)
	}
	return g.ask(ctx, owner, r, req.ID, req.Method, params)
}

// ownerOf decides whom a message from upstream r is for, from where and when it was read: the
// call the transport names, or the only session with calls in flight there; for a session's
// own connection, that session's standalone stream outside its calls. Without an owner it
// says why.
func (g *Gateway) ownerOf(r *conn, origin upstream.Origin) (*callOwner, noOwner) {
	if owner, ok := origin.Caller.(*callOwner); ok && owner != nil {
		if origin.Arrival == upstream.Unattributed {
			// Known by its session, not by its call: it must not end with whichever of the
			// session's calls it was attributed to.
			return owner.forSession(g), 0
		}
		return owner, 0
	}
	if owner := g.boundOwner(r); owner != nil {
		return owner, 0
	}
	switch {
	case origin.Arrival == upstream.OnStandalone:
		return nil, onSharedStandalone
	case origin.Arrival == upstream.Unattributed && origin.InFlight > 0:
		return nil, ambiguous
	}
	return nil, outsideCalls
}

// narrowIncludeContext turns includeContext thisServer/allServers into none: through a
// gateway they would hand one upstream the context of others.
func narrowIncludeContext(params json.RawMessage) json.RawMessage {
	v, ok, err := protocol.StringMember(params, "includeContext")
	if err != nil || !ok || v == "none" {
		return params
	}
	out, err := protocol.SetMember(params, "includeContext", []byte(`"none"`))
	if err != nil {
		return params
	}
	return out
}

// ask sends a request to this session's client on the owner's stream and waits for its
// answer, for the upstream's cancel, or for the client's call to end. The request is
// recorded in the session's routing tables, so that the client's answer and the upstream's
// cancel find it.
func (g *Gateway) ask(ctx context.Context, owner *callOwner, r *conn, upstreamID protocol.ID, method string, params json.RawMessage) (json.RawMessage, error) {
	ls := owner.session
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id := protocol.StringID(replicaTag + "-" + strconv.FormatUint(ls.reverseSeq.Add(1), 10))
	ch := make(chan *protocol.Response, 1)
	ls.mu.Lock()
	ls.pending[id] = pendingReverse{answer: ch, cancel: cancel}
	ls.mu.Unlock()
	defer func() {
		ls.mu.Lock()
		delete(ls.pending, id)
		ls.mu.Unlock()
	}()
	rec := session.ReverseRecord{SessionID: ls.id, ID: id.String(), Method: method, Upstream: r.connKey(""), UpstreamID: upstreamID.String(), Sent: g.opts.Now()}
	if err := g.store.PutReverse(ctx, rec); err != nil {
		return nil, fmt.Errorf("record the request to the client: %w", err)
	}
	defer func() { _, _ = g.store.TakeReverse(context.WithoutCancel(ctx), ls.id, rec.ID) }()
	if err := owner.out.send(&protocol.Request{ID: id, Method: method, Params: params}); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's stream for this call is closed")
	}
	select {
	case resp := <-ch:
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	case <-ctx.Done():
	case <-owner.ctx.Done():
	}
	// Tell the client to stop (mcp-notes §8.2); best effort on the same stream.
	note, _ := json.Marshal(map[string]any{"requestId": id, "reason": "the upstream no longer needs the answer"})
	_ = owner.out.send(&protocol.Notification{Method: protocol.NotificationCancelled, Params: note})
	return nil, protocol.Errorf(protocol.CodeInternalError, "request cancelled before the client answered")
}

// pendingReverse is the live side of a request sent to a client: where its answer goes, and
// how to give up on it.
type pendingReverse struct {
	answer chan *protocol.Response
	cancel context.CancelFunc
}

// answer delivers a client's answer to a request the gateway sent it; it reports whether
// one was waiting here.
func (ls *liveSession) answer(resp *protocol.Response) bool {
	ls.mu.Lock()
	p, ok := ls.pending[resp.ID]
	delete(ls.pending, resp.ID)
	ls.mu.Unlock()
	if ok {
		p.answer <- resp
	}
	return ok
}

// cancelReverse gives up on a request sent to the client.
func (ls *liveSession) cancelReverse(id protocol.ID) {
	ls.mu.Lock()
	p, ok := ls.pending[id]
	ls.mu.Unlock()
	if ok {
		p.cancel()
	}
}

// onUpstreamNotification routes an upstream's notification about a call to its client:
// progress by the gateway's token, a cancel of a reverse request by the upstream's id.
func (g *Gateway) onUpstreamNotification(c *upstream.Client, n *protocol.Notification, origin upstream.Origin) {
	r := g.connOf(c)
	if r == nil {
		return
	}
	switch n.Method {
	case protocol.NotificationProgress:
		token, ok, err := protocol.Member(n.Params, "progressToken")
		if err != nil || !ok {
			return
		}
		rec, err := g.store.Progress(g.ctx, r.connKey(""), string(token))
		if err != nil {
			return
		}
		owner := g.callOf(rec.SessionID, rec.ClientID)
		if owner == nil {
			return
		}
		params, err := protocol.SetMember(n.Params, "progressToken", []byte(rec.ClientToken))
		if err != nil {
			return
		}
		_ = owner.out.send(&protocol.Notification{Method: n.Method, Params: params})
	case protocol.NotificationMessage:
		g.deliverLog(r, n, origin)
	case notificationStatus:
		g.deliverTaskStatus(r, n)
	case protocol.NotificationResourceUpdated:
		g.deliverUpdated(r, n)
	case protocol.NotificationElicitationComplete:
		// A URL-mode elicitation finished: tell the client it was for, found by its
		// elicitationId (the notification may come on any stream, after the call), else by
		// where the notification came.
		id, _, _ := protocol.StringMember(n.Params, "elicitationId")
		owner, _ := g.ownerOf(r, origin)
		if ls := g.elicitations.take(r.connKey(""), id); ls != nil && (owner == nil || owner.session != ls) {
			_ = standaloneSink{ls, g}.send(n)
			return
		}
		if owner != nil && owner.caps.elicitURL {
			if err := owner.out.send(n); err != nil {
				_ = standaloneSink{owner.session, g}.send(n)
			}
		}
	case protocol.NotificationCancelled:
		raw, ok, err := protocol.Member(n.Params, "requestId")
		if err != nil || !ok {
			return
		}
		id, err := protocol.ParseID(raw)
		if err != nil {
			return
		}
		rec, err := g.store.ReverseByUpstream(g.ctx, r.connKey(""), id.String())
		if err != nil {
			return
		}
		g.mu.Lock()
		ls := g.live[rec.SessionID]
		g.mu.Unlock()
		if ls != nil {
			if pid, err := protocol.ParseID([]byte(rec.ID)); err == nil {
				ls.cancelReverse(pid)
			}
		}
	}
}

// remapProgress replaces a request's _meta.progressToken by a gateway token unique on the
// upstream connection, so that two sessions' tokens never meet there; it returns the new
// params and a func that forgets the mapping when the call ends.
func (g *Gateway) remapProgress(r *conn, owner *callOwner, params json.RawMessage) (json.RawMessage, func(), error) {
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok || len(meta) == 0 || meta[0] != '{' {
		return params, func() {}, nil
	}
	original, ok, err := protocol.Member(meta, "progressToken")
	if err != nil || !ok {
		return params, func() {}, nil
	}
	token := protocol.AppendString(nil, "mf-p-"+replicaTag+"-"+strconv.FormatUint(g.progressSeq.Add(1), 10))
	newMeta, err := protocol.SetMember(meta, "progressToken", token)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite progress token: %w", err)
	}
	out, err := protocol.SetMember(params, "_meta", newMeta)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite progress token: %w", err)
	}
	rec := session.ProgressRecord{Upstream: r.connKey(""), Token: string(token), SessionID: owner.session.id, ClientID: owner.clientID.String(), ClientToken: string(original)}
	if err := g.store.PutProgress(g.ctx, rec); err != nil {
		return nil, nil, fmt.Errorf("record the progress token: %w", err)
	}
	return out, func() { _ = g.store.DeleteProgress(context.WithoutCancel(g.ctx), rec.Upstream, rec.Token) }, nil
}

// callOf returns the live owner of a session's client request, when this process serves it.
func (g *Gateway) callOf(sessionID, clientID string) *callOwner {
	g.mu.Lock()
	ls := g.live[sessionID]
	g.mu.Unlock()
	if ls == nil {
		return nil
	}
	id, err := protocol.ParseID([]byte(clientID))
	if err != nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.calls[id]
}

// urlElicitations remembers which session each URL-mode elicitation was sent to, by the
// upstream's elicitationId, so that its notifications/elicitation/complete reaches that
// session, and no other, whichever stream it comes on.
type urlElicitations struct {
	mu sync.Mutex
	// sent holds the session of each elicitation, by upstream connection and id. Guarded
	// by mu.
	sent map[[2]string]sentElicitation
}

type sentElicitation struct {
	session *liveSession
	at      time.Time
}

// Bounds of the table of URL elicitations: past maxURLElicitations, those older than
// urlElicitationLifetime, or whose session ended, are forgotten.
const (
	maxURLElicitations     = 10000
	urlElicitationLifetime = time.Hour
)

func (e *urlElicitations) remember(conn, id string, ls *liveSession, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sent == nil {
		e.sent = map[[2]string]sentElicitation{}
	}
	if len(e.sent) >= maxURLElicitations {
		for key, el := range e.sent {
			if now.Sub(el.at) > urlElicitationLifetime || el.session.ctx.Err() != nil {
				delete(e.sent, key)
			}
		}
		if len(e.sent) >= maxURLElicitations {
			return // still full: its completion will be routed like any notification
		}
	}
	e.sent[[2]string{conn, id}] = sentElicitation{session: ls, at: now}
}

// take returns and forgets the live session an elicitation was sent to, or nil.
func (e *urlElicitations) take(conn, id string) *liveSession {
	if id == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	el, ok := e.sent[[2]string{conn, id}]
	delete(e.sent, [2]string{conn, id})
	if !ok || el.session.ctx.Err() != nil {
		return nil
	}
	return el.session
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/metrics"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// messageRouter routes what upstreams send to the client sessions it belongs to (design
// decision 4): their requests (sampling, elicitation, roots) and the cancels of those, progress,
// and the completion of URL elicitations. Its owner is decided when a message is read
// (upstream.Origin); it reaches the owner's stream through the hub, by id. Log messages, task
// statuses and resource updates go to their per-session semantics (sessionLogs, taskTable,
// subscriptions), which use the router to find owners and deliver.
type messageRouter struct {
	hub    liveHub
	store  session.Store
	logger *slog.Logger
	now    func() time.Time
	// ctx is the gateway's lifetime, for store lookups outside any request.
	ctx context.Context
	// rootsResult answers roots/list that belongs to no session: the config's roots.
	rootsResult json.RawMessage
	// elicitations routes the completion of URL-mode elicitations to their sessions.
	elicitations urlElicitations
	// progressSeq numbers the progress tokens the gateway gives upstreams.
	progressSeq atomic.Uint64
	// replicas carries messages for streams other replicas hold; nil for one replica.
	replicas crossReplica
	// metrics counts the requests upstreams send toward clients; nil when metrics are off.
	metrics *metrics.Set
}

// sessionLive reports whether a session is live here.
func (rt *messageRouter) sessionLive(id string) bool { return rt.hub.Lookup(id) != nil }

// notifySessions sends n on the standalone streams of the sessions ids that this process
// serves, or of all of them when ids is empty.
func (rt *messageRouter) notifySessions(n *protocol.Notification, ids ...string) {
	data, err := protocol.Encode(n)
	if err != nil {
		rt.logger.Error("encode notification", "method", n.Method, "error", err.Error())
		return
	}
	if len(ids) == 0 {
		// To every session: each replica tells those it holds the stream of.
		for _, s := range rt.hub.Sessions() {
			_ = rt.deliverHere(s.ID(), "", data)
		}
		return
	}
	for _, id := range ids {
		if digest, ok := strings.CutPrefix(id, digestKey); ok {
			// A session known here by its digest only (subscriptions taken over from a
			// stopped replica): its stream is elsewhere.
			if rt.replicas != nil {
				rt.replicas.DeliverElsewhere(digest, "", data)
			}
			continue
		}
		_ = rt.deliver(id, "", data)
	}
}

// digestKey begins the key of a session known by its digest only (session.Digest), where
// its id would be.
const digestKey = "#"

// callOwner is one client request being served, as plain values: its session, the stream
// its related messages go on, and what the client declared. It rides with the upstream call
// (upstream.WithCaller), so that the upstream's requests and notifications about that call
// reach this client only (design decision 4). It holds no live session: messages reach the
// stream through the hub, by id.
type callOwner struct {
	sessionID string
	// streamID is the stream messages about the call go on: the request's POST stream, or ""
	// for the session's standalone stream.
	streamID string
	// orStandalone sends on the standalone stream once streamID's has ended: for a message
	// known to be for the session, not for one call.
	orStandalone bool
	// caps and version are what the client declared at initialize and the version it speaks.
	caps    json.RawMessage
	version string
	// ctx ends when the client request does (or the session, for the standalone stream).
	ctx context.Context
	// clientID is the id of the client request; zero for the standalone stream.
	clientID protocol.ID
	// logLevel is the session's log level when the request came; "" for none set. For a
	// request without a session (direct set), the level its own _meta asked for; "" for none.
	logLevel string
	// direct is the response of a 2026-07-28 request, which has no session: messages about
	// the call go there, not through the hub; nil for a request of a session.
	direct *directStream
}

// party is whom the owner's upstream calls are made for (upstream.WithCaller): its session,
// or, for a request without one, that request alone, so that no two such requests ever
// take each other's messages.
func (o *callOwner) party() any {
	if o.direct != nil {
		return o.direct.party
	}
	return o.sessionID
}

// admitsLog reports whether a log message at level reaches the owner's client: at or above
// the level it asked for. A session that set no level gets everything (the server may
// choose, mcp-notes §6.5); a 2026-07-28 request that asked for none gets nothing
// (mcp-2026-notes §1.9).
func (o *callOwner) admitsLog(level string) bool {
	if o.direct != nil && o.logLevel == "" {
		return false
	}
	return levelAllows(o.logLevel, level)
}

// forSession is the owner of a message known to be for o's session but not for o's call:
// it goes on o's stream while that is open, else on the session's standalone stream, and
// lives as long as the session.
func (o *callOwner) forSession(h liveHub) *callOwner {
	so := *o
	so.orStandalone = true
	if ls := h.Lookup(o.sessionID); ls != nil {
		so.ctx = ls.Context()
	}
	so.clientID = protocol.ID{}
	return &so
}

// clientCaps reads the capabilities the owner's client declared.
func (o *callOwner) clientCaps() clientCaps { return parseClientCaps(o.caps, o.version) }

// send puts a message on the owner's stream, or on the session's standalone stream when the
// owner allows and its own has ended. It never blocks.
func (rt *messageRouter) send(o *callOwner, m protocol.Message) error {
	data, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	if o.direct != nil {
		return o.direct.put(data)
	}
	err = rt.deliver(o.sessionID, o.streamID, data)
	if err != nil && o.orStandalone && o.streamID != "" {
		err = rt.deliver(o.sessionID, "", data)
	}
	return err
}

// deliver puts an encoded message on a session's stream ("" for the standalone one); a
// stream whose client does not keep up is closed, and said so in the log. A standalone
// stream another replica holds gets it from there.
func (rt *messageRouter) deliver(sessionID, streamID string, data []byte) error {
	err := rt.deliverHere(sessionID, streamID, data)
	if errors.Is(err, hub.ErrNoStream) && rt.replicas != nil && (streamID == "" || hub.Producer(streamID) != rt.hub.Tag()) {
		// The standalone stream, or the stream of a call forwarded here, is held elsewhere.
		rt.replicas.DeliverElsewhere(session.Digest(sessionID), streamID, data)
		return nil
	}
	return err
}

// deliverHere is deliver to the streams this replica holds only.
func (rt *messageRouter) deliverHere(sessionID, streamID string, data []byte) error {
	err := rt.hub.Deliver(sessionID, streamID, data)
	if errors.Is(err, hub.ErrStreamOverflow) {
		rt.logger.Warn("a session's stream was closed: its client is not reading it", "session", fingerprint(sessionID))
	}
	return err
}

// boundOwner is the owner of a message from a session's own upstream connection that came
// outside any call: that session, on its standalone stream, while this process serves it.
func (rt *messageRouter) boundOwner(r *conn) *callOwner {
	if r.session == "" {
		return nil
	}
	ls := rt.hub.Lookup(r.session)
	if ls == nil {
		return nil
	}
	rec, err := rt.store.Get(ls.Context(), r.session)
	if err != nil {
		return nil
	}
	return &callOwner{sessionID: r.session, caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: ls.Context(), logLevel: rec.LogLevel}
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
func (rt *messageRouter) onRequest(ctx context.Context, r *conn, req *protocol.Request, origin upstream.Origin) (_ json.RawMessage, err error) {
	// outcome is how the request ended, for the metrics, where decided here; asked: it
	// went to the client (or its capabilities refused it first, if not).
	var outcome string
	var asked bool
	defer func() { rt.metrics.ReverseRequest(req.Method, reverseOutcome(ctx, outcome, asked, err)) }()
	owner, why := rt.ownerOf(r, origin)
	if owner == nil {
		if req.Method == protocol.MethodListRoots && why != ambiguous {
			// roots/list that belongs to no session: the gateway's own roots (the config's),
			// never an arbitrary client's.
			outcome = "gateway_roots"
			return rt.rootsResult, nil
		}
		r.noOwnerOnce.Do(func() {
			rt.logger.Warn("an upstream sent a request the gateway cannot route to one client; set isolation: session for it",
				"upstream", r.upstream.ns.Name, "method", req.Method, "sessions", origin.Parties)
		})
		outcome = why.outcome()
		return nil, why.refusal(r, req.Method, origin)
	}
	if owner.direct != nil {
		// A 2026-07-28 client is never sent a request (mcp-2026-notes §1.7): the call waits
		// for the client's input (parking.go), or fails.
		outcome = "refused_modern"
		if mayPark(r.upstream, owner.direct) {
			outcome = "relayed_input"
			// What this request did not declare, the upstream is refused as by a client that
			// lacks the capability, after what it asked beside it reached the client; the call
			// goes on.
			undeclared := !parks(r.upstream, owner.direct, req.Method, req.Params)
			return owner.direct.ask(ctx, owner.ctx, r.upstream.ns.Name, req.Method, asInputRequest(req.Method, req.Params), undeclared)
		}
		owner.direct.fail(missingCapability(r.upstream.ns.Name, req.Method, req.Params, r.upstream.inputBridge != inputBridgePark))
		return nil, protocol.Errorf(protocol.CodeInternalError,
			"the gateway cannot relay %s to this call's client (it speaks 2026-07-28, which has no requests to clients): the call was ended", req.Method)
	}
	params := req.Params
	caps := owner.clientCaps()
	switch req.Method {
	case protocol.MethodCreateMessage:
		if !caps.sampling {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the sampling capability")
		}
		if _, hasTools, _ := protocol.Member(params, "tools"); hasTools && !caps.samplingTools {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare sampling with tools")
		}
		params = narrowIncludeContext(params)
	case protocol.MethodElicit:
		mode, _, _ := protocol.StringMember(params, "mode")
		if mode == "url" && !caps.elicitURL || mode != "url" && !caps.elicitForm {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the elicitation capability for this mode")
		}
		if id, _, _ := protocol.StringMember(params, "elicitationId"); mode == "url" && id != "" {
			rt.elicitations.remember(r.connKey(""), id, owner.sessionID, rt.now(), rt.sessionLive)
		}
	case protocol.MethodListRoots:
		if !caps.roots {
			return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the client did not declare the roots capability")
		}
	default:
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the gateway does not forward %s to clients", req.Method)
	}
	asked = true
	return rt.ask(ctx, owner, r, req.ID, req.Method, params)
}

// ownerOf decides whom a message from upstream r is for, from where and when it was read: the
// call the transport names, or the only session with calls in flight there; for a session's
// own connection, that session's standalone stream outside its calls. Without an owner it
// says why.
func (rt *messageRouter) ownerOf(r *conn, origin upstream.Origin) (*callOwner, noOwner) {
	if owner, ok := origin.Caller.(*callOwner); ok && owner != nil {
		if origin.Arrival == upstream.Unattributed {
			// Known by its session, not by its call: it must not end with whichever of the
			// session's calls it was attributed to.
			return owner.forSession(rt.hub), 0
		}
		return owner, 0
	}
	if owner := rt.boundOwner(r); owner != nil {
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
// cancel find it; its id carries the hub's tag, so that the answer routes without a lookup.
func (rt *messageRouter) ask(ctx context.Context, owner *callOwner, r *conn, upstreamID protocol.ID, method string, params json.RawMessage) (json.RawMessage, error) {
	result, err := rt.askOn(ctx, owner, method, params, "the upstream", func(ctx context.Context, id protocol.ID) (func(), error) {
		rec := session.ReverseRecord{SessionID: owner.sessionID, ID: id.String(), Method: method, Upstream: r.connKey(""), UpstreamID: upstreamID.String(), Sent: rt.now()}
		if err := rt.store.PutReverse(ctx, rec); err != nil {
			return nil, fmt.Errorf("record the request to the client: %w", err)
		}
		return func() { _, _ = rt.store.TakeReverse(context.WithoutCancel(ctx), owner.sessionID, rec.ID) }, nil
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, protocol.Errorf(protocol.CodeInternalError, "request cancelled before the client answered")
	}
	return result, err
}

// askOn sends a request to the owner's client on the owner's stream and waits for its
// answer, for ctx, or for the client's call to end; record, if not nil, runs with the
// request's id before it is sent, and what it returns once it is answered or given up.
// When it gives up, it tells the client to stop, on behalf of who ("the upstream").
func (rt *messageRouter) askOn(ctx context.Context, owner *callOwner, method string, params json.RawMessage, who string, record func(context.Context, protocol.ID) (func(), error)) (json.RawMessage, error) {
	if owner.direct != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "a 2026-07-28 client cannot be sent %s", method)
	}
	ls := rt.hub.Lookup(owner.sessionID)
	if ls == nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's session has ended")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	id, answer, forget := ls.Ask(cancel)
	defer forget()
	if record != nil {
		done, err := record(ctx, id)
		if err != nil {
			return nil, err
		}
		defer done()
	}
	if err := rt.send(owner, &protocol.Request{ID: id, Method: method, Params: params}); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's stream for this call is closed")
	}
	// A stream dropped after the request went on it (overflow, a client that left and cannot
	// resume) carries no answer back.
	var dropped <-chan struct{}
	if st := ls.Stream(owner.streamID); st != nil && owner.streamID != "" {
		dropped = st.Dropped()
	}
	select {
	case resp := <-answer:
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	case <-dropped:
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client's stream for this call ended before its answer")
	case <-ctx.Done():
	case <-owner.ctx.Done():
	}
	// Tell the client to stop (mcp-notes §8.2); best effort on the same stream.
	note, _ := json.Marshal(map[string]any{"requestId": id, "reason": who + " no longer needs the answer"})
	_ = rt.send(owner, &protocol.Notification{Method: protocol.NotificationCancelled, Params: note})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, protocol.Errorf(protocol.CodeInternalError, "request cancelled before the client answered")
}

// onUpstreamNotification routes an upstream's notification about a call to its client:
// progress by the gateway's token, a cancel of a reverse request by the upstream's id.
// onProgress sends an upstream's progress about a call to its client, by the gateway's token.
func (rt *messageRouter) onProgress(r *conn, n *protocol.Notification) {
	token, ok, err := protocol.Member(n.Params, "progressToken")
	if err != nil || !ok {
		return
	}
	v, ok := r.progress.Load(string(token))
	if !ok {
		return
	}
	p := v.(progressRoute)
	clientToken := p.clientToken
	if d := p.owner.direct; d != nil {
		// A 2026-07-28 call's progress goes under the token of the request following it now:
		// after a round of input, the client's retry, which may have another or none.
		if clientToken = d.progressToken(); clientToken == nil {
			return
		}
	}
	params, err := protocol.SetMember(n.Params, "progressToken", clientToken)
	if err != nil {
		return
	}
	_ = rt.send(p.owner, &protocol.Notification{Method: n.Method, Params: params})
}

// onElicitationComplete tells a client that a URL-mode elicitation finished: the client it
// was for, found by its elicitationId (the notification may come on any stream, after the
// call), else by where the notification came.
func (rt *messageRouter) onElicitationComplete(r *conn, n *protocol.Notification, origin upstream.Origin) {
	id, _, _ := protocol.StringMember(n.Params, "elicitationId")
	owner, _ := rt.ownerOf(r, origin)
	if sid := rt.elicitations.take(r.connKey(""), id); sid != "" && (owner == nil || owner.sessionID != sid) {
		_ = rt.send(&callOwner{sessionID: sid}, n)
		return
	}
	if owner != nil && owner.clientCaps().elicitURL {
		_ = rt.send(owner.forSession(rt.hub), n)
	}
}

// onCancelled gives up on a request sent to a client that its upstream cancelled.
func (rt *messageRouter) onCancelled(r *conn, n *protocol.Notification) {
	raw, ok, err := protocol.Member(n.Params, "requestId")
	if err != nil || !ok {
		return
	}
	id, err := protocol.ParseID(raw)
	if err != nil {
		return
	}
	rec, err := rt.store.ReverseByUpstream(rt.ctx, r.connKey(""), id.String())
	if err != nil {
		return
	}
	if ls := rt.hub.Lookup(rec.SessionID); ls != nil {
		if pid, err := protocol.ParseID([]byte(rec.ID)); err == nil {
			ls.CancelAsk(pid)
		}
	}
}

// remapProgress replaces a request's _meta.progressToken by a gateway token unique on the
// upstream connection, so that two sessions' tokens never meet there; it returns the new
// params and a func that forgets the mapping when the call ends. The mapping stays with the
// connection that carries the call: progress comes back on it, and needs no store.
func (rt *messageRouter) remapProgress(r *conn, owner *callOwner, params json.RawMessage) (json.RawMessage, func(), error) {
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok || len(meta) == 0 || meta[0] != '{' {
		return params, func() {}, nil
	}
	original, ok, err := protocol.Member(meta, "progressToken")
	if err != nil || !ok {
		return params, func() {}, nil
	}
	token := protocol.AppendString(nil, "mf-p-"+rt.hub.Tag()+"-"+strconv.FormatUint(rt.progressSeq.Add(1), 10))
	newMeta, err := protocol.SetMember(meta, "progressToken", token)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite progress token: %w", err)
	}
	out, err := protocol.SetMember(params, "_meta", newMeta)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite progress token: %w", err)
	}
	key := string(token)
	r.progress.Store(key, progressRoute{owner: owner, clientToken: append(json.RawMessage(nil), original...)})
	return out, func() { r.progress.Delete(key) }, nil
}

// progressRoute is where an upstream's progress about one call goes, with the client's own
// token (its type kept).
type progressRoute struct {
	owner       *callOwner
	clientToken json.RawMessage
}

// rememberRequiredElicitations notes the URL elicitations an upstream's -32042 error asks the
// client to complete, so that their completion notifications reach that session.
func (rt *messageRouter) rememberRequiredElicitations(conn, sessionID string, data json.RawMessage) {
	var d struct {
		Elicitations []struct {
			ElicitationID string `json:"elicitationId"`
		} `json:"elicitations"`
	}
	if json.Unmarshal(data, &d) != nil {
		return
	}
	for _, el := range d.Elicitations {
		if el.ElicitationID != "" {
			rt.elicitations.remember(conn, el.ElicitationID, sessionID, rt.now(), rt.sessionLive)
		}
	}
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
	sessionID string
	at        time.Time
}

// Bounds of the table of URL elicitations: past maxURLElicitations, those older than
// urlElicitationLifetime, or whose session ended, are forgotten.
const (
	maxURLElicitations     = 10000
	urlElicitationLifetime = time.Hour
)

// remember notes that elicitation id of connection conn went to a session; live reports
// whether a session still lives.
func (e *urlElicitations) remember(conn, id, sessionID string, now time.Time, live func(string) bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sent == nil {
		e.sent = map[[2]string]sentElicitation{}
	}
	if len(e.sent) >= maxURLElicitations {
		for key, el := range e.sent {
			if now.Sub(el.at) > urlElicitationLifetime || !live(el.sessionID) {
				delete(e.sent, key)
			}
		}
		if len(e.sent) >= maxURLElicitations {
			return // still full: its completion will be routed like any notification
		}
	}
	e.sent[[2]string{conn, id}] = sentElicitation{sessionID: sessionID, at: now}
}

// take returns and forgets the session an elicitation was sent to, or "".
func (e *urlElicitations) take(conn, id string) string {
	if id == "" {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	el, ok := e.sent[[2]string{conn, id}]
	delete(e.sent, [2]string{conn, id})
	if !ok {
		return ""
	}
	return el.sessionID
}

package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Kinds of the messages that run a call on the replica holding a session's own upstream
// connection (isolation: session).
const (
	// busCall: run Data (a forwardedCall) on the session's own connection to its upstream,
	// its messages to stream Stream of the sender; Text names the call.
	busCall = "call"
	// busCallResult: how call Text ended (Data: a forwardedResult).
	busCallResult = "call-result"
	// busCallCancel: the client cancelled call Text.
	busCallCancel = "call-cancel"
)

// forwardedCall is a call another replica runs for this one.
type forwardedCall struct {
	Upstream string          `json:"u"`
	Method   string          `json:"m"`
	Params   json.RawMessage `json:"p,omitempty"`
	ClientID json.RawMessage `json:"id,omitempty"`
	// Exposed and Original name the resource of a resources/subscribe or unsubscribe, which
	// the holder keeps in its own subscription table; Notify marks a client notification
	// (roots list_changed) to pass on, with no result.
	Exposed  string `json:"x,omitempty"`
	Original string `json:"o,omitempty"`
	Notify   bool   `json:"n,omitempty"`
	// Subject and SubjectExpiry are the caller's current access token and its expiry, for an
	// upstream with token exchange (isolation: principal): the holder exchanges the token the
	// client presents now, not the one it presented when its connection opened. The bus is
	// the gateway's own; the token never reaches an upstream.
	Subject       string    `json:"st,omitempty"`
	SubjectExpiry time.Time `json:"se,omitzero"`
}

// forwardedResult is how a forwarded call ended: a result, the upstream's JSON-RPC error, or
// the upstream unavailable there; Draining: not run, the holder is shutting down (the call
// runs on the sender's own connection instead).
type forwardedResult struct {
	Result      json.RawMessage `json:"r,omitempty"`
	RPCError    *protocol.Error `json:"e,omitempty"`
	Unavailable string          `json:"x,omitempty"`
	// Reason says why, for Unavailable: "timeout", "interrupted" (it may have run there),
	// "limit" (max_connections) or "ended" (the session), else unavailable; the sender
	// refuses the call for the same reason.
	Reason   string `json:"why,omitempty"`
	Draining bool   `json:"dr,omitempty"`
}

// Reasons a forwarded call failed, and the errors they stand for.
var forwardReasons = []struct {
	name string
	err  error
}{
	{"timeout", upstream.ErrTimeout},
	{"interrupted", upstream.ErrInterrupted},
	{"limit", errConnectionLimit},
	{"ended", hub.ErrSessionEnded},
}

// failedResult is how a call that failed on this replica travels back.
func failedResult(err error) forwardedResult {
	res := forwardedResult{Unavailable: err.Error()}
	for _, r := range forwardReasons {
		if errors.Is(err, r.err) {
			res.Reason = r.name
		}
	}
	return res
}

// failure is the error of a forwarded call that failed there, with its reason.
func (res forwardedResult) failure() error {
	for _, r := range forwardReasons {
		if res.Reason == r.name {
			return fmt.Errorf("%s: %w", res.Unavailable, r.err)
		}
	}
	return fmt.Errorf("%s: %w", res.Unavailable, upstream.ErrUnavailable)
}

// forwardMargin is how much longer than the upstream's request timeout a forwarded call is
// waited for: its result may be lost with Redis.
const forwardMargin = 5 * time.Second

// forwarding is the calls this replica forwarded and waits for, and those it runs for others.
type forwarding struct {
	mu sync.Mutex
	// seq numbers the calls forwarded from here. Guarded by mu.
	seq uint64
	// waiting holds the forwarded calls by name, with the replica running each. Guarded by mu.
	waiting map[string]waitingCall
	// running holds the calls run here for other replicas. Guarded by mu.
	running map[string]runningCall
}

// runningCall is a call run here for replica from.
type runningCall struct {
	from   string
	cancel context.CancelFunc
}

type waitingCall struct {
	replica string
	done    chan forwardedResult
}

// errReplicaStopped ends a forwarded call whose replica stopped before answering: the call
// may have run there.
var errReplicaStopped = fmt.Errorf("the replica holding the session's connection stopped: %w", upstream.ErrInterrupted)

// holderOf returns the replica that holds the session's own connection to u, when it is
// another replica not known to have stopped: the call goes there.
func (r *replicas) holderOf(rq *request, u *upstreamEntry) string {
	holder := rq.connections[u.ns.Name]
	if holder == "" || holder == r.bus.Replica() || r.isGone(holder) {
		return ""
	}
	return holder
}

// isGone reports whether replica is known to have stopped.
func (r *replicas) isGone(replica string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.goneReplicas[replica]
	if ok && time.Since(at) >= r.lease {
		delete(r.goneReplicas, replica)
		return false
	}
	return ok
}

// recordConnection records that this replica holds the session's own connection to upstream.
func (r *replicas) recordConnection(ctx context.Context, sessionID, upstreamName string, open bool) {
	rec := r.g.backends.Connections
	if rec == nil {
		return
	}
	var err error
	if open {
		err = rec.SetConnection(ctx, sessionID, upstreamName, r.bus.Replica())
	} else {
		err = rec.ClearConnection(ctx, sessionID, upstreamName, r.bus.Replica())
	}
	if err != nil {
		r.logger.Warn("recording where a session's own upstream connection is failed: another replica may open its own", "upstream", upstreamName, "session", fingerprint(sessionID), "error", err.Error())
	}
}

// forwardCall runs a call on replica holder, which holds the session's own connection to u,
// and returns how it ended there. Messages about the call come back to its stream here.
func (r *replicas) forwardCall(ctx context.Context, rq *request, u *upstreamEntry, holder, method string, params json.RawMessage) (json.RawMessage, error, bool) {
	return r.forward(ctx, rq, u, holder, forwardedCall{Method: method, Params: params})
}

// forward sends fc, for upstream u, to replica holder and waits for how it ended there;
// forwarded is false when it was not run there (the caller runs it here).
func (r *replicas) forward(ctx context.Context, rq *request, u *upstreamEntry, holder string, fc forwardedCall) (result json.RawMessage, err error, forwarded bool) {
	sessionID := rq.Client.SessionID
	if err := r.follow(ctx, sessionID); err != nil {
		return nil, nil, false
	}
	streamID := ""
	if rq.owner != nil {
		streamID, fc.ClientID = rq.owner.streamID, rq.owner.clientID.Raw()
	}
	fc.Upstream = u.ns.Name
	if ex := u.pool.credentials.exchanger; ex != nil {
		fc.Subject, fc.SubjectExpiry, _ = ex.Subject(rq.Client.Principal)
	}
	data, err := json.Marshal(fc)
	if err != nil {
		return nil, err, true
	}
	f := &r.forwarding
	f.mu.Lock()
	f.seq++
	name := r.bus.Replica() + "-c" + strconv.FormatUint(f.seq, 10)
	done := make(chan forwardedResult, 1)
	f.waiting[name] = waitingCall{replica: holder, done: done}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiting, name)
		f.mu.Unlock()
	}()
	listens, err := r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCall, Session: session.Digest(sessionID), Stream: streamID, Text: name, Data: data})
	if err != nil || !listens {
		// Not reachable: the call runs here, on a connection of this replica's own.
		return nil, nil, false
	}
	wait := time.NewTimer(u.pool.spec.RequestTimeout + forwardMargin)
	defer wait.Stop()
	select {
	case res := <-done:
		switch {
		case res.Draining:
			return nil, nil, false
		case res.RPCError != nil:
			return nil, &upstreamRPCError{Err: res.RPCError}, true
		case res.Unavailable != "":
			return nil, res.failure(), true
		}
		return res.Result, nil, true
	case <-wait.C:
		_, _ = r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCallCancel, Text: name})
		return nil, fmt.Errorf("the replica holding the session's connection did not answer in time: %w", upstream.ErrTimeout), true
	case <-ctx.Done():
		_, _ = r.bus.Send(context.WithoutCancel(ctx), holder, &session.BusMessage{Kind: busCallCancel, Text: name})
		return nil, ctx.Err(), true
	}
}

// runForwarded runs a call another replica forwarded, on the session's own connection here,
// and sends back how it ended.
func (r *replicas) runForwarded(m *session.BusMessage) {
	g := r.g
	var fc forwardedCall
	reply := func(res forwardedResult) {
		if fc.Notify {
			return // nobody waits for a notification
		}
		data, _ := json.Marshal(res)
		// Through the outbox, after the call's messages queued there before it.
		r.post(outgoing{replica: m.From, msg: &session.BusMessage{Kind: busCallResult, Text: m.Text, Data: data}})
	}
	if m.SessionID == "" || json.Unmarshal(m.Data, &fc) != nil {
		reply(forwardedResult{Unavailable: "the replica holding the session's connection does not know the session"})
		return
	}
	var u *upstreamEntry
	for _, e := range g.upstreams {
		if e.ns.Name == fc.Upstream && e.pool != nil {
			u = e
		}
	}
	ctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	f := &r.forwarding
	f.mu.Lock()
	f.running[m.Text] = runningCall{from: m.From, cancel: cancel}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.running, m.Text)
		f.mu.Unlock()
	}()
	rec, err := g.store.Get(ctx, m.SessionID)
	if u == nil || err != nil {
		reply(forwardedResult{Unavailable: "the session or its upstream is gone on the replica holding its connection"})
		return
	}
	ls, err := g.hub.Open(rec.ID, rec.Profile)
	if err != nil {
		reply(forwardedResult{Draining: true})
		return
	}
	// Counted among the session's requests, so that a drain waits for it (and refuses it
	// once begun: the sender then runs it itself).
	callCtx, _, done, err := ls.Begin(protocol.StringID(m.Text), 0)
	if err != nil {
		reply(forwardedResult{Draining: true})
		return
	}
	defer ls.RequestDone()
	defer done()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	stopWith := context.AfterFunc(callCtx, stop)
	defer stopWith()
	clientID, _ := protocol.ParseID(fc.ClientID)
	rq := &request{Request: &pipeline.Request{Method: fc.Method, Params: fc.Params, Client: pipeline.ClientContext{
		SessionID: rec.ID, ProtocolVersion: rec.ProtocolVersion, Capabilities: rec.ClientCapabilities, LogLevel: rec.LogLevel, Profile: rec.Profile,
		Principal: rec.Principal,
	}}}
	if ex := u.pool.credentials.exchanger; ex != nil && fc.Subject != "" {
		ex.Remember(rec.Principal, fc.Subject, fc.SubjectExpiry)
	}
	rq.owner = &callOwner{sessionID: rec.ID, streamID: m.Stream, caps: rec.ClientCapabilities, version: rec.ProtocolVersion, ctx: ctx, clientID: clientID, logLevel: rec.LogLevel}
	var result json.RawMessage
	switch {
	case fc.Notify:
		g.notifyOwnConnections(ctx, rec.ID, &protocol.Notification{Method: fc.Method, Params: fc.Params})
	case fc.Method == protocol.MethodSubscribe || fc.Method == protocol.MethodUnsubscribe:
		res := &resolved{upstream: u, params: fc.Params, target: pipeline.Target{Kind: pipeline.Resource, Upstream: u.ns.Name, Exposed: fc.Exposed, Original: fc.Original}}
		result, err = g.subs.subscribeHere(ctx, rq, res, fc.Method == protocol.MethodSubscribe)
	default:
		result, err = g.callHere(ctx, rq, u, fc.Method, fc.Params)
	}
	var rpcErr *upstreamRPCError
	var protoErr *protocol.Error
	switch {
	case errors.As(err, &rpcErr):
		reply(forwardedResult{RPCError: rpcErr.Err})
	case errors.As(err, &protoErr):
		reply(forwardedResult{RPCError: protoErr})
	case err != nil:
		reply(failedResult(err))
	default:
		reply(forwardedResult{Result: result})
	}
}

// callResult hands how a forwarded call ended to the request waiting for it.
func (r *replicas) callResult(m *session.BusMessage) {
	var res forwardedResult
	if json.Unmarshal(m.Data, &res) != nil {
		res = forwardedResult{Unavailable: "the replica holding the session's connection sent an unreadable result"}
	}
	f := &r.forwarding
	f.mu.Lock()
	w, ok := f.waiting[m.Text]
	delete(f.waiting, m.Text)
	f.mu.Unlock()
	if ok {
		w.done <- res
	}
}

// cancelForwarded stops a call run here for another replica.
func (r *replicas) cancelForwarded(name string) {
	f := &r.forwarding
	f.mu.Lock()
	rc, ok := f.running[name]
	f.mu.Unlock()
	if ok {
		rc.cancel()
	}
}

// failForwarded ends the calls waiting on a replica that stopped, and stops those run here
// for it: nobody waits for their result.
func (r *replicas) failForwarded(replica string) {
	f := &r.forwarding
	f.mu.Lock()
	for _, rc := range f.running {
		if rc.from == replica {
			rc.cancel()
		}
	}
	var failed []waitingCall
	for name, w := range f.waiting {
		if w.replica == replica {
			failed = append(failed, w)
			delete(f.waiting, name)
		}
	}
	f.mu.Unlock()
	for _, w := range failed {
		w.done <- failedResult(errReplicaStopped)
	}
}

// notifyHolders passes a client's notification (roots list_changed) to the session's own
// upstream connections held on other replicas.
func (r *replicas) notifyHolders(ctx context.Context, rec *session.Record, n *protocol.Notification) {
	rq := &request{Request: &pipeline.Request{Client: pipeline.ClientContext{SessionID: rec.ID}}, connections: rec.Connections}
	for _, u := range r.g.upstreams {
		if u.pool == nil || u.pool.existing(rec.ID) != nil {
			continue
		}
		if holder := r.holderOf(rq, u); holder != "" {
			data, _ := json.Marshal(forwardedCall{Upstream: u.ns.Name, Method: n.Method, Params: n.Params, Notify: true})
			f := &r.forwarding
			f.mu.Lock()
			f.seq++
			name := r.bus.Replica() + "-n" + strconv.FormatUint(f.seq, 10)
			f.mu.Unlock()
			if _, err := r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCall, Session: session.Digest(rec.ID), Text: name, Data: data}); err != nil {
				r.logger.Debug("passing a client's notification to the replica holding its connection failed", "error", err.Error())
			}
		}
	}
}

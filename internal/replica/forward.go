package replica

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// Kinds of the messages that run a call on the replica holding a session's own upstream
// connection (isolation: session).
const (
	// busCall: run Data (a Call) on the session's own connection to its upstream, its
	// messages to stream Stream of the sender; Text names the call.
	busCall = "call"
	// busCallResult: how call Text ended (Data: a Result).
	busCallResult = "call-result"
	// busCallCancel: the client cancelled call Text.
	busCallCancel = "call-cancel"
)

// Call is a call another replica runs for this one.
type Call struct {
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
	// Trace is the W3C trace context of the sender's request (traceparent, tracestate),
	// when it is traced: the holder's call to the upstream continues that trace.
	Trace map[string]string `json:"t,omitempty"`
}

// Result is how a forwarded call ended: a result, the upstream's JSON-RPC error, or the
// upstream unavailable there; Draining: not run, the holder is shutting down (the call runs
// on the sender's own connection instead).
type Result struct {
	Result      json.RawMessage `json:"r,omitempty"`
	RPCError    *protocol.Error `json:"e,omitempty"`
	Unavailable string          `json:"x,omitempty"`
	// Reason says why, for Unavailable: "timeout", "interrupted" (it may have run there),
	// "limit" (max_connections) or "ended" (the session), else unavailable; the sender
	// refuses the call for the same reason.
	Reason   string `json:"why,omitempty"`
	Draining bool   `json:"dr,omitempty"`
}

// Reasons a forwarded call failed that the layer itself gives.
const (
	// ReasonTimeout: the holder did not answer in time.
	ReasonTimeout = "timeout"
	// ReasonInterrupted: the call reached the holder, which stopped before it answered: it
	// may have run in part there.
	ReasonInterrupted = "interrupted"
)

// waitMargin is how much longer than the upstream's request timeout a forwarded call is
// waited for: its result may be lost with Redis.
const waitMargin = 5 * time.Second

// ConnectionRecorder records which replica holds a session's own upstream connection.
type ConnectionRecorder interface {
	SetConnection(ctx context.Context, id, upstream, replica string) error
	ClearConnection(ctx context.Context, id, upstream, replica string) error
}

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
	done    chan Result
	// events carries what the call sent about itself meanwhile (busResumeEvent), for an
	// exchange that follows them; nil for one that does not.
	events chan []byte
}

// stoppedResult ends a forwarded call whose replica stopped before answering: the call may
// have run there.
var stoppedResult = Result{Unavailable: "the replica holding the session's connection stopped", Reason: ReasonInterrupted}

// HolderOf returns the replica that holds the session's own connection to upstream (by the
// session's record of connections), when it is another replica not known to have stopped:
// the call goes there.
func (r *Replicas) HolderOf(connections map[string]string, upstream string) string {
	holder := connections[upstream]
	if holder == "" || holder == r.bus.Replica() || r.gone.has(holder) {
		return ""
	}
	return holder
}

// goneReplicas holds when replicas were found stopped; an entry counts for a lease (a replica
// taken for dead after an outage may renew again).
type goneReplicas struct {
	lease time.Duration
	mu    sync.Mutex
	at    map[string]time.Time // Guarded by mu.
}

// mark notes that replica was found stopped now.
func (g *goneReplicas) mark(replica string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at == nil {
		g.at = map[string]time.Time{}
	}
	g.at[replica] = time.Now()
}

// has reports whether replica is known to have stopped.
func (g *goneReplicas) has(replica string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.at[replica]
	if ok && time.Since(at) >= g.lease {
		delete(g.at, replica)
		return false
	}
	return ok
}

// RecordConnection records that this replica holds (open) or no longer holds the session's own
// connection to upstream.
func (r *Replicas) RecordConnection(ctx context.Context, sessionID, upstreamName string, open bool) {
	rec := r.opts.Connections
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

// Forward sends c to replica holder, which holds the session's own connection to c.Upstream,
// and waits for how it ended there, at most timeout and a margin; its messages come back to
// stream streamID here. forwarded is false when it was not run there (the caller runs it
// here); err is set when the wait ended here (ctx's error).
func (r *Replicas) Forward(ctx context.Context, holder, sessionID, streamID string, c Call, timeout time.Duration) (res Result, forwarded bool, err error) {
	if err := r.Follow(ctx, sessionID); err != nil {
		return Result{}, false, nil
	}
	data, err := json.Marshal(c)
	if err != nil {
		return Result{}, true, err
	}
	res, forwarded, err = r.exchange(ctx, holder, &session.BusMessage{Kind: busCall, Session: session.Digest(sessionID), Stream: streamID, Data: data},
		timeout, "the replica holding the session's connection did not answer in time")
	return res, forwarded && !res.Draining, err
}

// exchange sends msg, named anew, to replica holder, and waits for the Result it answers with
// (busCallResult), at most timeout and a margin; a wait that ends here tells holder to stop
// (busCallCancel). sent is false when holder did not take msg (not reachable, or not
// listening); late says what a Result that did not come in time stands for.
func (r *Replicas) exchange(ctx context.Context, holder string, msg *session.BusMessage, timeout time.Duration, late string) (res Result, sent bool, err error) {
	return r.exchangeFollowing(ctx, holder, msg, timeout, late, nil)
}

// exchangeEvents bounds the messages of an exchange's call waiting for its follower: past
// it, the newest are dropped (they are progress and log messages, which may be lost).
const exchangeEvents = 64

// exchangeFollowing is exchange, handing emit, if not nil, the messages the call sends about
// itself meanwhile (busResumeEvent), in order, on the caller's goroutine.
func (r *Replicas) exchangeFollowing(ctx context.Context, holder string, msg *session.BusMessage, timeout time.Duration, late string, emit func([]byte)) (res Result, sent bool, err error) {
	f := &r.forwarding
	f.mu.Lock()
	f.seq++
	msg.Text = r.bus.Replica() + "-c" + strconv.FormatUint(f.seq, 10)
	done := make(chan Result, 1)
	var events chan []byte
	if emit != nil {
		events = make(chan []byte, exchangeEvents)
	}
	f.waiting[msg.Text] = waitingCall{replica: holder, done: done, events: events}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiting, msg.Text)
		f.mu.Unlock()
	}()
	if listens, err := r.bus.Send(ctx, holder, msg); err != nil || !listens {
		return Result{}, false, nil
	}
	wait := time.NewTimer(timeout + waitMargin)
	defer wait.Stop()
	for {
		select {
		case data := <-events:
			emit(data)
			continue
		case res := <-done:
			// The events came before the result on the bus: the ones still queued go first.
			for {
				select {
				case data := <-events:
					emit(data)
					continue
				default:
				}
				return res, true, nil
			}
		case <-wait.C:
			_, _ = r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCallCancel, Text: msg.Text})
			return Result{Unavailable: late, Reason: ReasonTimeout}, true, nil
		case <-ctx.Done():
			_, _ = r.bus.Send(context.WithoutCancel(ctx), holder, &session.BusMessage{Kind: busCallCancel, Text: msg.Text})
			return Result{}, true, ctx.Err()
		}
	}
}

// serveFor runs serve for the exchange m another replica began, cancellable by its busCallCancel,
// and sends back the Result it returns.
func (r *Replicas) serveFor(m *session.BusMessage, serve func(ctx context.Context) Result) {
	r.replyTo(m, r.runFor(m, serve))
}

// runFor runs serve for the exchange m another replica began, cancellable by its
// busCallCancel, and returns its Result.
func (r *Replicas) runFor(m *session.BusMessage, serve func(ctx context.Context) Result) Result {
	ctx, cancel := context.WithCancel(r.opts.Context)
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
	return serve(ctx)
}

// replyTo sends res to the replica that began exchange m: through the outbox, after the
// messages the exchange queued there before it.
func (r *Replicas) replyTo(m *session.BusMessage, res Result) {
	data, _ := json.Marshal(res)
	r.post(outgoing{replica: m.From, msg: &session.BusMessage{Kind: busCallResult, Text: m.Text, Data: data}})
}

// runForwarded runs a call another replica forwarded, through the host, and sends back how it
// ended; a notification gets no answer: nobody waits for it.
func (r *Replicas) runForwarded(m *session.BusMessage) {
	var c Call
	if m.SessionID == "" || json.Unmarshal(m.Data, &c) != nil {
		if !c.Notify {
			r.replyTo(m, Result{Unavailable: "the replica holding the session's connection does not know the session"})
		}
		return
	}
	res := r.runFor(m, func(ctx context.Context) Result { return r.host.Serve(ctx, m.SessionID, m.Stream, m.Text, c) })
	if !c.Notify {
		r.replyTo(m, res)
	}
}

// callResult hands how a forwarded call ended to the request waiting for it.
func (f *forwarding) callResult(m *session.BusMessage) {
	var res Result
	if json.Unmarshal(m.Data, &res) != nil {
		res = Result{Unavailable: "the replica holding the session's connection sent an unreadable result"}
	}
	f.mu.Lock()
	w, ok := f.waiting[m.Text]
	delete(f.waiting, m.Text)
	f.mu.Unlock()
	if ok {
		w.done <- res
	}
}

// callEvent hands a message a call sent about itself to the exchange following it; dropped
// when that exchange ended, does not follow, or has exchangeEvents waiting already.
func (f *forwarding) callEvent(m *session.BusMessage) {
	f.mu.Lock()
	w, ok := f.waiting[m.Text]
	f.mu.Unlock()
	if !ok || w.events == nil {
		return
	}
	select {
	case w.events <- m.Data:
	default:
	}
}

// cancel stops a call run here for another replica.
func (f *forwarding) cancel(name string) {
	f.mu.Lock()
	rc, ok := f.running[name]
	f.mu.Unlock()
	if ok {
		rc.cancel()
	}
}

// fail ends the calls waiting on a replica that stopped, and stops those run here for it:
// nobody waits for their result.
func (f *forwarding) fail(replica string) {
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
		w.done <- stoppedResult
	}
}

// NotifyHolder passes a client's notification c (roots list_changed) to replica holder, which
// holds the session's own connection to c.Upstream.
func (r *Replicas) NotifyHolder(ctx context.Context, holder, sessionID string, c Call) {
	c.Notify = true
	data, _ := json.Marshal(c)
	f := &r.forwarding
	f.mu.Lock()
	f.seq++
	name := r.bus.Replica() + "-n" + strconv.FormatUint(f.seq, 10)
	f.mu.Unlock()
	if _, err := r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCall, Session: session.Digest(sessionID), Text: name, Data: data}); err != nil {
		r.logger.Debug("passing a client's notification to the replica holding its connection failed", "error", err.Error())
	}
}

package replica

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
)

// A 2026-07-28 call that waits for its client's input waits on the replica that took it; its
// client's retry may reach any replica, which passes it to that one and waits for what the
// call came to (its result, or its next request for input). The retry is opaque here: the
// gateway encodes it and serves it (Host.ServeResume).

// busResume: serve Data (a retry of a waiting call) and answer with busCallResult; Text names
// the exchange, and busCallCancel ends it as it ends a forwarded call.
const busResume = "resume"

// ForwardResume passes retry, a 2026-07-28 client's retry of a call waiting on replica holder,
// to that replica and waits for how it went there, at most timeout and a margin. forwarded is
// false when holder did not take it (stopped, or not listening): the call is then lost with
// it. err is set when the wait ended here (ctx's error).
func (r *Replicas) ForwardResume(ctx context.Context, holder string, retry json.RawMessage, timeout time.Duration) (res Result, forwarded bool, err error) {
	f := &r.forwarding
	f.mu.Lock()
	f.seq++
	name := r.bus.Replica() + "-r" + strconv.FormatUint(f.seq, 10)
	done := make(chan Result, 1)
	f.waiting[name] = waitingCall{replica: holder, done: done}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiting, name)
		f.mu.Unlock()
	}()
	listens, err := r.bus.Send(ctx, holder, &session.BusMessage{Kind: busResume, Text: name, Data: retry})
	if err != nil || !listens {
		return Result{}, false, nil
	}
	wait := time.NewTimer(timeout + waitMargin)
	defer wait.Stop()
	select {
	case res := <-done:
		return res, true, nil
	case <-wait.C:
		_, _ = r.bus.Send(ctx, holder, &session.BusMessage{Kind: busCallCancel, Text: name})
		return Result{Unavailable: "the replica the call waits on did not answer in time", Reason: ReasonTimeout}, true, nil
	case <-ctx.Done():
		_, _ = r.bus.Send(context.WithoutCancel(ctx), holder, &session.BusMessage{Kind: busCallCancel, Text: name})
		return Result{}, true, ctx.Err()
	}
}

// runResume serves a retry another replica passed here, through the host, and sends back how
// it went.
func (r *Replicas) runResume(m *session.BusMessage) {
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
	res := r.host.ServeResume(ctx, m.Data)
	data, _ := json.Marshal(res)
	r.post(outgoing{replica: m.From, msg: &session.BusMessage{Kind: busCallResult, Text: m.Text, Data: data}})
}

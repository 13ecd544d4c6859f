package replica

import (
	"context"
	"encoding/json"
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

// busResumeEvent: Data is a message the call of exchange Text sent about itself (progress, a
// log message) while it ran for the retry, which the replica that took the retry passes on to
// its client before the result.
const busResumeEvent = "resume-event"

// ForwardResume passes retry, a 2026-07-28 client's retry of a call waiting on replica holder,
// to that replica and waits for how it went there, at most timeout and a margin, handing emit
// the messages the call sends about itself meanwhile. forwarded is false when holder did not
// take it (stopped, or not listening): the call is then lost with it. err is set when the
// wait ended here (ctx's error).
func (r *Replicas) ForwardResume(ctx context.Context, holder string, retry json.RawMessage, timeout time.Duration, emit func([]byte)) (res Result, forwarded bool, err error) {
	return r.exchangeFollowing(ctx, holder, &session.BusMessage{Kind: busResume, Data: retry}, timeout, "the replica the call waits on did not answer in time", emit)
}

// runResume serves a retry another replica passed here, through the host, and sends back the
// messages about the call meanwhile, then how it went; all through the outbox, in order.
func (r *Replicas) runResume(m *session.BusMessage) {
	emit := func(data []byte) {
		r.post(outgoing{replica: m.From, msg: &session.BusMessage{Kind: busResumeEvent, Text: m.Text, Data: data}})
	}
	r.serveFor(m, func(ctx context.Context) Result { return r.host.ServeResume(ctx, m.Data, emit) })
}

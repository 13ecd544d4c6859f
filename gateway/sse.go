package gateway

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/hub"
)

// eventWriteTimeout bounds writing one event (or keep-alive) to a client; a write that misses
// it gives up the connection (the stream stays, for the client to resume).
const eventWriteTimeout = 10 * time.Second

// keepAliveInterval is how often an idle SSE stream gets a comment line, so that proxies and
// clients can tell it is alive.
const keepAliveInterval = 25 * time.Second

// retryMillis is the reconnection delay the priming event gives clients (SSE retry field).
const retryMillis = 1000

// drainRetryEvent ends a stream the gateway closes as it drains: a short reconnection delay,
// so that the client resumes on another replica at once.
var drainRetryEvent = []byte("retry: 100\n\n")

// streamWriter writes one stream of a session to one HTTP connection. It runs on the HTTP
// handler's goroutine: nothing writes to w after it returns.
type streamWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	stream *hub.Stream
	cursor *hub.Cursor
	// prime says whether the client gets a priming event and may resume: sessions of
	// 2025-11-25 and later (older SDK clients fail on an event without data, mcp-notes §4.2).
	prime bool
	// started is set once the SSE headers went out.
	started bool
}

// start sends the SSE headers and, for clients that resume, the priming event: an id and a
// retry field, so that from now on a dropped connection can be resumed.
func (sw *streamWriter) start() error {
	startSSE(sw.w)
	sw.started = true
	if sw.prime {
		ev := make([]byte, 0, 64)
		ev = append(ev, "id: "...)
		ev = append(ev, sw.stream.EventID(0)...)
		ev = append(ev, "\nretry: "...)
		ev = strconv.AppendInt(ev, retryMillis, 10)
		ev = append(ev, "\ndata: \n\n"...)
		if err := writeWithDeadline(sw.w, sw.rc, ev); err != nil {
			return err
		}
		sw.cursor.MarkResumable()
		return nil
	}
	return sw.rc.Flush()
}

// writeEvents writes events, with their ids for clients that resume, and tells the stream
// how far the client has them: only those may make room for later events.
func (sw *streamWriter) writeEvents(events []hub.Event) error {
	if len(events) == 0 {
		return nil
	}
	var err error
	written := uint64(0)
	for _, e := range events {
		id := ""
		if sw.prime {
			id = sw.stream.EventID(e.Seq)
		}
		if err = writeWithDeadline(sw.w, sw.rc, sseEvent(id, e.Data)); err != nil {
			break
		}
		written = e.Seq
	}
	if written > 0 {
		sw.cursor.Wrote(written)
	}
	return err
}

// deliver writes events and reports whether the connection is done with the stream: a write
// failed (the stream stays, for the client to resume), or the stream is complete and written
// to its end (it goes).
func (sw *streamWriter) deliver(events []hub.Event, state hub.State) bool {
	if err := sw.writeEvents(events); err != nil {
		return true
	}
	if state == hub.Complete {
		sw.cursor.Finish()
		return true
	}
	return false
}

// answer writes a POST's answer: the response alone as JSON when nothing else came first and
// it came before switchAfter (nil: no timer), else an SSE stream that ends with the response.
// It returns when the stream is complete, the connection fails, or ctx ends (the client left);
// a stream its client can resume is kept for it.
func (sw *streamWriter) answer(ctx context.Context, switchAfter <-chan time.Time) {
	defer sw.cursor.Detach()
	for {
		events, state, streamed := sw.cursor.Next()
		if state == hub.Dropped || state == hub.Detached {
			return
		}
		if !sw.started && !streamed && state == hub.Complete {
			if len(events) == 0 {
				// Every request went unanswered (cancelled): an SSE stream with no event.
				startSSE(sw.w)
				_ = sw.rc.Flush()
				return
			}
			// A client that does not read its answer must not pin it for ever. No flush: the
			// server sends the answer, with its length, when the handler returns.
			sw.w.Header().Set("Content-Type", "application/json")
			_ = sw.rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
			_, _ = sw.w.Write(events[0].Data)
			return
		}
		if !sw.started && (streamed || len(events) > 0) {
			if err := sw.start(); err != nil {
				return
			}
		}
		if sw.deliver(events, state) {
			return
		}
		select {
		case <-sw.cursor.Wake():
		case <-switchAfter:
			switchAfter = nil
			if !sw.started {
				if err := sw.start(); err != nil {
					return
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// answerServing serves a POST's request on the handler's goroutine, which then writes the
// answer as answer does. No other goroutine is involved unless something must reach the
// client before the answer: a message put on the stream while the request runs (progress, a
// request to the client, a log message), or the switch to SSE after switchAfter (0: never on
// time alone). Then a writer goroutine starts and writes the stream meanwhile, and the handler
// waits for it once the request is answered; it never returns while the writer may write.
//
// Until such a writer starts, nothing watches ctx: a client that leaves while its request runs
// is noticed when the answer is written, and the request, which belongs to its session (design
// decision 10), runs to its end either way.
func (sw *streamWriter) answerServing(ctx context.Context, switchAfter time.Duration, job *admittedRequest) {
	lw := &lateWriter{sw: sw, job: job, ctx: ctx, done: make(chan struct{})}
	sw.cursor.OnWake(lw.start)
	var switchTimer *time.Timer
	if switchAfter > 0 {
		switchTimer = time.AfterFunc(switchAfter, lw.start)
	}
	resp := job.serve()
	if switchTimer != nil {
		switchTimer.Stop()
	}
	// Claimed here, before the answer is queued: queuing it wakes the cursor, which must not
	// start a writer for it.
	if lw.claimed.CompareAndSwap(false, true) {
		job.answer(resp)
		sw.answer(ctx, nil)
		return
	}
	job.answer(resp)
	<-lw.done
}

// lateWriter starts, at most once, a goroutine that writes a stream while the handler's
// goroutine is busy serving its request.
type lateWriter struct {
	sw  *streamWriter
	job *admittedRequest
	ctx context.Context
	// claimed is set by whoever writes the stream: the late writer, or the handler itself
	// when the request was answered before anything else had to be written.
	claimed atomic.Bool
	// done is closed when the late writer is done with the connection.
	done chan struct{}
}

// start starts the writer unless the stream is claimed. It never blocks: it is called with the
// stream locked (a wake) or from a timer.
func (lw *lateWriter) start() {
	if !lw.claimed.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer close(lw.done)
		// Started by a message (which makes the answer SSE), by the end of the stream (which
		// answer writes as it finds it), or by the switch time: in every case the answer
		// switches to SSE as soon as nothing else decides.
		lw.sw.answer(lw.ctx, closedChan)
		select {
		case <-lw.sw.stream.Dropped():
			// Nobody can receive the answer any more (the client left a stream it cannot
			// resume, or did not keep up): the request stops rather than run for no one.
			lw.job.abandon()
		default:
		}
	}()
}

// closedChan is a channel that is always ready to receive.
var closedChan = func() chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// follow writes a stream that is already SSE (a GET: the standalone stream, or a resumed one)
// until it completes, the connection fails or ctx ends, its session ends, or the gateway
// drains.
func (sw *streamWriter) follow(ctx context.Context, sessionEnded, draining <-chan struct{}) {
	defer sw.cursor.Detach()
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	for {
		events, state, _ := sw.cursor.Next()
		if state == hub.Dropped || state == hub.Detached || sw.deliver(events, state) {
			return
		}
		select {
		case <-sw.cursor.Wake():
		case <-keepAlive.C:
			if err := writeWithDeadline(sw.w, sw.rc, []byte(": keep-alive\n\n")); err != nil {
				return
			}
			// A quiet stream stays resumable on another replica should this one stop.
			sw.stream.KeepLogged()
		case <-ctx.Done(): // the client left
			return
		case <-sessionEnded:
			return
		case <-draining: // nil for a stream that ends with its answer
			// The client reconnects soon, and resumes on another replica.
			_ = writeWithDeadline(sw.w, sw.rc, drainRetryEvent)
			return
		}
	}
}

func startSSE(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// writeWithDeadline writes data and flushes it, within eventWriteTimeout.
func writeWithDeadline(w http.ResponseWriter, rc *http.ResponseController, data []byte) error {
	_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	if _, err := w.Write(data); err != nil {
		return err
	}
	return rc.Flush()
}

// sseEvent frames one message as an SSE message event, with its id unless that is empty.
func sseEvent(id string, data []byte) []byte {
	buf := make([]byte, 0, len(data)+len(id)+32)
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

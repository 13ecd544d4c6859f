package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/manifold-mcp/manifold/hub"
)

// eventWriteTimeout bounds writing one event (or keep-alive) to a client; a write that misses
// it gives up the connection (the stream stays, for the client to resume).
const eventWriteTimeout = 10 * time.Second

// keepAliveInterval is how often an idle SSE stream gets a comment line, so that proxies and
// clients can tell it is alive.
const keepAliveInterval = 25 * time.Second

// retryMillis is the reconnection delay the priming event gives clients (SSE retry field).
const retryMillis = 1000

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
		case <-ctx.Done(): // the client left
			return
		case <-sessionEnded:
			return
		case <-draining: // nil for a stream that ends with its answer
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

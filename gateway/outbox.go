package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Bounds of the queue of one client stream: past either, the stream is dropped, so that a
// client that does not read costs only itself. A single message larger than the byte bound
// still goes when the queue is empty.
const (
	maxQueuedMessages = 256
	maxQueuedBytes    = 8 << 20
)

// eventWriteTimeout bounds writing one event (or keep-alive) to a client; a write that misses
// it drops the stream.
const eventWriteTimeout = 10 * time.Second

// errStreamDone is returned by a put after the stream's last message, or after it was dropped.
var errStreamDone = errors.New("the stream has ended")

// errStreamOverflow is returned by the put that found the queue over its bounds and dropped
// the stream.
var errStreamOverflow = fmt.Errorf("%w: its client did not keep up", errStreamDone)

// outbox is the bounded queue of messages waiting for one client stream. Any goroutine may put
// (an upstream's read loop among them: a put never blocks); only the stream's own handler takes
// and writes (design: writes to clients never run on an upstream's read loop).
type outbox struct {
	mu sync.Mutex
	// queue and size are the messages waiting, and their bytes. Guarded by mu.
	queue [][]byte
	size  int
	// responses counts the responses still expected; the stream ends after the last one. A
	// standalone stream expects none (negative). Guarded by mu.
	responses int
	// streamed is set once a message other than a response was put: the answer must be an SSE
	// stream. Guarded by mu.
	streamed bool
	// closed is set after the last response, or when the stream was dropped. Guarded by mu.
	closed bool
	// dropped is set when the client did not keep up. Guarded by mu.
	dropped bool
	// wake tells the writer that there is something to take.
	wake chan struct{}
}

func newOutbox(responses int) *outbox {
	return &outbox{responses: responses, wake: make(chan struct{}, 1)}
}

// put queues a message, or a response when response is set. It fails when the stream has
// ended; a queue over its bounds drops the stream and fails the put.
func (b *outbox) put(data []byte, response bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errStreamDone
	}
	if !response && len(b.queue) > 0 && (len(b.queue) >= maxQueuedMessages || b.size+len(data) > maxQueuedBytes) {
		b.dropLocked()
		return errStreamOverflow
	}
	b.queue = append(b.queue, data)
	b.size += len(data)
	if response {
		b.answeredLocked()
	} else {
		b.streamed = true
	}
	b.signal()
	return nil
}

// unanswered notes that one expected response will not come (the client cancelled its
// request, or its session ended): the stream may end without it.
func (b *outbox) unanswered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.answeredLocked()
		b.signal()
	}
}

func (b *outbox) answeredLocked() {
	if b.responses--; b.responses == 0 {
		b.closed = true
	}
}

// startStream makes the answer an SSE stream even before a message is put (a batch).
func (b *outbox) startStream() {
	b.mu.Lock()
	b.streamed = true
	b.mu.Unlock()
}

// drop ends the stream because its client did not keep up or left; later puts fail.
func (b *outbox) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked()
}

func (b *outbox) dropLocked() {
	b.closed, b.dropped = true, true
	b.queue, b.size = nil, 0
	b.signal()
}

func (b *outbox) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued, whether the stream ends after it (and whether because it was
// dropped), and whether it must be an SSE stream.
func (b *outbox) take() (batch [][]byte, closed, dropped, streamed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	batch, b.queue, b.size = b.queue, nil, 0
	return batch, b.closed, b.dropped, b.streamed
}

// writeWithDeadline writes data and flushes it, within eventWriteTimeout.
func writeWithDeadline(w http.ResponseWriter, rc *http.ResponseController, data []byte) error {
	_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
	if _, err := w.Write(data); err != nil {
		return err
	}
	return rc.Flush()
}

// sseEvent frames one message as an SSE message event.
func sseEvent(data []byte) []byte {
	buf := make([]byte, 0, len(data)+24)
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

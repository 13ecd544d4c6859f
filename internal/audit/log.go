package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	defaultBuffer       = 4096
	defaultCloseTimeout = 5 * time.Second
)

// warnEvery spaces the Log's warnings about lost records: under overload records are lost by
// the thousand, and one warning a second with a count says as much as one per record.
const warnEvery = time.Second

// Options configures a Log. The zero value (or a nil *Options) gives the defaults.
type Options struct {
	// Buffer is how many records may wait to be written; a record that finds it full is
	// dropped. It bounds the memory the trail takes when its output falls behind. If zero or
	// less, defaults to 4096.
	Buffer int

	// CloseTimeout bounds how long Close waits for the queued records to be written. If
	// zero or less, defaults to 5 seconds.
	CloseTimeout time.Duration

	// Logger receives the Log's own warnings: records dropped because the queue was full,
	// and writes that failed. They are logged at most once a second, with counts. If nil,
	// they are discarded.
	Logger *slog.Logger

	// Now tells the time of records that come without one, and spaces the warnings. If nil,
	// defaults to time.Now.
	Now func() time.Time
}

// Log writes audit records to an io.Writer as JSON lines, one line per record in the order
// Record took them, from a goroutine of its own. Record never waits for the writer; see the
// package doc.
//
// A nil *Log is valid and does nothing: it is the trail when auditing is off. A Log is safe
// for concurrent use and must not be copied.
type Log struct {
	h            slog.Handler // the JSON handler over the writer; used by the writer goroutine only
	logger       *slog.Logger
	now          func() time.Time
	closeTimeout time.Duration

	// mu orders Record's sends before Close's close of the queue: Record holds it for
	// reading while it sends, Close for writing while it closes.
	mu sync.RWMutex
	// queue carries records to the writer goroutine, which drains it until it is closed.
	// Lifecycle: closed once by Close and then set to nil; Record drops records from then
	// on. Guarded by mu.
	queue chan Record

	// Counters. Invariant: handled <= accepted once Close holds mu, since Record adds to
	// accepted before it releases mu.
	dropped  atomic.Uint64 // records Record did not queue: the queue was full, or closed
	accepted atomic.Uint64 // records Record queued
	handled  atomic.Uint64 // queued records the writer is done with, written or failed

	// Lifecycle: Close runs once; the others wait for its result. Close closes abandon when it
	// stops waiting for the writer, which then returns after the write in progress; the writer
	// closes done when it returns.
	closeOnce sync.Once
	closeErr  error
	abandon   chan struct{}
	done      chan struct{}
}

// New returns a Log that writes to w, and starts its writer goroutine; Close stops it. A nil
// opts gives the defaults. The Log never closes w, and w is written by one goroutine at a
// time. New panics if w is nil: to turn auditing off, use a nil *Log.
func New(w io.Writer, opts *Options) *Log {
	if w == nil {
		panic("audit: New with a nil writer")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Buffer <= 0 {
		o.Buffer = defaultBuffer
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = defaultCloseTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Log{
		h:            slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: dropLevel}),
		logger:       o.Logger,
		now:          o.Now,
		closeTimeout: o.CloseTimeout,
		queue:        make(chan Record, o.Buffer),
		abandon:      make(chan struct{}),
		done:         make(chan struct{}),
	}
	go l.writeLoop(l.queue)
	return l
}

// dropLevel leaves the level out of the JSON lines: every audit record has the same one.
func dropLevel(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		return slog.Attr{}
	}
	return a
}

// Record queues r to be written, filling in r.Time if it is zero. It never waits for the
// output: if the queue is full, or the Log is closed, r is dropped and counted (see Dropped).
// Record is safe for concurrent use; on a nil Log it does nothing.
func (l *Log) Record(r Record) {
	if l == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = l.now()
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	select {
	case l.queue <- r: // a nil queue (closed Log) is never ready
		l.accepted.Add(1)
	default:
		l.dropped.Add(1)
	}
}

// Dropped returns how many records Record has dropped so far, because the queue was full or
// the Log was closed. It is 0 for a nil Log.
func (l *Log) Dropped() uint64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

// Close stops taking records, waits for the queued ones to be written, and stops the writer
// goroutine. It does not close the writer given to New.
//
// Close waits at most Options.CloseTimeout: if the writer is stuck (a full disk, a pipe
// nobody reads), it gives up and returns a *CloseTimeoutError saying how many records are
// lost; the writer goroutine then returns as soon as the write in progress does, writing
// nothing more. Close may be called more than once and concurrently: every call returns the
// first one's result once it is known. On a nil Log it returns nil.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() { l.closeErr = l.close() })
	return l.closeErr
}

func (l *Log) close() error {
	l.mu.Lock()
	close(l.queue)
	l.queue = nil
	l.mu.Unlock()

	timer := time.NewTimer(l.closeTimeout)
	defer timer.Stop()
	select {
	case <-l.done:
		return nil
	case <-timer.C:
	}
	close(l.abandon)
	// The record being written counts as lost: its write may never complete.
	if n := l.accepted.Load() - l.handled.Load(); n > 0 {
		return &CloseTimeoutError{Unwritten: n, Timeout: l.closeTimeout}
	}
	return nil // only the warnings were slow; no record is lost
}

// CloseTimeoutError is returned by Close when the output did not take the queued records in
// time. The records it counts are lost.
type CloseTimeoutError struct {
	// Unwritten is how many records were queued, or being written, when Close gave up.
	Unwritten uint64
	// Timeout is how long Close waited (Options.CloseTimeout).
	Timeout time.Duration
}

func (e *CloseTimeoutError) Error() string {
	return fmt.Sprintf("close audit log: %d records not written after %v: the audit output takes no writes (is the disk full, or the pipe not read?)", e.Unwritten, e.Timeout)
}

// writeLoop is the Log's writer goroutine: it writes the records of queue in order until
// Close closes it and it is drained, or until Close abandons it.
func (l *Log) writeLoop(queue <-chan Record) {
	defer close(l.done)
	var st warnState
	for r := range queue {
		if err := l.h.Handle(context.Background(), r.slogRecord()); err != nil {
			st.failed++
			st.err = err
		}
		l.handled.Add(1)
		select {
		case <-l.abandon:
			return // Close has reported what is left as lost
		default:
		}
		l.warn(&st, false)
	}
	l.warn(&st, true) // drained: what is still untold is told now, however recent the last
}

// warnState is what the writer goroutine has told the Logger so far. It is the goroutine's
// own, so it needs no lock.
type warnState struct {
	last     time.Time // when the last warning was logged; zero if none was
	reported uint64    // Log.dropped at that warning
	failed   int       // writes that failed since then
	err      error     // the last of them
}

// warn logs what was lost since the last warning, if anything was and a second has passed
// since, or if final is set. It needs no timer: records are dropped only while the queue is
// full, so the writer has records left to write and calls warn after each. A drop within a
// second of a warning is told after the first record written once that second is over, or
// when Close has drained the queue.
func (l *Log) warn(st *warnState, final bool) {
	dropped := l.dropped.Load()
	if dropped == st.reported && st.failed == 0 {
		return
	}
	now := l.now()
	if !final && !st.last.IsZero() && now.Sub(st.last) < warnEvery {
		return
	}
	st.last = now
	if n := dropped - st.reported; n > 0 {
		l.logger.Warn("audit records dropped: the audit output falls behind and the queue is full",
			"dropped", n, "dropped_total", dropped)
		st.reported = dropped
	}
	if st.failed > 0 {
		l.logger.Warn("audit records not written", "failed", st.failed, "error", st.err)
		st.failed, st.err = 0, nil
	}
}

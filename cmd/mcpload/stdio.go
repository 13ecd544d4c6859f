package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// stopGrace is how long the stdio server gets at each step of the shutdown ladder.
const stopGrace = 2 * time.Second

// errStopped reports a send after the connection was stopped.
var errStopped = errors.New("stdio connection stopped")

// runStdio runs cfg against a stdio server: it starts the command, initializes one
// session, and lets all workers call through the one pipe; answers are routed back to
// workers by id.
func runStdio(ctx context.Context, cfg *Config) (*Result, error) {
	c, err := startStdio(cfg)
	if err != nil {
		return nil, err
	}
	defer c.stop()

	r := newResult(cfg, strings.Join(cfg.Command, " "))
	var init stats
	defer init.addTo(r)

	// initialize goes through worker 0's slot: its id, 0, routes there.
	w0 := &stdioWorker{c: c, s: &c.slots[0]}
	start := time.Now()
	msg, kind, err := w0.roundTrip(ctx, initializeRequest(0), 0, start)
	elapsed := time.Since(start)
	if kind == "" {
		_, kind, err = checkResult(msg, 0)
	}
	if kind == "" {
		err = c.send(initializedNotification, time.Now())
		kind = sendKind(err)
	}
	switch kind {
	case "":
	case kindCanceled:
		return r, nil
	default:
		init.fail(kind, fmt.Errorf("initialize: %w", err))
		return r, nil
	}
	r.Sessions = 1
	r.Init = []time.Duration{elapsed}

	callers := make([]caller, cfg.Workers)
	for w := range callers {
		callers[w] = &stdioWorker{c: c, s: &c.slots[w]}
	}
	drive(ctx, cfg, callers, r)
	return r, nil
}

// stdioConn is the one pipe to a stdio server child, shared by all workers. Each worker
// has a slot; request ids are chosen so that id % len(slots) is the sender's slot, and the
// reader hands each answer to its slot. Safe for concurrent use by the workers, one call
// in flight per slot.
type stdioConn struct {
	cmd     *exec.Cmd
	stdin   *os.File // our end of the child's stdin
	stdout  *os.File // our end of the child's stdout
	timeout time.Duration

	// coalesce lets concurrent sends share one write: pending counts senders between
	// announcing themselves and finishing their write, and the one that brings it to zero
	// flushes. Without it each send flushes its own message.
	coalesce bool
	pending  atomic.Int32
	// wmu guards the fields below it.
	wmu     sync.Mutex
	w       *bufio.Writer
	werr    error     // the first write error; every later send fails with it
	renewAt time.Time // when the stdin write deadline must be pushed back

	slots []slot

	// dead is closed, once, by fail when the pipe becomes unusable; deadErr says why and
	// is written before dead is closed.
	dead     chan struct{}
	deadOnce sync.Once
	deadErr  error
	// readDone is closed when readLoop returns.
	readDone chan struct{}
}

// slot is where one worker waits for its answer.
type slot struct {
	// expect is the id the worker awaits, or -1. Whoever swaps it from the id to -1 (the
	// reader, delivering, or the worker, giving up) owns the outcome.
	expect atomic.Int64
	// done gets a value when the reader has put the answer in buf.
	done chan struct{}
	buf  []byte
	// timer bounds the wait; used only by the worker.
	timer *time.Timer
}

// startStdio starts the command of cfg with its stdin and stdout on pipes, and the reader.
func startStdio(cfg *Config) (*stdioConn, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout = inR, outW
	if cfg.Stderr != nil {
		cmd.Stderr = cfg.Stderr
	}
	cmd.WaitDelay = stopGrace // do not wait forever for a grandchild holding stderr
	err = cmd.Start()
	inR.Close() // the child has its own copies now
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Command[0], err)
	}
	c := &stdioConn{
		cmd:      cmd,
		stdin:    inW,
		stdout:   outR,
		timeout:  cfg.Timeout,
		coalesce: cfg.CoalesceWrites,
		w:        bufio.NewWriterSize(inW, 64<<10),
		slots:    make([]slot, cfg.Workers),
		dead:     make(chan struct{}),
		readDone: make(chan struct{}),
	}
	for i := range c.slots {
		s := &c.slots[i]
		s.expect.Store(-1)
		s.done = make(chan struct{}, 1)
		s.timer = time.NewTimer(time.Hour)
		s.timer.Stop()
	}
	go c.readLoop()
	return c, nil
}

// send writes one message. Writes are bounded by a deadline of at least half the call
// timeout, so a server that stops reading cannot block a sender for long; after any write
// error the pipe is unusable.
func (c *stdioConn) send(msg []byte, now time.Time) error {
	c.pending.Add(1)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		c.pending.Add(-1)
		return c.werr
	}
	if now.After(c.renewAt) {
		// Renewing only now and then keeps this off the per-message cost.
		_ = c.stdin.SetWriteDeadline(now.Add(c.timeout))
		c.renewAt = now.Add(c.timeout / 2)
	}
	_, err := c.w.Write(msg)
	if err == nil {
		err = c.w.WriteByte('\n')
	}
	if last := c.pending.Add(-1) == 0; (last || !c.coalesce) && err == nil {
		err = c.w.Flush()
	}
	if err != nil {
		c.werr = fmt.Errorf("write to server: %w", err)
		c.fail(c.werr)
		return c.werr
	}
	return nil
}

// sendKind returns the error kind of a send error ("" for nil).
func sendKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, os.ErrDeadlineExceeded):
		return kindTimeout
	}
	return kindTransport
}

// fail marks the pipe unusable; the first reason wins.
func (c *stdioConn) fail(err error) {
	c.deadOnce.Do(func() {
		c.deadErr = err
		close(c.dead)
	})
}

// readLoop reads answers and hands each to the slot that awaits its id, until stdout
// ends. Lines that await no one (late answers, server requests, noise) are dropped.
func (c *stdioConn) readLoop() {
	defer close(c.readDone)
	br := bufio.NewReaderSize(c.stdout, 64<<10)
	n := int64(len(c.slots))
	var long []byte
	for {
		line, err := readLine(br, &long)
		if id, ok := routeID(line); ok {
			s := &c.slots[id%n]
			if s.expect.CompareAndSwap(id, -1) {
				s.buf = append(s.buf[:0], line...)
				s.done <- struct{}{}
			}
		}
		switch {
		case err == io.EOF:
			c.fail(errors.New("server closed its stdout"))
			return
		case err != nil && !errors.Is(err, errTooLong): // an overlong answer times its call out
			c.fail(fmt.Errorf("read from server: %w", err))
			return
		}
	}
}

// stop ends the child with the shutdown ladder of mcp-notes §1.5 (close stdin, then
// SIGTERM, then SIGKILL, stopGrace apart), then waits for the reader.
func (c *stdioConn) stop() {
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = errStopped
	}
	c.stdin.Close()
	c.wmu.Unlock()

	exited := make(chan struct{})
	go func() {
		_ = c.cmd.Wait() // the exit status of a stopped benchmark server is of no interest
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(stopGrace):
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			_ = c.cmd.Process.Kill()
			<-exited
		}
	}
	c.stdout.Close() // in case a grandchild still holds the pipe open
	<-c.readDone
}

// stdioWorker is one worker's view of the shared pipe. Not safe for concurrent use.
type stdioWorker struct {
	c *stdioConn
	s *slot
}

// roundTrip implements caller: it sends req, the request with id, and waits for its
// answer until the call timeout (counted from start), the pipe's failure or ctx's end. The
// answer is valid until the worker's next call.
func (w *stdioWorker) roundTrip(ctx context.Context, req []byte, id int64, start time.Time) ([]byte, string, error) {
	s := w.s
	s.expect.Store(id)
	var kind string
	var err error
	if err = w.c.send(req, start); err != nil {
		kind = sendKind(err)
	} else {
		s.timer.Reset(w.c.timeout - time.Since(start))
		select {
		case <-s.done:
			s.timer.Stop()
			return s.buf, "", nil
		case <-s.timer.C:
			kind, err = kindTimeout, fmt.Errorf("no answer within %v", w.c.timeout)
		case <-w.c.dead:
			kind, err = kindTransport, w.c.deadErr
		case <-ctx.Done():
			kind, err = kindCanceled, ctx.Err()
		}
		s.timer.Stop()
	}
	if !s.expect.CompareAndSwap(id, -1) {
		// The reader claimed the answer first; it is on its way.
		<-s.done
		return s.buf, "", nil
	}
	return nil, kind, err
}

package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"golang.org/x/time/rate"
)

// conn is one live connection to an upstream server that moves JSON-RPC messages. The Client
// is its only user; Read is called from one goroutine, Write from many.
type conn interface {
	// Read returns the next message and where it arrived: on the response stream of a gateway
	// request (and which), on the standalone stream, or where the transport cannot tell.
	// Errors of type *skippedError report input that was skipped; the connection goes on.
	Read() (protocol.Message, arrival, error)
	// Write sends one message; ctx bounds how long it may block. An error of type
	// *requestError failed that message only; any other error means the connection is broken.
	Write(ctx context.Context, m protocol.Message) error
	// Close ends the connection and frees everything it holds; it may be called more than once.
	Close() error
}

// answeringConn is a conn whose sending of a request may bring back its answer at once (a
// Streamable HTTP POST answered with JSON): WriteRequest returns that answer to the caller
// itself, without the hand-offs through Read and the read loop. A nil response with a nil
// error means the answer comes through Read.
type answeringConn interface {
	WriteRequest(ctx context.Context, r *protocol.Request) (*protocol.Response, error)
}

// exitReporter is a conn over a child process that can say how the child ended.
type exitReporter interface {
	exitReport() (code int, lastLines []string, exited bool)
}

// initializedConn is a conn that takes part in the handshake: it learns the negotiated
// version as soon as initialize is answered (Streamable HTTP sends it on every later request),
// and is told when the handshake is complete (it then opens its standalone stream).
type initializedConn interface {
	negotiated(protocolVersion string)
	initialized()
}

// skippedError reports an input the transport skipped: a line that is not JSON-RPC, or a
// message over the size limit. related is the request the skipped message answered, when its
// id could be read, so that request fails instead of waiting for its timeout.
type skippedError struct {
	err     error
	related int64
}

func (e *skippedError) Error() string { return e.err.Error() }
func (e *skippedError) Unwrap() error { return e.err }

// errMessageTooLarge is wrapped by the skippedError for a message over the size limit.
var errMessageTooLarge = errors.New("message exceeds the size limit")

// exitDrainTime is how long ReadMessage may still read what a child wrote before it exited.
const exitDrainTime = 500 * time.Millisecond

// stdioConn is a child process spoken to over newline-framed JSON-RPC on stdin/stdout. The
// child runs in its own process group so that Close can end it with everything it spawned.
type stdioConn struct {
	name   string
	cmd    *exec.Cmd
	stdin  *os.File // parent's write end
	stdout *os.File // parent's read end
	stderr *os.File // parent's read end
	reader *bufio.Reader
	max    int
	grace  time.Duration
	logger *slog.Logger
	// level is the level of the process's start, exit and stderr lines (see Quiet).
	level slog.Level

	writeMu sync.Mutex // serializes writes to stdin
	// writeDeadline is the deadline set on stdin. Guarded by writeMu.
	writeDeadline time.Time

	// exited is closed by waitChild once the child has been reaped; exitCode is its status
	// (-1 for a signal), written before.
	exited   chan struct{}
	exitCode int
	// tailMu guards tail, the child's last stderr lines (at most stderrTailLines).
	tailMu sync.Mutex
	tail   []string
	// stderrDone is closed when the stderr pump has ended.
	stderrDone chan struct{}
	closeOnce  sync.Once
	line       []byte // ReadMessage's buffer; only the reading goroutine touches it
}

// stdioOptions are the settings of one child process.
type stdioOptions struct {
	Command string
	Args    []string
	// Env, InheritEnv and InheritAllEnv make the child's environment (see childEnv).
	Env           map[string]string
	InheritEnv    []string
	InheritAllEnv bool
	Dir           string
	// MaxMessageBytes caps a line of stdout.
	MaxMessageBytes int
	// Grace is how long Close waits after closing stdin and again after SIGTERM.
	Grace time.Duration
	// Quiet logs the process's start, exit and stderr lines at debug level, not info: for
	// the retries of an upstream already down, whose first attempt was logged in full.
	Quiet bool
}

// startStdio spawns the child. Its stderr goes to logger, one record per line.
func startStdio(name string, o stdioOptions, logger *slog.Logger) (*stdioConn, error) {
	cmd := exec.Command(o.Command, o.Args...)
	cmd.Dir = o.Dir
	cmd.Env = childEnv(os.Environ(), o.InheritEnv, o.InheritAllEnv, o.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	var parentEnds, childEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			parentEnds, childEnds = append(parentEnds, r, w), append(childEnds, r, w)
		}
		return r, w, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		closeAll(childEnds)
		return nil, fmt.Errorf("create pipes for %s: %w", name, err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		closeAll([]*os.File{inR, inW, outR, outW, errR, errW})
		return nil, fmt.Errorf("start %s: %w", o.Command, err)
	}
	// The child has its own copies; the parent keeps only its ends.
	inR.Close()
	outW.Close()
	errW.Close()

	c := &stdioConn{
		name:       name,
		cmd:        cmd,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		reader:     bufio.NewReaderSize(outR, 64<<10),
		max:        o.MaxMessageBytes,
		grace:      o.Grace,
		logger:     logger,
		level:      slog.LevelInfo,
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	if c.grace <= 0 {
		c.grace = 2 * time.Second
	}
	if o.Quiet {
		c.level = slog.LevelDebug
	}
	go c.waitChild()
	go c.pumpStderr()
	logger.Log(context.Background(), c.level, "upstream process started", "pid", cmd.Process.Pid, "command", o.Command)
	return c, nil
}

// waitChild reaps the child. When it exits, a pipe held open by a grandchild must not keep the
// connection alive: ReadMessage gets a short while to drain what the child wrote, then ends.
//
// It logs the exit before it reports it (closing exited): Close waits for that, so that nothing
// is logged after Close returns, when the log's writer may be gone.
func (c *stdioConn) waitChild() {
	err := c.cmd.Wait()
	c.exitCode = c.cmd.ProcessState.ExitCode()
	status := "exit status 0"
	if err != nil {
		status = err.Error()
	}
	c.logger.Log(context.Background(), c.level, "upstream process exited", "pid", c.cmd.Process.Pid, "status", status)
	close(c.exited)
	_ = c.stdout.SetReadDeadline(time.Now().Add(exitDrainTime))
}

// The last stderr lines of a child are kept for the report of its exit.
const (
	stderrTailLines = 5
	stderrTailBytes = 300 // of each line
)

func (c *stdioConn) keepTail(line []byte) {
	kept := string(line[:min(len(line), stderrTailBytes)])
	c.tailMu.Lock()
	if len(c.tail) == stderrTailLines {
		c.tail = append(c.tail[:0], c.tail[1:]...)
	}
	c.tail = append(c.tail, kept)
	c.tailMu.Unlock()
}

// exitReport implements exitReporter: the child's exit status and its last stderr lines, once
// it has exited. Complete after Close, which reads stderr to its end.
func (c *stdioConn) exitReport() (code int, lastLines []string, exited bool) {
	select {
	case <-c.exited:
	default:
		return 0, nil, false
	}
	c.tailMu.Lock()
	defer c.tailMu.Unlock()
	return c.exitCode, slices.Clone(c.tail), true
}

// maxStderrLine caps how much of one stderr line is logged; the rest of the line is dropped.
const maxStderrLine = 64 << 10

// pumpStderr copies the child's stderr into the log, a record per line, until stderr ends. It
// keeps reading past an overlong line: a child blocked on a full stderr pipe would hang.
func (c *stdioConn) pumpStderr() {
	defer close(c.stderrDone)
	r := bufio.NewReaderSize(c.stderr, 4096)
	limit := rate.NewLimiter(stderrLinesPerSecond, stderrBurst)
	suppressed := 0
	reportSuppressed := func() {
		if suppressed > 0 {
			c.logger.Warn("upstream stderr lines not logged: the upstream writes more than the log takes", "suppressed", suppressed, "limit_per_second", stderrLinesPerSecond)
			suppressed = 0
		}
	}
	defer reportSuppressed()
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk[:min(len(chunk), maxStderrLine-len(line))]...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if l := bytes.TrimRight(line, "\r\n"); len(l) > 0 {
			c.keepTail(l)
			if limit.Allow() {
				reportSuppressed()
				c.logger.Log(context.Background(), c.level, "upstream stderr", "line", string(l))
			} else {
				suppressed++
			}
		}
		line = line[:0]
		if err != nil {
			return
		}
	}
}

// An upstream's stderr lines are logged at most this fast (with this burst); the rest are
// counted, and the count logged, so that a flooding server cannot flood the gateway's log.
const (
	stderrLinesPerSecond = 100
	stderrBurst          = 200
)

// Read implements conn. Nothing on a stdio pipe ties a message to a call.
func (c *stdioConn) Read() (protocol.Message, arrival, error) {
	line, err := c.readLine()
	if err != nil {
		return nil, arrival{}, err
	}
	// The line buffer is reused; the message keeps its own copy.
	msg, err := protocol.Decode(bytes.Clone(line))
	if err != nil {
		return nil, arrival{}, &skippedError{err: fmt.Errorf("a stdout line is not a JSON-RPC message: %w", err)}
	}
	return msg, arrival{}, nil
}

// headSize is how much of an oversized line is kept to find the id it answers.
const headSize = 256

// readLine returns the next non-empty line, valid until the next call. A line over the limit
// is skipped and reported as a *skippedError.
func (c *stdioConn) readLine() ([]byte, error) {
	for {
		c.line = c.line[:0]
		tooLarge := false
		var head []byte
		for {
			chunk, err := c.reader.ReadSlice('\n')
			if !tooLarge {
				if c.max > 0 && len(c.line)+len(chunk) > c.max {
					tooLarge = true
					head = append(head, c.line[:min(len(c.line), headSize)]...)
					if len(head) < headSize {
						head = append(head, chunk[:min(len(chunk), headSize-len(head))]...)
					}
					c.line = c.line[:0]
				} else {
					c.line = append(c.line, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if errors.Is(err, os.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) {
					err = io.EOF
				}
				return nil, err
			}
			break
		}
		if tooLarge {
			return nil, &skippedError{err: fmt.Errorf("%w (%d bytes)", errMessageTooLarge, c.max), related: idInHead(head)}
		}
		line := bytes.TrimSpace(c.line)
		if len(line) == 0 {
			continue
		}
		return line, nil
	}
}

// idInHead finds the integer id near the start of a JSON-RPC message, where encoders put it,
// or returns 0.
func idInHead(head []byte) int64 {
	i := bytes.Index(head, []byte(`"id"`))
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(head[i+4:], " \t")
	if len(rest) == 0 || rest[0] != ':' {
		return 0
	}
	rest = bytes.TrimLeft(rest[1:], " \t")
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Write implements conn.
func (c *stdioConn) Write(ctx context.Context, m protocol.Message) error {
	data, err := protocol.Encode(m)
	if err != nil {
		return &requestError{Err: err}
	}
	data = append(data, '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.extendWriteDeadlineLocked(ctx)
	if _, err := c.stdin.Write(data); err != nil {
		return fmt.Errorf("write to %s: %w", c.name, err)
	}
	return nil
}

// extendWriteDeadlineLocked bounds how long a write may block when the child stops reading.
// Setting a deadline costs a timer update, too much for every message, so the deadline is
// moved only when ctx's own deadline lies beyond it: a write blocks at most until then, and a
// healthy child never meets it.
func (c *stdioConn) extendWriteDeadlineLocked(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(time.Minute)
	}
	if dl.After(c.writeDeadline) {
		// Round up, so that calls with nearly the same deadline share one update.
		c.writeDeadline = dl.Add(time.Second)
		_ = c.stdin.SetWriteDeadline(c.writeDeadline)
	}
}

// killWait bounds the wait for the child to be reaped after SIGKILL, and for the stderr pump
// to end once stderr is closed. A SIGKILLed process is gone within milliseconds unless the
// kernel holds it (uninterruptible I/O); Close then gives up on it rather than hang.
const killWait = 2 * time.Second

// Close implements conn: it closes stdin, waits for the child to exit, then sends SIGTERM and
// finally SIGKILL to the child and its whole process group, so neither the child nor anything
// it spawned is left running or unreaped (mcp-notes §1.5). Every wait is bounded: Close
// returns within about twice the grace period plus 2×killWait, whatever the child does.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		// Not under writeMu: a write blocked on a child that stopped reading holds it until
		// its deadline. Closing the file ends that write at once.
		c.stdin.Close()
		pid := c.cmd.Process.Pid
		if !c.waitExited(c.grace) {
			c.signal(syscall.SIGTERM)
			if !c.waitExited(c.grace) {
				c.signal(syscall.SIGKILL)
				if !c.waitExited(killWait) {
					c.logger.Error("upstream process still there after SIGKILL; giving up on it", "pid", pid, "waited", killWait.String())
				}
			}
		}
		// End whatever the child left behind in its group.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		c.stdout.Close()
		// What the child wrote to stderr before it went is read to its end (often the lines
		// that say why it went); only a pipe that something outside the group keeps open is
		// cut, after exitDrainTime.
		_ = c.stderr.SetReadDeadline(time.Now().Add(exitDrainTime))
		t := time.NewTimer(killWait)
		defer t.Stop()
		select {
		case <-c.stderrDone:
		case <-t.C:
			c.logger.Error("reading the upstream's stderr did not end", "pid", pid, "waited", killWait.String())
		}
		c.stderr.Close()
	})
	return nil
}

// waitExited waits up to d for the child to be reaped and reports whether it was.
func (c *stdioConn) waitExited(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited:
		return true
	case <-t.C:
		return false
	}
}

// signal sends sig to the child's process group and to the child itself: a child that left
// its group (setpgid into another one) would otherwise never get it. The child is signalled
// through its os.Process, which does nothing once it has been reaped, so a reused pid is
// never hit.
func (c *stdioConn) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	_ = c.cmd.Process.Signal(sig)
}

// Pid returns the child's process id (also its process group id).
func (c *stdioConn) Pid() int { return c.cmd.Process.Pid }

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
	"sync"
	"syscall"
	"time"
)

// conn is one live connection to an upstream server that moves framed JSON-RPC messages.
// The Client is its only user; ReadMessage is called from one goroutine, WriteMessage from many.
type conn interface {
	// ReadMessage returns the next message's bytes, valid until the next call.
	ReadMessage() ([]byte, error)
	// WriteMessage sends one encoded message; ctx bounds how long it may block.
	WriteMessage(ctx context.Context, data []byte) error
	// Close ends the connection and frees everything it holds; it may be called more than once.
	Close() error
}

// errMessageTooLarge is returned by ReadMessage for a line over the size limit; the line is
// skipped and the connection stays usable.
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

	writeMu sync.Mutex // serializes writes to stdin

	// exited is closed by waitChild once the child has been reaped.
	exited chan struct{}
	// stderrDone is closed when the stderr pump has ended.
	stderrDone chan struct{}
	closeOnce  sync.Once
	line       []byte // ReadMessage's buffer; only the reading goroutine touches it
}

// stdioOptions are the settings of one child process.
type stdioOptions struct {
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// MaxMessageBytes caps a line of stdout.
	MaxMessageBytes int
	// Grace is how long Close waits after closing stdin and again after SIGTERM.
	Grace time.Duration
}

// startStdio spawns the child. Its stderr goes to logger, one record per line.
func startStdio(name string, o stdioOptions, logger *slog.Logger) (*stdioConn, error) {
	cmd := exec.Command(o.Command, o.Args...)
	cmd.Dir = o.Dir
	if len(o.Env) > 0 {
		env := cmd.Environ()
		for k, v := range o.Env {
			env = append(env, k+"="+v)
		}
		cmd.Env = env
	}
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
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	if c.grace <= 0 {
		c.grace = 2 * time.Second
	}
	go c.waitChild()
	go c.pumpStderr()
	logger.Info("upstream process started", "pid", cmd.Process.Pid, "command", o.Command)
	return c, nil
}

// waitChild reaps the child. When it exits, a pipe held open by a grandchild must not keep the
// connection alive: ReadMessage gets a short while to drain what the child wrote, then ends.
func (c *stdioConn) waitChild() {
	err := c.cmd.Wait()
	close(c.exited)
	_ = c.stdout.SetReadDeadline(time.Now().Add(exitDrainTime))
	if err != nil {
		c.logger.Info("upstream process exited", "pid", c.cmd.Process.Pid, "status", err.Error())
	} else {
		c.logger.Info("upstream process exited", "pid", c.cmd.Process.Pid, "status", "exit status 0")
	}
}

// pumpStderr copies the child's stderr into the log, a record per line.
func (c *stdioConn) pumpStderr() {
	defer close(c.stderrDone)
	sc := bufio.NewScanner(c.stderr)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if line := bytes.TrimRight(sc.Bytes(), "\r"); len(line) > 0 {
			c.logger.Info("upstream stderr", "line", string(line))
		}
	}
}

// ReadMessage implements conn.
func (c *stdioConn) ReadMessage() ([]byte, error) {
	for {
		c.line = c.line[:0]
		tooLarge := false
		for {
			chunk, err := c.reader.ReadSlice('\n')
			if !tooLarge {
				if c.max > 0 && len(c.line)+len(chunk) > c.max {
					tooLarge = true
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
			return nil, errMessageTooLarge
		}
		line := bytes.TrimSpace(c.line)
		if len(line) == 0 {
			continue
		}
		return line, nil
	}
}

// WriteMessage implements conn.
func (c *stdioConn) WriteMessage(ctx context.Context, data []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.stdin.SetWriteDeadline(dl)
	} else {
		_ = c.stdin.SetWriteDeadline(time.Time{})
	}
	if _, err := c.stdin.Write(data); err != nil {
		return fmt.Errorf("write to %s: %w", c.name, err)
	}
	if _, err := c.stdin.Write([]byte{'\n'}); err != nil {
		return fmt.Errorf("write to %s: %w", c.name, err)
	}
	return nil
}

// Close implements conn: it closes stdin, waits for the child to exit, then sends SIGTERM and
// finally SIGKILL to its whole process group, so neither the child nor anything it spawned is
// left running or unreaped (mcp-notes §1.5).
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.writeMu.Lock()
		c.stdin.Close()
		c.writeMu.Unlock()
		pgid := c.cmd.Process.Pid
		select {
		case <-c.exited:
		case <-time.After(c.grace):
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-time.After(c.grace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-c.exited
			}
		}
		// The child is gone; end whatever it left behind in its group.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		c.stdout.Close()
		c.stderr.Close()
		<-c.stderrDone
	})
	return nil
}

// Pid returns the child's process id (also its process group id).
func (c *stdioConn) Pid() int { return c.cmd.Process.Pid }

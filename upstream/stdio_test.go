package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// envLeaveGroup makes this test binary act as a child that escapes its stop sequence (see
// leaveGroupChild).
const envLeaveGroup = "MANIFOLD_TEST_LEAVE_GROUP"

// init turns this test binary into the child of
// TestStdioCloseKillsChildThatLeftItsProcessGroup when started as one, before TestMain runs.
func init() {
	if os.Getenv(envLeaveGroup) != "" {
		leaveGroupChild()
	}
}

// leaveGroupChild ignores SIGTERM and its stdin, moves itself out of the process group
// startStdio made for it, says so on stdout and then waits for a signal it never gets.
//
// A process-group leader, which startStdio makes every child, cannot call setsid (EPERM); it
// leaves its group with setpgid into another group of its session, here its parent's. Either
// way, signals sent to the child's original group no longer reach it.
func leaveGroupChild() {
	signal.Ignore(syscall.SIGTERM)
	wake := make(chan os.Signal, 1)
	signal.Notify(wake, syscall.SIGUSR1) // also keeps the runtime from calling the wait a deadlock
	if _, err := syscall.Setsid(); err != nil {
		pgid, err := syscall.Getpgid(os.Getppid())
		if err == nil {
			err = syscall.Setpgid(0, pgid)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "leave the process group:", err)
			os.Exit(2)
		}
	}
	fmt.Println(`{"jsonrpc":"2.0","method":"notifications/left_group"}`)
	<-wake
	os.Exit(0)
}

// TestStdioCloseKillsChildThatLeftItsProcessGroup pins the fix for Close hanging forever on
// a child that left its process group and ignores both stdin EOF and SIGTERM: SIGTERM and
// SIGKILL went to the group only, so the child never died, and Close waited for it without
// bound. Close now signals the child itself too and bounds every wait.
func TestStdioCloseKillsChildThatLeftItsProcessGroup(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	const grace = 50 * time.Millisecond
	c, err := startStdio("leaver", stdioOptions{
		Command: exe,
		Env:     map[string]string{envLeaveGroup: "1", testupstream.EnvRun: newMarker()},
		Grace:   grace,
	}, slog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Pid()
	closed := make(chan struct{})
	var closing sync.Once
	startClose := func() {
		closing.Do(func() {
			go func() {
				defer close(closed)
				c.Close()
			}()
		})
	}
	t.Cleanup(func() {
		// Should Close hang or the child survive it, kill the child (through its os.Process,
		// which cannot hit a reused pid), so that Close can return and nothing is left.
		_ = c.cmd.Process.Kill()
		startClose()
		select {
		case <-closed:
		case <-time.After(waitTimeout):
			t.Errorf("Close still blocked %s after the child %d was killed", waitTimeout, pid)
		}
	})

	// The child announces that it has left its group; only then is the test meaningful.
	read := make(chan error, 1)
	go func() {
		msg, _, err := c.Read()
		if err == nil {
			if n, ok := msg.(*protocol.Notification); !ok || n.Method != "notifications/left_group" {
				err = fmt.Errorf("child wrote %#v, want its notifications/left_group", msg)
			}
		}
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("waiting for the child to leave its group: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("the child did not report leaving its group within %s", waitTimeout)
	}
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid == pid {
		t.Fatalf("child %d: process group %d (error %v); want it out of its own group", pid, pgid, err)
	}

	startClose()
	// Close waits grace after closing stdin and again after SIGTERM; well before this bound
	// SIGKILL must have ended the child.
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatalf("Close did not return within %s (StopGrace %s)", waitTimeout, grace)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Close = %v, want ESRCH: the child is still there", pid, err)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, rec := range logs.recs {
		if strings.HasPrefix(rec, "ERROR ") {
			t.Errorf("Close logged %q; SIGKILL should have ended the child", rec)
		}
	}
}

// TestStdioCloseDoesNotWaitForABlockedWrite: a child that stops reading its stdin leaves a
// write blocked until its deadline (here an hour away). Closing the connection must end that
// write and return, not wait behind it.
func TestStdioCloseDoesNotWaitForABlockedWrite(t *testing.T) {
	c, err := startStdio("deaf", stdioOptions{Command: "sleep", Args: []string{"60"}, Grace: 50 * time.Millisecond}, slog.New(&logRecorder{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	written := make(chan error, 1)
	big := &protocol.Notification{Method: "notifications/big", Params: json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)}
	go func() { written <- c.Write(ctx, big) }()
	// The write holds the write lock while it is blocked on the full pipe.
	waitUntil(t, "the write blocked on the child's full stdin", func() bool {
		if c.writeMu.TryLock() {
			c.writeMu.Unlock()
			return false
		}
		return true
	})
	c.Close()
	if err := <-written; err == nil {
		t.Error("the blocked write succeeded; the child never read it")
	}
}

// TestStdioStderrIsReadToItsEndWhenTheChildExits: every line a child wrote to stderr before
// it exited is accounted for, even when the connection is closed the moment it exits (the pipe
// used to be closed before it was drained, losing the last lines: often the ones that say why).
// A flood like this one is rate-limited in the log: each line is logged or counted as
// suppressed, and the last lines are kept for the exit report.
func TestStdioStderrIsReadToItsEndWhenTheChildExits(t *testing.T) {
	const lines = 2000
	for round := range 3 {
		logs := &logRecorder{}
		c, err := startStdio("talker", stdioOptions{
			Command: "sh",
			Args:    []string{"-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "line $i" >&2; i=$((i+1)); done; exit 3`, lines)},
			Grace:   time.Second,
		}, slog.New(logs))
		if err != nil {
			t.Fatal(err)
		}
		<-c.exited
		c.Close()
		logged := len(logs.matching("INFO upstream stderr "))
		suppressed := 0
		for _, rec := range logs.matching("WARN upstream stderr lines not logged") {
			var n int
			if _, err := fmt.Sscanf(rec[strings.Index(rec, "suppressed=")+len("suppressed="):], "%d", &n); err != nil {
				t.Fatalf("no count in %q", rec)
			}
			suppressed += n
		}
		if logged+suppressed != lines {
			t.Fatalf("round %d: %d stderr lines logged and %d counted as suppressed, of %d written before the child exited", round, logged, suppressed, lines)
		}
		// Logging all 2,000 would take the child 18 s of writing at the limit's pace.
		if suppressed == 0 {
			t.Errorf("round %d: all %d stderr lines of a flood were logged, want the rate limit to hold most back", round, logged)
		}
		if _, last, _ := c.exitReport(); len(last) == 0 || last[len(last)-1] != fmt.Sprintf("line %d", lines-1) {
			t.Errorf("round %d: last stderr lines %q, want them to end with the last line written", round, last)
		}
	}
}

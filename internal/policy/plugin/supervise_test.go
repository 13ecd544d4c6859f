package plugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// restartNow restarts a crashed plugin after 1 ms, and checks a plugin only when a call to it
// fails: in these tests nothing but the test's own calls finds a crash.
func restartNow() *Options {
	return &Options{HealthInterval: time.Hour, Backoff: func(int) time.Duration { return time.Millisecond }}
}

// kill kills the plugin's process as a crash would, and waits until it is gone.
func kill(t *testing.T, pid int) {
	t.Helper()
	if pid == 0 {
		t.Fatal("the plugin has no process")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	waitGone(t, pid)
}

// decide is h.Decide on a fresh context, failing t on an error.
func decide(t *testing.T, h *Host, args string) Outcome {
	t.Helper()
	out, err := h.Decide(context.Background(), aCall(args))
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return out
}

func TestKilledPluginIsRestarted(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		name := "fail closed"
		if failOpen {
			name = "fail open"
		}
		t.Run(name, func(t *testing.T) {
			spec := guardSpec("guard", `{"block":["secret"]}`)
			spec.FailOpen = failOpen
			h := start(t, []Spec{spec}, restartNow())
			pid := h.pids()[0]
			kill(t, pid)

			// The first call after the crash finds it (and has the plugin restarted).
			out := decide(t, h, `{"q":"go"}`)
			if failOpen {
				if out.Effect != Allow || out.Results[0].Err == nil {
					t.Errorf("Outcome = %+v, want Allow, skipping the failed plugin", out)
				}
			} else if out.Effect != Deny || out.Reason != unavailableReason("guard") {
				t.Errorf("Outcome = %+v, want a deny saying guard is unavailable", out)
			}
			checkPluginError(t, out.Results[0].Err, "guard", func(err error) bool { return err != nil })

			testwait.Until(t, 10*time.Second, "calls passing again", func() bool {
				out, err := h.Decide(context.Background(), aCall(`{"q":"go"}`))
				return err == nil && out.Effect == Allow && out.Results[0].Err == nil
			})
			if now := h.pids()[0]; now == pid || now == 0 {
				t.Errorf("pid after restart = %d, want a new process (was %d)", now, pid)
			}
			// Configured again: the new process knows its patterns.
			if out := decide(t, h, `{"q":"a secret"}`); out.Effect != Deny || !strings.Contains(out.Reason, `"secret"`) {
				t.Errorf("after restart, Outcome = %+v; want guard's deny (its config applied again)", out)
			}
		})
	}
}

func TestPluginCrashingOnACallIsRestarted(t *testing.T) {
	h := start(t, []Spec{testSpec("fragile", `{"crash_on":"boom"}`)}, restartNow())
	pid := h.pids()[0]
	if out := decide(t, h, `{"boom":1}`); out.Effect != Deny || out.Reason != unavailableReason("fragile") {
		t.Errorf("Outcome of the crashing call = %+v, want a deny saying fragile is unavailable", out)
	}
	waitGone(t, pid)
	testwait.Until(t, 10*time.Second, "calls passing again", func() bool {
		out, err := h.Decide(context.Background(), aCall(`{"q":1}`))
		return err == nil && out.Effect == Allow
	})
}

func TestHealthCheckFindsACrashWithoutCalls(t *testing.T) {
	opts := restartNow()
	opts.HealthInterval = 10 * time.Millisecond
	h := start(t, []Spec{testSpec("t", `{}`)}, opts)
	pid := h.pids()[0]
	kill(t, pid)
	testwait.Until(t, 10*time.Second, "a new process", func() bool {
		now := h.pids()[0]
		return now != 0 && now != pid
	})
}

// TestRestartBacksOff: while restarts fail (here the executable was replaced, so its checksum
// differs), the Host retries with growing attempt numbers, calls fail as "not running", and
// once the right executable is back the plugin runs and is configured again.
func TestRestartBacksOff(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plugin")
	install(t, testpluginBin, path)

	var mu sync.Mutex
	var attempts []int
	opts := restartNow()
	opts.Backoff = func(n int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, n)
		return time.Millisecond
	}
	logs := newRecords()
	opts.Logger = slog.New(logs)
	spec := testSpec("swapped", `{"effect":"deny","reason":"configured"}`)
	spec.Path = path
	h := start(t, []Spec{spec}, opts)

	install(t, guardBin, path) // the running process keeps the old file
	kill(t, h.pids()[0])
	decide(t, h, `{}`) // finds the crash
	testwait.Until(t, 10*time.Second, "three failed restarts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) >= 3
	})
	out := decide(t, h, `{}`)
	if out.Reason != unavailableReason("swapped") {
		t.Errorf("while down, Outcome = %+v, want a deny saying swapped is unavailable", out)
	}
	checkPluginError(t, out.Results[0].Err, "swapped", func(err error) bool { return errors.Is(err, ErrNotRunning) })
	if rec, ok := logs.find(slog.LevelWarn, "restart failed"); !ok || !strings.Contains(attr(rec, "error"), guardSum) {
		t.Errorf("no warning with the checksum that failed the restart")
	}

	install(t, testpluginBin, path)
	testwait.Until(t, 10*time.Second, "the plugin running and configured", func() bool {
		return decide(t, h, `{}`).Reason == "configured"
	})
	mu.Lock()
	defer mu.Unlock()
	for i, n := range attempts {
		if n != i+1 {
			t.Fatalf("Backoff attempts = %v, want 1, 2, 3, …", attempts)
		}
	}
}

// install copies the executable src to dst, replacing dst by a rename as a package manager
// would (a running executable cannot be written to).
func install(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	slow := testSpec("slow", `{"hang":true}`)
	slow.Timeout = time.Hour
	h, err := Start(context.Background(), []Spec{
		guardSpec("guard", `{}`), testSpec("t", `{}`), inspecting(testSpec("i", `{}`)), slow,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pids := h.pids()

	// A call in flight when Close comes ends with it.
	done := make(chan Outcome)
	go func() {
		out, _ := h.Decide(context.Background(), aCall(`{}`))
		done <- out
	}()
	h.Close()
	if out := <-done; out.Effect != Deny {
		t.Errorf("the call in flight at Close got %v, want Deny", out.Effect)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("plugin process %d still runs after Close", pid)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kill(%d, 0) = %v, want ESRCH", pid, err)
		}
	}
	if kids := children(); len(kids) > 0 {
		t.Errorf("child processes left after Close: %v", kids)
	}
	checkGoroutines(t, goroutines)
	h.Close() // again: no effect

	out := decide(t, h, `{}`)
	if out.Effect != Deny {
		t.Errorf("Decide after Close = %v, want Deny", out.Effect)
	}
	checkPluginError(t, out.Results[0].Err, "guard", func(err error) bool { return errors.Is(err, ErrNotRunning) })
}

package upstream

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envLowFD makes the test binary run TestOutOfFileDescriptorsIsAnError's child part.
const envLowFD = "MANIFOLD_TEST_LOW_FD"

// TestOutOfFileDescriptorsIsAnError: at the file-descriptor limit an upstream cannot start;
// that is logged at error level on every attempt, not once and then at debug. The limit is
// lowered in a child process (this test binary again), so nothing else runs short.
func TestOutOfFileDescriptorsIsAnError(t *testing.T) {
	if os.Getenv(envLowFD) != "" {
		outOfFileDescriptors(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOutOfFileDescriptorsIsAnError$", "-test.v")
	cmd.Env = append(os.Environ(), envLowFD+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("the child with few file descriptors: %v\n%s", err, out)
	}
}

func outOfFileDescriptors(t *testing.T) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here to count open files")
	}
	// Room for one pipe of the three a stdio child needs.
	limit := uint64(len(fds) + 2)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	c := New(Spec{Name: "starved", Command: "true"}, &Options{Logger: slog.New(logs), RestartDelay: time.Millisecond, MaxRestartDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	const want = "ERROR the gateway is out of file descriptors, so the upstream cannot start; raise the limit (ulimit -n) or lower max_sessions"
	defer func() { cancel(); <-done }()
	waitUntil(t, "an error record for each of three failed starts", func() bool { return logs.count(want) >= 3 })
}

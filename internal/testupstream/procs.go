package testupstream

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvRun names the environment variable that marks every process a test run starts, so that
// Leftovers can find them, grandchildren included.
const EnvRun = "MANIFOLD_TEST_RUN"

// Leftovers returns the ids of live processes (zombies included) whose environment carries
// EnvRun=marker. It reads /proc; elsewhere it finds nothing.
func Leftovers(marker string) []int {
	want := []byte(EnvRun + "=" + marker)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	self := os.Getpid()
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == self {
			continue
		}
		// A zombie has no environment left; count it when it is this process's child.
		if stat, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && isZombieChildOf(stat, self) {
			pids = append(pids, pid)
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// isZombieChildOf reads a /proc/PID/stat line: "pid (comm) state ppid …".
func isZombieChildOf(stat []byte, parent int) bool {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return false
	}
	fields := bytes.Fields(stat[end+1:])
	return len(fields) >= 2 && string(fields[0]) == "Z" && string(fields[1]) == strconv.Itoa(parent)
}

// Marker tags the processes this test binary starts: put EnvRun=Marker in their environment.
var Marker = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// RunTests is the body of a TestMain for tests that start upstream processes: it serves an
// upstream when this process was started as one (see Main), else runs the tests, then
// cleanup (may be nil), and fails the run if any process carrying Marker is still alive a
// few seconds later. It returns the exit code.
func RunTests(m *testing.M, cleanup func()) int {
	Main()
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(Leftovers(Marker)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := Leftovers(Marker); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: processes left behind: %v\n", left)
		code = 1
	}
	if leaked := waitGoroutines(5 * time.Second); leaked != "" {
		fmt.Fprintf(os.Stderr, "FAIL: goroutines of Manifold's packages still running after the tests:\n%s\n", leaked)
		code = 1
	}
	return code
}

// waitGoroutines waits until no goroutine runs code of Manifold's own packages (besides the
// caller) and returns the stacks of those still running at the limit.
func waitGoroutines(limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for {
		leaked := ownGoroutines()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ownGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/manifold-mcp/manifold/") ||
			strings.Contains(g, "testupstream.RunTests") || strings.Contains(g, "testupstream.ownGoroutines") {
			continue
		}
		leaked = append(leaked, g)
	}
	return strings.Join(leaked, "\n\n")
}

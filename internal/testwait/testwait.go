// Package testwait waits, in tests, for what happens elsewhere and has no event to wait on:
// another process, a server's own clock (Redis's TTLs). It checks a condition every 10 ms up
// to a bound; the bound fails a test that would otherwise hang, it never asserts speed.
package testwait

import (
	"runtime"
	"testing"
	"time"
)

// interval is how often a condition is checked.
const interval = 10 * time.Millisecond

// Within reports whether cond holds within bound, checking it at once and then every 10 ms.
func Within(bound time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// Until fails t unless cond holds within bound; what names it in the failure.
func Until(t testing.TB, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(bound, cond) {
		t.Fatalf("%s did not happen within %s", what, bound)
	}
}

// Goroutines fails t if, once its cleanups registered later have run, more goroutines run
// than now: what a test starts, it stops. It waits up to 3s for them to end (go-redis's probe
// of a server that stopped answering sleeps 1s between tries).
func Goroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !Within(3*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	})
}

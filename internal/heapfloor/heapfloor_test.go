package heapfloor

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name               string
		live, roots, floor uint64
		want               int
	}{
		{"small heap collects at the floor", 4 * mib, 0, 64 * mib, 1500},
		{"a tiny heap meets the runtime's minimum, scaled", mib / 4, 0, 64 * mib, 1600},
		{"roots count as GOGC scales them", 4 * mib, 4 * mib, 64 * mib, 750},
		{"half the floor is the default", 32 * mib, 0, 64 * mib, 100},
		{"above the floor is the default", 200 * mib, 0, 64 * mib, 100},
		{"no live heap known yet", 0, 0, 64 * mib, 100},
		{"just under half the floor", 31 * mib, 0, 64 * mib, 106},
		{"never below the default", 40 * mib, 20 * mib, 64 * mib, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.live, tc.roots, tc.floor); got != tc.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", tc.live, tc.roots, tc.floor, got, tc.want)
			}
		})
	}
}

// TestKeepRetunesAfterEachCollection: a keeper sets a percentage at once and again after every
// collection, which puts the runtime's heap goal at the floor (the live heap of a test is far
// smaller), until Stop restores the default.
func TestKeepRetunesAfterEachCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const floor = 64 << 20
	runtime.GC() // a live heap to start from
	tuned := make(chan int, 16)
	k := keep(floor, func(p int) { tuned <- p })
	checkGoal := func(when string, p int) {
		t.Helper()
		goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		metrics.Read(goal)
		if g := goal[0].Value.Uint64(); p <= 100 || g < floor*9/10 || g > floor*11/10 {
			t.Errorf("%s: percentage %d, heap goal %d bytes, want above 100 and a goal within 10 %% of %d", when, p, g, floor)
		}
	}
	checkGoal("at start", <-tuned)
	for i := range 3 {
		runtime.GC()
		select {
		case p := <-tuned:
			checkGoal(fmt.Sprintf("after collection %d", i+1), p)
		case <-time.After(10 * time.Second):
			t.Fatal("no retune after a collection")
		}
	}
	k.Stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("percentage %d after Stop, want 100", p)
	}
}

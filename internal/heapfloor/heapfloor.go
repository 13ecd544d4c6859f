// Package heapfloor lets a process with a small live heap collect garbage less often. With
// Go's default GOGC of 100 the collector runs each time the heap doubles, which for a
// gateway whose live heap is a few megabytes means dozens of collections a second under
// load. Keep sets the GC percentage after every collection so that the next one comes when
// the heap reaches the floor, or at Go's default goal once that is larger: the default
// behaviour for large heaps, fewer collections for small ones, and a heap goal that never
// passes the larger of the floor and the default one.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// The runtime metrics the percentage depends on: the heap that survived the last collection,
// and the goroutine stacks and globals, which GOGC scales too.
const (
	liveHeap = "/gc/heap/live:bytes"
	stacks   = "/gc/scan/stack:bytes"
	globals  = "/gc/scan/globals:bytes"
)

// minimumHeap is the runtime's least heap goal at GOGC=100; GOGC scales it like the rest.
const minimumHeap = 4 << 20

// Percent is the GC percentage that puts the next collection at floor bytes of heap, for a
// live heap of live bytes and roots (stacks and globals) of roots bytes: the runtime's goal is
// live + (live + roots) × percent / 100, and at least minimumHeap × percent / 100. It is never
// below Go's default of 100.
func Percent(live, roots, floor uint64) int {
	if live == 0 || floor <= live {
		return 100
	}
	p := min((floor-live)*100/(live+roots), floor*100/minimumHeap)
	return max(100, int(p))
}

// Keeper retunes the collector after each collection until Stop.
type Keeper struct {
	floor   uint64
	stopped atomic.Bool
	// tuned, when set, is called with each percentage set (for tests).
	tuned  func(percent int)
	sample []metrics.Sample
}

// Keep starts retuning the collector for a heap floor of floor bytes; the first percentage is
// set at once.
func Keep(floor uint64) *Keeper {
	return keep(floor, nil)
}

func keep(floor uint64, tuned func(int)) *Keeper {
	k := &Keeper{floor: floor, tuned: tuned, sample: []metrics.Sample{{Name: liveHeap}, {Name: stacks}, {Name: globals}}}
	k.retune()
	k.arm()
	return k
}

// Stop ends the retuning and restores Go's default percentage.
func (k *Keeper) Stop() {
	k.stopped.Store(true)
	debug.SetGCPercent(100)
}

// arm places a sentinel whose finalizer runs after the next collection; the finalizer retunes
// and arms the next one, until Stop. The finalizer runs on the runtime's finalizer goroutine.
func (k *Keeper) arm() {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		if k.stopped.Load() {
			return
		}
		k.retune()
		k.arm()
	})
}

func (k *Keeper) retune() {
	metrics.Read(k.sample)
	value := func(i int) uint64 {
		if k.sample[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return k.sample[i].Value.Uint64()
	}
	p := Percent(value(0), value(1)+value(2), k.floor)
	debug.SetGCPercent(p)
	if k.tuned != nil {
		k.tuned(p)
	}
}

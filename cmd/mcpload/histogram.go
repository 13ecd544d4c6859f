package main

import (
	"math"
	"math/bits"
	"time"
)

// The latency histogram is log-linear: values below 2^(subBits+1) ns have a bucket each,
// and every further power of two is split into 2^subBits buckets, so a bucket is at most
// 1/64 (1.6%) of its values wide. Quantiles are bucket midpoints, within 0.8% of the true
// value. Values of 2^maxBits ns (about 18 minutes) and more share the last bucket.
const (
	subBits    = 6
	maxBits    = 40
	numBuckets = (maxBits-subBits)<<subBits + 1<<subBits
)

// histogram counts durations in fixed buckets: recording is O(1) and memory is fixed
// (18 KiB) however long the run. The zero value is empty and ready to use. Not safe for
// concurrent use: each worker has its own, merged at the end.
type histogram struct {
	counts [numBuckets]uint64
	n      uint64
	max    time.Duration
}

// bucketOf returns the bucket index of a duration in nanoseconds.
func bucketOf(ns uint64) int {
	if ns >= 1<<maxBits {
		return numBuckets - 1
	}
	shift := max(bits.Len64(ns)-(subBits+1), 0)
	return shift<<subBits + int(ns>>shift)
}

// bucketRange returns the smallest value of bucket i and the bucket's width.
func bucketRange(i int) (low, width uint64) {
	if i < 2<<subBits {
		return uint64(i), 1
	}
	shift := i>>subBits - 1
	m := uint64(i - shift<<subBits)
	return m << shift, 1 << shift
}

// record adds one duration.
func (h *histogram) record(d time.Duration) {
	d = max(d, 0)
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

// merge adds the counts of o to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// count returns the number of recorded durations.
func (h *histogram) count() uint64 { return h.n }

// quantile returns the nearest-rank q-quantile (0 < q ≤ 1): the midpoint of the bucket
// holding it, never more than the maximum. It returns 0 for an empty histogram.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			low, width := bucketRange(i)
			return min(time.Duration(low+width/2), h.max)
		}
	}
	return h.max
}

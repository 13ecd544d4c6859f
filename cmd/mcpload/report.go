package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report is the -json output. Its keys are a contract with scripts.
type report struct {
	N         int              `json:"n"`
	Calls     int64            `json:"calls"`
	Errors    map[string]int64 `json:"errors"`
	Duration  float64          `json:"duration_s"`
	CallsPerS float64          `json:"calls_per_s"`
	Latency   struct {
		P50 float64 `json:"p50"`
		P95 float64 `json:"p95"`
		P99 float64 `json:"p99"`
		Max float64 `json:"max"`
	} `json:"latency_us"`
	Init struct {
		P50 float64 `json:"p50"`
		Max float64 `json:"max"`
	} `json:"init_us"`
}

// micros converts a duration to microseconds.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// writeJSON prints r as one JSON object: the figures of the human summary, in
// microseconds and seconds.
func writeJSON(w io.Writer, r *Result) error {
	var rep report
	rep.N = r.Workers
	rep.Calls = r.Calls
	rep.Errors = r.Errors
	rep.Duration = r.Duration.Seconds()
	rep.CallsPerS = r.CallsPerSecond()
	rep.Latency.P50 = micros(r.Latency.quantile(0.50))
	rep.Latency.P95 = micros(r.Latency.quantile(0.95))
	rep.Latency.P99 = micros(r.Latency.quantile(0.99))
	rep.Latency.Max = micros(r.Latency.max)
	rep.Init.P50 = micros(initMedian(r.Init))
	if len(r.Init) > 0 {
		rep.Init.Max = micros(r.Init[len(r.Init)-1])
	}
	b, err := json.Marshal(&rep)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeSummary prints r for people.
func writeSummary(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "target      %s\n", r.Target)
	fmt.Fprintf(&b, "method      %s\n", r.Method)
	fmt.Fprintf(&b, "workers     %d\n", r.Workers)
	if r.Protocol == ProtocolModern {
		fmt.Fprintf(&b, "sessions    none (%s)\n", r.Protocol)
	} else {
		fmt.Fprintf(&b, "sessions    %d initialized\n", r.Sessions)
	}
	fmt.Fprintf(&b, "calls       %d ok, %d errors\n", r.Calls, r.ErrorCount())
	for _, kind := range slices.Sorted(maps.Keys(r.Errors)) {
		fmt.Fprintf(&b, "  %-10s %d  (first: %s)\n", kind, r.Errors[kind], r.Samples[kind])
	}
	fmt.Fprintf(&b, "duration    %s\n", formatDuration(r.Duration))
	fmt.Fprintf(&b, "rate        %.0f calls/s\n", r.CallsPerSecond())
	fmt.Fprintf(&b, "latency     p50 %s  p95 %s  p99 %s  max %s\n",
		formatDuration(r.Latency.quantile(0.50)), formatDuration(r.Latency.quantile(0.95)),
		formatDuration(r.Latency.quantile(0.99)), formatDuration(r.Latency.max))
	if len(r.Init) > 0 {
		fmt.Fprintf(&b, "initialize  p50 %s  max %s\n", formatDuration(initMedian(r.Init)), formatDuration(r.Init[len(r.Init)-1]))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// initMedian returns the nearest-rank median of the sorted initialize latencies.
func initMedian(sorted []time.Duration) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[(len(sorted)-1)/2]
}

// formatDuration prints d in µs, ms or s with about three significant digits.
func formatDuration(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(micros(d), 'f', 0, 64) + "µs"
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(ms, 'f', 2, 64) + "ms"
	case d < 100*time.Millisecond:
		return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
	case d < time.Second:
		return strconv.FormatFloat(ms, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

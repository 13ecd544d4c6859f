package main

import (
	"fmt"
	"math"
	"slices"
)

// comparison is what one concurrency's alternating rounds measured: every target's results
// in round order. The report on stdout and the page are both read from it.
type comparison struct {
	n       int
	targets []target
	samples map[string][]result // by target name, one result a round
}

// figures are a target's medians over the rounds, or ratios of such medians.
type figures struct {
	rate float64 // calls/s
	p50  float64 // µs
	p99  float64 // µs
}

// over divides f by g, figure by figure.
func (f figures) over(g figures) figures {
	return figures{rate: f.rate / g.rate, p50: f.p50 / g.p50, p99: f.p99 / g.p99}
}

// medians returns the medians of the named target's rounds (zero when it has none).
func (c comparison) medians(name string) figures {
	med := func(f func(result) float64) float64 {
		var v []float64
		for _, r := range c.samples[name] {
			v = append(v, f(r))
		}
		return median(v)
	}
	return figures{
		rate: med(func(r result) float64 { return r.CallsPerS }),
		p50:  med(func(r result) float64 { return r.Latency.P50 }),
		p99:  med(func(r result) float64 { return r.Latency.P99 }),
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	switch {
	case len(v) == 0:
		return 0
	case len(v)%2 == 1:
		return v[len(v)/2]
	default:
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
}

// errorCount is how many calls of the named target failed over all rounds.
func (c comparison) errorCount(name string) int {
	total := 0
	for _, r := range c.samples[name] {
		total += sum(r.Errors)
	}
	return total
}

// spread is the lowest and highest of a ratio computed round by round: how much the machine
// moved during the run. Its zero value means no round had both sides.
type spread struct {
	lo, hi float64
	rounds int
}

// spreadOf computes ratio for every round i in [0, rounds).
func spreadOf(rounds int, ratio func(i int) float64) spread {
	s := spread{lo: math.Inf(1), hi: math.Inf(-1), rounds: rounds}
	for i := range rounds {
		r := ratio(i)
		s.lo, s.hi = min(s.lo, r), max(s.hi, r)
	}
	return s
}

// String gives "lo–hi" to two decimals, or "-" when no round was measured.
func (s spread) String() string {
	if s.rounds == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f–%.2f", s.lo, s.hi)
}

// floorRow is a gateway target against the floor of the two hops it adds. A gateway cannot
// beat them: its calls/s are at most 1/(1/a + 1/b) of the direct targets a and b of its two
// hops, its p50 at least theirs added up.
type floorRow struct {
	target string
	hops   [2]string
	floor  figures // rate and p50 of the floor; p99 is not used
	// frac is the target's medians over the floor's (rate and p50 only).
	frac figures
	// rateRounds and p50Rounds are frac round by round, each round's target against that
	// round's floor.
	rateRounds, p50Rounds spread
}

// floors returns a row for each target that has a floor, in target order.
func (c comparison) floors() []floorRow {
	var rows []floorRow
	for _, t := range c.targets {
		if len(t.floor) != 2 {
			continue
		}
		a, b := t.floor[0], t.floor[1]
		ma, mb, mt := c.medians(a), c.medians(b), c.medians(t.name)
		floor := figures{rate: 1 / (1/ma.rate + 1/mb.rate), p50: ma.p50 + mb.p50}
		st, sa, sb := c.samples[t.name], c.samples[a], c.samples[b]
		rounds := min(len(st), len(sa), len(sb))
		rows = append(rows, floorRow{
			target: t.name,
			hops:   [2]string{a, b},
			floor:  floor,
			frac:   figures{rate: mt.rate / floor.rate, p50: mt.p50 / floor.p50},
			rateRounds: spreadOf(rounds, func(i int) float64 {
				return st[i].CallsPerS * (1/sa[i].CallsPerS + 1/sb[i].CallsPerS)
			}),
			p50Rounds: spreadOf(rounds, func(i int) float64 {
				return st[i].Latency.P50 / (sa[i].Latency.P50 + sb[i].Latency.P50)
			}),
		})
	}
	return rows
}

// versusRow is a target against the other target it is compared with in the same run.
type versusRow struct {
	target, versus string
	ratio          figures // the target's medians over the other's
	// rateRounds and p50Rounds are the ratio round by round, each round's target against
	// that round's other.
	rateRounds, p50Rounds spread
}

// versus returns a row for each target compared with another, in target order.
func (c comparison) versus() []versusRow {
	var rows []versusRow
	for _, t := range c.targets {
		if t.versus == "" {
			continue
		}
		st, sv := c.samples[t.name], c.samples[t.versus]
		rounds := min(len(st), len(sv))
		rows = append(rows, versusRow{
			target:     t.name,
			versus:     t.versus,
			ratio:      c.medians(t.name).over(c.medians(t.versus)),
			rateRounds: spreadOf(rounds, func(i int) float64 { return st[i].CallsPerS / sv[i].CallsPerS }),
			p50Rounds:  spreadOf(rounds, func(i int) float64 { return st[i].Latency.P50 / sv[i].Latency.P50 }),
		})
	}
	return rows
}

// print writes the report of c to stdout: the medians of each target and their ratios to
// direct, each gateway against its floor, and each target against the one it is compared
// with.
func (c comparison) print() {
	w := nameWidth(c.targets)
	fmt.Printf("n=%d (medians)\n", c.n)
	fmt.Printf("  %-*s %12s %10s %10s %10s %10s %10s\n", w, "target", "calls/s", "p50 µs", "p99 µs", "×calls/s", "×p50", "×p99")
	direct := c.medians("direct")
	for _, t := range c.targets {
		v := c.medians(t.name)
		x := v.over(direct)
		fmt.Printf("  %-*s %12.0f %10.0f %10.0f %10.2f %10.2f %10.2f\n", w, t.name, v.rate, v.p50, v.p99, x.rate, x.p50, x.p99)
	}
	for i, r := range c.floors() {
		if i == 0 {
			fmt.Printf("  %-*s %12s %10s %10s %10s   %-11s %-11s %s\n", w, "of the floor", "floor/s", "floor p50", "×calls/s", "×p50", "rounds ×c/s", "rounds ×p50", "hops")
		}
		fmt.Printf("  %-*s %12.0f %10.0f %10.2f %10.2f   %-11s %-11s %s + %s\n", w, r.target, r.floor.rate, r.floor.p50, r.frac.rate, r.frac.p50, r.rateRounds, r.p50Rounds, r.hops[0], r.hops[1])
	}
	for i, r := range c.versus() {
		if i == 0 {
			fmt.Printf("  %-*s %10s %10s %10s   %-11s %-11s %s\n", w, "against", "×calls/s", "×p50", "×p99", "rounds ×c/s", "rounds ×p50", "of")
		}
		fmt.Printf("  %-*s %10.2f %10.2f %10.2f   %-11s %-11s %s\n", w, r.target, r.ratio.rate, r.ratio.p50, r.ratio.p99, r.rateRounds, r.p50Rounds, r.versus)
	}
	fmt.Println()
}

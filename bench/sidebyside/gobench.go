package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// goBenchArgs are the arguments of go test that run the plugin benchmarks: a plugin's round
// trip through the gateway's plugin host beside go-plugin's own bare gRPC round trip to the
// same plugin, in this run: what gateway-plugin adds per call.
var goBenchArgs = []string{"test", "-run", "^$", "-bench", "BenchmarkDecide$|BenchmarkBareRoundTrip$", "-benchtime", "2s", "-count", "5", "./internal/policy/plugin/"}

// goBenchCommand is the command line of the plugin benchmarks, as the page shows it.
var goBenchCommand = commandLine(append([]string{"go"}, goBenchArgs...))

// goBench is one benchmark's ns/op, one a run.
type goBench struct {
	name    string
	nsPerOp []float64
}

// spread gives the lowest and highest µs/op, or "-" without runs.
func (g goBench) spread() string {
	if len(g.nsPerOp) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f–%.0f", slices.Min(g.nsPerOp)/1e3, slices.Max(g.nsPerOp)/1e3)
}

// runGoBench runs the plugin benchmarks from the module root (the current directory) and
// prints their result lines.
func runGoBench(ctx context.Context) ([]goBench, error) {
	cmd := exec.CommandContext(ctx, "go", goBenchArgs...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("plugin benchmarks: %w: %s", err, strings.TrimSpace(string(out)))
	}
	lines, benches := parseGoBench(string(out))
	fmt.Println()
	fmt.Println("plugin round trip (go test -bench, ns/op): the host's Decide, then go-plugin's bare round trip")
	for _, l := range lines {
		fmt.Println(l)
	}
	if len(benches) == 0 {
		return nil, fmt.Errorf("plugin benchmarks: no result in the output of %s", goBenchCommand)
	}
	return benches, nil
}

// parseGoBench returns the result lines of go test -bench output and each benchmark's
// ns/op, in the order the benchmarks first appear.
func parseGoBench(out string) (lines []string, benches []goBench) {
	index := map[string]int{}
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		for i := 2; i+1 < len(fields); i++ {
			if fields[i+1] != "ns/op" {
				continue
			}
			ns, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				break
			}
			lines = append(lines, line)
			name := fields[0]
			j, ok := index[name]
			if !ok {
				j = len(benches)
				index[name] = j
				benches = append(benches, goBench{name: name})
			}
			benches[j].nsPerOp = append(benches[j].nsPerOp, ns)
			break
		}
	}
	return lines, benches
}

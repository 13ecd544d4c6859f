package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/page.golden from the canned record")

// sample is a load tool result with the given calls/s, p50 and p99 (µs), and errors.
func sample(rate, p50, p99 float64, errs map[string]int) result {
	r := result{CallsPerS: rate, Errors: errs, Calls: int(rate)}
	r.Latency.P50, r.Latency.P99 = p50, p99
	return r
}

// cannedRecord is a run of two rounds at N=1 and N=32 with every part of the page filled in.
func cannedRecord() record {
	floor := []string{"direct", "direct-stdio"}
	targets := []target{
		{name: "direct"},
		{name: "direct-stdio"},
		{name: "gateway-stdio", floor: floor},
		{name: "gateway-auth", floor: floor, versus: "gateway-stdio"},
		{name: "gateway-stdio-2026", floor: floor, versus: "gateway-stdio", protocol: protocolModern},
	}
	calls := []comparison{
		{n: 1, targets: targets, samples: map[string][]result{
			"direct":             {sample(1000, 100, 300, nil), sample(1100, 90, 280, nil)},
			"direct-stdio":       {sample(4000, 25, 60, nil), sample(3600, 30, 70, nil)},
			"gateway-stdio":      {sample(400, 250, 700, nil), sample(500, 200, 650, nil)},
			"gateway-auth":       {sample(380, 260, 720, nil), sample(450, 230, 690, map[string]int{"timeout": 2})},
			"gateway-stdio-2026": {sample(480, 210, 600, nil), sample(560, 180, 590, nil)},
		}},
		{n: 32, targets: targets, samples: map[string][]result{
			"direct":             {sample(8000, 4000, 9000, nil), sample(8200, 3900, 8800, nil)},
			"direct-stdio":       {sample(30000, 1000, 2000, nil), sample(31000, 1000, 2100, nil)},
			"gateway-stdio":      {sample(5000, 6400, 15000, nil), sample(5200, 6100, 14000, nil)},
			"gateway-auth":       {sample(4800, 6600, 16000, nil), sample(5100, 6300, 15000, nil)},
			"gateway-stdio-2026": {sample(5600, 5700, 13000, nil), sample(5900, 5400, 12500, nil)},
		}},
	}
	listTargets := []target{{name: "direct"}, {name: "gateway-20x100"}}
	lists := []comparison{{n: 1, targets: listTargets, samples: map[string][]result{
		"direct":         {sample(2000, 400, 900, nil), sample(2100, 380, 850, nil)},
		"gateway-20x100": {sample(1700, 470, 1000, nil), sample(1800, 450, 990, nil)},
	}}}
	return record{
		started:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		commit:   "0123456789abcdef0123456789abcdef01234567",
		machine:  machine{goos: "linux", goarch: "amd64", cpus: 2, cpuModel: "AMD EPYC", goVersion: "go1.26.0"},
		command:  commandLine([]string{"/tmp/bin/sidebyside", "-bin", ".cache/bin", "-rounds", "2", "-n", "1,32", "-page", "docs/benchmarks.md"}),
		settings: settings{rounds: 2, duration: 3 * time.Second, warmup: 500 * time.Millisecond, ns: []int{1, 32}, errorsN: 256, errorsCalls: 20},
		redis:    "127.0.0.1:6379, PING round trip p50 23 µs (1000 PINGs on one connection)",
		calls:    calls,
		errorChecks: []errorCheck{
			{target: "direct", n: 256, callsPerSession: 20, res: result{Calls: 5120}},
			{target: "gateway-stdio", n: 256, callsPerSession: 20, res: result{Calls: 5117, Errors: map[string]int{"timeout": 2, "http 503": 1}}},
		},
		replicaRequests: []int64{1200, 1201},
		lists:           lists,
		goBench: []goBench{
			{name: "BenchmarkDecide-2", nsPerOp: []float64{209000, 215000, 205000}},
			{name: "BenchmarkBareRoundTrip-2", nsPerOp: []float64{214000, 216000, 220000}},
		},
	}
}

// TestRenderPage compares the page of a canned record with testdata/page.golden; -update
// rewrites the file.
func TestRenderPage(t *testing.T) {
	got := renderPage(cannedRecord())
	golden := filepath.Join("testdata", "page.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("page differs from %s (-want +got; run with -update if the change is meant):\n%s", golden, diff)
	}
}

// TestFiguresOfAComparison checks the figures the page and the report share against sums
// done by hand.
func TestFiguresOfAComparison(t *testing.T) {
	c := cannedRecord().calls[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

	// Medians of two rounds are their means.
	if got, want := c.medians("gateway-stdio"), (figures{rate: 450, p50: 225, p99: 675}); got != want {
		t.Errorf("medians(gateway-stdio) = %+v, want %+v", got, want)
	}
	if got := c.errorCount("gateway-auth"); got != 2 {
		t.Errorf("errorCount(gateway-auth) = %d, want 2", got)
	}

	floors := c.floors()
	if len(floors) != 3 || floors[0].target != "gateway-stdio" || floors[1].target != "gateway-auth" || floors[2].target != "gateway-stdio-2026" {
		t.Fatalf("floors() = %+v, want gateway-stdio, gateway-auth, gateway-stdio-2026", floors)
	}
	// direct: 1050/s, p50 95; direct-stdio: 3800/s, p50 27.5.
	f := floors[0]
	wantRate := 1 / (1/1050.0 + 1/3800.0)
	tests := []struct {
		name      string
		got, want float64
	}{
		{"floor calls/s", f.floor.rate, wantRate},
		{"floor p50", f.floor.p50, 122.5},
		{"× floor calls/s", f.frac.rate, 450 / wantRate},
		{"× floor p50", f.frac.p50, 225 / 122.5},
		// Round 1: 400 × (1/1000 + 1/4000) = 0.5; round 2: 500 × (1/1100 + 1/3600).
		{"rounds × calls/s, lowest", f.rateRounds.lo, 0.5},
		{"rounds × calls/s, highest", f.rateRounds.hi, 500 * (1/1100.0 + 1/3600.0)},
		// Round 1: 250/125 = 2; round 2: 200/120.
		{"rounds × p50, lowest", f.p50Rounds.lo, 200 / 120.0},
		{"rounds × p50, highest", f.p50Rounds.hi, 2},
	}
	for _, tt := range tests {
		if !near(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	versus := c.versus()
	if len(versus) != 2 {
		t.Fatalf("versus() = %+v, want two rows", versus)
	}
	v := versus[0]
	if v.target != "gateway-auth" || v.versus != "gateway-stdio" {
		t.Errorf("versus row compares %s with %s, want gateway-auth with gateway-stdio", v.target, v.versus)
	}
	// gateway-auth: 415/s, p50 245; the rounds: 380/400 and 450/500.
	if !near(v.ratio.rate, 415/450.0) || !near(v.ratio.p50, 245/225.0) {
		t.Errorf("versus ratio = %+v, want calls/s %v and p50 %v", v.ratio, 415/450.0, 245/225.0)
	}
	if got, want := v.rateRounds.String(), "0.90–0.95"; got != want {
		t.Errorf("versus rounds × calls/s = %s, want %s", got, want)
	}
	// gateway-stdio-2026 against gateway-stdio: 520/s over 450/s; the rounds 480/400 and
	// 560/500, p50 210/250 and 180/200.
	if v := versus[1]; v.target != "gateway-stdio-2026" || !near(v.ratio.rate, 520/450.0) ||
		v.rateRounds.String() != "1.12–1.20" || v.p50Rounds.String() != "0.84–0.90" {
		t.Errorf("the 2026 row = %+v, want gateway-stdio-2026 at %v × calls/s, rounds 1.12–1.20, p50 rounds 0.84–0.90", v, 520/450.0)
	}
}

// TestTexts checks the pieces of text the page is made of, each computed from its values.
func TestTexts(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"spread of no rounds", spreadOf(0, nil).String(), "-"},
		{"spread of one round", spreadOf(1, func(int) float64 { return 0.5 }).String(), "0.50–0.50"},
		{"spread of rounds", spreadOf(3, func(i int) float64 { return []float64{0.7, 0.555, 0.9}[i] }).String(), "0.56–0.90"},

		{"cpu model, x86", cpuModel("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nmodel name\t: other\n"), "AMD EPYC 7B13"},
		{"cpu model, none", cpuModel("processor\t: 0\nBogoMIPS\t: 50.00\n"), ""},
		{"cpu model, empty", cpuModel(""), ""},

		{"machine, model known", machine{"linux", "amd64", 2, "AMD EPYC", "go1.26.0"}.String(), "linux/amd64, 2 CPUs (AMD EPYC), go1.26.0"},
		{"machine, model unknown", machine{"darwin", "arm64", 8, "", "go1.26.0"}.String(), "darwin/arm64, 8 CPUs (model unknown), go1.26.0"},

		{"command line, plain", commandLine([]string{"/x/bin/sidebyside", "-rounds", "3", "-n", "1,32"}), "sidebyside -rounds 3 -n 1,32"},
		{"command line, spaces and quotes", commandLine([]string{"sidebyside", "-other", "proxy -config it's.json", "-page", ""}), `sidebyside -other 'proxy -config it'\''s.json' -page ''`},

		{"settings, full", settings{5, 3 * time.Second, 500 * time.Millisecond, []int{1, 32}, 256, 20}.String(),
			"5 rounds of 3s per target and concurrency, targets alternating, the first 500ms of each run not measured; N = 1, 32; errors only at N = 256, 20 calls per session"},
		{"settings, one round, no errors check", settings{1, 500 * time.Millisecond, 100 * time.Millisecond, []int{8}, 0, 20}.String(),
			"1 round of 500ms per target and concurrency, targets alternating, the first 100ms of each run not measured; N = 8"},

		{"error kinds, none", errorKinds(nil), "none"},
		{"error kinds, sorted", errorKinds(map[string]int{"timeout": 2, "http 503": 1, "closed": 0}), "http 503 1, timeout 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got\n%q, want\n%q", tt.got, tt.want)
			}
		})
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/manifold-mcp/manifold/internal/policy/plugin
cpu: AMD EPYC
BenchmarkDecide-2          	   10000	    209344 ns/op
BenchmarkDecide-2          	   10000	    215000 ns/op	    1024 B/op	      20 allocs/op
BenchmarkBareRoundTrip-2   	   10000	    214999 ns/op
BenchmarkBroken-2          	 --- FAIL
PASS
ok  	github.com/manifold-mcp/manifold/internal/policy/plugin	12.3s
`
	lines, benches := parseGoBench(out)
	wantLines := []string{
		"BenchmarkDecide-2          \t   10000\t    209344 ns/op",
		"BenchmarkDecide-2          \t   10000\t    215000 ns/op\t    1024 B/op\t      20 allocs/op",
		"BenchmarkBareRoundTrip-2   \t   10000\t    214999 ns/op",
	}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	wantBenches := []goBench{
		{name: "BenchmarkDecide-2", nsPerOp: []float64{209344, 215000}},
		{name: "BenchmarkBareRoundTrip-2", nsPerOp: []float64{214999}},
	}
	if diff := cmp.Diff(wantBenches, benches, cmp.AllowUnexported(goBench{})); diff != "" {
		t.Errorf("benchmarks (-want +got):\n%s", diff)
	}
}

// pageShapeProblems returns what keeps page from being one renderPage wrote: the title and
// the generated-file marker first, the lines naming the date, commit, machine, command and
// settings, the reading guide, and tables whose heading rows are the writer's and whose rows
// each have a cell a column. The figures themselves cannot be checked.
func pageShapeProblems(page string) []string {
	var problems []string
	if !strings.HasPrefix(page, "# Benchmarks\n\n"+pageMarker+"\n") {
		problems = append(problems, "does not start with the title and the generated-file marker")
	}
	facts := []struct{ name, pattern string }{
		{"date", `(?m)^- Date: \d{4}-\d\d-\d\d \d\d:\d\d UTC$`},
		{"commit", `(?m)^- Commit: ([0-9a-f]{40}( with uncommitted changes)?|unknown)$`},
		{"machine", `(?m)^- Machine: [^/\s]+/[^,\s]+, \d+ CPUs \(.+\), go\S+$`},
		{"command", "(?m)^- Command: `sidebyside .*`$"},
		{"settings", `(?m)^- Settings: \d+ rounds? of \S+ per target and concurrency, .*; N = \d+(, \d+)*(;.*)?$`},
	}
	for _, f := range facts {
		if !regexp.MustCompile(f.pattern).MatchString(page) {
			problems = append(problems, "no "+f.name+" line")
		}
	}
	if !strings.Contains(page, readingGuide) {
		problems = append(problems, "the reading guide is not the writer's")
	}
	known := map[string]int{}
	for _, cols := range [][]column{callsColumns, floorColumns, versusColumns, errorsColumns, goBenchColumns} {
		known[tableHead(cols)] = len(cols)
	}
	seen := map[string]bool{}
	for block := range strings.SplitSeq(page, "\n\n") {
		if !strings.HasPrefix(block, "|") {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
		if len(lines) < 2 {
			problems = append(problems, fmt.Sprintf("a table without rows: %q", block))
			continue
		}
		head := lines[0] + "\n" + lines[1] + "\n"
		cells, ok := known[head]
		if !ok {
			problems = append(problems, fmt.Sprintf("a table the writer does not write: %q", lines[0]))
			continue
		}
		seen[head] = true
		for _, row := range lines[2:] {
			if !strings.HasPrefix(row, "| ") || !strings.HasSuffix(row, " |") || strings.Count(row, " | ")+1 != cells {
				problems = append(problems, fmt.Sprintf("a row without %d cells: %q", cells, row))
			}
		}
	}
	for _, cols := range [][]column{callsColumns, floorColumns, errorsColumns} {
		if !seen[tableHead(cols)] {
			problems = append(problems, fmt.Sprintf("no table headed %q", cols[0].heading))
		}
	}
	return problems
}

// TestPageShapeCheck shows that the check of the committed page accepts what the writer
// writes and fails on hand edits.
func TestPageShapeCheck(t *testing.T) {
	page := renderPage(cannedRecord())
	tests := []struct {
		name string
		edit func(string) string
		ok   bool
	}{
		{"as written", func(s string) string { return s }, true},
		{"marker removed", func(s string) string { return strings.Replace(s, pageMarker+"\n", "", 1) }, false},
		{"machine line removed", func(s string) string {
			return regexp.MustCompile(`(?m)^- Machine: .*\n`).ReplaceAllString(s, "")
		}, false},
		{"a figure edited", func(s string) string {
			return strings.Replace(s, "| gateway-stdio | 450 |", "| gateway-stdio | 900 |", 1)
		}, true},
		{"a cell dropped", func(s string) string {
			return strings.Replace(s, "| gateway-stdio | 450 | 225 |", "| gateway-stdio | 450 |", 1)
		}, false},
		{"a column renamed", func(s string) string {
			return strings.Replace(s, "| × floor p50 |", "| × floor median |", 1)
		}, false},
		{"floor table removed", func(s string) string {
			return regexp.MustCompile(`(?s)\| against the floor \|.*?\n\n`).ReplaceAllString(s, "")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edited := tt.edit(page)
			if tt.name != "as written" && edited == page {
				t.Fatal("the edit changed nothing")
			}
			problems := pageShapeProblems(edited)
			if ok := len(problems) == 0; ok != tt.ok {
				t.Errorf("problems %q, want accepted: %v", problems, tt.ok)
			}
		})
	}
}

// TestCommittedPage checks that docs/benchmarks.md has the shape of a page this writer
// produced, so that a hand edit that breaks it fails. Whether its figures are recent cannot
// be checked.
func TestCommittedPage(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatalf("reading the page bench/run writes: %v", err)
	}
	for _, p := range pageShapeProblems(string(page)) {
		t.Errorf("docs/benchmarks.md: %s (bench/run writes it)", p)
	}
}

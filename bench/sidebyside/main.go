// Command sidebyside measures what the gateway costs: in one run it alternates, for several
// rounds, the load tool against the fast echo upstream's own HTTP face (direct) and against
// the gateway in front of the same upstream over stdio and over Streamable HTTP, at each
// concurrency asked for; then it checks a high concurrency for errors only. It prints the
// medians and the ratios gateway/direct, which stay meaningful on a shared, noisy machine
// where absolute figures do not. bench/run builds the binaries and calls it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// result is what mcpload -json prints.
type result struct {
	N         int            `json:"n"`
	Calls     int            `json:"calls"`
	Errors    map[string]int `json:"errors"`
	Duration  float64        `json:"duration_s"`
	CallsPerS float64        `json:"calls_per_s"`
	Latency   struct {
		P50, P95, P99, Max float64
	} `json:"latency_us"`
}

type target struct {
	name string
	url  string
}

func main() {
	bin := flag.String("bin", ".cache/bin", "directory holding gateway, echo-server and mcpload")
	rounds := flag.Int("rounds", 5, "rounds of alternating runs")
	duration := flag.Duration("duration", 3*time.Second, "length of one measured run")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "unmeasured start of each run")
	concurrency := flag.String("n", "1,32", "concurrencies to measure, comma-separated")
	errorsN := flag.Int("errors-n", 256, "concurrency checked for errors only (0: skip)")
	errorsCalls := flag.Int("errors-calls", 20, "calls per session in the errors-only check")
	other := flag.String("other", "", "command line of another MCP proxy to compare, serving the echo upstream over stdio at the URL given by -other-url (optional)")
	otherURL := flag.String("other-url", "", "MCP endpoint of -other")
	lists := flag.Bool("lists", true, "also compare a first-page tools/list over 20 upstreams × 100 tools with one direct 100-tool upstream")
	flag.Parse()
	if err := run(*bin, *rounds, *duration, *warmup, *concurrency, *errorsN, *errorsCalls, *other, *otherURL); err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		os.Exit(1)
	}
	if !*lists {
		return
	}
	if err := runLists(*bin, *rounds, *duration, *warmup, *concurrency); err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		os.Exit(1)
	}
}

func run(bin string, rounds int, duration, warmup time.Duration, concurrency string, errorsN, errorsCalls int, other, otherURL string) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sidebyside")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			stop(p)
		}
	}()
	echo := filepath.Join(bin, "echo-server")

	echoAddr, err := freeAddr()
	if err != nil {
		return err
	}
	p, err := start(filepath.Join(tmp, "echo.log"), echo, "-http", echoAddr)
	if err != nil {
		return err
	}
	procs = append(procs, p)

	gwStdio, gwHTTP := "", ""
	for _, g := range []struct {
		name     string
		upstream string
		addr     *string
	}{
		{"stdio", fmt.Sprintf("    command: %q\n", echo), &gwStdio},
		{"http", fmt.Sprintf("    url: http://%s/mcp\n", echoAddr), &gwHTTP},
	} {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		cfg := filepath.Join(tmp, "gateway-"+g.name+".yaml")
		text := fmt.Sprintf("listen: %s\nlog_level: warn\nmax_sessions: 10000\nupstreams:\n  - name: echo\n    prefix: \"\"\n%s", addr, g.upstream)
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			return err
		}
		p, err := start(filepath.Join(tmp, "gateway-"+g.name+".log"), filepath.Join(bin, "gateway"), "serve", "-config", cfg)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		*g.addr = "http://" + addr + "/mcp"
	}
	targets := []target{
		{"direct", "http://" + echoAddr + "/mcp"},
		{"gateway-stdio", gwStdio},
		{"gateway-http", gwHTTP},
	}
	if other != "" {
		fields := strings.Fields(other)
		p, err := start(filepath.Join(tmp, "other.log"), fields[0], fields[1:]...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		targets = append(targets, target{"other-proxy", otherURL})
	}
	for _, t := range targets {
		if err := waitUp(t.url, 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", t.name, err, tmp)
		}
	}

	var ns []int
	for f := range strings.SplitSeq(concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -n %q", concurrency)
		}
		ns = append(ns, n)
	}
	mcpload := filepath.Join(bin, "mcpload")
	fmt.Printf("side by side: %d rounds of %s per target and concurrency, alternating; echo tool, prefix \"\"\n\n", rounds, duration)
	failed := false
	for _, n := range ns {
		samples := map[string][]result{}
		for r := range rounds {
			// Alternate the order too, so no target always runs right after another.
			order := slices.Clone(targets)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				res, err := load(mcpload, t.url, n, "-duration", duration.String(), "-warmup", warmup.String())
				if err != nil {
					return fmt.Errorf("%s n=%d: %w", t.name, n, err)
				}
				if sum(res.Errors) > 0 {
					failed = true
					fmt.Printf("  %s n=%d round %d: errors %v\n", t.name, n, r+1, res.Errors)
				}
				samples[t.name] = append(samples[t.name], res)
			}
		}
		report(n, targets, samples)
	}
	if errorsN > 0 {
		for _, t := range targets {
			res, err := load(mcpload, t.url, errorsN, "-calls", strconv.Itoa(errorsCalls))
			if err != nil {
				return fmt.Errorf("%s n=%d: %w", t.name, errorsN, err)
			}
			fmt.Printf("errors at n=%d, %d calls per session: %-14s %d errors of %d calls %v\n", errorsN, errorsCalls, t.name, sum(res.Errors), res.Calls+sum(res.Errors), res.Errors)
			if sum(res.Errors) > 0 {
				failed = true
			}
		}
	}
	if failed {
		return errors.New("some calls failed")
	}
	return nil
}

// report prints the medians of each target and their ratios to direct.
func report(n int, targets []target, samples map[string][]result) {
	med := func(name string, f func(result) float64) float64 {
		var v []float64
		for _, r := range samples[name] {
			v = append(v, f(r))
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	rate := func(r result) float64 { return r.CallsPerS }
	p50 := func(r result) float64 { return r.Latency.P50 }
	p99 := func(r result) float64 { return r.Latency.P99 }
	fmt.Printf("n=%d (medians)\n", n)
	fmt.Printf("  %-14s %12s %10s %10s %10s %10s %10s\n", "target", "calls/s", "p50 µs", "p99 µs", "×calls/s", "×p50", "×p99")
	d := []float64{med("direct", rate), med("direct", p50), med("direct", p99)}
	for _, t := range targets {
		v := []float64{med(t.name, rate), med(t.name, p50), med(t.name, p99)}
		fmt.Printf("  %-14s %12.0f %10.0f %10.0f %10.2f %10.2f %10.2f\n", t.name, v[0], v[1], v[2], v[0]/d[0], v[1]/d[1], v[2]/d[2])
	}
	fmt.Println()
}

func load(mcpload, url string, n int, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mcpload, append([]string{"-url", url, "-n", strconv.Itoa(n), "-json"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run() // exit 1 means "some calls failed"; the JSON says which
	var res result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("mcpload: %v; %v: %s", runErr, err, strings.TrimSpace(errOut.String()))
	}
	return res, nil
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func start(logPath, name string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return cmd, nil
}

// stop ends a process group started by start: SIGTERM, then SIGKILL after a grace period.
func stop(cmd *exec.Cmd) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// waitUp waits until url answers an initialize POST.
func waitUp(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sidebyside","version":"1"}}}`
	for {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
					del, _ := http.NewRequest(http.MethodDelete, url, nil)
					del.Header.Set("Mcp-Session-Id", sid)
					if r, err := http.DefaultClient.Do(del); err == nil {
						r.Body.Close()
					}
				}
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not come up: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runLists compares the first page of tools/list: the gateway merging 20 stdio upstreams of
// 100 tools each (served from its catalog, no upstream round trip) against one 100-tool
// upstream asked directly over HTTP.
func runLists(bin string, rounds int, duration, warmup time.Duration, concurrency string) error {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "sidebyside-lists")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			stop(p)
		}
	}()
	echo := filepath.Join(bin, "echo-server")
	echoAddr, err := freeAddr()
	if err != nil {
		return err
	}
	p, err := start(filepath.Join(tmp, "echo.log"), echo, "-http", echoAddr, "-tools", "99")
	if err != nil {
		return err
	}
	procs = append(procs, p)
	gwAddr, err := freeAddr()
	if err != nil {
		return err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "listen: %s\nlog_level: warn\nmax_sessions: 10000\nupstreams:\n", gwAddr)
	for i := range 20 {
		fmt.Fprintf(&cfg, "  - name: up%02d\n    command: %q\n    args: [-tools, \"99\"]\n", i, echo)
	}
	cfgPath := filepath.Join(tmp, "gateway.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	p, err = start(filepath.Join(tmp, "gateway.log"), filepath.Join(bin, "gateway"), "serve", "-config", cfgPath)
	if err != nil {
		return err
	}
	procs = append(procs, p)
	targets := []target{{"direct", "http://" + echoAddr + "/mcp"}, {"gateway-20x100", "http://" + gwAddr + "/mcp"}}
	for _, t := range targets {
		if err := waitUp(t.url, 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", t.name, err, tmp)
		}
	}
	// The gateway answers before its upstreams are connected; wait for the whole catalog.
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := load(filepath.Join(bin, "mcpload"), targets[1].url, 1, "-method", "tools/list", "-min-tools", "100", "-calls", "1")
		if err == nil && sum(res.Errors) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway never listed 100 tools (logs in %s)", tmp)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("tools/list, first page (100 tools): gateway over 20 upstreams × 100 tools vs one 100-tool upstream directly\n\n")
	for n := range strings.SplitSeq(concurrency, ",") {
		nn, _ := strconv.Atoi(strings.TrimSpace(n))
		samples := map[string][]result{}
		for r := range rounds {
			order := slices.Clone(targets)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				res, err := load(filepath.Join(bin, "mcpload"), t.url, nn, "-method", "tools/list", "-min-tools", "100", "-duration", duration.String(), "-warmup", warmup.String())
				if err != nil {
					return fmt.Errorf("%s n=%d: %w", t.name, nn, err)
				}
				if sum(res.Errors) > 0 {
					return fmt.Errorf("%s n=%d: errors %v", t.name, nn, res.Errors)
				}
				samples[t.name] = append(samples[t.name], res)
			}
		}
		report(nn, targets, samples)
	}
	return nil
}

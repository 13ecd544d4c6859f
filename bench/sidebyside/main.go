// Command sidebyside measures what the gateway costs: in one run it alternates, for several
// rounds, the load tool against the fast echo upstream's own HTTP face (direct) and against
// the gateway in front of the same upstream over stdio (with authentication off, and on:
// gateway-auth, a JWT of a local issuer verified on every request; gateway-policy, a rule set
// and rate limits deciding every call; gateway-plugin, one policy plugin asked about every
// call; gateway-metrics, Prometheus metrics recorded for every call; and gateway-observed,
// metrics and an OpenTelemetry trace of every call, exported to a local receiver), over
// Streamable HTTP, and as `gateway stdio` (gateway-stdio-face: the load tool starts it, as a
// desktop host does, and drives one session over its stdin and stdout), at each concurrency
// asked for; then it checks a high
// concurrency for errors only. Every gateway serves both MCP revisions: gateway-stdio-2026
// and gateway-redis-2026 call gateway-stdio and gateway-redis in 2026-07-28, statelessly,
// beside the other targets' 2025-11-25 sessions, and are compared with them. It prints the medians and
// the ratios gateway/direct, which stay meaningful on a shared, noisy machine where absolute
// figures do not; with -page it also writes them, with the date, commit, machine and flags,
// to a Markdown page. bench/run builds the binaries and calls it.
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
	"os/signal"
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
	// url is the target's MCP endpoint; stdio, when set instead, is the command line of a
	// stdio server the load tool starts and drives over one pipe.
	url, stdio string
	// floor names the two direct targets whose hops this one adds up (client → gateway over
	// HTTP, gateway → upstream), nil for a direct target: its floor is what it cannot beat.
	floor []string
	// versus names another target this one is also compared with, by the ratios of their
	// medians (what a proxy or a second replica adds); empty for none.
	versus string
	// bearer is a token the load tool sends on every request (through its environment, not
	// its command line); empty for none.
	bearer string
	// protocol is the MCP revision the load tool speaks to it: empty for 2025-11-25 (a
	// session per worker), protocolModern for 2026-07-28 (no session, every request alone).
	protocol string
}

// protocolModern is the MCP revision served statelessly, as the load tool's -protocol names it.
const protocolModern = "2026-07-28"

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
	redisAddr := flag.String("redis", "127.0.0.1:6379", "a Redis to compare the gateway with its session store there (gateway-redis), the same behind a round-robin proxy of this command's (gateway-redis-proxied), and two replicas sharing it behind that proxy, every session alternating between them (gateway-2replicas); skipped when it does not answer, or when empty")
	lists := flag.Bool("lists", true, "also compare a first-page tools/list over 20 upstreams × 100 tools with one direct 100-tool upstream")
	pluginBench := flag.Bool("plugin-bench", false, "at the end, run go test -bench of a plugin's round trip through the plugin host and bare (from the module root)")
	only := flag.String("only", "", "measure only these targets, comma-separated, and those their ratios need (direct, their floor's hops, the target each is compared with); all when empty")
	page := flag.String("page", "", "write a Markdown page of the run's results to this file (none when empty); written when every measurement ran, even if some calls failed")
	flag.Parse()
	// An interrupted run still stops every process it started: a signal ends the current load
	// and the deferred clean-up runs; a closed stdout is an error, not a silent death.
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stopSignals()
	signal.Ignore(syscall.SIGPIPE)
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		os.Exit(1)
	}
	ns, err := parseConcurrency(*concurrency)
	if err != nil {
		fail(err)
	}
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		fail(err)
	}
	rec := &record{
		started:  time.Now().UTC(),
		commit:   gitCommit(),
		machine:  thisMachine(),
		command:  commandLine(os.Args),
		settings: settings{rounds: *rounds, duration: *duration, warmup: *warmup, ns: ns, errorsN: *errorsN, errorsCalls: *errorsCalls},
	}
	m := measurer{ctx: ctx, mcpload: filepath.Join(absBin, "mcpload"), rounds: *rounds, args: []string{"-duration", duration.String(), "-warmup", warmup.String()}}
	fmt.Printf("side by side: %d rounds of %s per target and concurrency, alternating; echo tool, prefix \"\"\n\n", *rounds, *duration)
	// Failed calls end the run with an error once its measurements are on the page; any
	// other error ends it at once, with no page.
	var callsFailed error
	keepGoing := func(err error) {
		switch {
		case errors.Is(err, errCallsFailed):
			callsFailed = err
		case err != nil:
			fail(err)
		}
	}
	var keep []string
	if *only != "" {
		keep = strings.Split(*only, ",")
	}
	keepGoing(run(absBin, m, ns, *errorsN, *errorsCalls, *other, *otherURL, *redisAddr, keep, rec))
	if *lists && ctx.Err() == nil && callsFailed == nil {
		keepGoing(runLists(absBin, m, ns, rec))
	}
	if *pluginBench && ctx.Err() == nil && callsFailed == nil {
		benches, err := runGoBench(ctx)
		keepGoing(err)
		rec.goBench = benches
	}
	if ctx.Err() != nil {
		fail(ctx.Err())
	}
	if *page != "" {
		keepGoing(writePage(*page, *rec))
	}
	if callsFailed != nil {
		fail(callsFailed)
	}
}

// errCallsFailed reports that the load tool saw calls fail.
var errCallsFailed = errors.New("some calls failed")

func parseConcurrency(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad -n %q: want positive integers separated by commas", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// fleet owns the processes of one comparison and their logs; close stops them all.
type fleet struct {
	dir   string
	procs []*exec.Cmd
	// afterStop runs once every process has stopped: deleting a gateway's keys in Redis
	// while it runs would leave those it writes again (its replica lease).
	afterStop []func()
}

func newFleet() (*fleet, error) {
	dir, err := os.MkdirTemp("", "sidebyside")
	if err != nil {
		return nil, err
	}
	return &fleet{dir: dir}, nil
}

// start runs a process with its output in dir/logName.
func (f *fleet) start(logName, name string, args ...string) error {
	p, err := start(filepath.Join(f.dir, logName), name, args...)
	if err != nil {
		return err
	}
	f.procs = append(f.procs, p)
	return nil
}

// gateway writes a config with the given top-level settings and upstream entries and starts
// a gateway on it.
func (f *fleet) gateway(bin, name, settings, upstreams string) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	cfg := filepath.Join(f.dir, "gateway-"+name+".yaml")
	// Every gateway serves both revisions, as one in production does during the years both
	// eras' clients meet it: the 2025 targets open sessions on it, the -2026 ones do not.
	text := fmt.Sprintf("listen: %s\nlog_level: warn\nmax_sessions: 10000\nmodern_protocol: true\n%supstreams:\n%s", addr, settings, upstreams)
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		return "", err
	}
	if err := f.start("gateway-"+name+".log", filepath.Join(bin, "gateway"), "serve", "-config", cfg); err != nil {
		return "", err
	}
	return "http://" + addr + "/mcp", nil
}

// stdioFace writes the config of a `gateway stdio` in front of upstreams and returns its
// command line, which the load tool starts.
func (f *fleet) stdioFace(bin, upstreams string) (string, error) {
	cfg := filepath.Join(f.dir, "gateway-stdio-face.yaml")
	// Every worker of the load tool shares the face's one session: the session's cap on
	// requests in flight (64 by default, answered with a tool error past it) must hold them
	// all, as the HTTP targets' sessions each hold one worker's.
	if err := os.WriteFile(cfg, []byte("log_level: warn\nmax_calls_per_session: 1024\nupstreams:\n"+upstreams), 0o600); err != nil {
		return "", err
	}
	command := filepath.Join(bin, "gateway") + " stdio -config " + cfg
	if len(strings.Fields(command)) != 4 {
		return "", fmt.Errorf("the stdio face's command line %q must have no spaces in its paths", command)
	}
	return command, nil
}

// waitUp waits for every target to answer initialize.
func (f *fleet) waitUp(targets []target) error {
	for _, t := range targets {
		if t.stdio != "" {
			continue // the load tool starts it
		}
		if err := waitUp(t.url, t.bearer, 60*time.Second); err != nil {
			return fmt.Errorf("%s: %w (logs in %s)", t.name, err, f.dir)
		}
	}
	return nil
}

func (f *fleet) close() {
	for _, p := range f.procs {
		stop(p)
	}
	for _, cleanup := range f.afterStop {
		cleanup()
	}
	os.RemoveAll(f.dir)
}

// measurer runs the load tool against targets in alternating rounds.
type measurer struct {
	ctx     context.Context // ends the runs early on a signal
	mcpload string
	rounds  int
	args    []string // the length of each run
}

// compare measures every target at concurrency n, round after round, alternating the order
// so that no target always runs right after another, prints the report, and returns what it
// measured and whether any call failed.
func (m measurer) compare(targets []target, n int, extra ...string) (comparison, bool, error) {
	samples := map[string][]result{}
	failed := false
	for r := range m.rounds {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			res, err := load(m.ctx, m.mcpload, t, n, append(slices.Clone(m.args), extra...)...)
			if err != nil {
				return comparison{}, failed, fmt.Errorf("%s n=%d: %w", t.name, n, err)
			}
			if sum(res.Errors) > 0 {
				failed = true
				fmt.Printf("  %s n=%d round %d: errors %v\n", t.name, n, r+1, res.Errors)
			}
			samples[t.name] = append(samples[t.name], res)
		}
	}
	c := comparison{n: n, targets: targets, samples: samples}
	c.print()
	return c, failed, nil
}

// run compares the echo tool directly and through the gateway over stdio (authentication
// off and on, and with a policy) and HTTP. It adds what it measures to rec, and returns an
// error wrapping errCallsFailed when all was measured but some calls failed.
// keep, unless nil, names the targets to measure (selectTargets).
func run(bin string, m measurer, ns []int, errorsN, errorsCalls int, other, otherURL, redisAddr string, keep []string, rec *record) error {
	f, err := newFleet()
	if err != nil {
		return err
	}
	defer f.close()
	targets, done, err := f.startTargets(bin, other, otherURL, redisAddr, rec)
	defer done()
	if err != nil {
		return err
	}
	if keep != nil {
		if targets, err = selectTargets(targets, keep); err != nil {
			return err
		}
	}
	if err := f.waitUp(targets); err != nil {
		return err
	}
	return m.measure(targets, ns, errorsN, errorsCalls, rec)
}

// startTargets starts the echo server and the gateways in front of it, and returns the
// targets to measure. done, to call once measuring is over (also after an error), stops
// what the fleet does not: the issuer, the trace receiver, the replicas' accounting.
func (f *fleet) startTargets(bin, other, otherURL, redisAddr string, rec *record) (targets []target, done func(), err error) {
	var closers []func()
	done = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	echo := filepath.Join(bin, "echo-server")
	echoAddr, err := freeAddr()
	if err != nil {
		return nil, done, err
	}
	if err := f.start("echo.log", echo, "-http", echoAddr); err != nil {
		return nil, done, err
	}
	stdioUpstream := fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo)
	gwStdio, err := f.gateway(bin, "stdio", "", stdioUpstream)
	if err != nil {
		return nil, done, err
	}
	gwHTTP, err := f.gateway(bin, "http", "", fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    url: http://%s/mcp\n", echoAddr))
	if err != nil {
		return nil, done, err
	}
	stdioFloor, httpFloor := []string{"direct", "direct-stdio"}, []string{"direct", "direct"}
	gwAuth, closeIssuer, err := f.authGateway(bin, echo, stdioFloor)
	if err != nil {
		return nil, done, err
	}
	closers = append(closers, closeIssuer)
	gwPolicy, err := f.policyGateway(bin, echo, stdioFloor)
	if err != nil {
		return nil, done, err
	}
	gwPlugin, err := f.pluginGateway(bin, echo, stdioFloor)
	if err != nil {
		return nil, done, err
	}
	// gateway-stdio with metrics recorded (served on a listener of their own, not scraped).
	gwMetrics, err := f.gateway(bin, "metrics", "metrics: {listen: 127.0.0.1:0}\n", stdioUpstream)
	if err != nil {
		return nil, done, err
	}
	// gateway-stdio with metrics recorded and every request traced to a local receiver.
	gwObserved, closeReceiver, err := f.observedGateway(bin, echo, stdioFloor)
	if err != nil {
		return nil, done, err
	}
	closers = append(closers, closeReceiver)
	face, err := f.stdioFace(bin, stdioUpstream)
	if err != nil {
		return nil, done, err
	}
	targets = []target{
		{name: "direct", url: "http://" + echoAddr + "/mcp"},
		{name: "direct-stdio", stdio: echo},
		{name: "gateway-stdio", url: gwStdio, floor: stdioFloor},
		{name: "gateway-stdio-2026", url: gwStdio, floor: stdioFloor, versus: "gateway-stdio", protocol: protocolModern},
		gwAuth,
		gwPolicy,
		gwPlugin,
		{name: "gateway-metrics", url: gwMetrics, floor: stdioFloor, versus: "gateway-stdio"},
		gwObserved,
		{name: "gateway-http", url: gwHTTP, floor: httpFloor},
		// Client → gateway over stdio, gateway → upstream over stdio.
		{name: "gateway-stdio-face", stdio: face, floor: []string{"direct-stdio", "direct-stdio"}, versus: "gateway-stdio"},
	}
	if other != "" {
		fields := strings.Fields(other)
		if err := f.start("other.log", fields[0], fields[1:]...); err != nil {
			return nil, done, err
		}
		targets = append(targets, target{name: "other-proxy", url: otherURL, floor: stdioFloor})
	}
	if redisAddr == "" {
		return targets, done, nil
	}
	gwRedis, rtt, err := f.redisGateway(bin, echo, redisAddr)
	if err != nil {
		fmt.Printf("no Redis store compared: %v\n\n", err)
		rec.redis = fmt.Sprintf("not compared: %v", err)
		return targets, done, nil
	}
	ping := fmt.Sprintf("PING round trip p50 %d µs (1000 PINGs on one connection)", rtt.Microseconds())
	fmt.Printf("Redis at %s: %s\n\n", redisAddr, ping)
	rec.redis = redisAddr + ", " + ping
	targets = append(targets,
		target{name: "gateway-redis", url: gwRedis, floor: stdioFloor},
		target{name: "gateway-redis-2026", url: gwRedis, floor: stdioFloor, versus: "gateway-redis", protocol: protocolModern})
	more, closeReplicas, err := f.replicaTargets(bin, echo, redisAddr, gwRedis, stdioFloor)
	if err != nil {
		return nil, done, err
	}
	closers = append(closers, func() { rec.replicaRequests = closeReplicas() })
	return append(targets, more...), done, nil
}

// measure compares targets at each number of sessions in ns, then, when errorsN > 0, runs
// errorsN sessions of errorsCalls calls against each to count errors; what it finds goes to
// rec. It returns errCallsFailed when some calls failed.
func (m measurer) measure(targets []target, ns []int, errorsN, errorsCalls int, rec *record) error {
	failed := false
	for _, n := range ns {
		if m.ctx.Err() != nil {
			return m.ctx.Err()
		}
		c, bad, err := m.compare(targets, n)
		if err != nil {
			return err
		}
		rec.calls = append(rec.calls, c)
		failed = failed || bad
	}
	for _, t := range targets {
		if errorsN <= 0 {
			break
		}
		res, err := load(m.ctx, m.mcpload, t, errorsN, "-calls", strconv.Itoa(errorsCalls))
		if err != nil {
			return fmt.Errorf("%s n=%d: %w", t.name, errorsN, err)
		}
		fmt.Printf("errors at n=%d, %d calls per session: %-*s %d errors of %d calls %v\n", errorsN, errorsCalls, nameWidth(targets), t.name, sum(res.Errors), res.Calls+sum(res.Errors), res.Errors)
		rec.errorChecks = append(rec.errorChecks, errorCheck{target: t.name, n: errorsN, callsPerSession: errorsCalls, res: res})
		failed = failed || sum(res.Errors) > 0
	}
	if failed {
		return errCallsFailed
	}
	return nil
}

// selectTargets returns the targets named in keep and those their ratios need: direct, the
// hops of their floor and the target each is compared with, in the order of targets. A name
// that is no target is an error.
func selectTargets(targets []target, keep []string) ([]target, error) {
	byName := map[string]target{}
	for _, t := range targets {
		byName[t.name] = t
	}
	need := map[string]bool{"direct": true}
	for _, name := range keep {
		t, ok := byName[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-only: no target %q in this run", name)
		}
		need[t.name] = true
		for _, hop := range t.floor {
			need[hop] = true
		}
		if t.versus != "" {
			need[t.versus] = true
			for _, hop := range byName[t.versus].floor {
				need[hop] = true
			}
		}
	}
	return slices.DeleteFunc(slices.Clone(targets), func(t target) bool { return !need[t.name] }), nil
}

// runLists compares the first page of tools/list: the gateway merging 20 stdio upstreams of
// 100 tools each (served from its catalog, no upstream round trip) against one 100-tool
// upstream asked directly over HTTP. It adds what it measures to rec, and returns an error
// wrapping errCallsFailed when all was measured but some calls failed.
func runLists(bin string, m measurer, ns []int, rec *record) error {
	f, err := newFleet()
	if err != nil {
		return err
	}
	defer f.close()
	echo := filepath.Join(bin, "echo-server")
	echoAddr, err := freeAddr()
	if err != nil {
		return err
	}
	if err := f.start("echo.log", echo, "-http", echoAddr, "-tools", "99"); err != nil {
		return err
	}
	var ups strings.Builder
	for i := range 20 {
		fmt.Fprintf(&ups, "  - name: up%02d\n    command: %q\n    args: [-tools, \"99\"]\n", i, echo)
	}
	gw, err := f.gateway(bin, "20x100", "", ups.String())
	if err != nil {
		return err
	}
	targets := []target{{name: "direct", url: "http://" + echoAddr + "/mcp"}, {name: "gateway-20x100", url: gw}}
	if err := f.waitUp(targets); err != nil {
		return err
	}
	// The gateway answers before its upstreams are connected; wait for the whole catalog.
	list := []string{"-method", "tools/list", "-min-tools", "100"}
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := load(m.ctx, m.mcpload, targets[1], 1, append(slices.Clone(list), "-calls", "1")...)
		if err == nil && sum(res.Errors) == 0 {
			break
		}
		if m.ctx.Err() != nil {
			return m.ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway never listed 100 tools (logs in %s)", f.dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("tools/list, first page (100 tools): gateway over 20 upstreams × 100 tools vs one 100-tool upstream directly\n\n")
	for _, n := range ns {
		if m.ctx.Err() != nil {
			return m.ctx.Err()
		}
		c, failed, err := m.compare(targets, n, list...)
		if err != nil {
			return err
		}
		rec.lists = append(rec.lists, c)
		if failed {
			return fmt.Errorf("tools/list: %w", errCallsFailed)
		}
	}
	return nil
}

func load(ctx context.Context, mcpload string, t target, n int, args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	endpoint := []string{"-url", t.url}
	if t.stdio != "" {
		endpoint = []string{"-stdio", t.stdio}
	}
	if t.protocol != "" {
		endpoint = append(endpoint, "-protocol", t.protocol)
	}
	cmd := exec.CommandContext(ctx, mcpload, append(append(endpoint, "-n", strconv.Itoa(n), "-json"), args...)...)
	// The token goes through the environment, never the command line; a target without one
	// gets none, whatever this process's environment holds.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envBearer+"=") })
	if t.bearer != "" {
		cmd.Env = append(cmd.Env, envBearer+"="+t.bearer)
	}
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

// envBearer is the variable the load tool reads a bearer token from.
const envBearer = "MCPLOAD_BEARER"

// waitUp waits until url answers an initialize POST, sent with bearer as the
// Authorization unless bearer is "".
func waitUp(url, bearer string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sidebyside","version":"1"}}}`
	for {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("initialize answered %s", resp.Status)
			if resp.StatusCode == http.StatusOK {
				if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
					del, _ := http.NewRequest(http.MethodDelete, url, nil)
					del.Header.Set("Mcp-Session-Id", sid)
					if bearer != "" {
						del.Header.Set("Authorization", "Bearer "+bearer)
					}
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

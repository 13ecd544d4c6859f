// Command gateway runs Manifold, a multiplexing gateway for the Model Context Protocol: one
// MCP server face for clients over Streamable HTTP, one client connection to each upstream
// server. It only wires: flags, config, components, signals and drain.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/demo"
	"github.com/manifold-mcp/manifold/internal/demo/issuer"
	"github.com/manifold-mcp/manifold/internal/heapfloor"
	"github.com/manifold-mcp/manifold/internal/loglimit"
	"github.com/manifold-mcp/manifold/internal/tracing"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// answerGrace bounds the writing of the last answers once the drain is over; then the
// connections are closed.
const answerGrace = 5 * time.Second

// heapFloor is the heap size under which the garbage collector waits (see package heapfloor).
const heapFloor = 64 << 20

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText())
		return 2
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usageText())
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usageText())
	return 2
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// configArgs are the files that -config and -mcp-servers name.
type configArgs struct {
	command string // the subcommand, for messages
	path    string
	imports listFlag
}

// declareConfigFlags declares -config and -mcp-servers on fs.
func declareConfigFlags(fs *flag.FlagSet) *configArgs {
	a := &configArgs{command: fs.Name()}
	fs.StringVar(&a.path, "config", "", "path of the YAML config file")
	fs.Var(&a.imports, "mcp-servers", "a Claude Desktop, Cursor or VS Code server list to import (repeatable)")
	return a
}

// files names every file given, the config file first.
func (a *configArgs) files() []string {
	var files []string
	if a.path != "" {
		files = append(files, a.path)
	}
	return append(files, a.imports...)
}

// build loads what the flags name; code 2 with an error means none was given.
func (a *configArgs) build() (cfg *config.Config, code int, err error) {
	if a.path == "" && len(a.imports) == 0 {
		return nil, 2, fmt.Errorf("gateway %s: -config FILE (or -mcp-servers FILE) is required", a.command)
	}
	cfg, err = config.Build(a.path, a.imports, os.LookupEnv)
	if err != nil {
		return nil, 1, err
	}
	return cfg, 0, nil
}

// configFlags declares -config and -mcp-servers on fs; the function it returns loads what
// they name, reporting every problem of every file at once.
func configFlags(fs *flag.FlagSet) func(stderr io.Writer) (*config.Config, int) {
	args := declareConfigFlags(fs)
	return func(stderr io.Writer) (*config.Config, int) {
		cfg, code, err := args.build()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return nil, code
		}
		return cfg, 0
	}
}

// parse parses a subcommand's flags; ok=false means the caller returns code.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gateway %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// validate prints every problem of the files given at once: those of their content, and
// those of the programs they name (stdio commands, plugins), which are checked on whatever
// could be decoded even when the content has problems of its own.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	files := declareConfigFlags(fs)
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, code, err := files.build()
	var problems *config.Error
	switch {
	case errors.As(err, &problems):
		fmt.Fprintln(stderr, err)
		cfg = problems.Partial
	case err != nil:
		fmt.Fprintln(stderr, err)
		return code
	}
	var errs, warnings []string
	if cfg != nil {
		errs, warnings = checkCommands(cfg, exec.LookPath)
		warnings = append(warnings, config.PolicyWarnings(cfg)...)
		errs = append(errs, checkPlugins(cfg)...)
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, e := range errs {
		fmt.Fprintln(stderr, e)
	}
	if problems != nil || len(errs) > 0 {
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d upstreams enabled)\n", strings.Join(files.files(), ", "), len(cfg.EnabledUpstreams()))
	return 0
}

// checkPlugins looks at the policy plugins' programs as the gateway would start them: one
// that does not exist, is not an executable file, or whose SHA-256 is not the configured one
// is an error, starting with the FILE:LINE of the plugin's entry.
func checkPlugins(cfg *config.Config) (errs []string) {
	for i, p := range cfg.Plugins {
		if p.Path == "" {
			continue // a problem of the config, reported with it
		}
		at := fmt.Sprintf("%s:%d: %s (plugins[%d])", cfg.File, p.Line, p.Name, i)
		data, err := os.ReadFile(p.Path)
		switch info, statErr := os.Stat(p.Path); {
		case statErr != nil:
			errs = append(errs, fmt.Sprintf("%s.path: %s does not exist: build the plugin there, or fix the path (a relative one is taken from the config file's directory)", at, p.Path))
			continue
		case info.IsDir():
			errs = append(errs, fmt.Sprintf("%s.path: %s is a directory, not a program", at, p.Path))
			continue
		case info.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Sprintf("%s.path: %s is not executable: chmod +x it", at, p.Path))
			continue
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s.path: %v", at, err))
			continue
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != p.SHA256 {
			errs = append(errs, fmt.Sprintf("%s.sha256: the program at %s has SHA-256 %s, not %s: if you built it yourself, put its sha256sum here; otherwise do not run it", at, p.Path, got, p.SHA256))
		}
	}
	return errs
}

// checkCommands looks at the commands of the enabled stdio upstreams as this machine would
// start them: a path (one with a slash) that does not exist or is not an executable file is an
// error; a bare name that lookPath does not find on the gateway's PATH is a warning (the child
// may be given another PATH in its env). Each message starts with the FILE:LINE of the
// upstream's entry.
func checkCommands(cfg *config.Config, lookPath func(string) (string, error)) (errs, warnings []string) {
	for i, u := range cfg.EnabledUpstreams() {
		if u.Command == "" || u.Command == config.SelfCommand {
			continue // "@self" is this program, whose args validation checked
		}
		at := fmt.Sprintf("%s:%d: %s (upstreams[%d]).command", u.File, u.Line, u.Name, i)
		if !strings.Contains(u.Command, "/") {
			if _, err := lookPath(u.Command); err != nil {
				warnings = append(warnings, fmt.Sprintf("%s: %q is not on the gateway's PATH: install it, give its full path, or set PATH in the upstream's env", at, u.Command))
			}
			continue
		}
		info, err := os.Stat(u.Command)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %s does not exist: fix the path (a relative one is taken from the config file's directory)", at, u.Command))
		case info.IsDir():
			errs = append(errs, fmt.Sprintf("%s: %s is a directory, not a program", at, u.Command))
		case info.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Sprintf("%s: %s is not executable: chmod +x it", at, u.Command))
		}
	}
	return errs, warnings
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	files := declareConfigFlags(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file (for benchmarks)")
	listen := fs.String("listen", "", "address to listen on, `host:port` (overrides listen in the config)")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if *listen != "" {
		if _, _, err := net.SplitHostPort(*listen); err != nil {
			fmt.Fprintf(stderr, "gateway serve: -listen %q: want host:port, like 127.0.0.1:8080 or 0.0.0.0:8080\n", *listen)
			return 2
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "cpuprofile:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "cpuprofile:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	cfg, code, err := files.build()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return code
	}
	if err := listenOverride(cfg, *listen); err != nil {
		fmt.Fprintf(stderr, "gateway serve: %v\n", err)
		return 1
	}
	logger, level := reloadableLogger(cfg, stderr)
	signals, reloads, stopSignals := watchSignals(files, *listen, level)
	defer stopSignals()
	if err := serveUntilDone(signals, cfg, logger, reloads); err != nil {
		logger.Error("gateway stopped", "error", err.Error())
		return 1
	}
	return 0
}

// newLogger is the gateway's logger as cfg sets it: log_level, log_format (text or JSON,
// with the same fields), and with tracing on, the trace_id and span_id of the request a line
// is logged for.
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.LogFormat == config.LogFormatJSON {
		h = slog.NewJSONHandler(w, opts)
	}
	if cfg.Tracing.Endpoint != "" {
		h = tracing.LogHandler(h)
	}
	return slog.New(h)
}

// openTracer builds the tracer cfg's tracing names; nil when tracing is off.
func openTracer(cfg *config.Config) (*tracing.Tracer, error) {
	t := cfg.Tracing
	return tracing.New(&tracing.Options{Endpoint: t.Endpoint, Headers: t.Headers, SampleRatio: t.SampleRatio, ServiceName: t.ServiceName, ServiceVersion: version})
}

// openGateway builds the gateway cfg describes, with what it needs around it: the heap floor,
// the audit trail, the tracer, the metrics and the state backends. closeAll closes the gateway,
// then what is around it, the last records and spans written; it may be called more than once.
func openGateway(cfg *config.Config, logger *slog.Logger, reloads *reloader) (gw *gateway.Gateway, closeAll func(), err error) {
	var closers []func() // run last first
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		closers = nil
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// The gateway's live heap is small: without a floor the collector would run dozens of
		// times a second under load. An operator who sets GOGC or GOMEMLIMIT decides instead.
		closers = append(closers, heapfloor.Keep(heapFloor).Stop)
	}
	tracer, err := openTracer(cfg)
	if err != nil {
		return nil, nil, err
	}
	// Runs after gw.Close and the backends' close: the spans of the last requests are
	// exported, within a bound.
	closers = append(closers, func() {
		if err := tracer.Shutdown(context.Background()); err != nil {
			logger.Warn("exporting the last spans failed", "error", err.Error())
		}
	})
	metrics := gateway.NewMetrics(cfg, logger) // nil when off
	backends, err := openBackends(cfg, logger, tracer, gateway.RedisObserver(metrics))
	if err != nil {
		return nil, nil, err
	}
	// Runs after gw.Close: the gateway's last writes reach the store.
	closers = append(closers, func() { backends.Close() })
	// The gateway opens the audit trail, and the one each reload that changes it asks for; it
	// closes them, the last at Close, once the last records are written.
	openTrail := func(cfg *config.Config) (*audit.Log, func(), error) { return openAudit(cfg, logger) }
	opts := &gateway.Options{Logger: logger, Version: version, OpenAudit: openTrail, Backends: backends, Tracer: tracer, Metrics: metrics}
	if reloads != nil {
		opts.ReadConfig, opts.LogLevel = reloads.read, reloads.level
	}
	if gw, err = gateway.New(cfg, opts); err != nil {
		return nil, nil, err
	}
	closers = append(closers, func() { gw.Close() })
	return gw, closeAll, nil
}

// serveUntilDone runs the gateway until the first signal, then drains while it still listens:
// /readyz answers 503, new sessions and requests are refused, requests in flight get the
// drain_timeout to finish. When they have, when that time is over or at a second signal,
// the requests still running are answered with an error, the listener closes and the
// upstreams are stopped (their processes reaped).
//
// With reloads, SIGHUP and a change of the configuration's files reload it (reload.go).
func serveUntilDone(signals <-chan os.Signal, cfg *config.Config, logger *slog.Logger, reloads *reloader) error {
	gw, closeAll, err := openGateway(cfg, logger, reloads)
	if err != nil {
		return err
	}
	defer closeAll()
	if reloads != nil {
		// Runs before gw.Close: no reload begins once the gateway closes.
		defer reloads.run(gw, cfg, logger)()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (listen in %s): %w", cfg.Listen, cfg.File, err)
	}
	srv := gw.Server()
	// Standalone streams end at shutdown, so that Shutdown waits only for requests in flight.
	srv.RegisterOnShutdown(gw.Drain)
	gw.Start()
	logger.Info("manifold listening", "url", endpointURL(ln.Addr()), "listen", ln.Addr().String(), "upstreams", len(cfg.EnabledUpstreams()), "version", version)
	loopback := strings.HasPrefix(ln.Addr().String(), "127.") || strings.HasPrefix(ln.Addr().String(), "[::1]")
	switch {
	case cfg.Auth.Enabled():
		logger.Info("authentication on: every request needs a bearer token or an API key", "resource", cfg.Auth.Resource, "issuers", len(cfg.Auth.OIDC), "api_keys", len(cfg.Auth.APIKeys), "api_keys_file", cfg.Auth.APIKeysFile)
	case loopback:
		logger.Info("authentication off: clients are anonymous, and the gateway serves this machine only (configure auth to serve beyond loopback)")
	default:
		logger.Warn("authentication off beyond loopback (auth.allow_unauthenticated): anyone who can reach the gateway may use its upstreams; protect it with a network policy or a proxy in front", "listen", cfg.Listen)
	}
	if cfg.Audit.Arguments && cfg.Audit.SkipRedactDefaults {
		logger.Warn(gateway.KeepsSecretsWarning)
	}
	for _, u := range cfg.EnabledUpstreams() {
		if u.InheritAllEnv {
			logger.Warn("a stdio upstream inherits the gateway's whole environment (inherit_env: all): every secret in it is readable through that server", "upstream", u.Name)
		}
	}

	adminSrv, err := serveAdmin(gw, cfg, logger)
	if err != nil {
		return err
	}
	if adminSrv != nil {
		// The admin listener stops first: a decision taken while the gateway drains would
		// find its call ended anyway.
		defer adminSrv.Close()
	}
	metricsSrv, err := serveMetrics(gw, cfg, logger)
	if err != nil {
		return err
	}
	if metricsSrv != nil {
		defer metricsSrv.Close()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case sig := <-signals:
		logger.Info("draining: new sessions and requests are refused, requests in flight may finish; a second signal stops at once",
			"signal", sig.String(), "drain_timeout", cfg.DrainTimeout.String())
	}
	began := time.Now()
	gw.Drain()
	awaitRequests(gw, gw.Idle(), cfg, logger, signals)
	// The handlers write those answers; then the listener and the idle connections close.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), answerGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	err = <-served
	gw.Close()
	logger.Info("gateway stopped", "drain", time.Since(began).Round(time.Millisecond).String())
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// awaitRequests waits until idle is closed (the requests in flight have ended), the
// drain_timeout is over or a signal comes; then gw drains, and answers those still running
// with an error.
func awaitRequests(gw *gateway.Gateway, idle <-chan struct{}, cfg *config.Config, logger *slog.Logger, signals <-chan os.Signal) {
	drainOver := time.NewTimer(cfg.DrainTimeout)
	defer drainOver.Stop()
	select {
	case <-idle:
	case <-drainOver.C:
		logger.Warn("the drain time is over: requests still running are answered with an error", "drain_timeout", cfg.DrainTimeout.String())
	case sig := <-signals:
		logger.Warn("second signal: the drain ends now; requests still running are answered with an error", "signal", sig.String())
	}
	gw.Drain()
	gw.EndRequests()
}

// openBackends opens the state backends cfg's session_store names. Their warnings (a record
// that cannot be read, the bus's trouble) reach logger at most once a second per message.
func openBackends(cfg *config.Config, logger *slog.Logger, tracer *tracing.Tracer, observeRedis func(time.Duration, bool)) (*backend.Set, error) {
	limited := slog.New(loglimit.NewHandler(logger.Handler(), time.Second, time.Now))
	return backend.OpenInstrumented(cfg, time.Now, limited, backend.Instruments{Trace: tracer.RedisHook(), Observe: observeRedis})
}

// serveMetrics starts the metrics listener (metrics.listen), if there is one; closing the
// server it returns stops it. Metrics on the admin listener are served by serveAdmin.
func serveMetrics(gw *gateway.Gateway, cfg *config.Config, logger *slog.Logger) (*http.Server, error) {
	h := gw.MetricsHandler()
	if h == nil || cfg.Metrics.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (metrics.listen in %s): %w", cfg.Metrics.Listen, cfg.File, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("the metrics listener stopped", "error", err.Error())
		}
	}()
	if !strings.HasPrefix(ln.Addr().String(), "127.") && !strings.HasPrefix(ln.Addr().String(), "[::1]") {
		logger.Warn("the metrics listener asks for no credential and is reachable beyond loopback: expose it only to the scraper's network", "listen", cfg.Metrics.Listen)
	}
	logger.Info("metrics listening", "url", "http://"+ln.Addr().String()+"/metrics")
	return srv, nil
}

// serveAdmin starts the admin listener (config key `admin`), if there is one; closing the
// server it returns stops it.
func serveAdmin(gw *gateway.Gateway, cfg *config.Config, logger *slog.Logger) (*http.Server, error) {
	h, err := gw.AdminHandler()
	if err != nil || h == nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (admin.listen in %s): %w", cfg.Admin.Listen, cfg.File, err)
	}
	srv := gw.AdminServer(h)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("the admin listener stopped", "error", err.Error())
		}
	}()
	logger.Info("admin API and page listening", "url", "http://"+ln.Addr().String()+"/")
	return srv, nil
}

// serveDemo serves the demo MCP server over stdin and stdout: the example config starts it as
// its upstream with command "@self", this very program, so it starts at once.
//
// With -issuer it serves the demo OpenID Connect issuer instead (package issuer), on
// loopback only, until SIGINT or SIGTERM.
func serveDemo(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	name := fs.String("name", "demo", "server name reported in serverInfo")
	issuerAddr := fs.String("issuer", "", "serve the demo OIDC issuer on this loopback `host:port` (like 127.0.0.1:8090) instead of the MCP server")
	audience := fs.String("audience", "", "with -issuer: the aud of tokens whose request names no resource (default http://127.0.0.1:8080/mcp)")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *issuerAddr != "" {
		if err := serveIssuer(ctx, *issuerAddr, *audience, stderr); err != nil {
			fmt.Fprintln(stderr, "gateway demo:", err)
			return 1
		}
		return 0
	}
	if err := demo.Serve(ctx, *name); err != nil {
		fmt.Fprintln(stderr, "gateway demo:", err)
		return 1
	}
	return 0
}

// serveIssuer serves the demo issuer on addr, which must be a loopback address, until ctx ends.
func serveIssuer(ctx context.Context, addr, audience string, stderr io.Writer) error {
	if err := issuer.CheckLoopback(addr); err != nil {
		return fmt.Errorf("-issuer %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-issuer: %w", err)
	}
	iss, err := issuer.New("http://"+ln.Addr().String(), &issuer.Options{Audience: audience})
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: iss.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	logger.Info("demo OIDC issuer listening: every request gets a token for the demo user, on this machine only",
		"issuer", iss.URL(), "subject", issuer.Subject)
	select {
	case err := <-served:
		return fmt.Errorf("serve the issuer: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), answerGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the issuer: %w", err)
	}
	return nil
}

// endpointURL is the MCP endpoint's URL a user on this machine can open: for a listener on all
// interfaces (0.0.0.0, ::) it names loopback, not the unspecified address.
func endpointURL(addr net.Addr) string { return listenURL(addr.String()) + "/mcp" }

// openAudit opens the audit trail the config names; nil when it is off. The func it returns
// drains and closes it.
func openAudit(cfg *config.Config, logger *slog.Logger) (*audit.Log, func(), error) {
	w, err := audit.OpenSink(cfg.Audit.Sink, cfg.Audit.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("audit (in %s): %w", cfg.File, err)
	}
	if w == nil {
		return nil, func() {}, nil
	}
	trail := audit.New(w, &audit.Options{Buffer: cfg.Audit.Buffer, Logger: logger})
	return trail, func() {
		if err := trail.Close(); err != nil {
			logger.Warn("closing the audit trail", "error", err.Error())
		}
		_ = w.Close()
	}, nil
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// newAPIKey makes an API key for a service account: the key for the service, and the entry
// of auth.api_keys that holds its hash (the gateway never stores the key itself).
func newAPIKey(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apikey", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the service account's name (the principal policy and the audit trail see)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *name == "" {
		fmt.Fprintln(stderr, "gateway apikey: -name NAME is required")
		return 2
	}
	key, hash, err := auth.NewAPIKey()
	if err != nil {
		fmt.Fprintf(stderr, "gateway apikey: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "key (give it to the service; it is shown once): %s\n\nconfig entry:\nauth:\n  api_keys:\n    - name: %s\n      hash: %s\n", key, *name, hash)
	return 0
}

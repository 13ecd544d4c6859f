// Command gateway runs Manifold, a multiplexing gateway for the Model Context Protocol: one
// MCP server face for clients over Streamable HTTP, one client connection to each upstream
// server.
//
//	gateway serve -config FILE      run the gateway
//	gateway validate -config FILE   check a config file and print every problem
//	gateway version                 print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/gateway"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// shutdownGrace bounds the graceful part of shutdown; then connections are closed.
const shutdownGrace = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  gateway serve -config FILE      run the gateway
  gateway validate -config FILE   check a config file and print every problem
  gateway version                 print the version
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "validate":
		return validate(args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "manifold", version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return 2
}

// loadConfig parses the -config flag of a subcommand and loads the file.
func loadConfig(name string, args []string, stderr io.Writer) (*config.Config, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "path of the YAML config file")
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if *path == "" {
		fmt.Fprintf(stderr, "gateway %s: -config FILE is required\n", name)
		return nil, 2
	}
	cfg, err := config.Load(*path, os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, 1
	}
	return cfg, 0
}

func validate(args []string, stdout, stderr io.Writer) int {
	cfg, code := loadConfig("validate", args, stderr)
	if cfg == nil {
		return code
	}
	fmt.Fprintf(stdout, "%s: ok (%d upstreams enabled)\n", cfg.File, len(cfg.EnabledUpstreams()))
	return 0
}

func serve(args []string, stderr io.Writer) int {
	cfg, code := loadConfig("serve", args, stderr)
	if cfg == nil {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(cfg.LogLevel)}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveUntilDone(ctx, cfg, logger); err != nil {
		logger.Error("gateway stopped", "error", err.Error())
		return 1
	}
	return 0
}

// serveUntilDone runs the gateway until ctx ends, then drains: new requests are refused,
// streams close, in-flight requests get shutdownGrace to finish, upstreams are stopped.
func serveUntilDone(ctx context.Context, cfg *config.Config, logger *slog.Logger) error {
	gw, err := gateway.New(cfg, &gateway.Options{Logger: logger, Version: version})
	if err != nil {
		return err
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (listen in %s): %w", cfg.Listen, cfg.File, err)
	}
	srv := &http.Server{
		Handler:           gw.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	// Standalone streams end at shutdown, so that Shutdown waits only for requests in flight.
	srv.RegisterOnShutdown(gw.Drain)
	gw.Start()
	logger.Info("manifold listening", "url", "http://"+ln.Addr().String()+"/mcp", "upstreams", len(cfg.EnabledUpstreams()), "version", version)
	if !strings.HasPrefix(ln.Addr().String(), "127.") && !strings.HasPrefix(ln.Addr().String(), "[::1]") {
		logger.Warn("the gateway listens beyond loopback without authentication: protect it (network policy or a proxy in front)", "listen", cfg.Listen)
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

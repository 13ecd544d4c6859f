package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
)

// serveStdio serves one MCP client over stdin and stdout, as a desktop host starts its servers:
// stdout carries the protocol only, the logs go to stderr (or -log FILE). The MCP listener is
// not opened, nor the metrics listener, nor the admin listener unless -admin asks for it: the
// host may start several such gateways on one config. The end of stdin, or a signal, drains
// the gateway and stops its upstreams.
func serveStdio(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stdio", flag.ContinueOnError)
	files := declareConfigFlags(fs)
	principal := fs.String("principal", "", "the local user's name, which policy rules match as a subject (default: the OS user's name)")
	profile := fs.String("profile", "", "serve this profile's catalog, as the endpoint /mcp/NAME does (default: the whole catalog)")
	logFile := fs.String("log", "", "append the logs to this file instead of stderr")
	admin := fs.Bool("admin", false, "open the admin listener the config names (off by default: several gateways may share a config)")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, code, err := files.build()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return code
	}
	if cfg.Audit.Sink == config.AuditSinkStdout {
		fmt.Fprintf(stderr, "gateway stdio: audit.sink stdout (in %s) would mix audit records into the protocol on stdout: use sink: file with a path\n", cfg.File)
		return 1
	}
	logs := stderr
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "gateway stdio: -log: %v\n", err)
			return 1
		}
		defer f.Close()
		logs = f
	}
	if *principal == "" {
		*principal = localUser()
	}
	logger, level := reloadableLogger(cfg, logs)
	// As under serve, SIGHUP and a change of the files reload the configuration; one that
	// would write audit records to stdout is refused as at start.
	signals, reloads, stopSignals := watchSignals(files, "", level)
	defer stopSignals()
	read := reloads.read
	reloads.read = func() (*config.Config, error) {
		next, err := read()
		if err == nil && next.Audit.Sink == config.AuditSinkStdout {
			return nil, fmt.Errorf("audit.sink stdout (in %s) would mix audit records into the protocol on stdout: use sink: file with a path", next.File)
		}
		return next, err
	}
	face := stdioFace{in: stdin, out: stdout, principal: *principal, profile: *profile, admin: *admin}
	if err := face.serveUntilDone(signals, cfg, logger, reloads); err != nil {
		logger.Error("gateway stopped", "error", err.Error())
		return 1
	}
	return 0
}

// localUser is the name of the user running the gateway: the OS account's, else $USER, else
// "local".
func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "local"
}

// stdioFace is what `gateway stdio` serves, and to whom.
type stdioFace struct {
	in        io.Reader
	out       io.Writer
	principal string
	profile   string
	admin     bool
}

// serveUntilDone serves the client until stdin ends or the first signal, then drains: the
// client's requests in flight get the drain_timeout to finish and their answers are written. When they have,
// when that time is over or at a second signal, those still running are answered with an
// error, the client's session ends and the upstreams are stopped (their processes reaped).
//
// With reloads, SIGHUP and a change of the configuration's files reload it (reload.go).
func (f stdioFace) serveUntilDone(signals <-chan os.Signal, cfg *config.Config, logger *slog.Logger, reloads *reloader) error {
	if f.profile != "" && !hasProfile(cfg, f.profile) {
		return fmt.Errorf("-profile %s: the config has no such profile", f.profile)
	}
	gw, closeAll, err := openGateway(cfg, logger, reloads)
	if err != nil {
		return err
	}
	defer closeAll()
	// The reloads and the admin listener stop before the gateway closes (below, and on an
	// early return): no reload or operator's decision begins on a gateway closing.
	stopAround := func() {}
	defer func() { stopAround() }()
	if reloads != nil {
		stopReloads := reloads.run(gw, cfg, logger)
		stopAround = stopReloads
	}
	if f.admin {
		adminSrv, err := serveAdmin(gw, cfg, logger)
		if err != nil {
			return err
		}
		if adminSrv != nil {
			stopReloads := stopAround
			stopAround = func() { _ = adminSrv.Close(); stopReloads() }
		}
	}
	stdio := gw.NewStdio(f.in, f.out, &gateway.StdioOptions{Principal: f.principal, Profile: f.profile})
	gw.Start()
	logger.Info("manifold serving one client over stdio", "principal", f.principal, "profile", f.profile, "upstreams", len(cfg.EnabledUpstreams()), "version", version)

	ctx, stop := context.WithCancel(context.Background())
	interrupted := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-signals:
			interrupted <- sig
			stop()
		case <-ctx.Done():
		}
	}()
	err = stdio.Serve(ctx)
	stop()
	began := time.Now()
	select {
	case sig := <-interrupted:
		logger.Info("draining: requests in flight may finish; a second signal stops at once", "signal", sig.String(), "drain_timeout", cfg.DrainTimeout.String())
	default:
		if err != nil {
			logger.Error("reading the client's messages failed: draining", "error", err.Error())
		} else {
			logger.Info("the client closed stdin: draining", "drain_timeout", cfg.DrainTimeout.String())
		}
	}
	// The gateway drains once the client's requests are answered: one it sent just before the
	// end of stdin is served, not refused as one that came during a drain.
	awaitRequests(gw, stdio.Idle(), cfg, logger, signals)
	closeCtx, cancel := context.WithTimeout(context.Background(), answerGrace)
	defer cancel()
	if err := stdio.Close(closeCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("closing the stdio face", "error", err.Error())
	}
	stopAround()
	stopAround = func() {}
	closeAll()
	logger.Info("gateway stopped", "drain", time.Since(began).Round(time.Millisecond).String())
	return nil
}

// hasProfile reports whether cfg defines the profile name.
func hasProfile(cfg *config.Config, name string) bool {
	for _, p := range cfg.Profiles {
		if p.Name == name {
			return true
		}
	}
	return false
}

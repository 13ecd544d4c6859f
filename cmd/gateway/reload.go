package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
)

// configWatchInterval is how often serve looks for a change of the configuration's files.
const configWatchInterval = 2 * time.Second

// reloadTimeout bounds one reload.
const reloadTimeout = time.Minute

// reloader reloads the configuration of a running gateway: at each signal, and when one of
// its files changes (looked at every watch; zero: never). read is what the gateway reads its
// files with (gateway.Options.ReadConfig).
type reloader struct {
	signals <-chan os.Signal
	read    func() (*config.Config, error)
	watch   time.Duration
	// tick, when set, replaces the watch's ticker (tests drive the watch with it).
	tick <-chan time.Time
	// level is the logger's level, which a reload sets to log_level; nil: it stays.
	level *slog.LevelVar
	// files are those the flags name (-config, -mcp-servers), watched with those the
	// configuration names.
	files []string
}

// watchSignals returns the channel of the signals that stop the gateway (SIGINT, SIGTERM),
// and the reloader that SIGHUP and a change of the files given drive (listen overrides the
// configuration's, unless ""); stop stops both watching.
func watchSignals(files *configArgs, listen string, level *slog.LevelVar) (signals chan os.Signal, reloads *reloader, stop func()) {
	signals = make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	reloads = &reloader{signals: hups, read: rereader(files, listen), watch: configWatchInterval, level: level, files: files.files()}
	return signals, reloads, func() {
		signal.Stop(signals)
		signal.Stop(hups)
	}
}

// reloadableLogger is newLogger at a level a reload can change (log_level).
func reloadableLogger(cfg *config.Config, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.LogLevel))
	all := *cfg
	all.LogLevel = slog.LevelDebug.String()
	return slog.New(&levelHandler{Handler: newLogger(&all, w).Handler(), level: level}), level
}

// levelHandler passes what is at level or above to Handler.
type levelHandler struct {
	slog.Handler
	level *slog.LevelVar
}

func (h *levelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level.Level() && h.Handler.Enabled(ctx, l)
}

func (h *levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &levelHandler{Handler: h.Handler.WithAttrs(attrs), level: h.level}
}

func (h *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{Handler: h.Handler.WithGroup(name), level: h.level}
}

// listenOverride applies serve's -listen to cfg ("" leaves it as configured).
func listenOverride(cfg *config.Config, listen string) error {
	if listen == "" {
		return nil
	}
	defaultResource := cfg.BaseURL() + "/mcp"
	cfg.Listen = listen
	resourceSet := cfg.Auth.Resource != defaultResource
	if !resourceSet {
		cfg.Auth.Resource = cfg.BaseURL() + "/mcp"
	}
	if msg := config.CheckExposure(cfg, resourceSet); msg != "" {
		return fmt.Errorf("-listen %q: %s", listen, msg)
	}
	return nil
}

// rereader returns what reads the configuration again as serve read it at start (the same
// flags), checked as `gateway validate` checks it: the programs it names must be there.
func rereader(files *configArgs, listen string) func() (*config.Config, error) {
	return func() (*config.Config, error) {
		cfg, _, err := files.build()
		if err != nil {
			return nil, err
		}
		if err := listenOverride(cfg, listen); err != nil {
			return nil, err
		}
		errs, _ := checkCommands(cfg, exec.LookPath)
		errs = append(errs, checkPlugins(cfg)...)
		if len(errs) > 0 {
			return nil, errors.New(strings.Join(errs, "\n"))
		}
		return cfg, nil
	}
}

// run reloads gw at each signal and file change until the func it returns is called, which
// waits for the reload under way.
func (r *reloader) run(gw *gateway.Gateway, cfg *config.Config, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.loop(ctx, gw, cfg, logger)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// loop is the reloader's goroutine.
func (r *reloader) loop(ctx context.Context, gw *gateway.Gateway, cfg *config.Config, logger *slog.Logger) {
	tick := r.tick
	if tick == nil && r.watch > 0 {
		t := time.NewTicker(r.watch)
		defer t.Stop()
		tick = t.C
	}
	seen := fingerprints(watchedFiles(r.files, cfg))
	reload := func(why string) {
		logger.Info("reloading the configuration", "trigger", why)
		rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		defer cancel()
		_ = gw.ReloadFiles(rctx) // logged, applied or refused
		cfg = gw.RunningConfig()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-r.signals:
			reload(sig.String())
			seen = fingerprints(watchedFiles(r.files, cfg))
		case <-tick:
			now := fingerprints(watchedFiles(r.files, cfg))
			changed := changedFiles(seen, now)
			if len(changed) == 0 {
				continue
			}
			seen = now
			reload("file changed: " + strings.Join(changed, ", "))
			seen = fingerprints(watchedFiles(r.files, cfg))
		}
	}
}

// watchedFiles are the files cfg was built from or reads: those the flags name (the config
// file, the server lists it imports), and the files of keys it reads.
func watchedFiles(flagged []string, cfg *config.Config) []string {
	files := slices.Clone(flagged)
	for _, f := range []string{cfg.Auth.APIKeysFile, cfg.Admin.APIKeysFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// fingerprint is what a look at a file sees: its size, time and content's hash, or that it
// could not be read.
type fingerprint struct {
	size    int64
	modTime time.Time
	sum     [sha256.Size]byte
	missing bool
}

func fingerprints(files []string) map[string]fingerprint {
	out := make(map[string]fingerprint, len(files))
	for _, f := range files {
		out[f] = fingerprintOf(f)
	}
	return out
}

func fingerprintOf(path string) fingerprint {
	fh, err := os.Open(path)
	if err != nil {
		return fingerprint{missing: true}
	}
	defer fh.Close()
	info, err := fh.Stat()
	if err != nil {
		return fingerprint{missing: true}
	}
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return fingerprint{missing: true}
	}
	fp := fingerprint{size: info.Size(), modTime: info.ModTime()}
	h.Sum(fp.sum[:0])
	return fp
}

// changedFiles names the files whose fingerprint differs between before and now.
func changedFiles(before, now map[string]fingerprint) []string {
	var out []string
	for f, fp := range now {
		if b, ok := before[f]; !ok || b != fp {
			out = append(out, f)
		}
	}
	return out
}

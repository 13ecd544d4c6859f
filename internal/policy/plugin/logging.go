package plugin

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// hclogger is go-plugin's logger (hclog) writing to a slog.Logger. Through it go-plugin's own
// records reach the Host's logger, and so do the lines a plugin writes to its standard error:
// go-plugin parses those (hclog JSON, as plugin/sdk's Logger writes, at its level; anything
// else at debug, a panic at error).
type hclogger struct {
	logger  *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogger)(nil)

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (l *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	sl := slogLevel(level)
	if !l.logger.Enabled(context.Background(), sl) {
		return
	}
	l.logger.Log(context.Background(), sl, msg, cleanArgs(args)...)
}

// cleanArgs drops what go-plugin copies from a plugin's JSON records that the Host's log has
// its own form of: the plugin's timestamp and hclog's "@"-keys.
func cleanArgs(args []any) []any {
	out := args[:0:0]
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && (k == "timestamp" || strings.HasPrefix(k, "@")) {
			continue
		}
		out = append(out, args[i], args[i+1])
	}
	return out
}

func (l *hclogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogger) enabled(level hclog.Level) bool {
	return l.logger.Enabled(context.Background(), slogLevel(level))
}

func (l *hclogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hclogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hclogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hclogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hclogger) IsError() bool { return l.enabled(hclog.Error) }

// GetLevel reports the lowest level the slog.Logger records; go-plugin skips parsing a
// plugin's output when it is Off.
func (l *hclogger) GetLevel() hclog.Level {
	for _, level := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(level) {
			return level
		}
	}
	return hclog.Off
}

// SetLevel does nothing: the slog.Logger's handler decides.
func (l *hclogger) SetLevel(hclog.Level) {}

func (l *hclogger) ImpliedArgs() []any { return l.implied }

func (l *hclogger) With(args ...any) hclog.Logger {
	return &hclogger{logger: l.logger.With(cleanArgs(args)...), name: l.name, implied: append(l.implied[:len(l.implied):len(l.implied)], args...)}
}

func (l *hclogger) Name() string { return l.name }

// Named and ResetNamed keep the records' attributes: the Host's logger already names the
// plugin.
func (l *hclogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *hclogger) ResetNamed(name string) hclog.Logger {
	return &hclogger{logger: l.logger, name: name, implied: l.implied}
}

func (l *hclogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.logger.Handler(), slog.LevelInfo)
}

func (l *hclogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(opts).Writer()
}

// maxLine bounds how much of one line lineLogger keeps: a longer line is logged in pieces.
const maxLine = 64 << 10

// lineLogger logs each line written to it, at debug level: what a plugin writes to its
// standard output or error after it started serving reaches the Host through go-plugin's
// stdio stream. Safe for concurrent use.
type lineLogger struct {
	logger *slog.Logger
	stream string

	mu sync.Mutex
	// partial holds the start of a line not yet ended; guarded by mu.
	partial []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		line, rest, found := bytes.Cut(p, []byte{'\n'})
		w.partial = append(w.partial, line...)
		p = rest
		if found || len(w.partial) >= maxLine {
			w.flushLocked()
		}
	}
	return n, nil
}

func (w *lineLogger) flushLocked() {
	line := strings.TrimRight(string(w.partial), "\r")
	w.partial = w.partial[:0]
	if line != "" {
		w.logger.Debug(line, "stream", w.stream)
	}
}

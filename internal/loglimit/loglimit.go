// Package loglimit keeps logs readable when their records come at any rate: a slog.Handler
// that lets through at most one warning per message and interval (an upstream writing
// garbage, a client tripping a limit again and again), and an Outage that turns the failures
// of a dependency every request needs (a session store that is down) into a few lines: the
// first of each kind, a count every interval, and one line when it answers again.
//
//	logger := slog.New(loglimit.NewHandler(base.Handler(), time.Second, time.Now))
//	store := loglimit.NewOutage(logger, "the session store", time.Minute, time.Now)
package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Handler passes at most one record per message and interval at warning level, so that a
// peer causing thousands of warnings a second cannot flood the log. It counts the records it
// holds back and reports them, as "suppressed", with the next record of the same message it
// passes. Other levels all pass: information (such as an upstream's stderr lines), and
// errors, whose records a client may be pointed to by a request id.
type Handler struct {
	next  slog.Handler
	state *limitState // shared with the handlers WithAttrs and WithGroup derive
}

type limitState struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	// seen holds, per message, when a record last passed and how many were held back since.
	// Guarded by mu; its keys are the callers' fixed messages, so it stays small.
	seen map[string]*limitEntry
}

type limitEntry struct {
	passed time.Time
	held   int
}

// NewHandler returns a Handler over h that passes one warning per message and interval
// every; now tells the time (time.Now, or a fake clock in tests).
func NewHandler(h slog.Handler, every time.Duration, now func() time.Time) Handler {
	return Handler{next: h, state: &limitState{every: every, now: now, seen: map[string]*limitEntry{}}}
}

// Enabled implements slog.Handler.
func (h Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || r.Level >= slog.LevelError {
		return h.next.Handle(ctx, r)
	}
	s := h.state
	s.mu.Lock()
	now := s.now()
	e := s.seen[r.Message]
	if e == nil {
		e = &limitEntry{}
		s.seen[r.Message] = e
	} else if now.Sub(e.passed) < s.every {
		e.held++
		s.mu.Unlock()
		return nil
	}
	held := e.held
	e.passed, e.held = now, 0
	s.mu.Unlock()
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", held))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return Handler{next: h.next.WithAttrs(attrs), state: h.state}
}

// WithGroup implements slog.Handler.
func (h Handler) WithGroup(name string) slog.Handler {
	return Handler{next: h.next.WithGroup(name), state: h.state}
}

package upstream

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// limitedHandler passes at most one record per message and interval at warning level and
// above, so that an upstream writing garbage (thousands of lines a second) cannot flood the
// gateway's log. It counts the records it holds back and reports them, as "suppressed", with
// the next record of the same message it passes. Records below warning level (such as the
// upstream's stderr lines) all pass.
type limitedHandler struct {
	slog.Handler
	state *limitState // shared with the handlers WithAttrs and WithGroup derive
}

type limitState struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	// seen holds, per message, when a record last passed and how many were held back since.
	// Guarded by mu; its keys are the few fixed messages of this package.
	seen map[string]*limitEntry
}

type limitEntry struct {
	passed time.Time
	held   int
}

func newLimitedHandler(h slog.Handler, every time.Duration, now func() time.Time) limitedHandler {
	return limitedHandler{Handler: h, state: &limitState{every: every, now: now, seen: map[string]*limitEntry{}}}
}

// Handle implements slog.Handler.
func (h limitedHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.Handler.Handle(ctx, r)
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
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h limitedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return limitedHandler{Handler: h.Handler.WithAttrs(attrs), state: h.state}
}

// WithGroup implements slog.Handler.
func (h limitedHandler) WithGroup(name string) slog.Handler {
	return limitedHandler{Handler: h.Handler.WithGroup(name), state: h.state}
}

package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Outage logs the failures of one dependency (a session store) that every request needs,
// so that an outage under load is a few lines, not one per request: the first failure of
// each message in full, then at most one per message and interval, with the count of those
// held back since ("suppressed"); and, once the dependency answers again, one line that
// says so, with how long the outage lasted ("outage") and how many failures were held back
// in all — unless the outage was a blip, whose every failure was logged in full and which
// lasted less than the interval: its lines say all there is. The failures it holds back carry no request id a client was given: their client
// was told that the dependency is unavailable, nothing more. Safe for concurrent use; OK
// costs one atomic load while nothing fails.
type Outage struct {
	logger *slog.Logger
	what   string
	every  time.Duration
	now    func() time.Time

	// down is set while an outage lasts: between a failure and the next success.
	down atomic.Bool

	mu sync.Mutex
	// since is when the outage began, held how many failures it held back in all, seen per
	// message when one last passed and how many were held back since. Guarded by mu; reset
	// when the outage ends.
	since time.Time
	held  int
	seen  map[string]*limitEntry
}

// NewOutage returns an Outage that logs to logger; what names the dependency in the line
// that says it answers again ("the session store"); every is the interval (a minute, say);
// now tells the time (time.Now, or a fake clock in tests).
func NewOutage(logger *slog.Logger, what string, every time.Duration, now func() time.Time) *Outage {
	return &Outage{logger: logger, what: what, every: every, now: now, seen: map[string]*limitEntry{}}
}

// Failed logs a failure of the dependency at level, or counts it when one of the same
// message passed within the interval.
func (o *Outage) Failed(ctx context.Context, level slog.Level, msg string, args ...any) {
	o.mu.Lock()
	now := o.now()
	if !o.down.Load() {
		o.down.Store(true)
		o.since, o.held = now, 0
	}
	e := o.seen[msg]
	if e == nil {
		e = &limitEntry{}
		o.seen[msg] = e
	} else if now.Sub(e.passed) < o.every {
		e.held++
		o.held++
		o.mu.Unlock()
		return
	}
	held := e.held
	e.passed, e.held = now, 0
	o.mu.Unlock()
	if held > 0 {
		args = append(args, slog.Int("suppressed", held))
	}
	o.logger.Log(ctx, level, msg, args...)
}

// OK notes that the dependency answered: an outage, if one lasted, ends, and that is logged
// once when failures were held back or it lasted the interval or longer.
func (o *Outage) OK(ctx context.Context) {
	if !o.down.Load() {
		return
	}
	o.mu.Lock()
	if !o.down.Load() {
		o.mu.Unlock()
		return
	}
	o.down.Store(false)
	lasted, held := o.now().Sub(o.since), o.held
	clear(o.seen)
	o.mu.Unlock()
	if held == 0 && lasted < o.every {
		return // a blip: each failure was logged, and nothing more is to be said
	}
	o.logger.Log(ctx, slog.LevelInfo, o.what+" is reachable again", slog.Duration("outage", lasted.Round(time.Second)), slog.Int("suppressed", held))
}

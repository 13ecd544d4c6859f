package credential

import (
	"context"
	"time"
)

// fetchTimeout bounds one token request, whoever waits for it: the request runs detached from
// the caller that started it, so that this caller giving up does not fail the others.
const fetchTimeout = 30 * time.Second

// cell is one cached token and the fetch in flight for it. The mutex of its owner guards it.
type cell struct {
	// token is the access token, "" until one was fetched.
	token string
	// refreshAt is when token stops being used (shortly before it expires); zero: never.
	refreshAt time.Time
	// inflight is the fetch under way, nil if none. Lifecycle: set by the caller that
	// starts a fetch, set to nil by the fetch when it ends, before its done is closed.
	inflight *flight
}

// validLocked reports whether c's token may be used at now.
func (c *cell) validLocked(now time.Time) bool {
	return c.token != "" && (c.refreshAt.IsZero() || now.Before(c.refreshAt))
}

// flight is one token request that any number of callers wait for.
type flight struct {
	// done is closed when the request ended; token, refreshAt and err are set before.
	done      chan struct{}
	token     string
	refreshAt time.Time
	err       error
}

func newFlight() *flight { return &flight{done: make(chan struct{})} }

// wait returns f's token once it is there, or ctx's error if ctx ends first; the request
// goes on for the other waiters either way.
func (f *flight) wait(ctx context.Context) (string, error) {
	select {
	case <-f.done:
		return f.token, f.err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// detach returns the context a fetch started by a caller with ctx runs in: ctx's values, not
// its cancellation, fetchTimeout, and the end of lifetime (nil: none), which is what owns the
// fetch: the gateway that stops ends its token requests in flight.
func detach(ctx, lifetime context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	if lifetime == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(lifetime, cancel)
	return ctx, func() { stop(); cancel() }
}

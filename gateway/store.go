package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/manifold-mcp/manifold/internal/loglimit"
)

// storeOutageInterval is how often a failure of the session store of one kind is logged
// while the store is down, with the count of those held back since.
const storeOutageInterval = time.Minute

// storeFailures logs the session store's failures on requests' paths: while it is down,
// every request fails, and the log gets a few lines, not one per request (loglimit.Outage).
// The client was told that the store is unavailable, with no request id to look up.
type storeFailures struct{ outage *loglimit.Outage }

// failed logs (or counts) a failure at error level; warned, at warning level.
func (f storeFailures) failed(ctx context.Context, msg string, args ...any) {
	f.outage.Failed(ctx, slog.LevelError, msg, args...)
}

func (f storeFailures) warned(ctx context.Context, msg string, args ...any) {
	f.outage.Failed(ctx, slog.LevelWarn, msg, args...)
}

// answered notes that the session store answered: an outage ends, logged once.
func (f storeFailures) answered(ctx context.Context) { f.outage.OK(ctx) }

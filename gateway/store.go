package gateway

import (
	"context"
	"log/slog"
	"time"
)

// storeOutageInterval is how often a failure of the session store of one kind is logged
// while the store is down, with the count of those held back since.
const storeOutageInterval = time.Minute

// storeError logs a failure of the session store on a request's path, or counts it while
// the store is down (loglimit.Outage): the client was told that the store is unavailable,
// with no request id to look up. storeWarn is the same at warning level.
func (g *Gateway) storeError(ctx context.Context, msg string, args ...any) {
	g.storeOutage.Failed(ctx, slog.LevelError, msg, args...)
}

func (g *Gateway) storeWarn(ctx context.Context, msg string, args ...any) {
	g.storeOutage.Failed(ctx, slog.LevelWarn, msg, args...)
}

// storeOK notes that the session store answered: an outage ends, logged once.
func (g *Gateway) storeOK(ctx context.Context) { g.storeOutage.OK(ctx) }

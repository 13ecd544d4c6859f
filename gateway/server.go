package gateway

import (
	"log/slog"
	"net/http"
	"time"
)

// readHeaderTimeout bounds how long a client may take to send a request's headers.
const readHeaderTimeout = 10 * time.Second

// Server returns an HTTP server for the gateway's Handler with the timeouts a public endpoint
// needs: request headers must arrive within 10 seconds and an idle keep-alive connection
// closes after http_idle_timeout. It sets no ReadTimeout or WriteTimeout, which would cut SSE
// streams: a POST body is bounded by body_read_timeout in the handler, and every write to a
// client by a deadline of its own. The server's own errors (such as failing to accept at the
// file-descriptor limit) are logged at error level.
func (g *Gateway) Server() *http.Server {
	return &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       g.cfg.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelError),
	}
}

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
// client by a deadline of its own. A connection past max_connections_per_address of its
// address is closed as soon as it is accepted (its ConnState hook; a caller that sets its own
// must call this one too). The server's own errors (such as failing to accept at the
// file-descriptor limit) are logged at error level.
func (g *Gateway) Server() *http.Server {
	limit := &connLimit{g: g, limiter: g.addrs}
	return &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       g.cfg.HTTPIdleTimeout,
		ConnState:         limit.connState,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelError),
	}
}

// AdminServer returns an HTTP server for the admin handler h (AdminHandler), on the admin
// listener: request headers must arrive within 10 seconds and a whole request within
// body_read_timeout (the admin API sends no streams), an idle keep-alive connection closes
// after http_idle_timeout, and connections are capped per client address as on the MCP
// listener (max_connections_per_address, counted apart from it).
func (g *Gateway) AdminServer(h http.Handler) *http.Server {
	limit := &connLimit{g: g, limiter: newAddrLimiter(g.cfg.MaxConnectionsPerAddress)}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       g.cfg.BodyReadTimeout,
		IdleTimeout:       g.cfg.HTTPIdleTimeout,
		ConnState:         limit.connState,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelError),
	}
}

package gateway

import (
	"context"
	"errors"
	"log/slog"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// toWireError maps any error of the router to the JSON-RPC error a client receives: the one
// place where internal failures become wire errors (conventions 11). What the client sees
// says what to do next and carries no internal detail; the full error goes to the log with
// the request id.
func toWireError(err error, logger *slog.Logger, requestID string) *protocol.Error {
	var rpcErr *protocol.Error
	var unavailable *unavailableError
	switch {
	case errors.As(err, &rpcErr):
		// Errors the gateway made, and JSON-RPC errors an upstream answered: the latter are
		// the upstream's answer to the client's request, so they pass through.
		return rpcErr
	case errors.As(err, &unavailable):
		logger.Warn("request to an unavailable upstream", "request_id", requestID, "error", err.Error())
		return protocol.Errorf(protocol.CodeUpstreamUnavailable, "upstream %s is unavailable; try again later", unavailable.upstream)
	case errors.Is(err, errConnectionLimit):
		logger.Warn("request refused: the upstream's isolated connections are all in use", "request_id", requestID, "error", err.Error())
		return protocol.Errorf(protocol.CodeUpstreamUnavailable, "the upstream has its maximum of connections open for other sessions; try again later")
	case errors.Is(err, upstream.ErrTimeout):
		logger.Warn("upstream request timed out", "request_id", requestID, "error", err.Error())
		return protocol.Errorf(protocol.CodeUpstreamTimeout, "the upstream did not answer in time; try again later")
	case errors.Is(err, context.Canceled):
		return protocol.Errorf(protocol.CodeInternalError, "request cancelled")
	}
	logger.Error("request failed", "request_id", requestID, "error", err.Error())
	return protocol.Errorf(protocol.CodeInternalError, "internal error (request %s); the gateway's log has the details", requestID)
}

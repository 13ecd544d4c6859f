package gateway

import (
	"context"
	"encoding/json"

	"github.com/manifold-mcp/manifold/pipeline"
	"github.com/manifold-mcp/manifold/protocol"
)

// ServeValue serves a request value through the pipeline as a face without sessions or
// streams would (the 2026-07-28 stateless one will): for tests.
func (g *Gateway) ServeValue(ctx context.Context, req *pipeline.Request) (json.RawMessage, *protocol.Error) {
	return g.serve(ctx, &request{Request: req})
}

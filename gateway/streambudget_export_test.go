package gateway

import "github.com/manifold-mcp/manifold/internal/hub"

// HeldStreamBytes returns the bytes of events the streams of this replica hold, as its
// budget (stream_budget_bytes) counts them: for tests.
func (g *Gateway) HeldStreamBytes() int64 {
	return g.hub.(*hub.Local).HeldBytes()
}

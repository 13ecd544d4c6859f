package auth

import (
	"context"

	"github.com/manifold-mcp/manifold/internal/pipeline"
)

// RequirePrincipal is the first check of the policy chain when authentication is on. Every
// face authenticates before a request becomes a pipeline value (HTTP answers 401 before it
// reads a session); a request that still reaches the chain without a principal came through a
// face that did not, and is refused rather than served as anonymous.
func RequirePrincipal() pipeline.Check {
	return pipeline.CheckFunc(func(_ context.Context, req *pipeline.Request, _ *pipeline.Target) error {
		if req.Client.Principal.Anonymous() {
			return &pipeline.Refusal{Reason: pipeline.ReasonUnauthenticated,
				Message: "this request carries no authenticated principal, and the gateway requires authentication: send a bearer token or an API key"}
		}
		return nil
	})
}

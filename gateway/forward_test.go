package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/manifold-mcp/manifold/hub"
	"github.com/manifold-mcp/manifold/upstream"
)

// TestForwardedFailureKeepsItsReason: a call that failed on the replica holding the session's
// connection fails on the sender for the same reason, so that the client gets the same refusal
// (too slow, out of connections, session ended) as if it had run there.
func TestForwardedFailureKeepsItsReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"timeout", fmt.Errorf("upstream r: %w", upstream.ErrTimeout), upstream.ErrTimeout},
		{"connection limit", fmt.Errorf("upstream r: %w (max_connections 2)", errConnectionLimit), errConnectionLimit},
		{"session ended", fmt.Errorf("upstream r: %w", hub.ErrSessionEnded), hub.ErrSessionEnded},
		{"unavailable", fmt.Errorf("upstream r: %w", upstream.ErrUnavailable), upstream.ErrUnavailable},
		{"anything else", errors.New("boom"), upstream.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(failedResult(tc.err))
			if err != nil {
				t.Fatal(err)
			}
			var res forwardedResult
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			if got := res.failure(); !errors.Is(got, tc.want) {
				t.Errorf("failure() = %v, want one that is %v", got, tc.want)
			}
		})
	}
}

package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/replica"
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
		{"interrupted", fmt.Errorf("upstream r: %w (connection lost)", upstream.ErrInterrupted), upstream.ErrInterrupted},
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
			var res replica.Result
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			if got := forwardFailure(res); !errors.Is(got, tc.want) {
				t.Errorf("forwardFailure = %v, want one that is %v", got, tc.want)
			}
		})
	}
}

// TestForwardedCallOfAStoppedReplicaFailsAsInterrupted: the result of a call whose holder
// stopped before it answered fails on the sender as interrupted (it may have run in part),
// never as "unavailable", which invites a retry.
func TestForwardedCallOfAStoppedReplicaFailsAsInterrupted(t *testing.T) {
	err := forwardFailure(replica.Result{Unavailable: "the replica holding the session's connection stopped", Reason: replica.ReasonInterrupted})
	if !errors.Is(err, upstream.ErrInterrupted) || errors.Is(err, upstream.ErrUnavailable) {
		t.Errorf("forwardFailure = %v; want ErrInterrupted, not ErrUnavailable", err)
	}
}

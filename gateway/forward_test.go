package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/manifold-mcp/manifold/internal/hub"
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

// TestForwardedCallOfAStoppedReplicaMayHaveRun: a replica stops while it runs a call another
// replica forwarded to it. The call reached it and may have run in part: the sender fails it
// as interrupted, never as "unavailable", which invites a retry.
func TestForwardedCallOfAStoppedReplicaMayHaveRun(t *testing.T) {
	r := &replicas{forwarding: forwarding{waiting: map[string]waitingCall{}, running: map[string]runningCall{}}}
	done := make(chan forwardedResult, 1)
	r.forwarding.waiting["a-c1"] = waitingCall{replica: "b", done: done}
	r.failForwarded("b")
	if err := (<-done).failure(); !errors.Is(err, upstream.ErrInterrupted) || errors.Is(err, upstream.ErrUnavailable) {
		t.Errorf("the forwarded call of a stopped replica failed with %v; want ErrInterrupted, not ErrUnavailable", err)
	}
}

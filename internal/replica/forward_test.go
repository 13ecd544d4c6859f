package replica

import (
	"testing"
)

// TestForwardedCallOfAStoppedReplicaMayHaveRun: a replica stops while it runs a call another
// replica forwarded to it. The call reached it and may have run in part: the sender fails it
// as interrupted, never as "unavailable", which invites a retry.
func TestForwardedCallOfAStoppedReplicaMayHaveRun(t *testing.T) {
	r := &Replicas{forwarding: forwarding{waiting: map[string]waitingCall{}, running: map[string]runningCall{}}}
	done := make(chan Result, 1)
	r.forwarding.waiting["a-c1"] = waitingCall{replica: "b", done: done}
	r.forwarding.fail("b")
	if res := <-done; res.Reason != ReasonInterrupted || res.Unavailable == "" {
		t.Errorf("the forwarded call of a stopped replica ended with %+v; want reason %q", res, ReasonInterrupted)
	}
}

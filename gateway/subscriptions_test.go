package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callText calls a tool that must succeed and returns its text.
func callText(t *testing.T, cs *mcp.ClientSession, tool string) string {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: tool})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", tool, textOf(t, res))
	}
	return textOf(t, res)
}

// eventually checks cond every few milliseconds until it holds, and fails the test with the
// last observation if it does not within timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("%s: still %s after %v", what, last, timeout)
		}
	}
}

// TestSlowSubscribeBlocksNoOtherSubscription: while one upstream holds a subscribe
// unanswered, subscribes and unsubscribes of other URIs, on that upstream and another,
// complete; a second subscriber to the held URI waits for the first, and the upstream is
// subscribed to it once.
func TestSlowSubscribeBlocksNoOtherSubscription(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+
		upstreamYAML("slow", "semantics", "")+upstreamYAML("other", "semantics", ""), nil)
	defer tg.close()
	a := connect(t, tg.url, nil)
	b := connect(t, tg.url, nil)
	c := connect(t, tg.url, nil)
	ctx := ctxT(t)

	// A's subscribe is held in the upstream; C's, sent meanwhile, waits behind it.
	var heldErrs [2]error
	var held sync.WaitGroup
	subscribeHeld := func(i int, cs *mcp.ClientSession) {
		held.Go(func() { heldErrs[i] = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "slow+file:///held.txt"}) })
	}
	subscribeHeld(0, a)
	released := false
	defer func() {
		if !released {
			callText(t, b, "slow__release")
		}
		held.Wait()
	}()
	eventually(t, 10*time.Second, "the subscribe waits in the upstream", func() (bool, string) {
		got := callText(t, b, "slow__held")
		return got == "held=1", got
	})
	subscribeHeld(1, c)
	heldDone := make(chan struct{})
	go func() {
		held.Wait()
		close(heldDone)
	}()

	// Each of these must finish while the held subscribe is still waiting.
	others, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"subscribe another upstream's URI", func() error {
			return b.Subscribe(others, &mcp.SubscribeParams{URI: "other+file:///watched.txt"})
		}},
		{"subscribe another URI of the same upstream", func() error {
			return b.Subscribe(others, &mcp.SubscribeParams{URI: "slow+file:///watched.txt"})
		}},
		{"unsubscribe it", func() error {
			return b.Unsubscribe(others, &mcp.UnsubscribeParams{URI: "slow+file:///watched.txt"})
		}},
	} {
		if err := op.do(); err != nil {
			t.Fatalf("%s while another subscribe was held: %v", op.name, err)
		}
	}
	select {
	case <-heldDone:
		t.Fatalf("the held subscribes returned (%v) before they were released", heldErrs)
	default:
	}

	callText(t, b, "slow__release")
	released = true
	<-heldDone
	for i, err := range heldErrs {
		if err != nil {
			t.Errorf("held subscribe %d, released: %v", i, err)
		}
	}
	for tool, want := range map[string]string{
		"slow__sub_counts":  "subscribe=2 unsubscribe=1",
		"other__sub_counts": "subscribe=1 unsubscribe=0",
	} {
		if got := callText(t, b, tool); got != want {
			t.Errorf("%s = %s, want %s", tool, got, want)
		}
	}
}

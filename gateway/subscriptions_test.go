package gateway_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
)

// subscriber connects a client that reports the URI of every resources/updated it receives.
func subscriber(t *testing.T, url string) (*mcp.ClientSession, chan string) {
	t.Helper()
	updates := make(chan string, 64)
	cs := connect(t, url, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updates <- req.Params.URI },
	})
	return cs, updates
}

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

// touchUntilHeard calls a touching tool until the update reaches updates, and returns its URI.
// The go-sdk client opens its standalone stream in the background, and an update sent before
// that is lost, so the first touches may go unheard.
func touchUntilHeard(t *testing.T, cs *mcp.ClientSession, tool string, updates <-chan string) string {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		callText(t, cs, tool)
		select {
		case uri := <-updates:
			return uri
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			t.Fatalf("no resources/updated after calling %s", tool)
		}
	}
}

// awaitUpdate waits for one update, once the client's stream is known to be open.
func awaitUpdate(t *testing.T, updates <-chan string, what string) string {
	t.Helper()
	select {
	case uri := <-updates:
		return uri
	case <-time.After(10 * time.Second):
		t.Fatalf("no resources/updated: %s", what)
		return ""
	}
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

// TestSubscriptionSurvivesUpstreamRestart: a stdio upstream crashes and is restarted; the new
// process is subscribed again without the client asking, so the client keeps hearing updates.
func TestSubscriptionSurvivesUpstreamRestart(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("sem", "semantics", ""), fastRestart)
	defer tg.close()
	cs, updates := subscriber(t, tg.url)
	ctx := ctxT(t)
	const uri = "sem+file:///watched.txt"
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if got := touchUntilHeard(t, cs, "sem__touch", updates); got != uri {
		t.Fatalf("update for %q, want %q", got, uri)
	}

	crashAndAwaitResubscribe(t, ctx, cs, "sem", "the restarted upstream")
	callText(t, cs, "sem__touch")
	if got := awaitUpdate(t, updates, "after the upstream restarted"); got != uri {
		t.Errorf("update for %q, want %q", got, uri)
	}
}

// TestSubscriptionUnderSessionIsolation: with isolation: session the subscription is made on
// the session's own connection, the one whose child changes and notifies, and its updates
// reach that session only. While it has subscriptions, that connection is not closed as idle,
// and when its child restarts the new one is subscribed again.
func TestSubscriptionUnderSessionIsolation(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+
		upstreamYAML("iso", "semantics", "    isolation: session\n    isolation_idle_timeout: 300ms\n")+
		upstreamYAML("sem", "semantics", ""),
		&gateway.Options{ExpiryInterval: 50 * time.Millisecond, UpstreamOptions: fastRestart.UpstreamOptions})
	defer tg.close()
	a, updA := subscriber(t, tg.url)
	b, updB := subscriber(t, tg.url)
	ctx := ctxT(t)

	// B subscribes to the same upstream URI on another, shared upstream: its updates mark
	// B's stream as open, and flush it below.
	const isoURI, semURI = "iso+file:///watched.txt", "sem+file:///watched.txt"
	if err := b.Subscribe(ctx, &mcp.SubscribeParams{URI: semURI}); err != nil {
		t.Fatal(err)
	}
	if got := touchUntilHeard(t, b, "sem__touch", updB); got != semURI {
		t.Fatalf("B: update for %q, want %q", got, semURI)
	}

	if err := a.Subscribe(ctx, &mcp.SubscribeParams{URI: isoURI}); err != nil {
		t.Fatal(err)
	}
	// touch runs in A's own child.
	if got := touchUntilHeard(t, a, "iso__touch", updA); got != isoURI {
		t.Fatalf("A: update for %q, want %q", got, isoURI)
	}
	callText(t, b, "iso__touch") // in B's own child, where nobody subscribed

	// Everything sent to B before this touch arrives before its update.
	callText(t, b, "sem__touch")
	for flushed := false; !flushed; {
		switch got := awaitUpdate(t, updB, "B's flush"); got {
		case semURI:
			flushed = true
		default:
			t.Errorf("B, not subscribed to %s, got an update for %q", isoURI, got)
		}
	}

	// B's own connection is idle and closes; A's stays for its subscription, so a touch
	// there still reaches A.
	eventually(t, 10*time.Second, "B's idle connection closes", func() (bool, string) {
		n := tg.gw.IsolatedConnections("iso")
		return n == 1, fmt.Sprintf("%d connections", n)
	})
	callText(t, a, "iso__touch")
	if got := awaitUpdate(t, updA, "A, after the idle connections were closed"); got != isoURI {
		t.Errorf("A: update for %q, want %q", got, isoURI)
	}
	if got := callText(t, a, "iso__sub_counts"); got != "subscribe=1 unsubscribe=0" {
		t.Errorf("A's own child saw %s, want one subscribe", got)
	}

	// A's own child crashes and is restarted: the new one is subscribed again.
	crashAndAwaitResubscribe(t, ctx, a, "iso", "A's restarted child")
	callText(t, a, "iso__touch")
	if got := awaitUpdate(t, updA, "A, after its child restarted"); got != isoURI {
		t.Errorf("A: update for %q, want %q", got, isoURI)
	}

	// Unsubscribed on its own child, A's connection is idle like any other, and closes.
	if err := a.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: isoURI}); err != nil {
		t.Fatal(err)
	}
	if got := callText(t, a, "iso__sub_counts"); got != "subscribe=1 unsubscribe=1" {
		t.Errorf("after unsubscribing, A's own child saw %s", got)
	}
	eventually(t, 10*time.Second, "A's connection closes once idle", func() (bool, string) {
		n := tg.gw.IsolatedConnections("iso")
		return n == 0, fmt.Sprintf("%d connections", n)
	})
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

// crashAndAwaitResubscribe makes the upstream of prefix exit through cs, then waits until the
// restarted one reports one subscribe: counts start at zero in a new process, so that one is
// the gateway's renewal.
func crashAndAwaitResubscribe(t *testing.T, ctx context.Context, cs *mcp.ClientSession, prefix, what string) {
	t.Helper()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: prefix + "__crash"}); err == nil && !res.IsError {
		t.Fatalf("crash answered %q; want the call to fail with the process", textOf(t, res))
	}
	eventually(t, 15*time.Second, what+" is subscribed again", func() (bool, string) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: prefix + "__sub_counts"})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError {
			return false, "down: " + textOf(t, res)
		}
		got := textOf(t, res)
		return got == "subscribe=1 unsubscribe=0", got
	})
}

package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// Regression tests for memory a burst of large requests left behind: after three concurrent
// batches of 3.85 MB the gateway's memory stayed several times higher, and a batch in flight
// held a copy of everything it had already written to its client.

// maxBody is the max_body_bytes of these tests: the default.
const maxBody = 4 << 20

// liveHeap collects garbage and returns the heap that survived: what the process holds.
func liveHeap() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// bigBatch is a batch of 64 calls of tool, each with a text argument of 60 kB: 3.85 MB, just
// under maxBody.
func bigBatch(tool string) string {
	text := strings.Repeat("x", 60000)
	entries := make([]string, 64)
	for i := range entries {
		entries[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"text":%q}}}`, i+1, tool, text)
	}
	return "[" + strings.Join(entries, ",") + "]"
}

// TestBurstDoesNotRatchetTheHeap: a batch's stream, written to its client to the end, was
// kept with all its answers for a while after, although a client of 2025-03-26 cannot resume
// it, and the next burst added as much again. Once a burst is answered, the live heap is back
// to its size before it, within a small part of max_body_bytes.
func TestBurstDoesNotRatchetTheHeap(t *testing.T) {
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nmax_body_bytes: %d\nupstreams:%s", maxBody, upstreamYAML("a", "alpha", "")), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	var sessions []string
	for range 3 {
		sessions = append(sessions, c.initializeAs("2025-03-26", `{}`))
	}
	batch := bigBatch("a__echo")
	burst := func() {
		var wg sync.WaitGroup
		for _, sid := range sessions {
			wg.Go(func() {
				resp := c.post(t.Context(), sid, batch)
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n < int64(len(batch)) {
					t.Errorf("a batch's answer: %d bytes (%v), want its 64 echoes", n, err)
				}
			})
		}
		wg.Wait()
	}
	burst() // what the first requests set up for good (connections, caches)
	before := liveHeap()
	for i := range 3 {
		burst()
		// The client has read every answer; the handlers that wrote them may still be
		// returning on a loaded machine. What is kept for good shows as a heap that does not
		// come back down.
		var after int64
		testwait.Within(10*time.Second, func() bool {
			after = liveHeap()
			return after-before <= maxBody/4
		})
		t.Logf("live heap after burst %d: %d bytes (%+d)", i+1, after, after-before)
		if after-before > maxBody/4 {
			t.Fatalf("after burst %d of 3 batches of %d bytes, the live heap stays %d bytes above its size before (%d); want at most %d (max_body_bytes/4)",
				i+1, len(batch), after-before, before, maxBody/4)
		}
	}
}

// TestBatchInFlightHoldsAFewBodies: a batch in flight kept every message it had written to its
// client (here the upstream's sampling requests, each with the call's text) until its end,
// and the batch itself twice while it was split. A batch near max_body_bytes whose calls all
// wait for the client holds at most 3.5 times max_body_bytes: itself, its params as the
// upstream gets them, the upstream's requests waiting for their answers. Once its session
// ends, nothing of it is left.
func TestBatchInFlightHoldsAFewBodies(t *testing.T) {
	tg := startGateway(t, fmt.Sprintf("listen: 127.0.0.1:0\nmax_body_bytes: %d\nupstreams:%s", maxBody, upstreamYAML("r", "reverse", "")), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-03-26", `{"sampling":{}}`)
	batch := bigBatch("r__ask") // each call asks the client to sample its text, and waits
	before := liveHeap()

	resp := c.post(t.Context(), sid, batch)
	stream := readSSE(t, resp.Body)
	for i := range 64 {
		if m := stream.next(t, "a sampling request"); m.Method != "sampling/createMessage" {
			t.Fatalf("message %d of the batch's stream: %+v, want sampling/createMessage", i+1, m)
		}
	}
	during := liveHeap()
	t.Logf("live heap with the batch in flight: %d bytes (%+d, %.2f × max_body_bytes)", during, during-before, float64(during-before)/maxBody)
	if bound := int64(maxBody) * 7 / 2; during-before > bound {
		t.Errorf("with a batch of %d bytes in flight the live heap is %d bytes above its size before; want at most %d (3.5 × max_body_bytes)",
			len(batch), during-before, bound)
	}

	if r := c.do(http.MethodDelete, "", map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if _, err := stream.rest(t); err != nil {
		t.Fatalf("the batch's stream after DELETE: %v", err)
	}
	waitUntil(t, "the live heap to come back to its size before the batch", func() bool {
		return liveHeap()-before <= maxBody/4
	})
}

// TestModernCallsLeaveLittleInTheWindow: over a shared stdio upstream every 2026-07-28 call is
// a party of its own, which the upstream connection remembers for its attribution window
// after the call ends. What it remembers must be small: 32 workers make 2,000 calls, all well
// within the window (2 s, the default, and longer than the test takes to measure them), and
// the heap they leave is under 1 KB per call. Remembering each call's response stream held
// more than 2 KB per call (its 64-message buffer and its contexts).
func TestModernCallsLeaveLittleInTheWindow(t *testing.T) {
	const calls, workers, mostPerCall = 2000, 32, 1024
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nupstreams:"+upstreamYAML("alpha", "alpha", "    attribution_window: 1h\n"), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	body := modernBody(1, "tools/call", `{"name":"alpha__echo","arguments":{"text":"x"}}`)
	call := func() {
		if r := c.do(http.MethodPost, body, modernHeaders("tools/call", "alpha__echo")); r.status != http.StatusOK || r.msg.Error != nil {
			t.Errorf("call: %d %s", r.status, r.body)
		}
	}
	for range 50 {
		call() // what the first calls build once (pools, connections)
	}
	before := liveHeap()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < calls; i += workers {
				call()
			}
		})
	}
	wg.Wait()
	perCall := float64(liveHeap()-before) / calls
	t.Logf("heap left per call within the attribution window: %.0f bytes", perCall)
	if perCall > mostPerCall {
		t.Errorf("the heap left per 2026-07-28 call is %.0f bytes, want at most %d: what the upstream remembers of a call must be small", perCall, mostPerCall)
	}
}

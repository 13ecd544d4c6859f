package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// roundRobin is a load balancer without affinity of the test's own making: each HTTP request
// goes to the next replica, whatever session it belongs to.
type roundRobin struct {
	targets []*url.URL
	next    atomic.Uint64
	// sent counts the requests sent to each replica.
	sent []atomic.Int64

	mu sync.Mutex
	// last holds, for each of watched, the replica the last POST body holding it went to, and
	// times how many such bodies were sent. Guarded by mu.
	last, times map[string]int
}

// watched are the phrases whose last replica roundRobin notes.
var watched = []string{`"r__block"`, "notifications/cancelled"}

// lastTo is the replica the last POST whose body held phrase (one of watched) went to, -1
// if none did, and how many did.
func (rr *roundRobin) lastTo(phrase string) (replica, times int) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if i, ok := rr.last[phrase]; ok {
		return i, rr.times[phrase]
	}
	return -1, 0
}

func newRoundRobin(t *testing.T, urls ...string) *roundRobin {
	rr := &roundRobin{sent: make([]atomic.Int64, len(urls))}
	for _, u := range urls {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		rr.targets = append(rr.targets, parsed)
	}
	return rr
}

func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	i := int(rr.next.Add(1)-1) % len(rr.targets)
	rr.sent[i].Add(1)
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(body)
			body.Close()
			rr.mu.Lock()
			for _, w := range watched {
				if bytes.Contains(data, []byte(w)) {
					if rr.last == nil {
						rr.last, rr.times = map[string]int{}, map[string]int{}
					}
					rr.last[w] = i
					rr.times[w]++
				}
			}
			rr.mu.Unlock()
		}
	}
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host = rr.targets[i].Scheme, rr.targets[i].Host
	out.Host = rr.targets[i].Host
	return http.DefaultTransport.RoundTrip(out)
}

// twoReplicas starts two gateways on one Redis key prefix in front of the same upstreams
// (Streamable HTTP servers in this process): replicas of one deployment.
func twoReplicas(t *testing.T, upstreams string) (a, b *testGateway) {
	t.Helper()
	return twoReplicasWith(t, "", upstreams)
}

// twoReplicasWith is twoReplicas with more top-level settings (extra, YAML lines).
func twoReplicasWith(t *testing.T, extra, upstreams string) (a, b *testGateway) {
	t.Helper()
	return twoReplicasWithOptions(t, extra, upstreams, nil)
}

// twoReplicasWithOptions is twoReplicasWith, both replicas started with opts.
func twoReplicasWithOptions(t *testing.T, extra, upstreams string, opts *gateway.Options) (a, b *testGateway) {
	t.Helper()
	addr := testredis.Addr(t)
	yaml := fmt.Sprintf(extra+`listen: 127.0.0.1:0
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
`+keysYAML+`upstreams:
%s`, addr, testredis.Prefix(t, addr), upstreams)
	a, b = startGateway(t, yaml, opts), startGateway(t, yaml, opts)
	t.Cleanup(a.close)
	t.Cleanup(b.close)
	return a, b
}

// TestSDKClientAcrossReplicasWithoutAffinity: the official Go SDK client talks to two
// replicas through a balancer without affinity, so that its requests, its answers to the
// upstream's sampling and elicitation requests, its cancels and its standalone stream land on
// either replica. Every call gets its own answer, every reverse request reaches it and its
// answer reaches the call waiting on the other replica, a resource update raised through one
// replica reaches the stream held by the other, and a cancel sent to the replica not running
// the call stops it upstream.
func TestSDKClientAcrossReplicasWithoutAffinity(t *testing.T) {
	// Closed after the replicas (cleanups run last first), whose streams to them stay open.
	reverse := httptest.NewServer(goSDKHandler(t, "reverse", false))
	t.Cleanup(reverse.Close)
	semantics := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(semantics.Close)
	a, b := twoReplicas(t, fmt.Sprintf("  - name: r\n    url: %s\n  - name: s\n    url: %s\n", reverse.URL, semantics.URL))
	rr := newRoundRobin(t, a.url, b.url)

	updated := make(chan string, 16)
	clientOpts := &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			prompt := req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + prompt}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": strings.TrimPrefix(req.Params.Message, "answer for ")}}, nil
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	}
	ctx := ctxT(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, clientOpts)
	cs := connectRoundRobin(t, rr, a.url, client)
	askRounds(ctx, t, cs, 8, func(text string) string { return fmt.Sprintf("sampled=S/%s;elicited=%s", text, text) })

	resources, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	watched := ""
	for _, r := range resources.Resources {
		if strings.HasSuffix(r.URI, "watched.txt") {
			watched = r.URI
		}
	}
	if watched == "" {
		t.Fatalf("no watched resource among %d", len(resources.Resources))
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: watched}); err != nil {
		t.Fatal(err)
	}
	// Two touches: one lands on each replica, whichever holds the subscription.
	for range 2 {
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__touch"}); err != nil {
			t.Fatal(err)
		}
		select {
		case uri := <-updated:
			if uri != watched {
				t.Errorf("update for %q, want %q", uri, watched)
			}
		case <-ctx.Done():
			t.Fatal("no notifications/resources/updated reached the client")
		}
	}

	// Each block call is cancelled once the upstream runs it (a cancel that comes before its
	// call is TestCancelThatComesBeforeItsCall's), and the cancel is steered to the replica
	// that does not run the call: a ping goes first when the balancer would send it there.
	before := cancelsSoFar(ctx, t, cs)
	for i := range 2 {
		callCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "r__block"})
			done <- err
		}()
		testwait.Until(t, 10*time.Second, "the block call to run upstream", func() bool { return blockingOn(ctx, t, cs) == 1 })
		callOn, _ := rr.lastTo(`"r__block"`)
		if int(rr.next.Load())%2 == callOn {
			if err := cs.Ping(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		<-done
		// The client sends its cancel after CallTool returned: no other request may go first.
		testwait.Until(t, 10*time.Second, "the client's cancel to leave", func() bool {
			_, sent := rr.lastTo("notifications/cancelled")
			return sent == i+1
		})
		testwait.Until(t, 10*time.Second, fmt.Sprintf("block call %d to be cancelled upstream", i+1), func() bool {
			return cancelsSoFar(ctx, t, cs) == before+i+1
		})
		if cancelOn, _ := rr.lastTo("notifications/cancelled"); cancelOn == callOn {
			t.Errorf("block call %d: its cancel went to replica %d, which runs it; the test meant the other one", i+1, cancelOn)
		}
	}
	if rr.sent[0].Load() == 0 || rr.sent[1].Load() == 0 {
		t.Errorf("requests per replica %d and %d: the balancer did not spread them", rr.sent[0].Load(), rr.sent[1].Load())
	}
}

// connectRoundRobin connects an SDK client through rr, so that each of its HTTP requests goes
// to the next replica; the session closes with the test.
func connectRoundRobin(t *testing.T, rr *roundRobin, endpoint string, client *mcp.Client) *mcp.ClientSession {
	t.Helper()
	cs, err := client.Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: rr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// askRounds calls the reverse upstream's ask tool rounds times and checks each answer.
func askRounds(ctx context.Context, t *testing.T, cs *mcp.ClientSession, rounds int, want func(text string) string) {
	t.Helper()
	for round := range rounds {
		text := fmt.Sprintf("q%d", round)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__ask", Arguments: map[string]any{"text": text}})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := textOf(t, res); got != want(text) {
			t.Fatalf("round %d: %q, want %q", round, got, want(text))
		}
	}
}

// blockingOn reads how many block calls the reverse upstream is running.
func blockingOn(ctx context.Context, t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__blocking"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(textOf(t, res), &n)
	return n
}

// cancelsSoFar reads how many block calls the reverse upstream saw cancelled.
func cancelsSoFar(ctx context.Context, t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__cancels"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(textOf(t, res), &n)
	return n
}

// TestIsolatedSessionCallsRunWhereItsConnectionIs: with isolation: session, a session's own
// upstream connection (here a child process) lives on the replica that opened it; calls that
// land on the other replica run there too, with their sampling and cancels: the child counts
// every cancel, whichever replica the call and the cancel landed on.
func TestIsolatedSessionCallsRunWhereItsConnectionIs(t *testing.T) {
	a, b := twoReplicas(t, upstreamYAML("r", "reverse", "    isolation: session\n"))
	rr := newRoundRobin(t, a.url, b.url)
	clientOpts := &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "S/" + req.Params.Messages[0].Content.(*mcp.TextContent).Text}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "E"}}, nil
		},
	}
	ctx := ctxT(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, clientOpts)
	cs := connectRoundRobin(t, rr, a.url, client)
	askRounds(ctx, t, cs, 4, func(text string) string { return "sampled=S/" + text + ";elicited=E" })
	for i := range 2 {
		callCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "r__block"})
			done <- err
		}()
		// The cancel must find the call at the child: a call cancelled before it was
		// forwarded never reaches it.
		testwait.Until(t, 10*time.Second, "the block call to reach the session's child", func() bool {
			return blockingOn(ctx, t, cs) == 1 && blockingOn(ctx, t, cs) == 1
		})
		cancel()
		<-done
		// Read on both replicas: one child counts every cancel.
		testwait.Until(t, 10*time.Second, fmt.Sprintf("cancel %d to reach the session's child", i+1), func() bool {
			return cancelsSoFar(ctx, t, cs) == i+1 && cancelsSoFar(ctx, t, cs) == i+1
		})
	}
	// Roots changes, sent to either replica, reach the child too.
	client.AddRoots(&mcp.Root{URI: "file:///one"})
	client.AddRoots(&mcp.Root{URI: "file:///two"})
	testwait.Until(t, 10*time.Second, "both roots changes to reach the session's child", func() bool {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "r__roots_changes"})
		return err == nil && textOf(t, res) == "2"
	})
}

// TestConcurrentSubscribesOnTwoReplicasKeepOne: a session's subscribe to one URI sent twice at
// once, landing on both replicas, leaves one upstream subscription (the later, by a stamp the
// replicas share), not none: the update still comes, round after round.
func TestConcurrentSubscribesOnTwoReplicasKeepOne(t *testing.T) {
	semantics := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(semantics.Close)
	a, b := twoReplicas(t, fmt.Sprintf("  - name: s\n    url: %s\n", semantics.URL))
	rr := newRoundRobin(t, a.url, b.url)
	updated := make(chan string, 64)
	clientOpts := &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}
	ctx := ctxT(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, clientOpts)
	cs := connectRoundRobin(t, rr, a.url, client)
	const watched = "watched.txt"
	uri := ""
	resources, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.Resources {
		if strings.HasSuffix(r.URI, "watched.txt") {
			uri = r.URI
		}
	}
	if uri == "" {
		t.Fatalf("no %s among the resources", watched)
	}
	for round := range 8 {
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
					t.Errorf("round %d: subscribe: %v", round, err)
				}
			})
		}
		wg.Wait()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__touch"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-updated:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no update after two concurrent subscribes", round)
		}
		if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		for len(updated) > 0 { // a second copy, if both held it for a moment
			<-updated
		}
	}
}

// TestTakenOverSubscriptionEndsWithItsSession: a replica that stops hands its subscriptions
// to a survivor, which knows the session by its digest only; when the session then expires
// (nothing reports that to a replica that never saw it), the survivor's expiry pass finds it
// gone and unsubscribes upstream.
func TestTakenOverSubscriptionEndsWithItsSession(t *testing.T) {
	semantics := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(semantics.Close)
	// counts starts a session each time it polls: 127.0.0.1 may hold more than an eighth of
	// max_sessions.
	a, b := twoReplicasWith(t, "session_idle_timeout: 2s\nauth:\n  max_sessions_per_address: 1000\n", fmt.Sprintf("  - name: s\n    url: %s\n", semantics.URL))
	counts := func() string {
		c := rawClient{t: t, url: b.url}
		sid := c.initializeAs("2025-11-25", `{}`)
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"s__sub_counts","arguments":{}}}`, map[string]string{"Mcp-Session-Id": sid})
		return string(r.body)
	}
	before := counts()

	c := rawClient{t: t, url: a.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	list := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`, h)
	var resources struct{ Resources []struct{ URI string } }
	_ = json.Unmarshal(list.msg.Result, &resources)
	uri := ""
	for _, r := range resources.Resources {
		if strings.HasSuffix(r.URI, "watched.txt") {
			uri = r.URI
		}
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"`+uri+`"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("subscribe on A: %d %s", r.status, r.body)
	}
	a.close() // A gives its lease up; B claims what it owned and subscribes for the session
	testwait.Until(t, 20*time.Second, "B to take the subscription over", func() bool {
		return strings.Contains(counts(), "subscribe=2")
	})
	testwait.Until(t, 20*time.Second, "B to unsubscribe once the session expired", func() bool {
		return strings.Contains(counts(), "unsubscribe=1")
	})
	if !strings.Contains(before, "subscribe=0 unsubscribe=0") {
		t.Errorf("before: %s", before)
	}
}

// TestIsolatedSessionSubscribesWhereItsConnectionIs: with isolation: session, a subscribe that
// lands on the replica without the session's connection is made on that connection, where the
// upstream's updates for the session come from.
func TestIsolatedSessionSubscribesWhereItsConnectionIs(t *testing.T) {
	a, b := twoReplicas(t, upstreamYAML("s", "semantics", "    isolation: session\n"))
	rr := newRoundRobin(t, a.url, b.url)
	updated := make(chan string, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "rr", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	cs := connectRoundRobin(t, rr, a.url, client)
	ctx := ctxT(t)
	resources, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	uri := ""
	for _, r := range resources.Resources {
		if strings.HasSuffix(r.URI, "watched.txt") {
			uri = r.URI
		}
	}
	for round := range 3 { // subscribes land on both replicas
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__touch"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-updated:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no update from the session's own connection", round)
		}
		if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "s__sub_counts"})
	if err != nil {
		t.Fatal(err)
	}
	if got := textOf(t, res); got != "subscribe=3 unsubscribe=3" {
		t.Errorf("the session's child saw %s, want every subscribe and unsubscribe", got)
	}
}

// TestStandaloneStreamMovesToAnotherReplica: a client whose standalone stream dropped on A
// opens a new one on B (no Last-Event-ID): A drops the one it kept, so that a resource update
// A raises for the session reaches the stream on B instead of one nobody reads.
func TestStandaloneStreamMovesToAnotherReplica(t *testing.T) {
	semantics := httptest.NewServer(goSDKHandler(t, "semantics", false))
	t.Cleanup(semantics.Close)
	a, b := twoReplicas(t, fmt.Sprintf("  - name: s\n    url: %s\n", semantics.URL))
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	sid := onA.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	list := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"resources/list"}`, h)
	var resources struct{ Resources []struct{ URI string } }
	_ = json.Unmarshal(list.msg.Result, &resources)
	uri := ""
	for _, r := range resources.Resources {
		if strings.HasSuffix(r.URI, "watched.txt") {
			uri = r.URI
		}
	}
	if r := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"`+uri+`"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("subscribe on A: %d %s", r.status, r.body)
	}
	touch := func(id int) {
		t.Helper()
		if r := onA.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"s__touch"}}`, id), h); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("touch: %d %s", r.status, r.body)
		}
	}
	conn, drop := context.WithCancel(t.Context())
	_, first := onA.openStandalone(conn, sid)
	touch(3)
	if m := first.next(t, "an update on A's stream"); m.Method != "notifications/resources/updated" {
		t.Fatalf("on A: %+v", m)
	}
	drop() // A keeps the stream for a resume that will not come
	_, second := onB.openStandalone(t.Context(), sid)
	// The move is announced asynchronously: touch until the stream on B hears of it, fewer
	// times than the stream kept on A holds (past that, it would be dropped as unread anyway).
	id := 3
	testwait.Until(t, 20*time.Second, "an update raised on A to reach the stream opened on B", func() bool {
		if id++; id > 100 {
			t.Fatal("100 updates went to the stream kept on A, none to the one opened on B")
		}
		touch(id)
		select {
		case m := <-second.messages:
			if m.Method != "notifications/resources/updated" {
				t.Fatalf("on B: %+v", m)
			}
			return true
		default:
			return false
		}
	})
}

// TestForwardedCallProgressComesBeforeItsResult: a call forwarded to the replica holding the
// session's own connection reports progress there; the progress reaches the client's stream,
// on the replica it called, before the result, call after call.
func TestForwardedCallProgressComesBeforeItsResult(t *testing.T) {
	a, b := twoReplicas(t, upstreamYAML("r", "reverse", "    isolation: session\n"))
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	sid := onA.initializeAs("2025-11-25", `{}`)
	// The session's connection opens on A, with its first call.
	if r := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__cancels"}}`, map[string]string{"Mcp-Session-Id": sid}); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("first call on A: %d %s", r.status, r.body)
	}
	for i := range 30 {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"r__progress_fast","_meta":{"progressToken":"p%d"}}}`, 100+i, i)
		stream := readSSE(t, onB.post(ctxT(t), sid, body).Body)
		progress := 0
		for {
			m := stream.next(t, "the forwarded call's progress and result")
			if m.Method == "notifications/progress" {
				progress++
				continue
			}
			if !m.isResponse() {
				t.Fatalf("call %d: unexpected %+v", i, m)
			}
			break
		}
		if progress != 3 {
			t.Fatalf("call %d: %d progress notifications before the result, want 3", i, progress)
		}
	}
}

// TestDrainWaitsForForwardedCalls: a replica draining counts the calls it runs for others on a
// session's own connection among its requests in flight: it is not idle until they end.
func TestDrainWaitsForForwardedCalls(t *testing.T) {
	a, b := twoReplicas(t, upstreamYAML("r", "reverse", "    isolation: session\n"))
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	sid := onA.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	if r := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"r__cancels"}}`, h); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("first call on A: %d %s", r.status, r.body)
	}
	// Runs on A, for B, until cancelled; its progress says that the upstream has it.
	stream := readSSE(t, onB.post(ctxT(t), sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"r__hold","_meta":{"progressToken":"h"}}}`).Body)
	if m := stream.next(t, "the held call's progress"); m.Method != "notifications/progress" {
		t.Fatalf("first event: %+v", m)
	}
	a.gw.Drain()
	idle := a.gw.Idle()
	// Idle is told by a goroutine of its own: give it a moment to say so wrongly. (Under load
	// a broken drain may pass this check; a correct one never fails it.)
	if testwait.Within(300*time.Millisecond, func() bool {
		select {
		case <-idle:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("A is idle while a call it runs for B is in flight")
	}
	if r := onB.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`, h); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	select {
	case <-idle:
	case <-time.After(waitBound):
		t.Fatal("A is not idle after the forwarded call was cancelled")
	}
}

// TestCancelThatComesBeforeItsCall: behind a balancer without affinity a client's cancel may
// reach a replica before the call it cancels has begun anywhere. The call then ends without an
// answer when it comes, whether the cancel landed on the replica that gets the call or on the
// other one, instead of running until the upstream gives up.
func TestCancelThatComesBeforeItsCall(t *testing.T) {
	a, b := twoReplicas(t, upstreamYAML("r", "reverse", ""))
	onA, onB := rawClient{t: t, url: a.url}, rawClient{t: t, url: b.url}
	sid := onA.initializeAs("2025-11-25", `{}`)
	h := map[string]string{"Mcp-Session-Id": sid}
	for _, tt := range []struct {
		name     string
		cancelOn rawClient
		id       int
	}{
		{"the cancel on the call's replica", onA, 5},
		{"the cancel on the other replica", onB, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cancel := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, tt.id)
			if r := tt.cancelOn.do(http.MethodPost, cancel, h); r.status != http.StatusAccepted {
				t.Fatalf("cancel: %d %s", r.status, r.body)
			}
			call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"r__block"}}`, tt.id)
			resp := onA.post(ctxT(t), sid, call)
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("call: %d", resp.StatusCode)
			}
			stream := readSSE(t, resp.Body)
			select {
			case m, ok := <-stream.messages:
				if ok {
					t.Fatalf("the cancelled call's stream carried %+v; want it to end without an answer", m)
				}
			case <-time.After(waitBound):
				t.Fatalf("the call cancelled before it came still ran after %s", waitBound)
			}
		})
	}
	// A call that began before the cancel reached it is stopped upstream by the cancel the
	// gateway sends, which the upstream reads on its own time.
	testwait.Until(t, 10*time.Second, "no block call left running upstream", func() bool {
		r := onA.do(http.MethodPost, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"r__blocking"}}`, h)
		return r.status == http.StatusOK && r.msg.Error == nil && strings.Contains(string(r.body), `"text":"0"`)
	})
}

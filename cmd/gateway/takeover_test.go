package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
)

// balancer stands for a load balancer without sticky sessions in front of the replicas: it
// forwards every request to its current target, which the test moves when a replica dies.
type balancer struct {
	url    string
	target atomic.Pointer[url.URL]

	mu sync.Mutex
	// resumes counts the GETs with Last-Event-ID each target answered 200.
	resumes map[string]int
}

func newBalancer(t *testing.T, target string) *balancer {
	t.Helper()
	lb := &balancer{resumes: map[string]int{}}
	lb.moveTo(target)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			to := lb.target.Load()
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = to.Scheme, to.Host, to.Host
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Method == http.MethodGet && resp.Request.Header.Get("Last-Event-ID") != "" && resp.StatusCode == http.StatusOK {
				lb.mu.Lock()
				lb.resumes[resp.Request.URL.Host]++
				lb.mu.Unlock()
			}
			return nil
		},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	lb.url = srv.URL + "/mcp"
	return lb
}

func (lb *balancer) moveTo(target string) {
	u, err := url.Parse(target)
	if err != nil {
		panic(err)
	}
	lb.target.Store(u)
}

// resumedOn reports how many streams were resumed (200) on target.
func (lb *balancer) resumedOn(target string) int {
	u, _ := url.Parse(target)
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.resumes[u.Host]
}

// waitLoggedEvents waits until the Redis event log of stream streamID holds n events.
func (cl *crossCluster) waitLoggedEvents(t *testing.T, streamID string, n int) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.redis})
	defer c.Close()
	waitFor(t, fmt.Sprintf("the event log to hold %d events of stream %s", n, streamID), func() bool {
		keys, err := testredis.Keys(cl.redis, cl.prefix)
		if err != nil {
			return false
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, ":ev:"+streamID) {
				continue
			}
			entries, err := c.XRange(context.Background(), k, "-", "+").Result()
			if err != nil {
				return false
			}
			events := 0
			for _, e := range entries {
				if _, ok := e.Values["d"]; ok {
					events++
				}
			}
			return events >= n
		}
		return false
	})
}

// waitMethod reads a stream until a message of method comes (others are skipped), and
// returns its event.
func waitMethod(t *testing.T, st *eventStream, method string, where ...*node) (sseFrame, rpcMsg) {
	t.Helper()
	for {
		f, m, err := st.nextMessage(eventBound)
		if err != nil {
			t.Fatalf("waiting for %s: %v%s", method, err, tails(where...))
		}
		if m.Method == method {
			return f, m
		}
	}
}

// TestStandaloneStreamResumedOnAnotherReplicaDelivers: two replicas, A and B. A raw client
// has its standalone stream on A, reads a list change there and leaves; a resource update
// reaches the stream while it is away. The official Go SDK client has its standalone stream
// on A through a balancer. A is killed (SIGKILL) and the balancer moves to B. Resumed on B
// with Last-Event-ID, the raw client gets the update it missed from A's log, then the events
// caused after the kill: a tool added upstream (list_changed) and, once A's subscription was
// taken over, a resource update; a resume of the taken-over stream goes on delivering rather
// than end at once. The SDK client, which resumes by itself, hears of the tool added after
// the kill, and goes on working through B.
func TestStandaloneStreamResumedOnAnotherReplicaDelivers(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	cl.config += fmt.Sprintf("  - name: many\n    transport: streamable-http\n    url: %s\n", serveUpstream(t, "many"))
	a, b := cl.start("a"), cl.start("b")
	ctx := testCtx(t, 2*time.Minute)

	lb := newBalancer(t, a.url)
	changed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "sdk", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: lb.url}, nil)
	if err != nil {
		t.Fatalf("SDK client through the balancer: %v%s", err, tails(a))
	}
	t.Cleanup(func() { _ = cs.Close() })
	drain := func() {
		for {
			select {
			case <-changed:
			default:
				return
			}
		}
	}
	heard := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(eventBound):
			t.Fatalf("the SDK client did not hear of %s%s", what, tails(a, b))
		}
	}

	s := cl.session(t, ctx, a, "{}")
	uri := watchedURI(t, ctx, s, a)
	if err := subscribe(ctx, s, a, uri, true); err != nil {
		t.Fatalf("%v%s", err, tails(a))
	}
	stream := openStandalone(t, ctx, s, a)
	if prime, err := stream.next(eventBound); err != nil || prime.id == "" {
		t.Fatalf("the standalone stream on A: %v %+v, want its priming event%s", err, prime, tails(a))
	}
	if _, err := s.callTool(ctx, a.url, "many__add_tool", nil); err != nil {
		t.Fatalf("many__add_tool on A: %v%s", err, tails(a))
	}
	last, _ := waitMethod(t, stream, "notifications/tools/list_changed", a)
	heard("the tool added before the kill")
	stream.close()
	// Away from its stream, the client misses an update: A keeps it, and logs it.
	if text, err := s.callTool(ctx, a.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on A: %q %v%s", text, err, tails(a))
	}
	streamID := last.id[:strings.LastIndexByte(last.id, '.')]
	cl.waitLoggedEvents(t, streamID, 2)

	a.kill(t)
	lb.moveTo(b.url)

	resumed, err := s.open(ctx, b.url, "", last.id)
	if err != nil {
		t.Fatalf("resume on B after %s: %v%s", last.id, err, tails(b))
	}
	t.Cleanup(resumed.close)
	if _, m := waitMethod(t, resumed, "notifications/resources/updated", b); m.param("uri") != uri {
		t.Errorf("the update missed, resumed on B: %s, want %s", m.Params, uri)
	}
	// Caused after the kill: the SDK client's stream is resumed on B by then.
	waitWithin(t, eventBound, "the SDK client to resume its stream on B", func() bool { return lb.resumedOn(b.url) > 0 })
	drain()
	if _, err := s.callTool(ctx, b.url, "many__add_tool", nil); err != nil {
		t.Fatalf("many__add_tool on B: %v%s", err, tails(b))
	}
	waitMethod(t, resumed, "notifications/tools/list_changed", b)
	heard("the tool added after the kill")

	var counts string
	waitWithin(t, eventBound, "B to subscribe upstream for A's subscriber", func() bool {
		counts, _ = s.callTool(ctx, b.url, "sem__sub_counts", nil)
		return counts == "subscribe=2 unsubscribe=0"
	})
	if text, err := s.callTool(ctx, b.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on B: %q %v%s", text, err, tails(b))
	}
	f, _ := waitMethod(t, resumed, "notifications/resources/updated", b)

	// Resumed again, the stream goes on: the next change comes on it, it does not end at once.
	resumed.close()
	again, err := s.open(ctx, b.url, "", f.id)
	if err != nil {
		t.Fatalf("resume on B again after %s: %v%s", f.id, err, tails(b))
	}
	t.Cleanup(again.close)
	drain()
	if _, err := s.callTool(ctx, b.url, "many__add_tool", nil); err != nil {
		t.Fatalf("many__add_tool on B: %v%s", err, tails(b))
	}
	if _, m, err := again.nextMessage(eventBound); err != nil || m.Method != "notifications/tools/list_changed" {
		if errors.Is(err, errStreamEnded) {
			t.Fatalf("the stream resumed again on B ended at once%s", tails(b))
		}
		t.Fatalf("the stream resumed again on B: %v %s, want the list change%s", err, m.Method, tails(b))
	}
	heard("the third tool added")
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Errorf("the SDK client after the takeover: %v", err)
	}
}

// waitKey waits until Redis holds a key of the cluster's that ends in suffix.
func (cl *crossCluster) waitKey(t *testing.T, suffix string) {
	t.Helper()
	waitFor(t, "a key …"+suffix+" in Redis", func() bool {
		keys, err := testredis.Keys(cl.redis, cl.prefix)
		if err != nil {
			return false
		}
		for _, k := range keys {
			if strings.HasSuffix(k, suffix) {
				return true
			}
		}
		return false
	})
}

// dropLog deletes what Redis holds of stream streamID's log, as its expiry would.
func (cl *crossCluster) dropLog(t *testing.T, streamID string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.redis})
	defer c.Close()
	keys, err := testredis.Keys(cl.redis, cl.prefix)
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0
	for _, k := range keys {
		for _, kind := range []string{":ev:", ":evm:", ":evp:"} {
			if strings.HasSuffix(k, kind+streamID) {
				if err := c.Del(context.Background(), k).Err(); err != nil {
					t.Fatal(err)
				}
				dropped++
			}
		}
	}
	if dropped == 0 {
		t.Fatalf("no key of stream %s's log in Redis", streamID)
	}
}

// waitLoggedSeq waits until the Redis event log of stream streamID holds event seq.
func (cl *crossCluster) waitLoggedSeq(t *testing.T, streamID string, seq uint64) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: cl.redis})
	defer c.Close()
	id := fmt.Sprintf("%d-0", seq+1) // an event's entry id (session.RedisEventLog)
	waitFor(t, fmt.Sprintf("the event log to hold event %d of stream %s", seq, streamID), func() bool {
		keys, err := testredis.Keys(cl.redis, cl.prefix)
		if err != nil {
			return false
		}
		for _, k := range keys {
			if strings.HasSuffix(k, ":ev:"+streamID) {
				entries, err := c.XRange(context.Background(), k, id, id).Result()
				return err == nil && len(entries) == 1
			}
		}
		return false
	})
}

// TestCrossReplicaLongStandaloneStreamTakenOver: a standalone stream on A carries more
// events than the event log keeps of a stream (1000), which trims its first entries; A is
// killed. Resumed on B after its last event, it is still known as the session's standalone
// stream: B takes it over, and it goes on delivering rather than end at once.
func TestCrossReplicaLongStandaloneStreamTakenOver(t *testing.T) {
	cl := newCrossCluster(t, "info")
	a, b := cl.start("a"), cl.start("b")
	ctx := testCtx(t, 2*time.Minute)
	s := cl.session(t, ctx, b, "{}")
	uri := watchedURI(t, ctx, s, b)
	if err := subscribe(ctx, s, b, uri, true); err != nil {
		t.Fatalf("%v%s", err, tails(b))
	}
	stream := openStandalone(t, ctx, s, a)
	if prime, err := stream.next(eventBound); err != nil || prime.id == "" {
		t.Fatalf("the standalone stream on A: %v %+v, want its priming event%s", err, prime, tails(a))
	}

	const updates = 1100
	touches := make(chan struct{}, updates)
	for range updates {
		touches <- struct{}{}
	}
	close(touches)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range 8 {
		wg.Go(func() {
			for range touches {
				if text, err := s.callTool(ctx, a.url, "sem__touch", nil); err != nil || text != "touched" {
					err = fmt.Errorf("sem__touch on A: %q %v", text, err)
					failed.Store(&err)
					return
				}
			}
		})
	}
	var last sseFrame
	for i := range updates {
		f, m, err := stream.nextMessage(eventBound)
		if err != nil || m.Method != "notifications/resources/updated" || f.id == "" {
			t.Fatalf("update %d on A's standalone stream: %v %s%s", i+1, err, m.Method, tails(a, b))
		}
		last = f
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatal(*err)
	}
	dot := strings.LastIndexByte(last.id, '.')
	n, _ := strconv.ParseUint(last.id[dot+1:], 10, 64)
	cl.waitLoggedSeq(t, last.id[:dot], n)

	a.kill(t)
	if _, err := stream.rest(eventBound); err != nil {
		t.Fatalf("A's stream after SIGKILL: %v", err)
	}
	waitWithin(t, eventBound, "B to see A's lease end", func() bool { return strings.Contains(b.logs.String(), "lease ended") })
	resumed, err := s.open(ctx, b.url, "", last.id)
	if err != nil {
		t.Fatalf("resume on B after %s: %v%s", last.id, err, tails(b))
	}
	t.Cleanup(resumed.close)
	if text, err := s.callTool(ctx, b.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on B: %q %v%s", text, err, tails(b))
	}
	if _, m, err := resumed.nextMessage(eventBound); err != nil || m.Method != "notifications/resources/updated" {
		if errors.Is(err, errStreamEnded) {
			t.Fatalf("the stream resumed on B ended at once: taken for a call's stream%s", tails(b))
		}
		t.Fatalf("the stream resumed on B: %v %s, want the update%s", err, m.Method, tails(b))
	}
}

// TestCrossReplicaHeldCallWhoseLogExpiredIsAnswered: a call held for an operator on A is read
// on B (its stream resumed there, followed while A runs); its stream's log expires while it
// is held, and A is killed. The replica taking the call over cannot go on with the stream,
// whose log is gone: the client on B gets an answer all the same, that the call did not run,
// and the stream ends.
func TestCrossReplicaHeldCallWhoseLogExpiredIsAnswered(t *testing.T) {
	hc := newHeldCluster(t)
	a, b, c := hc.a, hc.b, hc.c
	ctx := testCtx(t, time.Minute)
	s := hc.session(t, ctx, c, "{}")
	const callID = 9
	st, err := s.open(ctx, a.url, toolCall(callID, "alpha__echo", map[string]any{"text": "deploy"}, ""), "")
	if err != nil {
		t.Fatalf("alpha__echo on A: %v%s", err, tails(a))
	}
	defer st.close()
	prime, err := st.next(eventBound)
	if err != nil || prime.id == "" || prime.data != "" {
		t.Fatalf("first event on A's stream: %v %+v, want the priming event%s", err, prime, tails(a))
	}
	waitWithin(t, eventBound, "the call held on A to be listed on B", func() bool { return hc.heldID(ctx, b) != "" })
	resumed, err := s.open(ctx, b.url, "", prime.id)
	if err != nil {
		t.Fatalf("resume on B after %s: %v%s", prime.id, err, tails(b))
	}
	defer resumed.close()

	hc.dropLog(t, prime.id[:strings.LastIndexByte(prime.id, '.')])
	a.kill(t)
	got, err := resumed.rest(eventBound)
	if err != nil {
		t.Errorf("the stream resumed on B: %v%s", err, tails(b, c))
	}
	var messages []string
	for _, f := range got {
		if f.data != "" {
			messages = append(messages, f.data)
		}
	}
	if len(messages) != 1 {
		t.Fatalf("resumed on B: %q, want the held call's answer%s", messages, tails(b, c))
	}
	m, err := parseMsg(messages[0])
	if err != nil || !m.isResponse(fmt.Sprint(callID)) || m.Error != nil {
		t.Fatalf("the held call's answer: %s, want a tool result", messages[0])
	}
	if text, err := m.toolText(); err == nil || !strings.Contains(text, "did not run") {
		t.Errorf("the held call's answer: %s (%v), want a tool error saying that it did not run", messages[0], err)
	}
}

// TestCrossReplicaStaleResumeLeavesTheNewStandaloneStream: a client's standalone stream on A
// dies with A; the client opens a new one on C. A later resume of the old one on B (a stale
// Last-Event-ID) does not take the old one over: it is refused, and the new stream on C
// stays, and delivers.
func TestCrossReplicaStaleResumeLeavesTheNewStandaloneStream(t *testing.T) {
	cl := newCrossCluster(t, "debug")
	a, b, c := cl.start("a"), cl.start("b"), cl.start("c")
	ctx := testCtx(t, time.Minute)
	s := cl.session(t, ctx, c, "{}")
	uri := watchedURI(t, ctx, s, c)
	if err := subscribe(ctx, s, c, uri, true); err != nil {
		t.Fatalf("%v%s", err, tails(c))
	}
	old := openStandalone(t, ctx, s, a)
	prime, err := old.next(eventBound)
	if err != nil || prime.id == "" {
		t.Fatalf("the standalone stream on A: %v %+v, want its priming event%s", err, prime, tails(a))
	}
	cl.waitKey(t, ":ev:"+prime.id[:strings.LastIndexByte(prime.id, '.')])
	a.kill(t)
	waitWithin(t, eventBound, "B to see A's lease end", func() bool { return strings.Contains(b.logs.String(), "lease ended") })

	cur := openStandalone(t, ctx, s, c)
	curPrime, err := cur.next(eventBound)
	if err != nil || curPrime.id == "" {
		t.Fatalf("the new standalone stream on C: %v %+v%s", err, curPrime, tails(c))
	}
	cl.waitKey(t, ":ev:"+curPrime.id[:strings.LastIndexByte(curPrime.id, '.')])

	stale, err := s.open(ctx, b.url, "", prime.id)
	var status *statusError
	if !errors.As(err, &status) || status.code != http.StatusBadRequest {
		t.Errorf("the stale resume on B: %v, want 400: the old stream is replaced", err)
	}
	if err == nil {
		defer stale.close()
	}
	if text, err := s.callTool(ctx, c.url, "sem__touch", nil); err != nil || text != "touched" {
		t.Fatalf("sem__touch on C: %q %v%s", text, err, tails(c))
	}
	waitUpdate(t, cur, uri, b, c)
}

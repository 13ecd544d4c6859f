package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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

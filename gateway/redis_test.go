package gateway_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/tcprelay"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

// redisStoreYAML is the session_store of a gateway on the Redis at addr, under a key prefix
// of the test's own, with short timeouts so that an outage shows at once.
func redisStoreYAML(t *testing.T, addr string) string {
	t.Helper()
	return fmt.Sprintf(`session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  dial_timeout: 300ms
  read_timeout: 300ms
  write_timeout: 300ms
`, addr, testredis.Prefix(t, testredis.Addr(t))) + keysYAML
}

// keysYAML is the key list of test gateways on Redis, a line of top-level YAML.
const keysYAML = "keys: [{id: test, secret: \"dGhlIGtleSBvZiB0aGUgZ2F0ZXdheSB0ZXN0cyAwMTIz\"}]\n"

// gatewayBehindRelay starts a gateway whose Redis is behind a relay the test can sever, with
// one upstream alpha, and a session on it.
func gatewayBehindRelay(t *testing.T) (*tcprelay.Relay, rawClient, map[string]string) {
	t.Helper()
	relay, err := tcprelay.New(testredis.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+redisStoreYAML(t, relay.Addr())+"upstreams:"+upstreamYAML("alpha", "alpha", ""), nil)
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	return relay, c, map[string]string{"Mcp-Session-Id": sid}
}

// TestRedisOutage: with Redis cut (a relay in front of the real server, severed), requests
// that need it fail at once with 503 and say why, /readyz is not ready and names the store;
// once Redis is back the gateway recovers by itself and the session is intact.
func TestRedisOutage(t *testing.T) {
	relay, c, h := gatewayBehindRelay(t)
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if r := c.do(http.MethodPost, list, h); r.status != http.StatusOK {
		t.Fatalf("tools/list before the outage: %d %s", r.status, r.body)
	}
	readyz := func() (int, string) {
		resp, err := http.Get(strings.TrimSuffix(c.url, "/mcp") + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Status       string                       `json:"status"`
			SessionStore struct{ Type, State string } `json:"session_store"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Status + " " + body.SessionStore.Type + " " + body.SessionStore.State
	}
	if code, state := readyz(); code != http.StatusOK || state != "ready redis ok" {
		t.Fatalf("/readyz before the outage: %d %s", code, state)
	}

	relay.Sever()
	// Each request is bounded by the client's own deadline: one that hangs fails the test.
	for _, tc := range []struct{ name, body string }{
		{"a request of a session", list},
		{"initialize", initBody},
	} {
		headers := h
		if tc.name == "initialize" {
			headers = nil
		}
		r := c.do(http.MethodPost, tc.body, headers)
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "session store is unavailable") || r.header.Get("Retry-After") == "" {
			t.Errorf("%s while Redis is cut: %d (Retry-After %q) %s, want 503 with Retry-After saying the store is unavailable", tc.name, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	if code, state := readyz(); code != http.StatusServiceUnavailable || state != "session_store_unreachable redis unreachable" {
		t.Errorf("/readyz while Redis is cut: %d %s, want 503 naming the store", code, state)
	}

	relay.Restore()
	waitUntil(t, "the gateway to be ready again", func() bool {
		code, _ := readyz()
		return code == http.StatusOK
	})
	if r := c.do(http.MethodPost, list, h); r.status != http.StatusOK || !strings.Contains(string(r.body), "alpha__echo") {
		t.Errorf("tools/list with the session of before the outage: %d %s", r.status, r.body)
	}
}

// TestRedisRoundTripsPerCall: a tools/call costs one Redis round trip before it is forwarded
// (reading the session) and at most one after; counted by a relay in front of Redis.
func TestRedisRoundTripsPerCall(t *testing.T) {
	relay, c, h := gatewayBehindRelay(t)
	call := func(i int) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"x"}}}`, i)
		if r := c.do(http.MethodPost, body, h); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	call(1) // warm: the store learns the session's TTL
	const calls = 50
	before := relay.Sends()
	for i := range calls {
		call(i + 10)
	}
	perCall := float64(relay.Sends()-before) / calls
	t.Logf("Redis round trips per tools/call: %.2f", perCall)
	if perCall > 2 {
		t.Errorf("%.2f Redis round trips per tools/call, want at most 2 (one before, one after)", perCall)
	}
	if perCall < 1 {
		t.Errorf("%.2f Redis round trips per tools/call: the session is not read from Redis for each request (a cache would serve a deleted session)", perCall)
	}
}

// TestRedisSessionsSurviveAGatewayRestart: a session lives in Redis, not in the process: a
// new gateway on the same Redis serves it, and a DELETE there ends it everywhere.
func TestRedisSessionsSurviveAGatewayRestart(t *testing.T) {
	store := redisStoreYAML(t, testredis.Addr(t))
	first := startGateway(t, "listen: 127.0.0.1:0\n"+store+"upstreams:"+upstreamYAML("alpha", "alpha", ""), nil)
	sid := rawClient{t: t, url: first.url}.initializeAs("2025-11-25", `{"roots":{}}`)
	first.close()

	second := startGateway(t, "listen: 127.0.0.1:0\n"+store+"upstreams:"+upstreamYAML("alpha", "alpha", ""), nil)
	defer second.close()
	c := rawClient{t: t, url: second.url}
	h := map[string]string{"Mcp-Session-Id": sid}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"again"}}}`, h)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "alpha:again") {
		t.Fatalf("the session after a restart: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodDelete, "", h); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, h); r.status != http.StatusNotFound {
		t.Errorf("after DELETE: %d %s, want 404", r.status, r.body)
	}
}

// TestRedisReverseRequestsAndResume runs the resumable-stream flow (a call that samples and
// elicits while its client's connection is down) on the Redis store: the records of requests
// sent to the client are in Redis.
func TestRedisReverseRequestsAndResume(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+redisStoreYAML(t, testredis.Addr(t))+"upstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	resumeAfterDroppedPOSTStream(t, tg)
}

// TestRedisOutageIsLoggedNotShouted: while Redis is cut, every request fails with 503, but
// the log gets the first failure of each kind in full, then at most one line per kind and
// interval (a minute, on the gateway's clock) with the count of those held back, and once
// Redis answers again, one line saying so, with how many failures were held back in all.
func TestRedisOutageIsLoggedNotShouted(t *testing.T) {
	clock := testclock.New(time.Now())
	logs := &lockedBuffer{}
	relay, err := tcprelay.New(testredis.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	tg := startGateway(t, "listen: 127.0.0.1:0\n"+redisStoreYAML(t, relay.Addr())+"upstreams:"+upstreamYAML("alpha", "alpha", ""),
		&gateway.Options{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	t.Cleanup(tg.close)
	c := rawClient{t: t, url: tg.url}
	h := map[string]string{"Mcp-Session-Id": c.initializeAs("2025-11-25", `{}`)}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`

	relay.Sever()
	fail := func(n int) {
		t.Helper()
		for range n {
			if r := c.do(http.MethodPost, list, h); r.status != http.StatusServiceUnavailable {
				t.Fatalf("tools/list while Redis is cut: %d %s", r.status, r.body)
			}
		}
	}
	failInit := func() {
		t.Helper()
		if r := c.do(http.MethodPost, initBody, nil); r.status != http.StatusServiceUnavailable {
			t.Fatalf("initialize while Redis is cut: %d %s", r.status, r.body)
		}
	}
	fail(40)
	failInit()
	failInit()
	clock.Advance(30 * time.Second)
	fail(10) // within the minute: held back
	clock.Advance(31 * time.Second)
	fail(5) // the first of these is logged, with the 49 held back before it

	relay.Restore()
	waitUntil(t, "a request to succeed once Redis is back", func() bool {
		return c.do(http.MethodPost, list, h).status == http.StatusOK
	})
	c.do(http.MethodPost, list, h)

	out := logs.String()
	var errorLines, reachable []string
	for line := range strings.Lines(out) {
		switch {
		case strings.Contains(line, "level=ERROR"):
			errorLines = append(errorLines, strings.TrimSpace(line))
		case strings.Contains(line, "reachable again"):
			reachable = append(reachable, strings.TrimSpace(line))
		}
	}
	// The first tools/list failure, the first initialize failure, the reminder a minute on.
	if len(errorLines) != 3 {
		t.Fatalf("%d error lines for 57 failed requests, want 3:\n%s", len(errorLines), strings.Join(errorLines, "\n"))
	}
	if !strings.Contains(errorLines[0], `msg="session store failed"`) || !strings.Contains(errorLines[0], "error=") || strings.Contains(errorLines[0], "suppressed=") {
		t.Errorf("the first line: %s, want the first failure in full", errorLines[0])
	}
	if !strings.Contains(errorLines[1], `msg="creating a session failed"`) || strings.Contains(errorLines[1], "suppressed=") {
		t.Errorf("the second line: %s, want the first failure of initialize in full", errorLines[1])
	}
	if !strings.Contains(errorLines[2], `msg="session store failed"`) || !strings.Contains(errorLines[2], "suppressed=49") {
		t.Errorf("the third line: %s, want the reminder with suppressed=49", errorLines[2])
	}
	if len(reachable) != 1 || !strings.Contains(reachable[0], "level=INFO") || !strings.Contains(reachable[0], "suppressed=54") {
		t.Errorf("recovery lines %q, want one, at info, with suppressed=54 (49 + 4 + the second initialize)", reachable)
	}
}

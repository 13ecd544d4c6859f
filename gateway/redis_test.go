package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/tcprelay"
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
`, addr, testredis.Prefix(t, testredis.Addr(t)))
}

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
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "session store is unavailable") {
			t.Errorf("%s while Redis is cut: %d %s, want 503 saying the store is unavailable", tc.name, r.status, r.body)
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

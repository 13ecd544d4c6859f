package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/tcprelay"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

// TestModernCallCostsNoRedisCommand: a 2026-07-28 tools/call served statelessly by a gateway
// on Redis sends Redis nothing when nothing stateful is involved; a shared rate limit, which
// counts in Redis, does send something, which shows the count can see a call's commands.
//
// What is counted: every write of the gateway to Redis, by a relay in front of Redis that only
// this gateway uses (other tests on the same Redis do not pass through it); with Redis's
// request-response protocol no write means no command. MONITOR, filtered by the test's key
// prefix, names the commands when there are some.
//
// Background traffic is kept out of the window rather than subtracted: the replica lease is
// an hour (renewed every 20 minutes) and idle sessions are looked for hourly, and the window
// opens only once the lease the bus takes at start is in Redis and a warm-up call has been
// served. A request's command therefore cannot hide, and a background one cannot pass for a
// request's.
func TestModernCallCostsNoRedisCommand(t *testing.T) {
	const calls = 20
	tests := []struct {
		name string
		// policy is the gateway's policy section, "" for none.
		policy string
		// wantCommands says whether the calls must send Redis something.
		wantCommands bool
	}{
		{name: "stateless call", wantCommands: false},
		{name: "shared rate limit", policy: "policy:\n  rate_limits:\n    - {key: principal, rate: 1000/s, burst: 1000, shared: true}\n", wantCommands: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := testredis.Addr(t)
			relay, err := tcprelay.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			prefix := testredis.Prefix(t, addr)
			yaml := fmt.Sprintf(`listen: 127.0.0.1:0
modern_protocol: true
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1h
`, relay.Addr(), prefix) + keysYAML + tt.policy + "upstreams:" + upstreamYAML("alpha", "alpha", "")
			tg := startGateway(t, yaml, &gateway.Options{ExpiryInterval: time.Hour})
			t.Cleanup(tg.close)
			c := rawClient{t: t, url: tg.url}

			waitUntil(t, "the replica's lease in Redis", func() bool {
				keys, err := testredis.Keys(addr, prefix)
				return err == nil && slices.Contains(keys, prefix+":replicas")
			})
			call := func(id int) {
				body := modernBody(id, "tools/call", `{"name":"alpha__echo","arguments":{"text":"x"}}`)
				r := c.do(http.MethodPost, body, modernHeaders("tools/call", "alpha__echo"))
				if r.status != http.StatusOK || r.msg.Error != nil || !strings.Contains(string(r.body), "alpha:x") {
					t.Fatalf("call %d: %d %s", id, r.status, r.body)
				}
				if sid := r.header.Get("Mcp-Session-Id"); sid != "" {
					t.Fatalf("call %d was given session %s: not served statelessly", id, sid)
				}
			}
			call(1) // warm-up: the catalog is listed, the routes are known

			stop := testredis.Monitor(t, addr)
			before := relay.Sends()
			for i := range calls {
				call(i + 10)
			}
			sends := relay.Sends() - before
			var ours []string
			for _, line := range stop() {
				if strings.Contains(line, prefix) {
					ours = append(ours, line)
				}
			}
			t.Logf("%d 2026-07-28 tools/call: %d writes to Redis, %d commands on the test's keys", calls, sends, len(ours))
			if got := sends > 0; got != tt.wantCommands {
				t.Errorf("%d calls sent Redis %d writes, want commands: %v; the commands on the test's keys:\n%s",
					calls, sends, tt.wantCommands, strings.Join(ours, "\n"))
			}
		})
	}
}

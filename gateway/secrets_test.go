package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

// TestNothingSecretInRedis: whoever reads the gateway's Redis (a dump, a SUBSCRIBE) gets no
// secret of its clients or upstreams: no session id, no client's bearer token or API key, no
// admin key, no upstream credential, neither in a key nor in a value nor in a message
// between replicas. Two replicas serve every feature that keeps something in Redis or sends
// something to the other replica: sessions (an OIDC user's, an API key's, one whose requests
// alternate between the replicas); a call held for an operator on a resumable stream,
// approved on the other replica and resumed there; the approval remembered and honoured
// there; an upstream whose tools are pinned; and a principal-isolated upstream reached by
// token exchange, whose calls on the replica without the user's connection go to the one
// with it, with the user's token to exchange. Every pub/sub message on the prefix is
// recorded, and Redis is dumped while the call is held and at the end.
func TestNothingSecretInRedis(t *testing.T) {
	iss := testissuer.New(t)
	tokens := newTokenEndpoint(t)
	exchanged := newRecordingUpstream(t, "alpha")
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	published := recordPubSub(t, rdb, prefix)

	const (
		clientKey      = "mfk_client-key-of-the-secrets-test"
		upstreamHeader = "upstream-static-credential-3b7e19"
		clientSecret   = "upstream-client-secret-c4d21f"
	)
	yaml := authYAML(iss, clientKey, adminYAML("")+fmt.Sprintf(`policy:
  approval: {timeout: 30s, remember: 10m, by: operator}
  rules:
    - {name: echo-needs-approval, effect: approve, match: {upstreams: [b], tools: [echo]}}
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
%supstreams:
  - name: x
    url: %s
    isolation: principal
    headers: {X-Upstream-Key: %q}
    credentials:
      client_credentials: {token_url: %q, client_id: manifold, client_secret: %q}
      token_exchange: {token_url: %q, client_id: manifold, client_secret: %q}
%s`, addr, prefix, keysYAML, exchanged.URL, upstreamHeader, tokens.URL, clientSecret, tokens.URL, clientSecret,
		upstreamYAML("b", "beta", "    pinning: withhold\n")[1:]))
	a, b := startGateway(t, yaml, nil), startGateway(t, yaml, nil)
	t.Cleanup(a.close)
	t.Cleanup(b.close)
	adminB := startAdmin(t, b)
	ctx := ctxT(t)
	aliceToken := userToken(t, iss, "alice")
	onA, onB := authedClient{rawClient{t: t, url: a.url}, aliceToken}, authedClient{rawClient{t: t, url: b.url}, aliceToken}

	// Alice's call on A is held for an operator, on a stream that becomes resumable.
	sid := onA.initialize()
	conn, drop := context.WithCancel(ctx)
	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"b__echo","arguments":{"text":"deploy"}}}`
	held := readSSE(t, onA.post(conn, sid, call).Body)
	waitUntil(t, "the held call's stream to give an event id", func() bool { return held.lastID.Load() != nil })
	eventID := *held.lastID.Load()
	drop()
	decided := adminB.waitHeld(1)[0]
	whileHeld := dumpRedis(t, rdb, prefix)
	if !strings.Contains(strings.Join(keysOf(whileHeld), " "), ":hold:") {
		t.Errorf("no held call's record in Redis while the call is held; keys: %v", keysOf(whileHeld))
	}

	// Approved on B, and resumed there.
	if code := adminB.do("POST", "/api/approvals/"+decided.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve on B: %d", code)
	}
	resumed := readSSE(t, onB.get(ctx, sid, eventID).Body)
	if m := resumed.next(t, "the approved call's result, resumed on B"); string(m.ID) != "7" || !strings.Contains(string(m.Result), "beta:deploy") {
		t.Fatalf("resumed on B: %+v", m)
	}
	// Remembered: the same call on B runs at once.
	if r := onB.do(http.MethodPost, call, map[string]string{"Authorization": "Bearer " + aliceToken, "Mcp-Session-Id": sid}); r.status != http.StatusOK || !strings.Contains(string(r.msg.Result), "beta:deploy") {
		t.Fatalf("the same call on B, its approval remembered: %d %s", r.status, r.body)
	}

	// Alice's requests alternate between the replicas: the calls that land on the replica
	// without her connection to x go to the one with it, with her token to exchange there.
	rr := newRoundRobin(t, a.url, b.url)
	client := mcp.NewClient(&mcp.Implementation{Name: "alice", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.url, HTTPClient: &http.Client{Transport: bearer{aliceToken, rr}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	for range 4 {
		if res := callTool(t, cs, "x__echo", map[string]any{"text": "hi"}); res.IsError {
			t.Fatalf("x__echo: %q", resultText(res))
		}
	}
	if n := a.gw.IsolatedConnections("x") + b.gw.IsolatedConnections("x"); n != 1 {
		t.Fatalf("%d connections of alice's to x, want 1: her calls on the other replica went to it", n)
	}
	exchangedToken := "x-" + aliceToken[len(aliceToken)-8:]
	if !exchanged.authorizations()["Bearer "+exchangedToken] {
		t.Fatalf("x never got alice's exchanged token: %v", exchanged.authorizations())
	}

	// A service's session, with its API key.
	service := authedClient{rawClient{t: t, url: b.url}, clientKey}
	serviceSID := service.initialize()
	if r := service.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{"Authorization": "Bearer " + clientKey, "Mcp-Session-Id": serviceSID}); r.status != http.StatusOK {
		t.Fatalf("tools/list with the API key: %d %s", r.status, r.body)
	}

	atEnd := dumpRedis(t, rdb, prefix)
	messages := published()
	if len(messages) == 0 {
		t.Fatal("no message between the replicas was recorded")
	}
	secrets := map[string]string{
		"alice's raw session id":          sid,
		"alice's SDK session id":          cs.ID(),
		"the service's session id":        serviceSID,
		"alice's bearer token":            aliceToken,
		"alice's bearer token, signature": aliceToken[strings.LastIndexByte(aliceToken, '.')+1:],
		"the client's API key":            clientKey,
		"the admin API key":               adminKey,
		"x's static header":               upstreamHeader,
		"x's client secret":               clientSecret,
		"x's token for alice":             exchangedToken,
		"the gateway's own token for x":   "cc-manifold",
	}
	for what, secret := range secrets {
		for where, dump := range map[string]map[string]string{"while the call was held": whileHeld, "at the end": atEnd} {
			for key, value := range dump {
				if strings.Contains(key, secret) || strings.Contains(value, secret) {
					t.Errorf("%s is in Redis %s, in key %s: %.300q", what, where, key, value)
				}
			}
		}
		for _, m := range messages {
			if strings.Contains(m, secret) {
				t.Errorf("%s was published: %.300q", what, m)
			}
		}
	}
}

// authedClient is a rawClient that sends a bearer token with every request.
type authedClient struct {
	rawClient
	token string
}

// initialize starts a 2025-11-25 session without client capabilities and returns its id.
func (c authedClient) initialize() string {
	c.t.Helper()
	h := map[string]string{"Authorization": "Bearer " + c.token}
	r := c.do(http.MethodPost, initBody, h)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		c.t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	h["Mcp-Session-Id"] = sid
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, h); r.status != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: %d %s", r.status, r.body)
	}
	return sid
}

// post sends body in session sid and returns the response, its body unread.
func (c authedClient) post(ctx context.Context, sid, body string) *http.Response {
	c.t.Helper()
	return c.send(ctx, http.MethodPost, body, map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Mcp-Session-Id": sid})
}

// get resumes a stream of session sid after event lastEventID.
func (c authedClient) get(ctx context.Context, sid, lastEventID string) *http.Response {
	c.t.Helper()
	resp := c.send(ctx, http.MethodGet, "", map[string]string{"Accept": "text/event-stream", "Mcp-Session-Id": sid, "Last-Event-ID": lastEventID})
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("GET with Last-Event-ID: %d", resp.StatusCode)
	}
	return resp
}

func (c authedClient) send(ctx context.Context, method, body string, headers map[string]string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	c.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// recordPubSub records every message published on a channel under prefix (PSUBSCRIBE), as
// "channel payload", until the test ends. The function it returns gives those published so
// far: it publishes a marker of its own and waits for it, so that what was published before
// it call is in.
func recordPubSub(t *testing.T, rdb *redis.Client, prefix string) func() []string {
	t.Helper()
	ps := rdb.PSubscribe(t.Context(), prefix+"*")
	if _, err := ps.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	var mu sync.Mutex
	var msgs []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range ps.Channel() {
			mu.Lock()
			msgs = append(msgs, m.Channel+" "+m.Payload)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = ps.Close(); <-done })
	marker := prefix + ":test-marker"
	return func() []string {
		t.Helper()
		if err := rdb.Publish(t.Context(), marker, "end").Err(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the marker to be recorded", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(msgs) > 0 && msgs[len(msgs)-1] == marker+" end"
		})
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs[:len(msgs)-1]...)
	}
}

// dumpRedis returns every key under prefix with its value, whatever its type, as text.
func dumpRedis(t *testing.T, rdb *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := t.Context()
	dump := map[string]string{}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		kind, err := rdb.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		var value any
		switch kind {
		case "string":
			value, err = rdb.Get(ctx, key).Result()
		case "hash":
			value, err = rdb.HGetAll(ctx, key).Result()
		case "list":
			value, err = rdb.LRange(ctx, key, 0, -1).Result()
		case "set":
			value, err = rdb.SMembers(ctx, key).Result()
		case "zset":
			value, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		case "stream":
			value, err = rdb.XRange(ctx, key, "-", "+").Result()
		case "none":
			continue // expired since the scan
		default:
			t.Fatalf("key %s is of type %s, which the test does not read", key, kind)
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("read %s: %v", key, err)
		}
		dump[key] = fmt.Sprintf("%v", value)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(dump) == 0 {
		t.Fatal("nothing under the prefix in Redis")
	}
	return dump
}

func keysOf(dump map[string]string) []string {
	keys := make([]string, 0, len(dump))
	for k := range dump {
		keys = append(keys, k)
	}
	return keys
}

package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// listenResourcesYAML begins the config of a gateway with the 2026-07-28 face on; its
// upstreams follow.
const listenResourcesYAML = "listen: 127.0.0.1:0\nmodern_protocol: true\nmax_listens_per_principal: 4\nupstreams:"

// watchedURI is the semantics upstream's subscribable resource as the gateway lists it.
const watchedURI = "sem+file:///watched.txt"

// listenResourcesGateway is a gateway in front of the 2025-11-25 upstream "sem" (the
// semantics flavour: file:///watched.txt, its "touch" and "sub_counts"), whose policy hides
// file:///linked.txt from everyone.
func listenResourcesGateway(t *testing.T) *testGateway {
	t.Helper()
	tg := startGateway(t, listenResourcesYAML+upstreamYAML("sem", "semantics", "")+`
policy:
  rules:
    - {name: no-linked, effect: hide, match: {resources: ["file:///linked.txt"]}}
`, nil)
	t.Cleanup(tg.close)
	return tg
}

// subCounts calls the upstream's sub_counts through the gateway, as a 2026-07-28 client: the
// subscribes and unsubscribes the upstream saw, as "subscribe=N unsubscribe=M".
func subCounts(t *testing.T, url string) string {
	t.Helper()
	status, body := postAll(t, url, modernBody(90, "tools/call", `{"name":"sem__sub_counts"}`), modernHeaders("tools/call", "sem__sub_counts"))
	i := strings.Index(body, "subscribe=")
	if status != http.StatusOK || i < 0 {
		t.Fatalf("sub_counts: HTTP %d %s", status, body)
	}
	counts, _, _ := strings.Cut(body[i:], `"`)
	return counts
}

// acknowledged reads a listen's acknowledgement and returns the resource subscriptions it
// lists.
func acknowledged(t *testing.T, lc *listenClient) []string {
	t.Helper()
	ack := lc.next(t, "acknowledgement")
	if ack.Method != "notifications/subscriptions/acknowledged" {
		t.Fatalf("first message %+v, want the acknowledgement", ack)
	}
	var uris []string
	if list, ok := ack.Params.Notifications["resourceSubscriptions"].([]any); ok {
		for _, u := range list {
			uris = append(uris, fmt.Sprint(u))
		}
	}
	return uris
}

// TestListenResourceSubscriptions: a listen's resourceSubscriptions on a 2025-11-25 upstream
// is acknowledged with the URIs the caller may read and the upstream subscribed to (not one
// the policy hides, nor one whose subscribe the upstream refused); an update of the resource
// reaches it once, with the namespaced URI and the listen's id, of its JSON type, as
// subscriptionId; a listen that did not ask for the resource hears nothing of it.
func TestListenResourceSubscriptions(t *testing.T) {
	tg := listenResourcesGateway(t)
	const id = `"res-1"`
	asked := `{"notifications":{"resourceSubscriptions":["` + watchedURI + `","sem+file:///linked.txt","sem+file:///gone.txt"]}}`
	subscribed := openListen(t, t, tg.url, id, asked)
	if got := acknowledged(t, subscribed); !slices.Equal(got, []string{watchedURI}) {
		t.Fatalf("acknowledged resource subscriptions %q, want only %q (linked.txt is hidden, gone.txt refused upstream)", got, watchedURI)
	}
	other := openListen(t, t, tg.url, `2`, `{"notifications":{"toolsListChanged":true}}`)
	if got := acknowledged(t, other); got != nil {
		t.Fatalf("a listen for list changes acknowledged resource subscriptions %q", got)
	}

	status, body := postAll(t, tg.url, modernBody(3, "tools/call", `{"name":"sem__touch"}`), modernHeaders("tools/call", "sem__touch"))
	if status != http.StatusOK || !strings.Contains(body, "touched") {
		t.Fatalf("touch: HTTP %d %s", status, body)
	}
	m := subscribed.next(t, "resources/updated")
	if m.Method != "notifications/resources/updated" || m.Params.URI != watchedURI {
		t.Fatalf("got %+v, want notifications/resources/updated for %s", m, watchedURI)
	}
	if got := string(m.Params.Meta["io.modelcontextprotocol/subscriptionId"]); got != id {
		t.Errorf("the update's subscriptionId is %s, want %s", got, id)
	}

	// What was queued before Close is written before the completion result it sends.
	tg.gw.Close()
	for name, lc := range map[string]*listenClient{"the subscribed listen": subscribed, "the listen for list changes": other} {
		if m := lc.next(t, "completion result"); m.Result == nil {
			t.Errorf("%s got %+v before its end; want nothing more", name, m)
		}
	}
}

// TestListenSharesUpstreamSubscription: two listens and a 2025-11-25 session subscribed to
// one resource make one subscribe upstream; the session's unsubscribe leaves the upstream
// subscribed for the listens, and closing them unsubscribes it.
func TestListenSharesUpstreamSubscription(t *testing.T) {
	tg := listenResourcesGateway(t)
	params := `{"notifications":{"resourceSubscriptions":["` + watchedURI + `"]}}`
	listens := []*listenClient{openListen(t, t, tg.url, `1`, params), openListen(t, t, tg.url, `2`, params)}
	for _, lc := range listens {
		if got := acknowledged(t, lc); !slices.Equal(got, []string{watchedURI}) {
			t.Fatalf("acknowledged %q, want %q", got, watchedURI)
		}
	}
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	session := map[string]string{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"`+watchedURI+`"}}`, session); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("the session's resources/subscribe: HTTP %d %s", r.status, r.body)
	}
	if got := subCounts(t, tg.url); got != "subscribe=1 unsubscribe=0" {
		t.Fatalf("the upstream saw %s, want one subscribe for two listens and a session", got)
	}

	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"resources/unsubscribe","params":{"uri":"`+watchedURI+`"}}`, session); r.status != http.StatusOK || r.msg.Error != nil {
		t.Fatalf("the session's resources/unsubscribe: HTTP %d %s", r.status, r.body)
	}
	if got := subCounts(t, tg.url); got != "subscribe=1 unsubscribe=0" {
		t.Fatalf("after the session unsubscribed, the upstream saw %s; want it still subscribed for the listens", got)
	}

	listens[0].cancel()
	waitUntil(t, "the first listen to close", func() bool { return tg.gw.ListenStreams() == 1 })
	if got := subCounts(t, tg.url); got != "subscribe=1 unsubscribe=0" {
		t.Fatalf("with one listen left, the upstream saw %s; want it still subscribed", got)
	}
	listens[1].cancel()
	waitUntil(t, "the upstream to be unsubscribed once the last listen closed", func() bool {
		return subCounts(t, tg.url) == "subscribe=1 unsubscribe=1"
	})
}

// TestListenSDKSubscribe: the Go SDK's client in its default mode (2026-07-28) subscribes to a
// resource with a listen of its own, and its ResourceUpdatedHandler hears the upstream's
// update through the gateway; its Unsubscribe closes that listen, which unsubscribes the
// upstream.
func TestListenSDKSubscribe(t *testing.T) {
	tg := listenResourcesGateway(t)
	updates := make(chan string, 64)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updates <- req.Params.URI },
	})
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %q, want 2026-07-28", v)
	}
	ctx := ctxT(t)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: watchedURI}); err != nil {
		t.Fatal(err)
	}
	// Subscribe returns before the listen is acknowledged: touch until the update is heard.
	if got := touchUntilHeard(t, cs, "sem__touch", updates); got != watchedURI {
		t.Fatalf("update for %q, want %q", got, watchedURI)
	}
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: watchedURI}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the upstream to be unsubscribed once the client unsubscribed", func() bool {
		return subCounts(t, tg.url) == "subscribe=1 unsubscribe=1"
	})
}

// TestListenSubResourceUpdates: an update of a resource below a subscribed one reaches the
// listen, namespaced, unless the policy hides that resource from the listen's caller. Alice's
// session subscribes the upstream to two resources below watched.txt; bob listens to
// watched.txt, and a rule hides one of the two from him.
func TestListenSubResourceUpdates(t *testing.T) {
	const aliceKey, bobKey = "mfk_parts-alice", "mfk_parts-bob"
	tg := startGateway(t, listenResourcesYAML+upstreamYAML("sem", "semantics", "")+
		aliceAndBobYAML(aliceKey, bobKey, `{name: no-secret-for-bob, effect: hide, match: {principal: {api_keys: [bob]}, resources: ["file:///watched.txt/secret"]}}`), nil)
	t.Cleanup(tg.close)
	bob := openListenAs(t, t, tg.url, `"bob-1"`, `{"notifications":{"resourceSubscriptions":["`+watchedURI+`"]}}`, bobKey)
	if got := acknowledged(t, bob); !slices.Equal(got, []string{watchedURI}) {
		t.Fatalf("bob's listen acknowledged %q, want %q", got, watchedURI)
	}

	c := rawClient{t: t, url: tg.url}
	alice := map[string]string{"Authorization": "Bearer " + aliceKey}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"alice","version":"1"}}}`, alice)
	if r.status != http.StatusOK || r.header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("alice's initialize: HTTP %d %s", r.status, r.body)
	}
	alice["Mcp-Session-Id"], alice["MCP-Protocol-Version"] = r.header.Get("Mcp-Session-Id"), "2025-11-25"
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, alice); r.status != http.StatusAccepted {
		t.Fatalf("alice's notifications/initialized: HTTP %d %s", r.status, r.body)
	}
	for i, part := range []string{"secret", "part"} {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":"%s/%s"}}`, 2+i, watchedURI, part)
		if r := c.do(http.MethodPost, body, alice); r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("alice's subscribe to %s: HTTP %d %s", part, r.status, r.body)
		}
	}
	if r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sem__touch_parts"}}`, alice); r.status != http.StatusOK || !strings.Contains(string(r.body), "touched parts") {
		t.Fatalf("touch_parts: HTTP %d %s", r.status, r.body)
	}

	// The upstream announced secret first: had it reached bob, it would be read here.
	if m := bob.next(t, "resources/updated"); m.Method != "notifications/resources/updated" || m.Params.URI != watchedURI+"/part" {
		t.Fatalf("bob got %+v, want the update of %s/part (and never of the secret hidden from him)", m, watchedURI)
	}
	tg.gw.Close()
	if m := bob.next(t, "completion result"); m.Result == nil {
		t.Errorf("bob got %+v before his listen's end; want nothing more", m)
	}
}

// TestListenModernUpstreamResource: a resource of a 2026-07-28 upstream is subscribed with an
// upstream listen of its own, shared by the listens that ask for it: two listens make one
// subscription upstream, an update reaches each with its own subscriptionId, and closing both
// ends it. A resource whose upstream listen fails is left out of the acknowledgement.
func TestListenModernUpstreamResource(t *testing.T) {
	m := testupstream.NewModern(testupstream.ModernOptions{})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m.Server },
		&mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	tg := startGateway(t, listenResourcesYAML+"\n  - name: mod\n    url: "+srv.URL+"\n    protocol: 2026-07-28\n", nil)
	t.Cleanup(tg.close)
	const uri = "mod+file:///watched.txt"
	counts := func() string {
		t.Helper()
		status, body := postAll(t, tg.url, modernBody(90, "tools/call", `{"name":"mod__sub_counts"}`), modernHeaders("tools/call", "mod__sub_counts"))
		i := strings.Index(body, "subscribe=")
		if status != http.StatusOK || i < 0 {
			t.Fatalf("sub_counts: HTTP %d %s", status, body)
		}
		c, _, _ := strings.Cut(body[i:], `"`)
		return c
	}
	params := `{"notifications":{"resourceSubscriptions":["` + uri + `","mod+file:///gone.txt"]}}`
	ids := []string{`1`, `"two"`}
	var listens []*listenClient
	for _, id := range ids {
		lc := openListen(t, t, tg.url, id, params)
		if got := acknowledged(t, lc); !slices.Equal(got, []string{uri}) {
			t.Fatalf("listen %s acknowledged %q, want %q", id, got, uri)
		}
		listens = append(listens, lc)
	}
	if got := counts(); got != "subscribe=1 unsubscribe=0" {
		t.Fatalf("the upstream saw %s, want one subscription for two listens", got)
	}
	status, body := postAll(t, tg.url, modernBody(3, "tools/call", `{"name":"mod__touch"}`), modernHeaders("tools/call", "mod__touch"))
	if status != http.StatusOK || !strings.Contains(body, "touched") {
		t.Fatalf("touch: HTTP %d %s", status, body)
	}
	for i, lc := range listens {
		m := lc.next(t, "resources/updated")
		if m.Method != "notifications/resources/updated" || m.Params.URI != uri || string(m.Params.Meta["io.modelcontextprotocol/subscriptionId"]) != ids[i] {
			t.Errorf("listen %s got %+v, want notifications/resources/updated for %s with its subscriptionId", ids[i], m, uri)
		}
	}
	for _, lc := range listens {
		lc.cancel()
	}
	waitUntil(t, "the upstream listen to end once both listens closed", func() bool { return counts() == "subscribe=1 unsubscribe=1" })
}

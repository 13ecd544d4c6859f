package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestModernCallsPerPrincipal: a 2026-07-28 caller may have max_calls_per_principal requests in
// flight on a replica, the counterpart of a session's cap for requests without one; the next is
// refused with too_many_calls, and room comes back when one ends.
func TestModernCallsPerPrincipal(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmodern_protocol: true\nmax_calls_per_principal: 1\nupstreams:"+upstreamYAML("rev", "reverse", ""), nil)
	t.Cleanup(tg.close)
	call := func(client *http.Client, ctx context.Context, id int, tool string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.url,
			strings.NewReader(modernBody(id, "tools/call", `{"name":"`+tool+`","arguments":{}}`)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range modernHeaders("tools/call", tool) {
			req.Header.Set(k, v)
		}
		return client.Do(req)
	}
	// Anonymous callers count by address: a watcher from another loopback address is another
	// caller, and may ask the upstream how many calls are running.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	t.Cleanup(other.CloseIdleConnections)
	blocking := func() string {
		resp, err := call(other, ctxT(t), 9, "rev__blocking")
		if err != nil {
			t.Fatalf("rev__blocking from another address: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var msg struct {
			Result struct{ Content []struct{ Text string } }
		}
		if json.Unmarshal(body, &msg) != nil || len(msg.Result.Content) != 1 {
			t.Fatalf("rev__blocking from another address: %s", body)
		}
		return msg.Result.Content[0].Text
	}

	blockCtx, unblock := context.WithCancel(context.Background())
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		if resp, err := call(http.DefaultClient, blockCtx, 1, "rev__block"); err == nil {
			resp.Body.Close()
		}
	}()
	waitUntil(t, "the first call running upstream", func() bool { return blocking() == "1" })

	c := rawClient{t: t, url: tg.url}
	r := c.do(http.MethodPost, modernBody(2, "tools/call", `{"name":"rev__blocking","arguments":{}}`), modernHeaders("tools/call", "rev__blocking"))
	if r.msg.Error != nil || !strings.Contains(string(r.msg.Result), `"too_many_calls"`) || !strings.Contains(string(r.msg.Result), "max_calls_per_principal") {
		t.Errorf("a second call in flight: %d %s; want a too_many_calls tool error naming max_calls_per_principal", r.status, r.body)
	}

	unblock()
	<-blocked
	waitUntil(t, "room for another call", func() bool {
		r := c.do(http.MethodPost, modernBody(3, "tools/call", `{"name":"rev__blocking","arguments":{}}`), modernHeaders("tools/call", "rev__blocking"))
		return r.msg.Error == nil && strings.Contains(string(r.msg.Result), `"text":"0"`)
	})
}

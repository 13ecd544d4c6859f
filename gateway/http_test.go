package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/upstream"
)

// rawClient speaks HTTP to the endpoint directly, to check what SDK clients never send.
type rawClient struct {
	t   *testing.T
	url string
}

type rawReply struct {
	status int
	header http.Header
	body   []byte
	msg    struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
}

func (c rawClient) do(method, body string, headers map[string]string) rawReply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	r := rawReply{status: resp.StatusCode, header: resp.Header}
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return r // the caller reads streams itself
	}
	r.body, _ = io.ReadAll(resp.Body)
	if len(r.body) > 0 {
		if err := json.Unmarshal(r.body, &r.msg); err != nil {
			c.t.Fatalf("%s answered %d with a body that is not JSON-RPC: %q", method, r.status, r.body)
		}
	}
	return r
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func (c rawClient) initialize() string {
	c.t.Helper()
	r := c.do(http.MethodPost, initBody, nil)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		c.t.Fatalf("initialize: %d %s (session %q)", r.status, r.body, sid)
	}
	for _, ch := range sid {
		if ch < 0x21 || ch > 0x7e {
			c.t.Fatalf("session id %q has a character outside visible ASCII", sid)
		}
	}
	return sid
}

// bareGateway is a gateway with no upstreams and small limits, for the transport's rules.
// Its clients all connect from 127.0.0.1: that address has no cap of its own below max_sessions.
func bareGateway(t *testing.T, extra string, opts *gateway.Options) rawClient {
	tg := startGateway(t, "listen: 127.0.0.1:0\nmax_body_bytes: 2048\nmax_sessions: 4\nauth:\n  max_sessions_per_address: 1000\n"+extra+"upstreams: []\n", opts)
	t.Cleanup(tg.close)
	return rawClient{t: t, url: tg.url}
}

func TestTransportRules(t *testing.T) {
	c := bareGateway(t, "", nil)
	sid := c.initialize()
	ping := `{"jsonrpc":"2.0","id":7,"method":"ping"}`
	withSession := map[string]string{"Mcp-Session-Id": sid}

	tests := []struct {
		name       string
		method     string
		body       string
		headers    map[string]string
		wantStatus int
		wantCode   int // JSON-RPC error code, 0 for none
	}{
		{"ping", http.MethodPost, ping, withSession, 200, 0},
		{"ping keeps an integer id", http.MethodPost, `{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}`, withSession, 200, 0},
		{"notification", http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, withSession, 202, 0},
		{"malformed JSON", http.MethodPost, `{"jsonrpc":`, withSession, 400, -32700},
		{"not JSON-RPC", http.MethodPost, `{"jsonrpc":"1.0","id":1,"method":"ping"}`, withSession, 400, -32600},
		{"float id", http.MethodPost, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, withSession, 400, -32600},
		{"batch", http.MethodPost, `[` + ping + `]`, withSession, 400, -32600},
		{"oversized body", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 4096) + `"}}`, withSession, 413, -32006},
		{"missing session", http.MethodPost, ping, nil, 400, -32006},
		{"unknown session", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": "nope"}, 404, -32001},
		{"bad origin", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Origin": "https://evil.example.com"}, 403, -32006},
		{"bad origin on GET", http.MethodGet, "", map[string]string{"Mcp-Session-Id": sid, "Origin": "https://evil.example.com", "Accept": "text/event-stream"}, 403, -32006},
		{"bad origin on DELETE", http.MethodDelete, "", map[string]string{"Mcp-Session-Id": sid, "Origin": "https://evil.example.com"}, 403, -32006},
		{"rebinding host", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Host": "evil.example.com"}, 403, -32006},
		{"localhost origin", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Origin": "http://localhost:6274"}, 200, 0},
		{"other supported version", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-03-26"}, 200, 0},
		{"unknown version", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "1999-01-01"}, 400, -32006},
		{"wrong content type", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Content-Type": "text/plain"}, 415, -32006},
		{"accept lacks SSE", http.MethodPost, ping, map[string]string{"Mcp-Session-Id": sid, "Accept": "application/json"}, 406, -32006},
		{"GET without SSE accept", http.MethodGet, "", map[string]string{"Mcp-Session-Id": sid, "Accept": "application/json"}, 406, -32006},
		{"PUT", http.MethodPut, ping, withSession, 405, -32006},
		{"unknown method", http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"no/such"}`, withSession, 200, -32601},
		{"second initialize", http.MethodPost, initBody, withSession, 400, -32600},
		{"bad log level", http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"loud"}}`, withSession, 200, -32602},
		{"log level", http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"debug"}}`, withSession, 200, 0},
		{"2026 discover", http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{}}`, map[string]string{"Mcp-Protocol-Version": "2026-07-28"}, 400, -32022},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.t = t
			r := c.do(tc.method, tc.body, tc.headers)
			if r.status != tc.wantStatus {
				t.Errorf("status %d, want %d (body %s)", r.status, tc.wantStatus, r.body)
			}
			switch {
			case tc.wantCode == 0 && r.msg.Error != nil:
				t.Errorf("unexpected error %+v", r.msg.Error)
			case tc.wantCode != 0 && r.msg.Error == nil:
				t.Errorf("no error; want code %d (body %q)", tc.wantCode, r.body)
			case tc.wantCode != 0 && r.msg.Error.Code != tc.wantCode:
				t.Errorf("error code %d (%s), want %d", r.msg.Error.Code, r.msg.Error.Message, tc.wantCode)
			case tc.wantCode != 0 && r.msg.Error.Message == "":
				t.Errorf("error without a message")
			}
		})
	}

	t.Run("ids come back as sent", func(t *testing.T) {
		for _, id := range []string{`7`, `"seven"`, `12345678901234567890`, `-3`} {
			r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, withSession)
			if string(r.msg.ID) != id {
				t.Errorf("sent id %s, got %s", id, r.msg.ID)
			}
		}
	})
	t.Run("discover names the versions served", func(t *testing.T) {
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{}}`, map[string]string{"Mcp-Protocol-Version": "2026-07-28"})
		var data struct {
			Supported []string `json:"supported"`
			Requested string   `json:"requested"`
		}
		if err := json.Unmarshal(r.msg.Error.Data, &data); err != nil || data.Requested != "2026-07-28" || len(data.Supported) != 4 || data.Supported[0] != "2025-11-25" {
			t.Errorf("data %s", r.msg.Error.Data)
		}
	})
}

func TestDeleteEndsSession(t *testing.T) {
	c := bareGateway(t, "", nil)
	sid := c.initialize()
	h := map[string]string{"Mcp-Session-Id": sid}
	if r := c.do(http.MethodDelete, "", h); r.status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		hh := map[string]string{"Mcp-Session-Id": sid, "Accept": "application/json, text/event-stream"}
		if r := c.do(m, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, hh); r.status != http.StatusNotFound || r.msg.Error == nil || r.msg.Error.Code != -32001 {
			t.Errorf("%s after DELETE: %d %s, want 404 with -32001", m, r.status, r.body)
		}
	}
}

func TestSessionLimit(t *testing.T) {
	c := bareGateway(t, "", nil)
	var sids []string
	for range 4 {
		sids = append(sids, c.initialize())
	}
	r := c.do(http.MethodPost, initBody, nil)
	if r.status != http.StatusServiceUnavailable || r.msg.Error == nil || r.msg.Error.Code != -32005 || r.header.Get("Retry-After") == "" {
		t.Fatalf("fifth session: %d %s, want 503 with -32005 and Retry-After", r.status, r.body)
	}
	c.do(http.MethodDelete, "", map[string]string{"Mcp-Session-Id": sids[0]})
	c.initialize() // a freed slot is usable again
}

func TestIdleSessionExpires(t *testing.T) {
	clock := testclock.New(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := session.NewMemoryStore(&session.MemoryOptions{Now: clock.Now})
	c := bareGateway(t, "session_idle_timeout: 200ms\n", &gateway.Options{ExpiryInterval: 10 * time.Millisecond, Now: clock.Now, Backends: backend.NewMemory(store)})
	idle := c.initialize()
	streaming := c.initialize()

	// A session with an open standalone stream is in use and stays.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", streaming)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %v %v", err, resp)
	}
	defer resp.Body.Close()

	// Past the idle timeout, the next round of expiry ends the idle session. The store is
	// watched rather than the session pinged: a ping would use it.
	clock.Advance(300 * time.Millisecond)
	waitUntil(t, "the idle session to expire", func() bool {
		_, err := store.Get(context.Background(), idle)
		return errors.Is(err, session.ErrNotFound)
	})
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	if r := c.do(http.MethodPost, ping, map[string]string{"Mcp-Session-Id": idle}); r.status != http.StatusNotFound {
		t.Errorf("a ping of the expired session: %d %s, want 404", r.status, r.body)
	}
	if r := c.do(http.MethodPost, ping, map[string]string{"Mcp-Session-Id": streaming}); r.status != http.StatusOK {
		t.Errorf("the session with an open stream expired: %d %s", r.status, r.body)
	}
}

func TestSecondStreamConflicts(t *testing.T) {
	c := bareGateway(t, "", nil)
	sid := c.initialize()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if r := c.do(http.MethodGet, "", map[string]string{"Mcp-Session-Id": sid, "Accept": "text/event-stream"}); r.status != http.StatusConflict {
		t.Errorf("second GET: %d, want 409", r.status)
	}
	// DELETE ends the open stream.
	c.do(http.MethodDelete, "", map[string]string{"Mcp-Session-Id": sid})
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream stayed open after DELETE")
	}
}

func TestUnavailableUpstream(t *testing.T) {
	// A long restart delay keeps the upstream down once it has crashed.
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("fragile", "fragile", "")+upstreamYAML("alpha", "alpha", ""),
		&gateway.Options{UpstreamOptions: &upstream.Options{RestartDelay: time.Hour}})
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__ok"}); err != nil || textOf(t, res) != "ok" {
		t.Fatalf("ok: %v %v", res, err)
	}
	// The upstream exits during the call: the call fails as a tool error naming the upstream.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__crash"})
	if err != nil {
		t.Fatalf("crash: %v, want a tool result", err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), `"fragile"`) {
		t.Errorf("crash result %+v, want isError naming the upstream", res)
	}
	// While it is down its tools are gone from the list, yet calling one says unavailable,
	// not unknown; the other upstream serves on.
	waitUntil(t, "the crashed upstream's tools to leave the list", func() bool {
		list, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(toolNames(list.Tools), "fragile__ok") {
			return false
		}
		if !slices.Contains(toolNames(list.Tools), "alpha__echo") {
			t.Errorf("alpha's tools left with fragile's: %v", toolNames(list.Tools))
		}
		return true
	})
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__ok"})
	if err != nil {
		t.Fatalf("ok while down: %v", err)
	}
	if !res.IsError || !strings.Contains(textOf(t, res), "unavailable") {
		t.Errorf("result %+v, want an unavailable tool error", res)
	}
	if reason := res.Meta["dev.manifold/reason"]; reason != "upstream_unavailable" {
		t.Errorf("_meta reason %v, want upstream_unavailable", reason)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "alpha__echo", Arguments: map[string]any{"text": "x"}}); err != nil || textOf(t, res) != "alpha:x" {
		t.Errorf("alpha while fragile is down: %v %v", res, err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fragile__never_listed"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("a name never seen: err = %v, want unknown tool", err)
	}
}

// TestBatchesFor20250326: a 2025-03-26 session may send JSON-RPC batches (mcp-notes §2.2):
// every request is answered on one SSE stream, a bad entry gets its error, and a batch of
// notifications only gets 202. Later versions have no batches.
func TestBatchesFor20250326(t *testing.T) {
	c := bareGateway(t, "", nil)
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`, nil)
	sid := r.header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s", r.body)
	}
	batch := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"two","method":"tools/list"},{"jsonrpc":"1.0","id":3,"method":"ping"}]`
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(batch))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("batch: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var ids []string
	errors := 0
	for _, line := range strings.Split(string(body), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *struct{}       `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if m.Error != nil {
			errors++
			continue
		}
		ids = append(ids, string(m.ID))
	}
	slices.Sort(ids)
	if strings.Join(ids, ",") != `"two",1` || errors != 1 {
		t.Errorf("answers %v with %d errors, want results for 1 and \"two\" and one error:\n%s", ids, errors, body)
	}

	r = c.do(http.MethodPost, `[{"jsonrpc":"2.0","method":"notifications/initialized"}]`, map[string]string{"Mcp-Session-Id": sid})
	if r.status != http.StatusAccepted {
		t.Errorf("notifications-only batch: %d %s, want 202", r.status, r.body)
	}
	r = c.do(http.MethodPost, `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]`, map[string]string{"Mcp-Session-Id": sid})
	if r.status != http.StatusOK {
		t.Errorf("batched initialize: %d, want an error on the stream", r.status)
	}
}

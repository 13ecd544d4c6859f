package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// modernHTTPUpstream is a testupstream.Modern served statelessly over HTTP (2026-07-28), with
// a record of the HTTP requests the gateway's client made.
type modernHTTPUpstream struct {
	*testupstream.Modern
	srv *httptest.Server

	mu    sync.Mutex
	posts []seenPost // guarded by mu
	gets  int        // guarded by mu
}

// seenPost is one POST: its JSON-RPC method and its headers.
type seenPost struct {
	Method string
	Header http.Header
}

func newModernHTTPUpstream(t *testing.T, opts testupstream.ModernOptions) *modernHTTPUpstream {
	t.Helper()
	u := &modernHTTPUpstream{Modern: testupstream.NewModern(opts)}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.Server },
		&mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		switch r.Method {
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct{ Method string }
			_ = json.Unmarshal(body, &msg)
			u.posts = append(u.posts, seenPost{Method: msg.Method, Header: r.Header.Clone()})
		case http.MethodGet:
			u.gets++
		}
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// lastPost returns the last POST of method.
func (u *modernHTTPUpstream) lastPost(t *testing.T, method string) seenPost {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := len(u.posts) - 1; i >= 0; i-- {
		if u.posts[i].Method == method {
			return u.posts[i]
		}
	}
	t.Fatalf("no POST of %s", method)
	return seenPost{}
}

// startModernClient runs a client of spec until the test ends and waits until it is ready.
func startModernClient(t *testing.T, spec Spec, opts *Options) *Client {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	opts.RestartDelay, opts.MaxRestartDelay = 20*time.Millisecond, 50*time.Millisecond
	c := New(spec, opts)
	start(t, c)
	waitUntil(t, "state ready", func() bool { return c.State() == StateReady })
	return c
}

// lastMeta returns the _meta of the last request of method that the server saw, decoded.
func lastMeta(t *testing.T, seen []testupstream.SeenRequest, method string) map[string]any {
	t.Helper()
	for i := len(seen) - 1; i >= 0; i-- {
		if seen[i].Method != method {
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal(seen[i].Meta, &meta); err != nil {
			t.Fatalf("_meta of %s: %v", method, err)
		}
		return meta
	}
	t.Fatalf("the server saw no %s", method)
	return nil
}

func decodeJSON(t *testing.T, raw string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func toolNames(c *Client) []string {
	var names []string
	for _, it := range c.Catalog().List(Tools) {
		names = append(names, it.Key)
	}
	return names
}

func TestModernHTTPUpstream(t *testing.T) {
	u := newModernHTTPUpstream(t, testupstream.ModernOptions{})
	changes := make(chan struct{}, 16)
	c := startModernClient(t, Spec{Name: "modern", URL: u.srv.URL, Protocol: ProtocolAuto},
		&Options{OnChange: func(*Client) {
			select {
			case changes <- struct{}{}:
			default:
			}
		}})

	server := c.Server()
	if server.ProtocolVersion != protocol.Version20260728 || server.ServerInfo.Name != "test-modern" ||
		server.Instructions != "instructions of modern" || server.Capabilities.Tools == nil {
		t.Errorf("Server() = %+v; want 2026-07-28, test-modern, its instructions and tools", server)
	}
	if n := u.Count(protocol.MethodInitialize); n != 0 {
		t.Errorf("the upstream saw %d initialize requests; want none", n)
	}

	ctx := WithClientCapabilities(context.Background(), json.RawMessage(`{"elicitation":{"form":{}},"roots":{}}`))
	for _, tc := range []struct {
		name, repo, want string
	}{
		{"plain value", "acme/widgets", "acme/widgets:crash"},
		{"value sent base64-encoded", "café/ü", "café/ü:crash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, _ := json.Marshal(map[string]string{"repo": tc.repo, "q": "crash"})
			params := `{"name":"lookup","arguments":` + string(args) + `,"_meta":{"progressToken":"p1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`
			raw, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(params))
			if err != nil {
				t.Fatalf("call lookup: %v", err)
			}
			if got := resultText(t, raw); got != tc.want {
				t.Errorf("lookup answered %q; want %q", got, tc.want)
			}
			if !bytes.Contains(raw, []byte(`"resultType":"complete"`)) {
				t.Errorf("the result lost its resultType: %s", raw)
			}
			post := u.lastPost(t, protocol.MethodCallTool)
			wantHeaders := map[string]string{
				"MCP-Protocol-Version": "2026-07-28",
				"Mcp-Method":           "tools/call",
				"Mcp-Name":             "lookup",
				"Mcp-Session-Id":       "",
			}
			for name, want := range wantHeaders {
				if got := post.Header.Get(name); got != want {
					t.Errorf("header %s = %q; want %q", name, got, want)
				}
			}
			if got := post.Header.Get("Mcp-Param-Repo"); got == "" {
				t.Errorf("no Mcp-Param-Repo header")
			}
			meta := lastMeta(t, u.Seen(), protocol.MethodCallTool)
			want := map[string]any{
				protocol.MetaProtocolVersion:    "2026-07-28",
				protocol.MetaClientCapabilities: decodeJSON(t, `{"elicitation":{"form":{}},"roots":{}}`),
				protocol.MetaClientInfo:         decodeJSON(t, `{"name":"manifold","version":"dev"}`),
				"progressToken":                 "p1",
				"traceparent":                   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			}
			if diff := cmp.Diff(want, meta); diff != "" {
				t.Errorf("_meta of tools/call (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("no capabilities in the context declare none", func(t *testing.T) {
		callText(t, context.Background(), c, "echo")
		meta := lastMeta(t, u.Seen(), protocol.MethodCallTool)
		if diff := cmp.Diff(map[string]any{}, meta[protocol.MetaClientCapabilities]); diff != "" {
			t.Errorf("clientCapabilities (-want +got):\n%s", diff)
		}
	})

	t.Run("a tools/list change arrives through subscriptions/listen", func(t *testing.T) {
		waitUntil(t, "the gateway's listen", func() bool { return u.Count(protocol.MethodListen) > 0 })
		for len(changes) > 0 {
			<-changes
		}
		added := callText(t, context.Background(), c, "add_tool")
		waitUntil(t, "the added tool in the catalog", func() bool { return slices.Contains(toolNames(c), added) })
		select {
		case <-changes:
		case <-time.After(waitTimeout):
			t.Fatal("OnChange was not called")
		}
	})

	t.Run("input_required comes back as a result", func(t *testing.T) {
		ctx := WithClientCapabilities(context.Background(), json.RawMessage(`{"elicitation":{"form":{}}}`))
		raw, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"ask","arguments":{}}`))
		if err != nil {
			t.Fatalf("call ask: %v", err)
		}
		var res struct {
			ResultType    string
			RequestState  string
			InputRequests map[string]struct{ Method string }
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if res.ResultType != protocol.ResultTypeInputRequired || res.RequestState != "asked" || res.InputRequests["name"].Method != protocol.MethodElicit {
			t.Errorf("result %s; want input_required asking elicitation/create, with its requestState", raw)
		}
	})

	t.Run("session methods are refused without a request", func(t *testing.T) {
		_, err := c.Call(context.Background(), protocol.MethodSetLogLevel, json.RawMessage(`{"level":"debug"}`))
		if !errors.Is(err, ErrSessionMethod) {
			t.Errorf("logging/setLevel: err = %v; want ErrSessionMethod", err)
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, p := range u.posts {
			if p.Method == protocol.MethodSetLogLevel {
				t.Error("logging/setLevel was POSTed to the upstream")
			}
		}
	})

	u.mu.Lock()
	gets := u.gets
	u.mu.Unlock()
	if gets != 0 {
		t.Errorf("the client opened %d GET streams; want none", gets)
	}
	for _, method := range []string{protocol.MethodInitialize, protocol.MethodPing, protocol.NotificationInitialized} {
		if n := u.Count(method); n != 0 {
			t.Errorf("the upstream saw %d %s; want none", n, method)
		}
	}
}

func TestModernListenIsOpenedAgainAfterADrop(t *testing.T) {
	u := newModernHTTPUpstream(t, testupstream.ModernOptions{})
	c := startModernClient(t, Spec{Name: "modern", URL: u.srv.URL, Protocol: ProtocolModern}, nil)
	waitUntil(t, "the gateway's listen", func() bool { return u.Count(protocol.MethodListen) == 1 })
	lists := u.Count(protocol.MethodListTools)

	u.srv.CloseClientConnections() // the listen's stream drops
	waitUntil(t, "the listen opened again", func() bool { return u.Count(protocol.MethodListen) >= 2 })
	waitUntil(t, "the lists fetched again, for changes missed meanwhile", func() bool { return u.Count(protocol.MethodListTools) > lists })
	added := callText(t, context.Background(), c, "add_tool")
	waitUntil(t, "the added tool in the catalog", func() bool { return slices.Contains(toolNames(c), added) })
	if st := c.State(); st != StateReady {
		t.Errorf("state %s; want ready: a dropped listen is not a lost connection", st)
	}
}

func TestModernHTTPCancelClosesTheStream(t *testing.T) {
	u := newModernHTTPUpstream(t, testupstream.ModernOptions{})
	c := startModernClient(t, Spec{Name: "modern", URL: u.srv.URL, Protocol: ProtocolModern}, nil)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"block"}`))
		errc <- err
	}()
	waitUntil(t, "the block call to run", func() bool { return u.Blocking() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Call = %v; want context.Canceled", err)
	}
	waitUntil(t, "the upstream to see the cancellation", func() bool { return u.Cancels() == 1 })
	if n := u.Count(protocol.NotificationCancelled); n != 0 {
		t.Errorf("the upstream got %d notifications/cancelled; want none over HTTP", n)
	}
}

func TestModernStdioUpstream(t *testing.T) {
	c := startModernClient(t, func() Spec {
		spec := goSpec(t, "modern")
		spec.Protocol = ProtocolAuto
		return spec
	}(), nil)
	if got := c.Server().ProtocolVersion; got != protocol.Version20260728 {
		t.Fatalf("protocol version %q; want 2026-07-28", got)
	}

	ctx := WithClientCapabilities(context.Background(), json.RawMessage(`{"sampling":{"tools":{}}}`))
	if got := callText(t, ctx, c, "echo"); got != "hi" {
		t.Errorf("echo answered %q; want hi", got)
	}
	added := callText(t, context.Background(), c, "add_tool")
	waitUntil(t, "the added tool in the catalog", func() bool { return slices.Contains(toolNames(c), added) })

	var report struct {
		Seen []testupstream.SeenRequest
	}
	if err := json.Unmarshal([]byte(callText(t, context.Background(), c, "seen")), &report); err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, s := range report.Seen {
		methods = append(methods, s.Method)
	}
	for _, method := range []string{protocol.MethodInitialize, protocol.MethodPing} {
		if slices.Contains(methods, method) {
			t.Errorf("the upstream saw %s: %v", method, methods)
		}
	}
	if len(methods) == 0 || methods[0] != protocol.MethodDiscover {
		t.Errorf("the first method was not server/discover: %v", methods)
	}
	if !slices.Contains(methods, protocol.MethodListen) {
		t.Errorf("no subscriptions/listen: %v", methods)
	}
	var echoMeta map[string]any
	for _, s := range report.Seen {
		if s.Method == protocol.MethodCallTool && bytes.Contains(s.Meta, []byte("sampling")) {
			_ = json.Unmarshal(s.Meta, &echoMeta)
		}
	}
	if diff := cmp.Diff(decodeJSON(t, `{"sampling":{"tools":{}}}`), echoMeta[protocol.MetaClientCapabilities]); diff != "" {
		t.Errorf("clientCapabilities of the call (-want +got):\n%s", diff)
	}
	if got := echoMeta[protocol.MetaProtocolVersion]; got != "2026-07-28" {
		t.Errorf("protocolVersion of the call = %v", got)
	}
}

func TestModernStdioFirstAnswerDecides(t *testing.T) {
	// The fake answers discover only when initialize arrives, and first: the gateway, which
	// sent initialize after its probe went unanswered, speaks 2026-07-28.
	stdioProbeWait = 50 * time.Millisecond
	t.Cleanup(func() { stdioProbeWait = 0 })
	spec, logPath := fakeSpec(t, "late", nil)
	spec.Protocol = ProtocolAuto
	c := startModernClient(t, spec, nil)
	if got := c.Server(); got.ProtocolVersion != protocol.Version20260728 || got.ServerInfo.Name != "fake-late" {
		t.Fatalf("Server() = %+v; want 2026-07-28 and the serverInfo of discover", got)
	}
	read, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(read), `"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"`) {
		t.Errorf("tools/list went without the 2026-07-28 _meta; the upstream read:\n%s", read)
	}
}

func TestModernStdioCancelIsANotification(t *testing.T) {
	spec := goSpec(t, "modern")
	spec.Protocol = ProtocolModern
	c := startModernClient(t, spec, nil)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, protocol.MethodCallTool, json.RawMessage(`{"name":"block"}`))
		errc <- err
	}()
	var report struct {
		Seen     []testupstream.SeenRequest
		Cancels  int
		Blocking int
	}
	readReport := func() {
		t.Helper()
		if err := json.Unmarshal([]byte(callText(t, context.Background(), c, "seen")), &report); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the block call to run", func() bool {
		readReport()
		return report.Blocking == 1
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Call = %v; want context.Canceled", err)
	}
	waitUntil(t, "the upstream to stop the call", func() bool {
		readReport()
		return report.Cancels == 1
	})
	if !slices.ContainsFunc(report.Seen, func(s testupstream.SeenRequest) bool { return s.Method == protocol.NotificationCancelled }) {
		t.Error("the upstream got no notifications/cancelled")
	}
}

func TestModernListsRefreshWhenTheirTTLRunsOut(t *testing.T) {
	freshnessPoll = 5 * time.Millisecond
	t.Cleanup(func() { freshnessPoll = 0 })
	clock := testclock.New(time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC))

	for _, tc := range []struct {
		name    string
		ttlMs   int
		refresh bool
	}{
		{"ttlMs 60000 refreshes after a minute", 60_000, true},
		{"ttlMs 0 plans no timed refresh", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Static: no listChanged, so no listen; only the TTL can bring the change.
			u := newModernHTTPUpstream(t, testupstream.ModernOptions{TTLMs: tc.ttlMs, Static: true})
			c := startModernClient(t, Spec{Name: "modern", URL: u.srv.URL, Protocol: ProtocolModern}, &Options{Now: clock.Now})
			if n := u.Count(protocol.MethodListen); n != 0 {
				t.Errorf("%d subscriptions/listen to an upstream that announces no changes", n)
			}
			cn := c.live.Load()
			cn.freshMu.Lock()
			planned := !cn.dueAt[Tools].IsZero()
			cn.freshMu.Unlock()
			if planned != tc.refresh {
				t.Fatalf("timed refresh planned: %v; want %v", planned, tc.refresh)
			}
			if !tc.refresh {
				return
			}
			lists := u.Count(protocol.MethodListTools)
			added := u.AddTool()
			clock.Advance(30 * time.Second)
			if u.Count(protocol.MethodListTools) != lists {
				t.Fatal("the list was refetched before its TTL ran out")
			}
			clock.Advance(time.Minute)
			waitUntil(t, "the added tool in the catalog", func() bool { return slices.Contains(toolNames(c), added) })
		})
	}
}

func TestAutoFallsBackToInitialize(t *testing.T) {
	t.Run("stateful HTTP server", func(t *testing.T) {
		u := newHTTPUpstream(t, false)
		c := startModernClient(t, Spec{Name: "legacy", URL: u.srv.URL, Protocol: ProtocolAuto}, nil)
		if got := c.Server().ProtocolVersion; got != protocol.Version20251125 {
			t.Errorf("protocol version %q; want 2025-11-25", got)
		}
		if got := callText(t, context.Background(), c, "echo"); got != "hi" {
			t.Errorf("echo answered %q", got)
		}
		var sawInitialize bool
		for _, r := range u.seen() {
			if r.SessionID != "" {
				sawInitialize = true
			}
		}
		if !sawInitialize {
			t.Error("no request carried a session: the client did not initialize")
		}
	})

	t.Run("stdio server silent on discover", func(t *testing.T) {
		stdioProbeWait = 100 * time.Millisecond
		t.Cleanup(func() { stdioProbeWait = 0 })
		spec, logPath := fakeSpec(t, "hang", nil)
		spec.Protocol = ProtocolAuto
		c := startModernClient(t, spec, nil)
		wantDiscoverThenInitialize(t, c, logPath)
	})

	t.Run("stdio server that exits on discover", func(t *testing.T) {
		spec, logPath := fakeSpec(t, "picky", nil)
		spec.Protocol = ProtocolAuto
		var wentDown atomic.Bool
		c := startModernClient(t, spec, &Options{OnChange: func(c *Client) {
			if c.State() == StateDown {
				wentDown.Store(true)
			}
		}})
		if wentDown.Load() {
			t.Errorf("the upstream went down: the process that exited was not started again within the same start")
		}
		// The first process read discover and exited; the second was initialized.
		wantDiscoverThenInitialize(t, c, logPath)
	})

	t.Run("protocol 2026-07-28 refuses a 2025 server", func(t *testing.T) {
		u := newHTTPUpstream(t, false)
		c := New(Spec{Name: "legacy", URL: u.srv.URL, Protocol: ProtocolModern}, &Options{RestartDelay: time.Hour})
		start(t, c)
		waitUntil(t, "state down", func() bool { return c.State() == StateDown })
		if st := c.Status(); st.Reason != ReasonStartFailed {
			t.Errorf("reason %q; want %q (%s)", st.Reason, ReasonStartFailed, st.Error)
		}
		for _, r := range u.seen() {
			if r.SessionID != "" {
				t.Errorf("the client initialized a session with an upstream it must not speak 2025 to")
			}
		}
	})
}

// wantDiscoverThenInitialize checks that c speaks 2025-11-25 with a fake stdio upstream whose
// processes logged, at logPath, server/discover and then initialize.
func wantDiscoverThenInitialize(t *testing.T, c *Client, logPath string) {
	t.Helper()
	if got := c.Server().ProtocolVersion; got != protocol.Version20251125 {
		t.Errorf("protocol version %q; want 2025-11-25", got)
	}
	read, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(read)), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], `"server/discover"`) || !strings.Contains(lines[1], `"initialize"`) {
		t.Errorf("the upstream read %q; want server/discover, then initialize", lines)
	}
}

func TestWithModernMeta(t *testing.T) {
	info := protocol.Implementation{Name: "manifold", Version: "1"}
	for _, tc := range []struct {
		name, params, caps, want string
	}{
		{"no params", ``, `{}`,
			`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"manifold","version":"1"}}}`},
		{"caller's meta kept, version and capabilities replaced", `{"name":"x","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/clientInfo":{"name":"claude","version":"2"}}}`, `{"roots":{}}`,
			`{"name":"x","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/clientInfo":{"name":"claude","version":"2"}}}`},
		{"null meta", `{"_meta":null}`, `{}`,
			`{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"manifold","version":"1"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withModernMeta(json.RawMessage(tc.params), protocol.Version20260728, json.RawMessage(tc.caps), info)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(decodeJSON(t, tc.want), decodeJSON(t, string(got))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := withModernMeta(nil, protocol.Version20260728, json.RawMessage(`["sampling"]`), info); !errors.Is(err, errCapabilitiesNotObject) {
		t.Errorf("capabilities that are not an object: err = %v; want errCapabilitiesNotObject", err)
	}
}

func TestDropInvalidAnnotations(t *testing.T) {
	cn := &connection{client: New(Spec{Name: "x", Command: "x"}, nil)}
	tools := []Item{
		{Key: "plain", Raw: json.RawMessage(`{"name":"plain","inputSchema":{"type":"object"}}`)},
		{Key: "annotated", Raw: json.RawMessage(`{"name":"annotated","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"R"}}}}`)},
		{Key: "on_a_number", Raw: json.RawMessage(`{"name":"on_a_number","inputSchema":{"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}}`)},
		{Key: "twice", Raw: json.RawMessage(`{"name":"twice","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}}`)},
	}
	var kept []string
	for _, it := range cn.dropInvalidAnnotations(tools) {
		kept = append(kept, it.Key)
	}
	if diff := cmp.Diff([]string{"plain", "annotated"}, kept); diff != "" {
		t.Errorf("kept tools (-want +got):\n%s", diff)
	}
	catalog := NewCatalog(map[Kind][]Item{Tools: tools})
	if got := catalog.toolHeaderParams("annotated"); len(got) != 1 || got[0].Header != "R" {
		t.Errorf("toolHeaderParams(annotated) = %+v; want the one of header R", got)
	}
	if got := catalog.toolHeaderParams("plain"); got != nil {
		t.Errorf("toolHeaderParams(plain) = %+v; want none", got)
	}
}

func TestJudgeDiscover(t *testing.T) {
	for _, tc := range []struct {
		name       string
		raw        string
		err        error
		version    string
		discovered bool
	}{
		{"2026 result", `{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}}`, nil, "2026-07-28", true},
		{"result listing legacy versions only", `{"supportedVersions":["2025-11-25","2025-06-18"],"capabilities":{}}`, nil, "", false},
		{"-32022 naming 2026-07-28", "", &protocol.Error{Code: protocol.CodeUnsupportedProtocolVersion, Data: json.RawMessage(`{"supported":["2026-07-28"],"requested":"2027-01-01"}`)}, "2026-07-28", false},
		{"-32022 naming legacy versions only", "", &protocol.Error{Code: protocol.CodeUnsupportedProtocolVersion, Data: json.RawMessage(`{"supported":["2025-11-25"]}`)}, "", false},
		{"-32601", "", &protocol.Error{Code: protocol.CodeMethodNotFound}, "", false},
		{"-32602", "", &protocol.Error{Code: protocol.CodeInvalidParams}, "", false},
		{"4xx without a JSON-RPC body", "", &requestError{Status: http.StatusBadRequest, Err: errors.New("bad request")}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans := judgeDiscover(json.RawMessage(tc.raw), tc.err)
			if ans.version != tc.version || (ans.server != nil) != tc.discovered || ans.unanswered != nil {
				t.Errorf("judgeDiscover = %+v; want version %q, discovered %v", ans, tc.version, tc.discovered)
			}
			if tc.discovered && ans.server.ServerInfo.Name != "s" {
				t.Errorf("serverInfo %+v; want the one of _meta", ans.server.ServerInfo)
			}
		})
	}
	if ans := judgeDiscover(nil, ErrTimeout); !errors.Is(ans.unanswered, ErrTimeout) {
		t.Errorf("no answer: %+v; want unanswered", ans)
	}
}

// TestListenAcknowledged: Listen holds a subscriptions/listen on a 2026-07-28 upstream, over
// HTTP and over stdio; its acknowledgement, told apart from the catalog's own listen by its
// subscriptionId, reaches the caller with what the upstream honours, and the listen lasts
// until its context ends. A 2025-11-25 upstream has none.
func TestListenAcknowledged(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func(t *testing.T) Spec
	}{
		{"http", func(t *testing.T) Spec {
			return Spec{Name: "modern", URL: newModernHTTPUpstream(t, testupstream.ModernOptions{}).srv.URL, Protocol: ProtocolModern}
		}},
		{"stdio", func(t *testing.T) Spec {
			spec := goSpec(t, "modern")
			spec.Protocol = ProtocolModern
			return spec
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startModernClient(t, tc.spec(t), nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			acked := make(chan json.RawMessage, 2)
			errc := make(chan error, 1)
			go func() {
				errc <- c.Listen(ctx, json.RawMessage(`{"notifications":{"resourceSubscriptions":["file:///watched.txt"]}}`),
					func(n json.RawMessage) { acked <- n })
			}()
			select {
			case n := <-acked:
				if !strings.Contains(string(n), `"resourceSubscriptions":["file:///watched.txt"]`) {
					t.Errorf("acknowledged %s; want the resource subscription", n)
				}
			case err := <-errc:
				t.Fatalf("Listen ended before its acknowledgement: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no acknowledgement")
			}
			if got := callText(t, context.Background(), c, "sub_counts"); got != "subscribe=1 unsubscribe=0" {
				t.Errorf("the upstream saw %s while the listen is open; want one subscription", got)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("Listen = %v; want context.Canceled once its context ended", err)
			}
			if len(acked) != 0 {
				t.Error("acknowledged more than once")
			}
		})
	}
	t.Run("2025-11-25", func(t *testing.T) {
		c := startModernClient(t, goSpec(t, "semantics"), nil)
		if err := c.Listen(context.Background(), json.RawMessage(`{}`), func(json.RawMessage) {}); !errors.Is(err, ErrNotModern) {
			t.Errorf("Listen on a 2025-11-25 upstream = %v; want ErrNotModern", err)
		}
	})
}

package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cuttingProxy forwards to the gateway, and cuts the first POST whose body contains cut right
// after the first message event of its SSE answer: a connection that drops mid-call.
func cuttingProxy(t *testing.T, target, cut string) (url string, cuts *atomic.Int32) {
	t.Helper()
	cuts = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		flusher := w.(http.Flusher)
		flusher.Flush()
		cutThis := r.Method == http.MethodPost && bytes.Contains(body, []byte(cut)) && cuts.CompareAndSwap(0, 1)
		lines := bufio.NewReader(resp.Body)
		messages := 0
		for {
			line, err := lines.ReadString('\n')
			if _, werr := io.WriteString(w, line); werr != nil || err != nil {
				return
			}
			flusher.Flush()
			if strings.HasPrefix(line, "data: {") {
				messages++
			}
			if cutThis && messages == 1 && line == "\n" {
				panic(http.ErrAbortHandler) // the connection drops, mid-call
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", cuts
}

// TestSDKClientResumesADroppedCall: the official Go SDK client, whose call's connection drops
// after its first progress notification, resumes the stream with GET and Last-Event-ID and
// gets the rest of the progress and the result: nothing lost, nothing twice.
func TestSDKClientResumesADroppedCall(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("r", "reverse", ""), nil)
	t.Cleanup(tg.close)
	url, cuts := cuttingProxy(t, tg.url, `"r__progress"`)

	var mu sync.Mutex
	var progress []float64
	cs := connect(t, url, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		progress = append(progress, req.Params.Progress)
		mu.Unlock()
	}})
	params := &mcp.CallToolParams{Name: "r__progress"}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctxT(t), params)
	if err != nil {
		t.Fatalf("the call whose connection dropped: %v", err)
	}
	if got := textOf(t, res); !strings.HasPrefix(got, "token=") {
		t.Errorf("result %q, want the tool's answer (the token the upstream saw)", got)
	}
	if cuts.Load() != 1 {
		t.Fatal("the proxy did not cut the call's connection")
	}
	// The client hands notifications to their handler on goroutines of its own: they may
	// come after the result.
	seen := func() []float64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(progress))
	}
	waitUntil(t, "the three progress notifications", func() bool { return len(seen()) >= 3 })
	if got := seen(); !slices.Equal(got, []float64{1, 2, 3}) {
		t.Errorf("progress seen %v, want 1, 2 and 3 once each", got)
	}
}

package credential

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// recorder is a fake upstream: it answers 200 and records the headers of each request.
type recorder struct {
	srv *httptest.Server

	mu      sync.Mutex
	headers []http.Header
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// seen returns the headers received so far, one per request.
func (r *recorder) seen() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.headers...)
}

// authorizations returns the Authorization header of each request received.
func (r *recorder) authorizations() []string {
	var out []string
	for _, h := range r.seen() {
		out = append(out, h.Get("Authorization"))
	}
	return out
}

// get sends a GET to the recorder through rt.
func (r *recorder) get(t *testing.T, rt http.RoundTripper, header http.Header) error {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// tokenRequest is one request a fake token endpoint received.
type tokenRequest struct {
	Form                   url.Values
	BasicUser, BasicSecret string // decoded per RFC 6749 §2.3.1; "" without Basic auth
	ContentType            string
}

// tokenEndpoint is a fake authorization server's token endpoint: it records each request and
// answers with answer.
type tokenEndpoint struct {
	srv *httptest.Server
	// answer gives the status and JSON body for a request; it may block (the test then
	// releases it).
	answer func(tokenRequest) (int, any)

	mu       sync.Mutex
	requests []tokenRequest
}

func newTokenEndpoint(t *testing.T, answer func(tokenRequest) (int, any)) *tokenEndpoint {
	t.Helper()
	te := &tokenEndpoint{answer: answer}
	te.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		if err := req.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tr := tokenRequest{Form: req.PostForm, ContentType: req.Header.Get("Content-Type")}
		if user, secret, ok := req.BasicAuth(); ok {
			tr.BasicUser, _ = url.QueryUnescape(user)
			tr.BasicSecret, _ = url.QueryUnescape(secret)
		}
		te.mu.Lock()
		te.requests = append(te.requests, tr)
		te.mu.Unlock()
		status, body := te.answer(tr)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(te.srv.Close)
	return te
}

// received returns the requests received so far.
func (te *tokenEndpoint) received() []tokenRequest {
	te.mu.Lock()
	defer te.mu.Unlock()
	return append([]tokenRequest(nil), te.requests...)
}

// count returns the number of requests received so far.
func (te *tokenEndpoint) count() int { return len(te.received()) }

// tokenAnswer is a successful token response.
func tokenAnswer(token string, expiresIn int) map[string]any {
	return map[string]any{
		"access_token":      token,
		"issued_token_type": tokenTypeAccessToken,
		"token_type":        "Bearer",
		"expires_in":        expiresIn,
	}
}

// checkGoroutines fails t if, once its cleanups registered later have run, more goroutines
// run than now: what a test starts, it stops.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if !testwait.Within(3*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	})
}

// waitWithin waits for wg, failing t if that takes longer than 10s (a bound, not a speed
// assertion: without it a broken coalescing would hang the test).
func waitWithin(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s did not happen within 10s", what)
	}
}

package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

const (
	repoAsRepo       = `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repo"},"q":{"type":"string"}}}`
	repoAsRepository = `{"type":"object","properties":{"repo":{"type":"string","x-mcp-header":"Repository"},"q":{"type":"string"}}}`
	repoUnannotated  = `{"type":"object","properties":{"repo":{"type":"string"},"q":{"type":"string"}}}`
)

// TestHeaderMismatchRefreshesToolsAndRetries: a 2026-07-28 upstream whose tool's
// x-mcp-header annotations changed since the gateway fetched its tool list refuses the call
// with -32020; the client fetches the tool list again, publishes it, and sends the call once
// more with the headers of the new schema, which the upstream runs. An upstream that refuses
// the second time too fails the call with ErrHeaderMismatch, after exactly two attempts and
// one refetch.
func TestHeaderMismatchRefreshesToolsAndRetries(t *testing.T) {
	tests := []struct {
		name       string
		before     string
		after      string
		refuseAll  bool
		wantHeader string // the Mcp-Param-* header the second attempt carries
	}{
		{"annotation renamed", repoAsRepo, repoAsRepository, false, "Mcp-Param-Repository"},
		{"annotation added", repoUnannotated, repoAsRepo, false, "Mcp-Param-Repo"},
		{"refused again after the refetch", repoAsRepo, repoAsRepo, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := testupstream.NewChanging(tt.before)
			srv := httptest.NewServer(u)
			t.Cleanup(srv.Close)
			changes := make(chan struct{}, 16)
			c := startModernClient(t, Spec{Name: "changing", URL: srv.URL, Protocol: ProtocolModern},
				&Options{OnChange: func(*Client) {
					select {
					case changes <- struct{}{}:
					default:
					}
				}})
			for len(changes) > 0 {
				<-changes
			}
			listsBefore := u.Lists()
			u.SetSchema(tt.after)
			u.RefuseCalls.Store(tt.refuseAll)

			raw, err := c.Call(context.Background(), protocol.MethodCallTool,
				json.RawMessage(`{"name":"lookup","arguments":{"repo":"acme/widgets","q":"crash"}}`))
			calls := u.CallHeaders()
			if len(calls) != 2 {
				t.Fatalf("the upstream got %d tools/call POSTs; want 2 (the refused one and one retry)", len(calls))
			}
			if n := u.Lists() - listsBefore; n != 1 {
				t.Errorf("tools/list was fetched %d times after the refusal; want 1", n)
			}
			if tt.refuseAll {
				if !errors.Is(err, ErrHeaderMismatch) {
					t.Fatalf("call refused twice: err = %v; want ErrHeaderMismatch", err)
				}
				var rpcErr *protocol.Error
				if errors.As(err, &rpcErr) {
					t.Errorf("the error wraps the upstream's -32020 (%v): a gateway would relay it as the client's own header mismatch", rpcErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("call after the schema changed: %v", err)
			}
			if got := resultText(t, raw); got != "acme/widgets:crash" {
				t.Errorf("lookup answered %q; want acme/widgets:crash", got)
			}
			if got := calls[1].Get(tt.wantHeader); got != "acme/widgets" {
				t.Errorf("the retry's %s = %q; want acme/widgets (from the refetched schema)", tt.wantHeader, got)
			}
			if got := string(inputSchemaOf(c.Catalog().List(Tools)[0].Raw)); !bytes.Contains([]byte(got), []byte(`"x-mcp-header":"`+headerName(tt.wantHeader)+`"`)) {
				t.Errorf("the catalog holds schema %s; want the refetched one", got)
			}
			select {
			case <-changes:
			default:
				t.Error("OnChange was not called for the refetched tool list")
			}
		})
	}
}

// headerName is the x-mcp-header value behind a Mcp-Param-* header name.
func headerName(header string) string { return header[len("Mcp-Param-"):] }

// TestToolsRefreshIsSharedByItsWaiters: calls refused together wait on one refetch of the
// tool list, and a waiter that gives up neither cancels it nor fails the others.
func TestToolsRefreshIsSharedByItsWaiters(t *testing.T) {
	u := testupstream.NewChanging(repoAsRepo)
	var held atomic.Bool
	arrived, release := make(chan struct{}, 4), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held.Load() && r.Header.Get("Mcp-Method") == protocol.MethodListTools {
			arrived <- struct{}{}
			<-release
		}
		u.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := startModernClient(t, Spec{Name: "changing", URL: srv.URL, Protocol: ProtocolModern}, nil)
	cn := c.live.Load()
	listsBefore := u.Lists()
	u.SetSchema(repoAsRepository)
	held.Store(true)

	impatient, giveUp := context.WithCancel(context.Background())
	results := make(chan error, 2)
	go func() { results <- cn.refreshToolsShared(impatient) }()
	select {
	case <-arrived:
	case <-time.After(waitTimeout):
		t.Fatal("the refetch did not reach the upstream")
	}
	go func() { results <- cn.refreshToolsShared(context.Background()) }()
	waitUntil(t, "both waiters on one refetch", func() bool {
		cn.mu.Lock()
		defer cn.mu.Unlock()
		return cn.toolsRefresh != nil && cn.toolsRefresh.waiters == 2
	})
	giveUp()
	if err := <-results; !errors.Is(err, context.Canceled) {
		t.Errorf("the waiter that gave up got %v; want context.Canceled", err)
	}
	close(release)
	if err := <-results; err != nil {
		t.Errorf("the waiter that stayed got %v; want the shared refetch's success", err)
	}
	if n := u.Lists() - listsBefore; n != 1 {
		t.Errorf("tools/list was fetched %d times; want once for both waiters", n)
	}
	if got := string(inputSchemaOf(c.Catalog().List(Tools)[0].Raw)); !strings.Contains(got, `"x-mcp-header":"Repository"`) {
		t.Errorf("the catalog holds schema %s; want the refetched one", got)
	}
}

package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// configView is GET /api/config.
type configView struct {
	Replicas []struct {
		Replica   string `json:"replica"`
		This      bool   `json:"this"`
		Version   string `json:"version"`
		LastError string `json:"lastError"`
	} `json:"replicas"`
	Agree bool `json:"agree"`
}

// TestAdminReloadReachesEveryReplica: two replicas on one Redis, each reading its own
// "files" (a config the test swaps). A reload asked through the admin API of one makes both
// apply theirs: a session on the other sees the upstream added (with a list_changed) and is
// decided by the new rule, and the admin API shows both on one version. A replica whose files
// do not validate says why and keeps its configuration, and the admin API shows that they
// disagree.
func TestAdminReloadReachesEveryReplica(t *testing.T) {
	addr := testredis.Addr(t)
	head := fmt.Sprintf(`listen: 127.0.0.1:0
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
  replica_lease: 1s
`+keysYAML+adminYAML(""), addr, testredis.Prefix(t, addr))
	alpha, beta := upstreamYAML("alpha", "alpha", ""), upstreamYAML("beta", "beta", "")
	first := parseConfig(t, head+reloadPolicy(false)+"upstreams:"+alpha)
	second := parseConfig(t, head+reloadPolicy(true)+"upstreams:"+alpha+beta)
	third := parseConfig(t, head+reloadPolicy(false)+"upstreams:"+alpha+beta)

	// What each replica's files say now.
	var filesA, filesB atomic.Pointer[config.Config]
	filesA.Store(first)
	filesB.Store(first)
	errB := errors.New("test.yaml:1: listen: not valid")
	var brokenB atomic.Bool
	a := startConfigured(t, first, &gateway.Options{ReadConfig: func() (*config.Config, error) { return filesA.Load(), nil }}, true)
	defer a.close()
	b := startConfigured(t, first, &gateway.Options{ReadConfig: func() (*config.Config, error) {
		if brokenB.Load() {
			return nil, errB
		}
		return filesB.Load(), nil
	}}, true)
	defer b.close()
	admin := startAdmin(t, a)
	view := func() configView {
		var v configView
		if status := admin.do(http.MethodGet, "/api/config", nil, &v); status != http.StatusOK {
			t.Fatalf("GET /api/config: %d", status)
		}
		return v
	}
	onVersion := func(v configView, version string) bool {
		return len(v.Replicas) == 2 && v.Replicas[0].Version == version && v.Replicas[1].Version == version && v.Agree
	}
	testwait.Until(t, 10*time.Second, "both replicas to show the first version", func() bool { return onVersion(view(), first.Version()) })

	changed := make(chan struct{}, 16)
	cs := connect(t, b.url, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	if got := textOf(t, callTool(t, cs, "alpha__whoami", nil)); got != "alpha" {
		t.Fatalf("alpha__whoami answered %q", got)
	}

	filesA.Store(second)
	filesB.Store(second)
	if status := admin.do(http.MethodPost, "/api/reload", nil, nil); status != http.StatusOK {
		t.Fatalf("POST /api/reload: %d (%s)", status, a.gw.ConfigStatus().LastError)
	}
	testwait.Until(t, 20*time.Second, "both replicas to run the second version", func() bool { return onVersion(view(), second.Version()) })
	if got := b.gw.ConfigStatus().Version; got != second.Version() {
		t.Errorf("replica b runs %q, want %q", got, second.Version())
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no tools/list_changed reached the session on the replica not asked")
	}
	testwait.Until(t, 20*time.Second, "beta's tools on the replica not asked", func() bool {
		return slices.Contains(toolsOf(t, ctx, cs), "beta__echo")
	})
	if res := callTool(t, cs, "alpha__whoami", nil); !res.IsError || !strings.Contains(textOf(t, res), "whoami is off") {
		t.Errorf("alpha__whoami on the replica not asked, after the rule denies it: isError=%v %q", res.IsError, textOf(t, res))
	}

	// b's files do not validate: b says why and keeps the second configuration.
	filesA.Store(third)
	brokenB.Store(true)
	if status := admin.do(http.MethodPost, "/api/reload", nil, nil); status != http.StatusOK {
		t.Fatalf("POST /api/reload: %d", status)
	}
	testwait.Until(t, 20*time.Second, "the admin API to show b's refusal", func() bool {
		v := view()
		for _, r := range v.Replicas {
			if !r.This && r.Version == second.Version() && strings.Contains(r.LastError, "listen: not valid") {
				return !v.Agree && v.Replicas[0].Version == third.Version()
			}
		}
		return false
	})
	if res := callTool(t, cs, "alpha__whoami", nil); !res.IsError {
		t.Errorf("replica b should keep the rule its refused reload would have dropped: %q", textOf(t, res))
	}
}

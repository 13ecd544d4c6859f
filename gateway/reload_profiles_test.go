package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestReloadAddsAndRemovesProfiles: sessions on /mcp and on two profiles stay open while a
// reload removes one profile and adds another: the removed profile's session ends (its next
// request gets 404, its stream closes), the added profile's endpoint serves what it includes,
// and the other sessions go on.
func TestReloadAddsAndRemovesProfiles(t *testing.T) {
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("alpha", "alpha", "") + upstreamYAML("beta", "beta", "") + "profiles:\n"
	profile := func(name, upstream string) string {
		return fmt.Sprintf("  - name: %s\n    include:\n      - {upstream: %s}\n", name, upstream)
	}
	tg := startConfigured(t, parseConfig(t, head+profile("p", "alpha")+profile("gone", "beta")), nil, true)
	defer tg.close()
	gw := tg.gw
	ctx := ctxT(t)
	cs, csP, csGone := connect(t, tg.url, nil), connect(t, tg.url+"/p", nil), connect(t, tg.url+"/gone", nil)
	if tools := toolsOf(t, ctx, csGone); !slices.Contains(tools, "beta__echo") {
		t.Fatalf("the profile gone's tools before the reload: %v", tools)
	}
	testwait.Until(t, 10*time.Second, "the three clients to listen on their streams", func() bool { return gw.ListeningSessions() == 3 })
	added := parseConfig(t, head+profile("p", "alpha")+profile("q", "beta"))
	if err := gw.Reload(ctx, added); err != nil {
		t.Fatalf("reload adding q and removing gone: %v", err)
	}

	ping := `{"jsonrpc":"2.0","id":9,"method":"ping"}`
	r := rawClient{t: t, url: tg.url + "/gone"}.do(http.MethodPost, ping, map[string]string{"Mcp-Session-Id": csGone.ID(), "Mcp-Protocol-Version": "2025-11-25"})
	if r.status != http.StatusNotFound {
		t.Errorf("a request of the removed profile's session: %d %s, want 404", r.status, r.body)
	}
	testwait.Until(t, 10*time.Second, "the removed profile's stream to close", func() bool { return gw.ListeningSessions() == 2 })
	if _, err := csGone.ListTools(ctx, nil); err == nil {
		t.Error("the removed profile's client listed tools after the reload")
	}

	csQ := connect(t, tg.url+"/q", nil)
	if tools := toolsOf(t, ctx, csQ); !slices.Contains(tools, "beta__echo") || slices.Contains(tools, "alpha__echo") {
		t.Errorf("the added profile's tools: %v, want beta's only", tools)
	}
	if got := textOf(t, callTool(t, csQ, "beta__echo", map[string]any{"text": "q"})); got != "beta:q" {
		t.Errorf("beta__echo through the added profile answered %q", got)
	}
	if got := textOf(t, callTool(t, csP, "alpha__whoami", nil)); got != "alpha" {
		t.Errorf("the kept profile's session after the reload: %q", got)
	}
	if got := textOf(t, callTool(t, cs, "beta__whoami", nil)); got != "beta" {
		t.Errorf("the /mcp session after the reload: %q", got)
	}
}

// TestReloadKeepsProfilesUnderOIDC: with OIDC issuers the tokens every endpoint accepts,
// one audience a profile, are fixed at start: a reload that adds a profile is refused,
// saying why, and its endpoint is not served; what a profile includes still changes.
func TestReloadKeepsProfilesUnderOIDC(t *testing.T) {
	iss := testissuer.New(t)
	head := authYAML(iss, "mfk_test_key", "upstreams:"+upstreamYAML("alpha", "alpha", "")+"profiles:\n  - name: p\n    include:\n      - {upstream: alpha}\n")
	tg := startConfigured(t, parseConfig(t, head), nil, true)
	defer tg.close()
	err := tg.gw.Reload(ctxT(t), parseConfig(t, head+"  - name: q\n    include:\n      - {upstream: alpha}\n"))
	if !strings.Contains(fmt.Sprint(err), "with OIDC issuers (auth.oidc), a profile cannot be added") {
		t.Errorf("reload adding a profile under OIDC: %v, want it refused with the reason", err)
	}
	r := rawClient{t: t, url: tg.url + "/q"}.do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer mfk_test_key"})
	if r.status != http.StatusNotFound {
		t.Errorf("the endpoint of the refused profile answered %d, want 404", r.status)
	}
}

// TestReloadRemovingAProfileCompletesItsListens: a 2026-07-28 listen stream on a profile a
// reload removes completes, with its result, as at a drain (after the list_changed of what
// the profile lost); one on /mcp stays open.
func TestReloadRemovingAProfileCompletesItsListens(t *testing.T) {
	head := listenLimits + upstreamYAML("alpha", "alpha", "")
	tg := startConfigured(t, parseConfig(t, head+"profiles:\n  - name: gone\n    include:\n      - {upstream: alpha}\n"), nil, true)
	t.Cleanup(tg.close)
	params := `{"notifications":{"toolsListChanged":true}}`
	gone := openListenAs(t, t, tg.url+"/gone", `1`, params, "")
	kept := openListenAs(t, t, tg.url, `2`, params, "")
	for _, lc := range []*listenClient{gone, kept} {
		if m := lc.next(t, "acknowledgement"); m.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("first message %+v, want the acknowledgement", m)
		}
	}
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, head)); err != nil {
		t.Fatalf("reload removing the profile: %v", err)
	}
	// What its profile lost (everything) may be told first; the completion ends the stream.
	m := gone.next(t, "completion result")
	for m.Method == "notifications/tools/list_changed" {
		m = gone.next(t, "completion result")
	}
	if m.Result == nil {
		t.Errorf("the removed profile's listen got %+v, want its completion result", m)
	}
	select {
	case m, ok := <-kept.messages:
		if ok {
			t.Errorf("the /mcp listen got %+v after the reload, want nothing", m)
		} else {
			t.Error("the /mcp listen ended with the reload")
		}
	default:
	}
}

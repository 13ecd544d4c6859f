package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testissuer"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// reloadPolicy is a policy that denies the tool whoami of upstream alpha when deny is set,
// and allows everything otherwise.
func reloadPolicy(deny bool) string {
	rule := "    - name: nothing\n      effect: deny\n      match:\n        upstreams: [nobody]\n"
	if deny {
		rule = "    - name: no-whoami\n      effect: deny\n      reason: whoami is off\n      match:\n        upstreams: [alpha]\n        tools: [whoami]\n"
	}
	return "policy:\n  default: allow\n  rules:\n" + rule
}

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// toolsOf lists the tools the session sees now.
func toolsOf(t *testing.T, ctx context.Context, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return toolNames(res.Tools)
}

// answersHeldUntil are the options of a client that answers the upstreams' sampling requests
// once release is closed, telling asked of each when it comes, and accepts elicitations.
func answersHeldUntil(asked chan<- struct{}, release <-chan struct{}) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "late"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
		},
	}
}

// TestReloadWithASessionOpen: one go-sdk session stays open through reloads that add an
// upstream (its tools appear, with a list_changed), change a policy rule (the next call is
// decided by the new rule), remove an upstream with a call in flight there (its tools vanish
// at once, the call finishes), and change a key that needs a restart (refused, the running
// configuration kept).
func TestReloadWithASessionOpen(t *testing.T) {
	head := "listen: 127.0.0.1:0\ndrain_timeout: 30s\n"
	alpha, rev, beta := upstreamYAML("alpha", "alpha", ""), upstreamYAML("rev", "reverse", ""), upstreamYAML("beta", "beta", "")
	first := parseConfig(t, head+reloadPolicy(false)+"upstreams:"+alpha+rev)
	tg := startConfigured(t, first, nil, true)
	defer tg.close()
	gw := tg.gw
	if got := gw.ConfigStatus().Version; got != first.Version() {
		t.Fatalf("version %q, want the config's %q", got, first.Version())
	}

	changed := make(chan struct{}, 16)
	sampling := make(chan struct{}, 1)
	release := make(chan struct{})
	opts := answersHeldUntil(sampling, release)
	opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }
	cs := connect(t, tg.url, opts)
	ctx := ctxT(t)
	if got := textOf(t, callTool(t, cs, "alpha__whoami", nil)); got != "alpha" {
		t.Fatalf("alpha__whoami answered %q before any reload", got)
	}
	testwait.Until(t, 10*time.Second, "the client to listen on its stream", func() bool { return gw.ListeningSessions() == 1 })

	// An upstream added: its tools appear, and the session hears of them.
	added := parseConfig(t, head+reloadPolicy(false)+"upstreams:"+alpha+rev+beta)
	if err := gw.Reload(ctx, added); err != nil {
		t.Fatalf("reload adding beta: %v", err)
	}
	// The list_changed comes once beta is ready and merged; the tools are listed then.
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no tools/list_changed reached the session for the upstream added")
	}
	if tools := toolsOf(t, ctx, cs); !slices.Contains(tools, "beta__echo") {
		t.Fatalf("beta's tools are not listed after its list_changed: %v", tools)
	}
	if got := textOf(t, callTool(t, cs, "beta__echo", map[string]any{"text": "x"})); got != "beta:x" {
		t.Errorf("beta__echo answered %q", got)
	}

	// A rule changed: the next call is decided by it.
	denied := parseConfig(t, head+reloadPolicy(true)+"upstreams:"+alpha+rev+beta)
	if err := gw.Reload(ctx, denied); err != nil {
		t.Fatalf("reload of the policy: %v", err)
	}
	res := callTool(t, cs, "alpha__whoami", nil)
	if !res.IsError || !strings.Contains(textOf(t, res), "whoami is off") {
		t.Errorf("alpha__whoami after the rule denies it: isError=%v %q", res.IsError, textOf(t, res))
	}

	// An upstream removed with a call in flight: its tools vanish at once, the call
	// finishes.
	done := make(chan *mcp.CallToolResult, 1)
	callErr := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rev__ask", Arguments: map[string]any{"text": "hi"}})
		callErr <- err
		done <- res
	}()
	select {
	case <-sampling:
	case <-time.After(30 * time.Second):
		t.Fatal("rev__ask never asked the client")
	}
	removed := parseConfig(t, head+reloadPolicy(true)+"upstreams:"+alpha+beta)
	if err := gw.Reload(ctx, removed); err != nil {
		t.Fatalf("reload removing rev: %v", err)
	}
	if tools := toolsOf(t, ctx, cs); slices.ContainsFunc(tools, func(n string) bool { return strings.HasPrefix(n, "rev__") }) {
		t.Errorf("rev's tools are still listed after it was removed: %v", tools)
	}
	close(release)
	if err := <-callErr; err != nil {
		t.Fatalf("the call in flight on the removed upstream failed: %v", err)
	}
	if res := <-done; res.IsError || !strings.Contains(textOf(t, res), "sampled=late") {
		t.Errorf("the call in flight on the removed upstream answered isError=%v %q", res.IsError, textOf(t, res))
	}
	if _, ok := gw.UpstreamStatuses()["rev"]; ok {
		t.Error("rev still has a status after it was removed")
	}
	if got := gw.ConfigStatus().Version; got != removed.Version() {
		t.Errorf("version %q after the reloads, want %q", got, removed.Version())
	}

	// An upstream changed: a new connection replaces the old one, under the same names.
	betaChanged := upstreamYAML("beta", "beta", "    request_timeout: 45s\n")
	replaced := parseConfig(t, head+reloadPolicy(true)+"upstreams:"+alpha+betaChanged)
	if err := gw.Reload(ctx, replaced); err != nil {
		t.Fatalf("reload changing beta: %v", err)
	}
	testwait.Until(t, 30*time.Second, "the changed beta to answer", func() bool {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"text": "y"}})
		return err == nil && !res.IsError && textOf(t, res) == "beta:y"
	})
	removed = replaced

	// A key that needs a restart: refused, the running configuration kept.
	restart := parseConfig(t, "listen: 127.0.0.1:1\ndrain_timeout: 30s\n"+reloadPolicy(true)+"upstreams:"+alpha)
	err := gw.Reload(ctx, restart)
	var refused *gateway.ReloadError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "restart it to change listen") {
		t.Fatalf("reload changing listen: %v, want a ReloadError naming listen", err)
	}
	st := gw.ConfigStatus()
	if st.Version != removed.Version() || st.LastError == "" {
		t.Errorf("after a refused reload: %+v, want version %q and the refusal", st, removed.Version())
	}
	if tools := toolsOf(t, ctx, cs); !slices.Contains(tools, "beta__echo") {
		t.Errorf("a refused reload changed the catalog: %v", tools)
	}
}

// TestReloadSwapsAPIKeys: a reload reads auth.api_keys_file and admin.api_keys_file again,
// also when the config did not change: a key taken out of them is refused from then on, one
// put in is accepted. A change to the rest of auth is refused, the keys in force kept.
func TestReloadSwapsAPIKeys(t *testing.T) {
	const oldKey, newKey = "mfk_reload-old-key", "mfk_reload-new-key"
	const oldAdmin, newAdmin = "mfk_reload-old-admin", "mfk_reload-new-admin"
	dir := t.TempDir()
	keysFile, adminFile := filepath.Join(dir, "keys.yaml"), filepath.Join(dir, "admins.yaml")
	writeKeys := func(file, name, key string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(fmt.Sprintf("- {name: %s, hash: %q}\n", name, auth.HashAPIKey(key))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(keysFile, "old", oldKey)
	writeKeys(adminFile, "old-ops", oldAdmin)
	text := fmt.Sprintf("listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\n  api_keys_file: %s\nauth:\n  api_keys_file: %s\n", adminFile, keysFile)
	cfg := parseConfig(t, text+"upstreams:"+upstreamYAML("alpha", "alpha", ""))
	tg := startConfigured(t, cfg, nil, true)
	defer tg.close()
	admin := startAdmin(t, tg)
	status := func(key string) int {
		return rawClient{t: t, url: tg.url}.do(http.MethodPost, initBody, map[string]string{"Authorization": "Bearer " + key}).status
	}
	adminStatus := func(key string) int {
		admin.key = key
		return admin.do(http.MethodGet, "/api/whoami", nil, nil)
	}
	if got := [2]int{status(oldKey), adminStatus(oldAdmin)}; got != [2]int{http.StatusOK, http.StatusOK} {
		t.Fatalf("the old client and admin keys before the reload: %v", got)
	}
	writeKeys(keysFile, "new", newKey)
	writeKeys(adminFile, "new-ops", newAdmin)
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, text+"upstreams:"+upstreamYAML("alpha", "alpha", ""))); err != nil {
		t.Fatalf("reload of the keys: %v", err)
	}
	if got, want := [2]int{status(oldKey), status(newKey)}, [2]int{http.StatusUnauthorized, http.StatusOK}; got != want {
		t.Errorf("after the reload the old key answers %d, the new one %d; want %v", got[0], got[1], want)
	}
	if got, want := [2]int{adminStatus(oldAdmin), adminStatus(newAdmin)}, [2]int{http.StatusUnauthorized, http.StatusOK}; got != want {
		t.Errorf("after the reload the old admin key answers %d, the new one %d; want %v", got[0], got[1], want)
	}

	scoped := parseConfig(t, text+"  scopes: [mcp]\nupstreams:"+upstreamYAML("alpha", "alpha", ""))
	err := tg.gw.Reload(ctxT(t), scoped)
	if !strings.Contains(fmt.Sprint(err), "only api_keys and api_keys_file can change") {
		t.Errorf("reload changing auth.scopes: %v, want it refused", err)
	}
	if got := status(newKey); got != http.StatusOK {
		t.Errorf("the new key after a refused reload: %d", got)
	}
}

// TestReloadSetsLogLevel: log_level changes the level given in Options.LogLevel; a gateway
// given none refuses the change.
func TestReloadSetsLogLevel(t *testing.T) {
	text := "listen: 127.0.0.1:0\nupstreams: []\n"
	level := new(slog.LevelVar)
	tg := startConfigured(t, parseConfig(t, text), &gateway.Options{LogLevel: level}, false)
	defer tg.close()
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, "log_level: debug\n"+text)); err != nil {
		t.Fatalf("reload of log_level: %v", err)
	}
	if level.Level() != slog.LevelDebug {
		t.Errorf("level %v after the reload, want debug", level.Level())
	}

	fixed := startConfigured(t, parseConfig(t, text), nil, false)
	defer fixed.close()
	err := fixed.gw.Reload(ctxT(t), parseConfig(t, "log_level: debug\n"+text))
	if !strings.Contains(fmt.Sprint(err), "restart it to change log_level") {
		t.Errorf("reload of log_level without Options.LogLevel: %v, want it refused", err)
	}
}

// TestReloadedRuleReachesListenStreams: a rule a reload adds that hides a tool from one
// caller is a change of that caller's list only: bob's listen stream (2026-07-28) hears
// list_changed, alice's hears nothing.
func TestReloadedRuleReachesListenStreams(t *testing.T) {
	const aliceKey, bobKey = "mfk_reload-alice", "mfk_reload-bob"
	text := listenLimits + upstreamYAML("alpha", "alpha", "")
	first := parseConfig(t, text+aliceAndBobYAML(aliceKey, bobKey, `{name: none, effect: hide, match: {upstreams: [nobody]}}`))
	tg := startConfigured(t, first, nil, true)
	t.Cleanup(tg.close)
	params := `{"notifications":{"toolsListChanged":true}}`
	alice := openListenAs(t, t, tg.url, `1`, params, aliceKey)
	bob := openListenAs(t, t, tg.url, `2`, params, bobKey)
	for _, lc := range []*listenClient{alice, bob} {
		if m := lc.next(t, "acknowledgement"); m.Method != "notifications/subscriptions/acknowledged" {
			t.Fatalf("first message %+v, want the acknowledgement", m)
		}
	}
	hidden := parseConfig(t, text+aliceAndBobYAML(aliceKey, bobKey, `{name: no-whoami-for-bob, effect: hide, match: {principal: {api_keys: [bob]}, tools: [whoami]}}`))
	if err := tg.gw.Reload(ctxT(t), hidden); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if m := bob.next(t, "tools/list_changed"); m.Method != "notifications/tools/list_changed" {
		t.Errorf("bob's listen got %+v, want notifications/tools/list_changed", m)
	}
	// What the reload queued is written before the completion result that Close sends.
	tg.gw.Close()
	if m := alice.next(t, "completion result"); m.Result == nil {
		t.Errorf("alice's listen got %+v before its end; want nothing (her view did not change)", m)
	}
}

// TestReloadedRuleReachesSessions: a rule a reload adds that hides a tool is a change of the
// session's list: it hears list_changed, and the tool is gone from its list.
func TestReloadedRuleReachesSessions(t *testing.T) {
	head := "listen: 127.0.0.1:0\n"
	alpha := upstreamYAML("alpha", "alpha", "")
	tg := startConfigured(t, parseConfig(t, head+reloadPolicy(false)+"upstreams:"+alpha), nil, true)
	defer tg.close()
	changed := make(chan struct{}, 16)
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	if tools := toolsOf(t, ctx, cs); !slices.Contains(tools, "alpha__whoami") {
		t.Fatalf("tools before the reload: %v", tools)
	}
	testwait.Until(t, 10*time.Second, "the client to listen on its stream", func() bool { return tg.gw.ListeningSessions() == 1 })
	hide := "policy:\n  default: allow\n  rules:\n    - {name: hide-whoami, effect: hide, match: {tools: [whoami]}}\n"
	if err := tg.gw.Reload(ctx, parseConfig(t, head+hide+"upstreams:"+alpha)); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed reached the session for the rule that hides a tool")
	}
	if tools := toolsOf(t, ctx, cs); slices.Contains(tools, "alpha__whoami") || !slices.Contains(tools, "alpha__echo") {
		t.Errorf("tools after the rule hides whoami: %v", tools)
	}
}

// TestReloadChangesWhatAProfileIncludes: what a profile includes changes with a reload, and
// its clients hear list_changed.
func TestReloadChangesWhatAProfileIncludes(t *testing.T) {
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("alpha", "alpha", "")
	profile := func(tools string) string {
		return "profiles:\n  - name: p\n    include:\n      - {upstream: alpha, tools: [" + tools + "]}\n"
	}
	tg := startConfigured(t, parseConfig(t, head+profile(`"alpha__echo"`)), nil, true)
	defer tg.close()
	changed := make(chan struct{}, 16)
	cs := connect(t, tg.url+"/p", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx := ctxT(t)
	if tools := toolsOf(t, ctx, cs); !slices.Equal(tools, []string{"alpha__echo"}) {
		t.Fatalf("the profile's tools before the reload: %v", tools)
	}
	testwait.Until(t, 10*time.Second, "the client to listen on its stream", func() bool { return tg.gw.ListeningSessions() == 1 })
	if err := tg.gw.Reload(ctx, parseConfig(t, head+profile(`"alpha__echo", "alpha__whoami"`))); err != nil {
		t.Fatalf("reload: %v", err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no tools/list_changed reached the profile's client")
	}
	if tools := toolsOf(t, ctx, cs); !slices.Contains(tools, "alpha__whoami") {
		t.Errorf("the profile's tools after the reload: %v", tools)
	}
}

// TestReloadSwapsRateLimits: a reload that raises a rate limit lets the next call through;
// one that keeps the limits keeps what they counted.
func TestReloadSwapsRateLimits(t *testing.T) {
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("alpha", "alpha", "")
	limit := func(burst int) string {
		return fmt.Sprintf("policy:\n  default: allow\n  rate_limits:\n    - {key: principal, rate: 1/h, burst: %d}\n", burst)
	}
	tg := startConfigured(t, parseConfig(t, head+limit(1)), nil, true)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	limited := func() bool {
		res := callTool(t, cs, "alpha__whoami", nil)
		return res.IsError && strings.Contains(textOf(t, res), "rate limited")
	}
	if limited() || !limited() {
		t.Fatal("burst 1: the first call should pass and the second be rate limited")
	}
	// The same limits, with a rule added: what they counted stays.
	ruled := head + limit(1) + "  rules:\n    - {name: none, effect: deny, match: {upstreams: [nobody]}}\n"
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, ruled)); err != nil {
		t.Fatalf("reload adding a rule: %v", err)
	}
	if !limited() {
		t.Error("a reload that kept the limits forgot what they counted")
	}
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, head+limit(5))); err != nil {
		t.Fatalf("reload raising the limit: %v", err)
	}
	if limited() {
		t.Error("the call after the limit was raised is still rate limited")
	}
}

// TestReloadSwapsApprovalTimeout: approval.timeout changes with a reload: a call asked for
// approval afterwards waits for the new timeout, and says so when it runs out.
func TestReloadSwapsApprovalTimeout(t *testing.T) {
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("alpha", "alpha", "")
	policy := func(timeout string) string {
		return "policy:\n  default: allow\n  approval: {timeout: " + timeout + "}\n  rules:\n    - {name: ask, effect: approve, match: {tools: [whoami]}}\n"
	}
	tg := startConfigured(t, parseConfig(t, head+policy("1h")), nil, true)
	defer tg.close()
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			<-ctx.Done() // nobody answers
			return nil, ctx.Err()
		},
	})
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, head+policy("200ms"))); err != nil {
		t.Fatalf("reload of approval.timeout: %v", err)
	}
	res := callTool(t, cs, "alpha__whoami", nil)
	if !res.IsError || !strings.Contains(textOf(t, res), "was not approved within 200ms") {
		t.Errorf("the call after approval.timeout became 200ms: isError=%v %q", res.IsError, textOf(t, res))
	}
}

// TestCallHeldAcrossAReloadThatReplacesItsUpstream: a call held for its user's approval when
// a reload replaces its isolated upstream is refused once approved, saying to send it again:
// it does not run on the upstream the reload retired, nor open a connection there.
func TestCallHeldAcrossAReloadThatReplacesItsUpstream(t *testing.T) {
	config := func(marker string) string {
		return "listen: 127.0.0.1:0\npolicy:\n  default: allow\n  approval: {timeout: 1m}\n  rules:\n    - {name: ask, effect: approve, match: {tools: [whoami]}}\nupstreams:" +
			upstreamYAML("alpha", "alpha", "    isolation: session\n    request_timeout: "+marker+"\n")
	}
	tg := startConfigured(t, parseConfig(t, config("30s")), nil, true)
	defer tg.close()
	asked, reloaded := make(chan struct{}), make(chan struct{})
	var first sync.Once
	cs := connect(t, tg.url, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			first.Do(func() { close(asked) })
			select {
			case <-reloaded:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
		},
	})
	done := make(chan *mcp.CallToolResult, 1)
	go func() { done <- callTool(t, cs, "alpha__whoami", nil) }()
	<-asked
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, config("31s"))); err != nil {
		t.Fatalf("reload that replaces alpha: %v", err)
	}
	close(reloaded)
	res := <-done
	if !res.IsError || !strings.Contains(textOf(t, res), "reload") || !strings.Contains(textOf(t, res), "send it again") {
		t.Errorf("the call approved after its upstream was replaced: isError=%v %q; want it refused, to be sent again", res.IsError, textOf(t, res))
	}
	if n := tg.gw.IsolatedConnections("alpha"); n != 0 {
		t.Errorf("%d connections of the new alpha after the refused call; want 0", n)
	}
	// Sent again once the upstream the reload made lists it, it runs there.
	testwait.Until(t, 20*time.Second, "the new alpha to list whoami", func() bool {
		return slices.Contains(toolsOf(t, ctxT(t), cs), "alpha__whoami")
	})
	if res := callTool(t, cs, "alpha__whoami", nil); res.IsError {
		t.Errorf("the call sent again after the reload: %q", textOf(t, res))
	}
}

// TestReloadSwapsApprovalMemory: approval.remember set by a reload remembers the next
// approval (the same call then runs without asking), and taken back by another, asks again.
func TestReloadSwapsApprovalMemory(t *testing.T) {
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("alpha", "alpha", "")
	policy := func(remember string) string {
		return "policy:\n  default: allow\n  approval: {timeout: 20s" + remember + "}\n  rules:\n    - {name: ask, effect: approve, match: {tools: [whoami]}}\n"
	}
	tg := startConfigured(t, parseConfig(t, head+policy("")), nil, true)
	defer tg.close()
	var asked atomic.Int64
	var last atomic.Value
	cs := connect(t, tg.url, approver("accept", true, &asked, &last))
	call := func(want int64, what string) {
		t.Helper()
		if res := callTool(t, cs, "alpha__whoami", nil); res.IsError {
			t.Fatalf("%s: %q", what, textOf(t, res))
		}
		if got := asked.Load(); got != want {
			t.Errorf("%s: asked %d times in all, want %d", what, got, want)
		}
	}
	call(1, "without remember")
	call(2, "without remember, again")
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, head+policy(", remember: 1h"))); err != nil {
		t.Fatalf("reload of approval.remember: %v", err)
	}
	call(3, "remember on, first call")
	call(3, "remember on, the same call")
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, head+policy(""))); err != nil {
		t.Fatalf("reload taking approval.remember back: %v", err)
	}
	call(4, "remember off again")
}

// TestReloadSwapsSelfApproval: approval.allow_self_approval set by a reload lets an operator
// approve a call of their own, where they could not before it.
func TestReloadSwapsSelfApproval(t *testing.T) {
	iss := testissuer.New(t)
	tg := startGateway(t, selfApprovalYAML(iss, "", ""), nil)
	defer tg.close()
	adm := startAdmin(t, tg)
	alice := &adminClient{t: t, url: adm.url, key: "mfk_alice-admin"}
	client := connectAs(t, tg.url, "mfk_alice", nil)
	done := callAsync(ctxT(t), client, "a__echo", map[string]any{"text": "mine"})
	held := adm.waitHeld(1)[0]
	if code := alice.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusForbidden {
		t.Errorf("approving one's own call before the reload: %d, want 403", code)
	}
	if err := tg.gw.Reload(ctxT(t), parseConfig(t, selfApprovalYAML(iss, ", allow_self_approval: true", ""))); err != nil {
		t.Fatalf("reload of allow_self_approval: %v", err)
	}
	if code := alice.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Errorf("approving one's own call after the reload: %d, want 200", code)
	}
	if res := <-done; res.IsError {
		t.Errorf("the self-approved call: %q", resultText(res))
	}
}

// TestNoReloadOnceClosing: a reload asked once the gateway began to close is refused with
// ErrClosed, and starts nothing: an upstream it would add would have outlived Close. Before,
// a reload (a file change, SIGHUP, another replica's) that came during the close started it.
func TestNoReloadOnceClosing(t *testing.T) {
	base := "listen: 127.0.0.1:0\nupstreams:\n" + upstreamYAML("alpha", "alpha", "")
	tg := startGateway(t, base, nil)
	tg.close()
	err := tg.gw.Reload(context.Background(), parseConfig(t, base+upstreamYAML("beta", "beta", "")))
	if !errors.Is(err, gateway.ErrClosed) {
		t.Fatalf("a reload after Close: %v, want ErrClosed", err)
	}
	if _, started := tg.gw.UpstreamStatuses()["beta"]; started {
		t.Error("the reload refused after Close started upstream beta")
	}
}

package gateway_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestReloadSwapsThePlugins: one session stays open while reloads replace the policy plugins
// (the next calls are decided by the new ones; a call in flight keeps the old ones, which
// inspect its result, and they stop once it has ended), are refused for a plugin that cannot
// start (the old ones stay, the refused one leaves no process), remove every plugin and add
// some again; no plugin process is left after the gateway closes.
func TestReloadSwapsThePlugins(t *testing.T) {
	_, test := plugins(t)
	head := "listen: 127.0.0.1:0\ndrain_timeout: 30s\nupstreams:" + upstreamYAML("a", "beta", "") + upstreamYAML("rev", "reverse", "")
	set := func(name, closed, mark string) string {
		return "plugins:\n" +
			pluginYAML("gatekeeper", test, fmt.Sprintf("    config: {effect: deny, reason: %q}\n    tools: [%s]\n    env: {PLUGIN_ROLE: %s-deny}\n", closed+" is closed", closed, name)) +
			pluginYAML("marker", test, fmt.Sprintf("    config: {mark: %q}\n    tools: [ask]\n    env: {TESTPLUGIN_INSPECT: \"1\", PLUGIN_ROLE: %s-mark}\n", mark, name))
	}
	tg := startConfigured(t, parseConfig(t, head+set("first", "whoami", "old-set")), nil, true)
	closed := false
	defer func() {
		if !closed {
			tg.close()
		}
	}()
	gw := tg.gw
	ctx := ctxT(t)
	sampling := make(chan struct{}, 1)
	release := make(chan struct{})
	cs := connect(t, tg.url, answersHeldUntil(sampling, release))
	argsOf := func(tool string) map[string]any {
		if strings.HasSuffix(tool, "echo") {
			return map[string]any{"text": "x"}
		}
		return nil
	}
	denied := func(tool, reason string) {
		t.Helper()
		res := callTool(t, cs, tool, argsOf(tool))
		if !res.IsError || !strings.Contains(resultText(res), reason) {
			t.Errorf("%s: isError=%v %q, want it refused with %q", tool, res.IsError, resultText(res), reason)
		}
	}
	allowed := func(tool string) {
		t.Helper()
		if res := callTool(t, cs, tool, argsOf(tool)); res.IsError {
			t.Errorf("%s: refused %q, want it allowed", tool, resultText(res))
		}
	}
	gone := func(roles ...string) {
		t.Helper()
		for _, role := range roles {
			testwait.Until(t, 30*time.Second, "the processes of the plugins "+role+" to end", func() bool {
				return len(pidsOf(t, test.path, "PLUGIN_ROLE="+role)) == 0
			})
		}
	}
	denied("a__whoami", "whoami is closed")

	// A call in flight took the first set; the reload puts the second in force.
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "rev__ask", Arguments: map[string]any{"text": "hi"}})
		done <- outcome{res, err}
	}()
	select {
	case <-sampling:
	case <-time.After(30 * time.Second):
		t.Fatal("rev__ask never asked the client")
	}
	if err := gw.Reload(ctx, parseConfig(t, head+set("second", "echo", "new-set"))); err != nil {
		t.Fatalf("reload replacing the plugins: %v", err)
	}
	allowed("a__whoami")
	denied("a__echo", "echo is closed")
	if left := pidsOf(t, test.path, "PLUGIN_ROLE=first-mark"); len(left) != 1 {
		t.Errorf("the first set's inspecting plugin while a call that took it runs: processes %v, want it still running", left)
	}
	close(release)
	out := <-done
	if out.err != nil {
		t.Fatalf("the call in flight across the reload: %v", out.err)
	}
	var texts []string
	for _, c := range out.res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, tc.Text)
		}
	}
	if out.res.IsError || !strings.Contains(strings.Join(texts, "|"), "old-set") || strings.Contains(strings.Join(texts, "|"), "new-set") {
		t.Errorf("the call in flight across the reload: isError=%v %q, want its result inspected by the plugins it began with", out.res.IsError, texts)
	}
	gone("first-deny", "first-mark")

	// A plugin that cannot start: refused, the running ones stay, nothing of it is left.
	bad := "plugins:\n" + pluginYAML("broken", test, "    config: {fail_configure: \"not today\"}\n    env: {PLUGIN_ROLE: broken}\n")
	err := gw.Reload(ctx, parseConfig(t, head+bad))
	var refused *gateway.ReloadError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("reload with a plugin that cannot start: %v, want a ReloadError naming it", err)
	}
	if left := pidsOf(t, test.path, "PLUGIN_ROLE=broken"); len(left) != 0 {
		t.Errorf("processes of the plugin refused: %v", left)
	}
	denied("a__echo", "echo is closed")

	// Every plugin removed, then some added again.
	if err := gw.Reload(ctx, parseConfig(t, head)); err != nil {
		t.Fatalf("reload removing every plugin: %v", err)
	}
	allowed("a__echo")
	allowed("a__whoami")
	gone("second-deny", "second-mark")
	if err := gw.Reload(ctx, parseConfig(t, head+set("third", "whoami", "third-set"))); err != nil {
		t.Fatalf("reload adding plugins again: %v", err)
	}
	denied("a__whoami", "whoami is closed")
	allowed("a__echo")

	tg.close()
	closed = true
	if left := pidsOf(t, test.path); len(left) != 0 {
		t.Errorf("plugin processes left after the gateway closed: %v", left)
	}
}

// TestReloadAddingPluginsWithoutAGate: a gateway started without a policy or plugins has no
// approval step, which a plugin may ask for: a reload that adds plugins is refused, saying
// so, and starts none.
func TestReloadAddingPluginsWithoutAGate(t *testing.T) {
	_, test := plugins(t)
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("a", "beta", "")
	tg := startConfigured(t, parseConfig(t, head), nil, true)
	defer tg.close()
	next := head + "plugins:\n" + pluginYAML("asker", test, "    config: {effect: require_approval}\n    env: {PLUGIN_ROLE: ungated}\n")
	err := tg.gw.Reload(ctxT(t), parseConfig(t, next))
	if !strings.Contains(fmt.Sprint(err), "no approval step") || !strings.Contains(fmt.Sprint(err), "restart it to add plugins") {
		t.Errorf("reload adding plugins to a gateway without a gate: %v, want it refused with the reason", err)
	}
	if left := pidsOf(t, test.path, "PLUGIN_ROLE=ungated"); len(left) != 0 {
		t.Errorf("processes of the plugin refused: %v", left)
	}
	cs := connect(t, tg.url, nil)
	if res := callTool(t, cs, "a__whoami", nil); res.IsError {
		t.Errorf("a call after the refused reload: %q", resultText(res))
	}
}

package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// pluginDir holds the plugins the tests build, once per run; TestMain removes it.
var pluginDir string

// builtPlugin is a plugin program the tests built, with its checksum.
type builtPlugin struct{ path, sum string }

var buildPlugins = sync.OnceValues(func() (map[string]builtPlugin, error) {
	dir, err := os.MkdirTemp("", "manifold-plugins-")
	if err != nil {
		return nil, err
	}
	pluginDir = dir
	out := map[string]builtPlugin{}
	for name, pkg := range map[string]string{"guard": "../examples/plugins/guard", "testplugin": "../internal/testplugin"} {
		path := filepath.Join(dir, name)
		if msg, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", pkg, err, msg)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		out[name] = builtPlugin{path, hex.EncodeToString(sum[:])}
	}
	return out, nil
})

// plugins returns the example guard plugin and the test plugin, built.
func plugins(t *testing.T) (guard, test builtPlugin) {
	t.Helper()
	built, err := buildPlugins()
	if err != nil {
		t.Fatal(err)
	}
	return built["guard"], built["testplugin"]
}

// pluginYAML is one entry of `plugins:`.
func pluginYAML(name string, p builtPlugin, extra string) string {
	return fmt.Sprintf("  - name: %s\n    path: %q\n    sha256: %s\n%s", name, p.path, p.sum, extra)
}

// pidsOf returns the processes running the program at path, with env among their
// environment if given.
func pidsOf(t *testing.T, path string, env ...string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || exe != path {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if len(env) == 0 || slices.Contains(strings.Split(string(environ), "\x00"), env[0]) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// callTool calls a tool and returns its result, or fails the test on a JSON-RPC error.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// TestPluginsDecideRewriteAndRedact: the example guard plugin, built by the test, in front of
// real upstreams: a call passes, one whose arguments match a blocked pattern is refused
// with the plugin's reason, one without the argument the plugin defaults is rewritten, and
// e-mail addresses in a result are redacted in its content and its structuredContent. A
// plugin that asks for approval holds the call for an operator. Every plugin's part is in
// the audit record.
func TestPluginsDecideRewriteAndRedact(t *testing.T) {
	guard, test := plugins(t)
	var out lockedBuffer
	trail := audit.New(&out, nil)
	t.Cleanup(func() { _ = trail.Close() })
	yaml := adminYAML("") + "listen: 127.0.0.1:0\naudit: {arguments: true}\nplugins:\n" +
		pluginYAML("guard", guard, `    config: {block: ["(?i)drop\\s+table"], defaults: {text: "hello from the defaults"}}
    upstreams: [a, r]
    tools: [echo, contact]
`) + pluginYAML("asker", test, `    config: {effect: require_approval, reason: "whoami needs a person"}
    tools: [whoami]
`) + "upstreams:" + upstreamYAML("a", "beta", "") + rugpullYAML("r", "", "")
	tg := startGateway(t, yaml, &gateway.Options{Audit: trail})
	defer tg.close()
	adm := startAdmin(t, tg)
	cs := connect(t, tg.url, nil)

	if res := callTool(t, cs, "a__echo", map[string]any{"text": "select 1"}); res.IsError || resultText(res) != "beta:select 1" {
		t.Errorf("an allowed call: %v %q", res.IsError, resultText(res))
	}
	res := callTool(t, cs, "a__echo", map[string]any{"text": "DROP  TABLE users"})
	if !res.IsError || res.Meta["dev.manifold/reason"] != "denied" || !strings.Contains(resultText(res), `matches the blocked pattern "(?i)drop\\s+table"`) {
		t.Errorf("a blocked call: %v %v %q", res.IsError, res.Meta, resultText(res))
	}
	if res := callTool(t, cs, "a__echo", map[string]any{}); res.IsError || resultText(res) != "beta:hello from the defaults" {
		t.Errorf("a rewritten call: %v %q", res.IsError, resultText(res))
	}
	res = callTool(t, cs, "r__contact", map[string]any{"text": "bob"})
	structured, _ := json.Marshal(res.StructuredContent)
	if res.IsError || resultText(res) != "write to [redacted email]" || string(structured) != `{"contact":{"email":"[redacted email]","name":"bob"}}` {
		t.Errorf("a redacted result: %v %q %s", res.IsError, resultText(res), structured)
	}

	done := callAsync(ctxT(t), cs, "a__whoami", nil)
	held := adm.waitHeld(1)[0]
	if held.Rule != "plugin asker" {
		t.Errorf("the held call's rule: %q, want the plugin that asked", held.Rule)
	}
	if code := adm.do("POST", "/api/approvals/"+held.ID, map[string]string{"decision": "approve"}, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if res := <-done; res.IsError || resultText(res) != "beta" {
		t.Errorf("the call a plugin held, approved: %v %q", res.IsError, resultText(res))
	}

	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, rec := range auditLines(t, out.String()) {
		decisions, _ := rec["decisions"].([]any)
		for _, d := range decisions {
			d, _ := d.(map[string]any)
			seen[fmt.Sprintf("%v %v %v", d["check"], d["effect"], d["rule"])] = true
		}
		if rec["target"] == "echo" && rec["outcome"] == "ok" && strings.Contains(fmt.Sprint(rec["arguments"]), "hello from the defaults") {
			seen["rewritten arguments audited"] = true
		}
	}
	for _, want := range []string{"plugin allow guard", "plugin deny guard", "plugin rewrite guard", "inspect rewrite guard", "plugin require_approval asker", "rewritten arguments audited"} {
		if !seen[want] {
			t.Errorf("the audit trail lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPluginFailures: a plugin killed mid-run fails its calls clearly (fail_closed), is
// restarted, and calls pass again; one that hangs hits its timeout; one that fails open is
// skipped; when the gateway closes, no plugin process is left.
func TestPluginFailures(t *testing.T) {
	_, test := plugins(t)
	yaml := "listen: 127.0.0.1:0\nplugins:\n" +
		pluginYAML("watcher", test, "    config: {crash_on: crash}\n    tools: [echo, whoami]\n    env: {PLUGIN_ROLE: watcher}\n") +
		pluginYAML("sleeper", test, "    config: {hang: true}\n    timeout: 200ms\n    tools: [add]\n") +
		pluginYAML("lenient", test, "    config: {hang: true}\n    timeout: 50ms\n    failure: fail_open\n    tools: [whoami]\n") +
		"upstreams:" + upstreamYAML("a", "beta", "")
	tg := startGateway(t, yaml, nil)
	closed := false
	defer func() {
		if !closed {
			tg.close()
		}
	}()
	cs := connect(t, tg.url, nil)
	if res := callTool(t, cs, "a__echo", map[string]any{"text": "before"}); res.IsError {
		t.Fatalf("before the kill: %q", resultText(res))
	}

	if all := pidsOf(t, test.path); len(all) != 3 {
		t.Fatalf("plugin processes: %v, want 3", all)
	}
	watcher := pidsOf(t, test.path, "PLUGIN_ROLE=watcher")
	if len(watcher) != 1 {
		t.Fatalf("the watcher's processes: %v, want 1", watcher)
	}
	if err := syscall.Kill(watcher[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := callTool(t, cs, "a__echo", map[string]any{"text": "while down"})
	if res.IsError && res.Meta["dev.manifold/reason"] != "plugin_unavailable" || res.IsError && !strings.Contains(resultText(res), `"watcher" is unavailable`) {
		t.Errorf("a call while the plugin is down: %v %q", res.Meta, resultText(res))
	}
	testwait.Until(t, 20*time.Second, "the killed plugins to be restarted and pass calls", func() bool {
		res := callTool(t, cs, "a__echo", map[string]any{"text": "after"})
		return !res.IsError && resultText(res) == "beta:after"
	})
	if again := pidsOf(t, test.path, "PLUGIN_ROLE=watcher"); len(again) != 1 || again[0] == watcher[0] {
		t.Errorf("the watcher's processes after the restart: %v, want one other than %d", again, watcher[0])
	}

	res = callTool(t, cs, "a__add", map[string]any{"a": 1, "b": 2})
	if !res.IsError || res.Meta["dev.manifold/reason"] != "plugin_unavailable" || !strings.Contains(resultText(res), `"sleeper"`) {
		t.Errorf("a call to a hanging plugin: %v %v %q", res.IsError, res.Meta, resultText(res))
	}
	if res := callTool(t, cs, "a__whoami", nil); res.IsError || resultText(res) != "beta" {
		t.Errorf("a call past a failing plugin that fails open: %v %q", res.IsError, resultText(res))
	}

	tg.close()
	closed = true
	if left := pidsOf(t, test.path); len(left) != 0 {
		t.Errorf("plugin processes left after the gateway closed: %v", left)
	}
}

// TestPluginWithAWrongChecksumDoesNotStart: a plugin whose program does not have the
// configured checksum is not started, and the gateway says which plugin and both sums.
func TestPluginWithAWrongChecksumDoesNotStart(t *testing.T) {
	guard, _ := plugins(t)
	wrong := strings.Repeat("0", 64)
	cfg, err := config.Parse("test.yaml", []byte("listen: 127.0.0.1:0\nplugins:\n"+pluginYAML("guard", builtPlugin{guard.path, wrong}, "")+"upstreams: []\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, nil)
	if err == nil {
		gw.Close()
		t.Fatal("the gateway started a plugin with a wrong checksum")
	}
	for _, want := range []string{"guard", wrong, guard.sum} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	if left := pidsOf(t, guard.path); len(left) != 0 {
		t.Errorf("processes of the refused plugin: %v", left)
	}
}

// TestPluginsInspectTaskResults: a tool call run as a task has its result, fetched with
// tasks/result, pass the inspecting plugins that see its tool call, like a plain call's, and
// they are told the method is tasks/result (regression: they were told tools/call); a
// plugin whose methods do not name tools/call does not see it.
func TestPluginsInspectTaskResults(t *testing.T) {
	guard, test := plugins(t)
	tg := startGateway(t, "listen: 127.0.0.1:0\nplugins:\n"+pluginYAML("guard", guard, "    config: {}\n    tools: [job]\n")+
		pluginYAML("stamp", test, "    config: {stamp: s}\n    env: {TESTPLUGIN_INSPECT: \"1\"}\n")+
		pluginYAML("prompts", test, "    config: {stamp: p}\n    methods: [prompts/get]\n    env: {TESTPLUGIN_INSPECT: \"1\"}\n")+
		"upstreams:"+upstreamYAML("tk", "tasks", ""), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	h := map[string]string{"Mcp-Session-Id": r.header.Get("Mcp-Session-Id")}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tk__job","arguments":{"text":"mail ann@example.com"},"task":{"ttl":60000}}}`, h)
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.msg.Result, &created); err != nil || created.Task.TaskID == "" {
		t.Fatalf("task-augmented call: %s", r.body)
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"`+created.Task.TaskID+`"}}`, h)
	if !strings.Contains(string(r.msg.Result), "done:mail [redacted email]") || strings.Contains(string(r.body), "ann@example.com") {
		t.Errorf("tasks/result: %s, want the address redacted", r.body)
	}
	var stamped struct {
		Meta struct {
			Seen []string `json:"testplugin/seen"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(r.msg.Result, &stamped); err != nil || !slices.Equal(stamped.Meta.Seen, []string{"s tasks/result job"}) {
		t.Errorf("what the inspecting plugins were told of the task's result: %q (%v), want only %q", stamped.Meta.Seen, err, "s tasks/result job")
	}
}

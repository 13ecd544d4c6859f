package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/audit"
	"github.com/manifold-mcp/manifold/gateway"
)

// filesYAML is a gateway without authentication in front of the files upstream (tools
// read_file and read_files, which answer the arguments they got), with policy (YAML lines at
// two spaces under `policy:`).
func filesYAML(policy string) string {
	return "listen: 127.0.0.1:0\naudit: {arguments: true}\npolicy:\n" + policy + "upstreams:" + upstreamYAML("fs", "files", "")
}

// toolReply is a tools/call's result as the client got it.
type toolReply struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	IsError bool           `json:"isError"`
	Meta    map[string]any `json:"_meta"`
}

// callRaw calls tool with args, raw JSON sent as is, and returns the tool result.
func callRaw(t *testing.T, c rawClient, sid, tool, args string) toolReply {
	t.Helper()
	r := c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__%s","arguments":%s}}`, tool, args), map[string]string{"Mcp-Session-Id": sid})
	var res toolReply
	if r.msg.Error != nil || json.Unmarshal(r.msg.Result, &res) != nil || len(res.Content) == 0 {
		t.Fatalf("%s %s: %d %s, want a tool result", tool, args, r.status, r.body)
	}
	return res
}

// got reports whether a served call's upstream got arguments equal (as JSON) to want.
func (r toolReply) got(want string) bool {
	var a, b any
	if r.IsError || json.Unmarshal([]byte(r.Content[0].Text), &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// denied reports whether the call was refused by the policy, with a message saying what.
func (r toolReply) denied(what string) bool {
	return r.IsError && r.Meta["dev.manifold/reason"] == "denied" && strings.Contains(r.Content[0].Text, what)
}

// TestOnlyTheDecidingRuleRewritesPathsThroughTheGateway: what the upstream gets is what the
// rule that decided the call checked: a relative path is taken from that rule's root (not
// from the root of a rule before it that did not match), and a rule that does not decide
// changes nothing (a relative path goes on as sent, for the upstream to resolve). The audit
// record names the deciding rule as the one that rewrote the arguments.
func TestOnlyTheDecidingRuleRewritesPathsThroughTheGateway(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, filesYAML(`  default: deny
  rules:
    - name: no-writes
      effect: deny
      match: {tools: [read_file], arguments: [{pointer: /path, path: true, root: /, matches: "."}, {pointer: /mode, equals: write}]}
    - name: readme
      effect: allow
      match: {tools: [read_file], arguments: [{pointer: /path, path: true, root: /srv/data, equals: /srv/data/readme}]}
    - name: reads
      effect: allow
      match: {tools: [read_file], arguments: [{pointer: /mode, equals: read}]}
`), &gateway.Options{Audit: trail})
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	if r := callRaw(t, c, sid, "read_file", `{"path":"readme","mode":"read"}`); !r.got(`{"path":"/srv/data/readme","mode":"read"}`) {
		t.Errorf("readme: the upstream got %q, want the path as the rule readme matched it, /srv/data/readme", r.Content[0].Text)
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"docs/x","mode":"read"}`); !r.got(`{"path":"docs/x","mode":"read"}`) {
		t.Errorf("docs/x: the upstream got %q, want it as sent: no rule that read the path decided", r.Content[0].Text)
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"readme","mode":"write"}`); !r.denied("does not allow") {
		t.Errorf("a write: %+v, want denied by no-writes", r)
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var rewrites []string
	for _, rec := range auditLines(t, out.String()) {
		if decisions := fmt.Sprint(rec["decisions"]); strings.Contains(decisions, "rewrite") {
			rewrites = append(rewrites, decisions)
		}
	}
	if len(rewrites) != 1 || !strings.Contains(rewrites[0], "effect:rewrite rule:readme") {
		t.Errorf("records with rewrites: %q, want one, by readme", rewrites)
	}
}

// TestCaseVariantMembersAreRefusedThroughTheGateway: arguments that give a member a rule reads
// twice, in names that differ only in case, are refused, fold_case or not: a Go upstream
// would read /etc/passwd where the rule read /ok.
func TestCaseVariantMembersAreRefusedThroughTheGateway(t *testing.T) {
	tg := startGateway(t, filesYAML(`  rules:
    - {name: no-etc, effect: deny, match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/etc(/|$)"}]}}
`), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	for _, args := range []string{`{"path":"/ok","PATH":"/etc/passwd"}`, `{"Path":"/etc/passwd","path":"/ok"}`} {
		if r := callRaw(t, c, sid, "read_file", args); !r.denied("differ only in case") {
			t.Errorf("%s: %+v, want denied, saying the names differ only in case", args, r)
		}
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/ok","Mode":"r","mode":"w"}`); !r.got(`{"path":"/ok","Mode":"r","mode":"w"}`) {
		t.Errorf("case variants where no rule reads: %+v, want served", r)
	}
}

// TestPathRuleRefusesWhatItCannotReadAndReadsLists: a deny rule's path matcher refuses a value
// that is not a string path (an array, an object) or a relative path without root, rather
// than let it past; a pointer ending in * reads every element of a list of paths, and the
// allowing rule that decides hands on every element cleaned.
func TestPathRuleRefusesWhatItCannotReadAndReadsLists(t *testing.T) {
	tg := startGateway(t, filesYAML(`  default: deny
  rules:
    - {name: no-etc, effect: deny, match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/etc(/|$)"}]}}
    - {name: no-etc-lists, effect: deny, match: {tools: [read_files], arguments: [{pointer: /paths/*, path: true, root: /srv/data, matches: "^/etc(/|$)"}]}}
    - {name: data, effect: allow, match: {tools: [read_files], arguments: [{pointer: /paths/*, path: true, root: /srv/data, matches: "^/srv/data/"}]}}
    - {name: files, effect: allow, match: {tools: [read_file]}}
`), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	for _, tt := range []struct{ tool, args, say string }{
		{"read_file", `{"path":["/etc/passwd"]}`, "must be a file path, a string, not an array"},
		{"read_file", `{"path":{"p":"/etc/passwd"}}`, "must be a file path, a string, not an object"},
		{"read_file", `{"path":"../etc/passwd"}`, "must be an absolute path"},
		{"read_files", `{"paths":["/srv/data/a","/etc/passwd"]}`, "does not allow"},
		{"read_files", `{"paths":["a","../../../etc/shadow"]}`, "does not allow"},
		{"read_files", `{"paths":["a",["/etc/passwd"]]}`, "must be a file path, a string, not an array"},
		{"read_files", `{"paths":"/etc/passwd"}`, "must be an array of file paths"},
	} {
		if r := callRaw(t, c, sid, tt.tool, tt.args); !r.denied(tt.say) {
			t.Errorf("%s %s: %+v, want denied, saying %q", tt.tool, tt.args, r, tt.say)
		}
	}
	if r := callRaw(t, c, sid, "read_files", `{"paths":["a","b/./c","/srv/data/d"]}`); !r.got(`{"paths":["/srv/data/a","/srv/data/b/c","/srv/data/d"]}`) {
		t.Errorf("a list under /srv/data: %+v, want served with every path cleaned", r)
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/srv/x"}`); !r.got(`{"path":"/srv/x"}`) {
		t.Errorf("an absolute path outside /etc: %+v, want served", r)
	}
}

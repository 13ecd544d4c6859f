package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
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

// TestHideRuleRefusalIsAnUnknownToolThroughTheGateway: a hide rule that refuses arguments it
// cannot read (a value that is not a path, a member given twice in names that differ in case,
// a lone case variant, an array where it reads a string) answers exactly as for a tool that
// does not exist, and the upstream is not called; the audit record says hide, by that rule,
// and names the tool as the client asked for it, like the record of a missing one.
func TestHideRuleRefusalIsAnUnknownToolThroughTheGateway(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	tg := startGateway(t, filesYAML(`  rules:
    - {name: secret-files, effect: hide, match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/secret(/|$)"}, {pointer: /mode, matches: "^r"}]}}
`), &gateway.Options{Audit: trail})
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	call := func(tool, args string) rawReply {
		return c.do(http.MethodPost, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, tool, args), map[string]string{"Mcp-Session-Id": sid})
	}
	missing := call("fs__nope", `{"path":"/secret/x","mode":"r"}`)
	if missing.msg.Error == nil {
		t.Fatalf("a missing tool: %d %s, want an error", missing.status, missing.body)
	}
	refused := []string{
		`{"path":["/secret/x"],"mode":"r"}`,
		`{"path":"/ok","PATH":"/secret/x","mode":"r"}`,
		`{"PATH":"/secret/x","mode":"r"}`,
		`{"path":"/secret/x","mode":["r"]}`,
	}
	for _, args := range refused {
		r := call("fs__read_file", args)
		if r.msg.Error == nil || r.status != missing.status || r.msg.Error.Code != missing.msg.Error.Code ||
			strings.Replace(r.msg.Error.Message, "fs__read_file", "X", 1) != strings.Replace(missing.msg.Error.Message, "fs__nope", "X", 1) ||
			string(r.msg.Error.Data) != string(missing.msg.Error.Data) {
			t.Errorf("%s: %d %s; want what a missing tool gets: %d %s", args, r.status, r.body, missing.status, missing.body)
		}
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/ok","mode":"r"}`); !r.got(`{"path":"/ok","mode":"r"}`) {
		t.Errorf("a path the rule does not hide: %+v, want served", r)
	}
	tg.close()
	if err := trail.Close(); err != nil {
		t.Fatal(err)
	}
	var missingRec map[string]any
	var hidden []map[string]any
	for _, rec := range auditLines(t, out.String()) {
		switch {
		case rec["method"] != "tools/call":
		case rec["target"] == "fs__nope":
			missingRec = rec
		case strings.Contains(fmt.Sprint(rec["decisions"]), "secret-files"):
			hidden = append(hidden, rec)
		}
	}
	if missingRec == nil || len(hidden) != len(refused) {
		t.Fatalf("records of the missing tool %v and of the hidden calls %v, want one and %d:\n%s", missingRec, hidden, len(refused), out.String())
	}
	for _, rec := range hidden {
		if d := fmt.Sprint(rec["decisions"]); !strings.Contains(d, "effect:hide rule:secret-files") || strings.Contains(d, "deny") {
			t.Errorf("a hidden call's decisions %s, want hide by secret-files", d)
		}
		for _, k := range []string{"outcome", "code", "reason", "upstream"} {
			if rec[k] != missingRec[k] {
				t.Errorf("a hidden call's record has %s %v, the missing tool's %v", k, rec[k], missingRec[k])
			}
		}
		if rec["target"] != "fs__read_file" {
			t.Errorf("a hidden call's record names the target %v, want fs__read_file as the client asked for it", rec["target"])
		}
	}
}

// TestLoneCaseVariantIsRefusedThroughTheGateway: a deny rule without fold_case on /path does
// not let {"PATH": "/etc/passwd"} past to an upstream that may read it as path (Go's
// encoding/json does); an allow rule does not match it.
func TestLoneCaseVariantIsRefusedThroughTheGateway(t *testing.T) {
	tg := startGateway(t, filesYAML(`  default: deny
  rules:
    - {name: no-etc, effect: deny, match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/etc(/|$)"}]}}
    - {name: srv, effect: allow, match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/srv/"}]}}
`), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	for _, args := range []string{`{"PATH":"/etc/passwd"}`, `{"Path":"/srv/../etc/passwd"}`} {
		if r := callRaw(t, c, sid, "read_file", args); !r.denied("differs only in case") || !strings.Contains(r.Content[0].Text, `"no-etc"`) {
			t.Errorf("%s: %+v, want denied by no-etc, saying the name differs only in case", args, r)
		}
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/srv/x"}`); !r.got(`{"path":"/srv/x"}`) {
		t.Errorf("the exact name: %+v, want served", r)
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/srv/x","Mode":"r"}`); !r.got(`{"path":"/srv/x","Mode":"r"}`) {
		t.Errorf("a case variant of a member no rule reads: %+v, want served", r)
	}
}

// TestContainerWhereADenyRuleReadsAValueIsRefusedThroughTheGateway: a deny rule that matches
// a string (matches) or one value (equals) does not let an array or an object past in its
// place: {"mode":["write"]} does not get past a rule on /mode equal to write.
func TestContainerWhereADenyRuleReadsAValueIsRefusedThroughTheGateway(t *testing.T) {
	tg := startGateway(t, filesYAML(`  rules:
    - {name: no-writes, effect: deny, match: {tools: [read_file], arguments: [{pointer: /mode, equals: write}]}}
    - {name: no-w, effect: deny, match: {tools: [read_files], arguments: [{pointer: /mode, matches: "^w"}]}}
`), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	for _, tt := range []struct{ tool, args, say string }{
		{"read_file", `{"path":"/x","mode":["write"]}`, "the argument /mode must be one value (a string, a number, a boolean or null), not an array"},
		{"read_file", `{"path":"/x","mode":{"m":"write"}}`, "not an object"},
		{"read_files", `{"paths":["/x"],"mode":["w"]}`, "the argument /mode must be a string, not an array"},
	} {
		if r := callRaw(t, c, sid, tt.tool, tt.args); !r.denied(tt.say) {
			t.Errorf("%s %s: %+v, want denied, saying %q", tt.tool, tt.args, r, tt.say)
		}
	}
	if r := callRaw(t, c, sid, "read_file", `{"path":"/x","mode":"read"}`); !r.got(`{"path":"/x","mode":"read"}`) {
		t.Errorf("a read: %+v, want served", r)
	}
}

package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/config"
	"github.com/manifold-mcp/manifold/pipeline"
)

// TestPathRuleCannotBeWalkedAround: a path matcher reads the value as the file path it is:
// repeated slashes, `.` and `..` are resolved, and a relative path is taken from the rule's
// root, before matching; so //etc/passwd, /./etc/passwd and /tmp/../etc/passwd are under
// /etc, as they are for the upstream. The cleaned value is what the decision hands on for
// the upstream, with the rules that changed it.
func TestPathRuleCannotBeWalkedAround(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Tools: []string{"read_file"},
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Path: true, Matches: "^/etc(/|$)"}}}},
		{Name: "srv-data", Effect: config.EffectAllow, Match: config.Match{Tools: []string{"read_file"},
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Path: true, Root: "/srv/data", Equals: ptr("/srv/data/readme")}}}},
		{Name: "plain", Effect: config.EffectDeny, Match: config.Match{Tools: []string{"read_file"},
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Matches: "^/secret/"}}}},
	}})
	call := func(args string) Input {
		return Input{Principal: alice, Upstream: "fs", Kind: pipeline.Tool, Name: "read_file", Arguments: json.RawMessage(args)}
	}
	tests := []struct {
		args, effect, rule string
		// rewritten are the arguments the upstream gets, "" when unchanged.
		rewritten string
		rewrites  []string
	}{
		{`{"path":"/etc/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/etc"}`, "deny", "no-etc", "", nil},
		{`{"path":"//etc/passwd"}`, "deny", "no-etc", `{"path":"/etc/passwd"}`, []string{"no-etc"}},
		{`{"path":"/./etc/passwd"}`, "deny", "no-etc", `{"path":"/etc/passwd"}`, []string{"no-etc"}},
		{`{"path":"/tmp/../etc/passwd"}`, "deny", "no-etc", `{"path":"/etc/passwd"}`, []string{"no-etc"}},
		{`{"path":"/../../etc/shadow"}`, "deny", "no-etc", `{"path":"/etc/shadow"}`, []string{"no-etc"}},
		{`{"path":"etc/passwd"}`, "deny", "no-etc", `{"path":"/etc/passwd"}`, []string{"no-etc"}},
		{`{"path":"\/etc\/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/etc/"}`, "deny", "no-etc", `{"path":"/etc"}`, []string{"no-etc"}},
		// Not under /etc: the cleaned path goes on, and later rules see it cleaned.
		{`{"path":"/tmp//x/./y", "n": 1}`, "allow", "default", `{"path":"/tmp/x/y", "n": 1}`, []string{"no-etc"}},
		{`{"path":"/srv/data/x/../readme"}`, "allow", "srv-data", `{"path":"/srv/data/readme"}`, []string{"no-etc"}},
		{`{"path":"/etcetera"}`, "allow", "default", "", nil},
		// A plain matcher sees what the path rules handed on.
		{`{"path":"/tmp/../secret/key"}`, "deny", "plain", `{"path":"/secret/key"}`, []string{"no-etc"}},
		// Not a string: no path to clean, and no match.
		{`{"path":["/etc/passwd"]}`, "allow", "default", "", nil},
	}
	for _, tt := range tests {
		d := r.Decide(call(tt.args))
		if d.Effect != tt.effect || d.Rule != tt.rule {
			t.Errorf("%s: %s by %s, want %s by %s", tt.args, d.Effect, d.Rule, tt.effect, tt.rule)
		}
		if string(d.Arguments) != tt.rewritten || !cmp.Equal(d.Rewrites, tt.rewrites) {
			t.Errorf("%s: arguments handed on %s by %q, want %s by %q", tt.args, d.Arguments, d.Rewrites, tt.rewritten, tt.rewrites)
		}
	}

	// The relative path of a rule with a root is taken from that root (the rule on /srv/data
	// comes after no-etc, whose root is /: a rule set cleans each value once, at the first
	// path matcher that reads it).
	rooted := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "data", Effect: config.EffectAllow, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/file", Path: true, Root: "/srv/data", Matches: "^/srv/data/"}}}},
	}})
	for _, tt := range []struct{ args, effect, rewritten string }{
		{`{"file":"notes/a.txt"}`, "allow", `{"file":"/srv/data/notes/a.txt"}`},
		{`{"file":"../../etc/passwd"}`, "deny", `{"file":"/etc/passwd"}`},
		{`{"file":"/srv/data/../other"}`, "deny", `{"file":"/srv/other"}`},
	} {
		d := rooted.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(tt.args)})
		if d.Effect != tt.effect || string(d.Arguments) != tt.rewritten {
			t.Errorf("root /srv/data, %s: %s, handing on %s; want %s, handing on %s", tt.args, d.Effect, d.Arguments, tt.effect, tt.rewritten)
		}
	}
}

// TestFoldCaseMatchesMembersInAnyCase: a matcher with fold_case finds its member whatever
// the case of its name, as an upstream that decodes names case-insensitively (Go's
// encoding/json) reads it; two members that differ only in case are refused, since such
// an upstream would take one of them and the rule might have read the other.
func TestFoldCaseMatchesMembersInAnyCase(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/opts/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)"}}}},
	}})
	for _, tt := range []struct{ args, effect, rewritten, reason string }{
		{`{"opts":{"path":"/etc/passwd"}}`, "deny", "", ""},
		{`{"Opts":{"PATH":"/etc/passwd"}}`, "deny", "", ""},
		{`{"OPTS":{"Path":"/tmp/../etc/passwd"}}`, "deny", `{"OPTS":{"Path":"/etc/passwd"}}`, ""},
		{`{"opts":{"Path":"/tmp/x","path":"/etc/passwd"}}`, "deny", "", "more than once"},
		{`{"opts":{"path":"/tmp/x"},"Opts":{"path":"/etc/passwd"}}`, "deny", "", "more than once"},
		{`{"opts":{"pathname":"/etc/passwd"}}`, "allow", "", ""},
	} {
		d := r.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(tt.args)})
		if d.Effect != tt.effect || string(d.Arguments) != tt.rewritten || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s: %s (%q), handing on %s; want %s (%q), handing on %s", tt.args, d.Effect, d.Reason, d.Arguments, tt.effect, tt.reason, tt.rewritten)
		}
	}
	// Without fold_case, names are exact.
	exact := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Matches: "^/etc"}}}},
	}})
	if d := exact.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"Path":"/etc/passwd"}`)}); d.Effect != "allow" {
		t.Errorf("exact names: Path matched /path: %+v", d)
	}
}

// TestExplainShowsThePathAsMatched: explain tells a path matcher's failure with the path as
// it was cleaned, and a refusal of members given twice in different case.
func TestExplainShowsThePathAsMatched(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Line: 3, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)"}}}},
	}})
	steps, d := r.Explain(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"path":"/tmp/./x"}`)})
	if len(steps) != 1 || !strings.Contains(steps[0].Why, `"/tmp/x"`) || !strings.Contains(steps[0].Why, "as a path") || string(d.Arguments) != `{"path":"/tmp/x"}` {
		t.Errorf("explain of a cleaned path: %+v, %+v", steps, d)
	}
	steps, d = r.Explain(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"path":"/tmp/x","PATH":"/etc"}`)})
	if len(steps) != 1 || !strings.Contains(steps[0].Why, "more than once") || d.Effect != "deny" || d.Rule != "no-etc" {
		t.Errorf("explain of members given twice in different case: %+v, %+v", steps, d)
	}
}

// TestPathMatcherOnACleanPathDoesNotAllocate: a path matcher pays for cleaning only when
// there is something to clean: Decide stays free of allocations for a clean absolute path.
func TestPathMatcherOnACleanPathDoesNotAllocate(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Tools: []string{"read_file"},
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)"}}}},
	}})
	in := Input{Principal: alice, Upstream: "fs", Kind: pipeline.Tool, Name: "read_file", Arguments: json.RawMessage(`{"path":"/home/alice/notes.txt"}`)}
	var d Decision
	allocs := testing.AllocsPerRun(100, func() { d = r.Decide(in) })
	if allocs != 0 && !raceEnabled {
		t.Errorf("Decide allocates %v times per call", allocs)
	}
	if d.Effect != config.EffectAllow || d.Arguments != nil {
		t.Errorf("Decide = %+v, want allow with the arguments unchanged", d)
	}
}

func TestIsCleanPathAgreesWithPathClean(t *testing.T) {
	for _, p := range []string{"/", "//", "/a", "/a/", "/a//b", "/a/./b", "/a/../b", "/.", "/..", "/a/.", "/a/..", "/.a", "/..a/b", "/a.b/c..", "a", "", "./a", "/a/b/c"} {
		if got, want := isCleanPath([]byte(p)), strings.HasPrefix(p, "/") && cleanPath(p, "/") == p; got != want {
			t.Errorf("isCleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}

func FuzzIsCleanPath(f *testing.F) {
	for _, p := range []string{"/", "/a/../b", "/a//b", "/a/", "/.a"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := isCleanPath([]byte(p)), strings.HasPrefix(p, "/") && cleanPath(p, "/") == p; got != want {
			t.Errorf("isCleanPath(%q) = %v, want %v", p, got, want)
		}
	})
}

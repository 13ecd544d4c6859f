package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
)

// TestPathRuleCannotBeWalkedAround: a path matcher reads the value as the file path it is:
// repeated slashes, `.` and `..` are resolved, and a relative path is taken from the rule's
// root, before matching; so //etc/passwd, /./etc/passwd and /tmp/../etc/passwd are under
// /etc, as they are for the upstream. The rule that decides a call it lets go on hands on
// the value as it cleaned it (TestOnlyTheDecidingRuleRewritesPaths).
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
		{`{"path":"//etc/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/./etc/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/tmp/../etc/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/../../etc/shadow"}`, "deny", "no-etc", "", nil},
		{`{"path":"\/etc\/passwd"}`, "deny", "no-etc", "", nil},
		{`{"path":"/etc/"}`, "deny", "no-etc", "", nil},
		// Relative, and no-etc has no root: refused (TestRelativePathWithoutRootIsRefused).
		{`{"path":"etc/passwd"}`, "deny", "no-etc", "", nil},
		// Not under /etc: a rule passed changes nothing; the deciding one hands on what it
		// matched.
		{`{"path":"/tmp//x/./y", "n": 1}`, "allow", "default", "", nil},
		{`{"path":"/srv/data/x/../readme"}`, "allow", "srv-data", `{"path":"/srv/data/readme"}`, []string{"srv-data"}},
		{`{"path":"/etcetera"}`, "allow", "default", "", nil},
		// A plain matcher sees the value as sent (gateway validate warns of it).
		{`{"path":"/tmp/../secret/key"}`, "allow", "default", "", nil},
		// Not a string: refused (TestPathMatcherRefusesValuesThatAreNotStrings).
		{`{"path":["/etc/passwd"]}`, "deny", "no-etc", "", nil},
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

	// The relative path of a rule with a root is taken from that root.
	rooted := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "data", Effect: config.EffectAllow, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/file", Path: true, Root: "/srv/data", Matches: "^/srv/data/"}}}},
	}})
	for _, tt := range []struct{ args, effect, rewritten string }{
		{`{"file":"notes/a.txt"}`, "allow", `{"file":"/srv/data/notes/a.txt"}`},
		{`{"file":"../../etc/passwd"}`, "deny", ""},
		{`{"file":"/srv/data/../other"}`, "deny", ""},
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
		{`{"OPTS":{"Path":"/tmp/../etc/passwd"}}`, "deny", "", ""},
		{`{"opts":{"Path":"/tmp/x","path":"/etc/passwd"}}`, "deny", "", "more than once"},
		{`{"opts":{"path":"/tmp/x"},"Opts":{"path":"/etc/passwd"}}`, "deny", "", "more than once"},
		{`{"opts":{"pathname":"/etc/passwd"}}`, "allow", "", ""},
	} {
		d := r.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(tt.args)})
		if d.Effect != tt.effect || string(d.Arguments) != tt.rewritten || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s: %s (%q), handing on %s; want %s (%q), handing on %s", tt.args, d.Effect, d.Reason, d.Arguments, tt.effect, tt.reason, tt.rewritten)
		}
	}
	// Without fold_case, names are exact: Path is not /path to an allowing rule (and a
	// refusing one refuses it, TestLoneCaseVariantIsRefusedByRestrictiveRules).
	exact := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "etc", Effect: config.EffectAllow, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Matches: "^/etc"}}}},
	}})
	if d := exact.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"Path":"/etc/passwd"}`)}); d.Rule != DefaultRule {
		t.Errorf("exact names: Path matched /path: %+v", d)
	}
}

// TestExplainShowsThePathAsMatched: explain tells a path matcher's failure with the path as
// it was cleaned, and a refusal of members given twice in different case. The rule that
// does not match hands nothing on.
func TestExplainShowsThePathAsMatched(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Line: 3, Match: config.Match{
			Arguments: []config.ArgumentMatch{{Pointer: "/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)"}}}},
	}})
	steps, d := r.Explain(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"path":"/tmp/./x"}`)})
	if len(steps) != 1 || !strings.Contains(steps[0].Why, `"/tmp/x"`) || !strings.Contains(steps[0].Why, "as a path") || d.Arguments != nil {
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
	// Nor for an allowing rule that reads every element of a list of clean paths.
	each := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/paths/*", Path: true, Matches: "^/etc(/|$)"}}}},
		{Name: "home", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/paths/*", Path: true, Matches: "^/home/"}}}},
	}})
	in.Arguments = json.RawMessage(`{"paths":["/home/alice/a.txt","/home/alice/b.txt"]}`)
	allocs = testing.AllocsPerRun(100, func() { d = each.Decide(in) })
	if allocs != 0 && !raceEnabled {
		t.Errorf("Decide on a list of paths allocates %v times per call", allocs)
	}
	if d.Effect != config.EffectAllow || d.Rule != "home" || d.Arguments != nil {
		t.Errorf("Decide = %+v, want allow by home with the arguments unchanged", d)
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

// decideArgs decides a call of tool t with args under r.
func decideArgs(r *Rules, args string) Decision {
	return r.Decide(Input{Principal: alice, Upstream: "fs", Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(args)})
}

// TestOnlyTheDecidingRuleRewritesPaths: a path matcher matches a cleaned copy of the value,
// taken from its own root; a rule that does not decide the call changes nothing the upstream
// gets, and the rule that decides it hands on the paths as it cleaned them, from its root.
func TestOnlyTheDecidingRuleRewritesPaths(t *testing.T) {
	r := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "no-writes", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Root: "/", Matches: "."},
			{Pointer: "/mode", Equals: ptr("write")},
		}}},
		{Name: "readme", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Root: "/srv/data", Equals: ptr("/srv/data/readme")},
		}}},
		{Name: "tmp", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Root: "/tmp", Matches: "^/tmp/"},
		}}},
	}})
	for _, tt := range []struct {
		args, effect, rule, rewritten string
		rewrites                      []string
	}{
		// The first rule reads readme as /readme, does not match, and changes nothing; the
		// second reads it from its own root, matches, and the upstream gets what it matched.
		{`{"path":"readme","mode":"read"}`, "allow", "readme", `{"path":"/srv/data/readme","mode":"read"}`, []string{"readme"}},
		{`{"path":"/srv/data/./readme","mode":"read"}`, "allow", "readme", `{"path":"/srv/data/readme","mode":"read"}`, []string{"readme"}},
		{`{"path":"/srv/data/readme","mode":"read"}`, "allow", "readme", "", nil},
		{`{"path":"x/../y","mode":"read"}`, "allow", "tmp", `{"path":"/tmp/y","mode":"read"}`, []string{"tmp"}},
		// A refusal hands nothing on.
		{`{"path":"readme","mode":"write"}`, "deny", "no-writes", "", nil},
		{`{"path":"/etc//x","mode":"read"}`, "deny", "default", "", nil},
	} {
		d := decideArgs(r, tt.args)
		if d.Effect != tt.effect || d.Rule != tt.rule || string(d.Arguments) != tt.rewritten || !cmp.Equal(d.Rewrites, tt.rewrites) {
			t.Errorf("%s: %s by %s, handing on %s (rewrites %q); want %s by %s, handing on %s (rewrites %q)",
				tt.args, d.Effect, d.Rule, d.Arguments, d.Rewrites, tt.effect, tt.rule, tt.rewritten, tt.rewrites)
		}
	}
	// A rule that is passed hands nothing on, a relative path above all: the upstream resolves
	// docs/x against its own directory, which the rule on /etc knows nothing of.
	passed := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Root: "/srv", Matches: "^/etc(/|$)"}}}},
	}})
	for _, args := range []string{`{"path":"docs/x"}`, `{"path":"/tmp//x/./y"}`} {
		if d := decideArgs(passed, args); d.Effect != "allow" || d.Arguments != nil || d.Rewrites != nil {
			t.Errorf("%s past a deny rule: %+v, want allowed with the arguments as sent", args, d)
		}
	}
}

// TestRelativePathWithoutRootIsRefused: a path matcher without root cannot tell where a
// relative path leads (the upstream resolves it against a directory the gateway does not
// know), so a rule that refuses or holds calls refuses one with a relative path rather than
// let ../etc/passwd past (as deny, or a hide rule as hide), and an allowing rule does not
// match it; nothing is re-rooted at /.
func TestRelativePathWithoutRootIsRefused(t *testing.T) {
	for _, effect := range []string{config.EffectDeny, config.EffectHide, config.EffectApprove} {
		r := compile(t, config.Policy{Rules: []config.Rule{
			{Name: "no-etc", Effect: effect, Match: config.Match{Arguments: []config.ArgumentMatch{
				{Pointer: "/path", Path: true, Matches: "^/etc(/|$)"}}}},
		}})
		want := config.EffectDeny
		if effect == config.EffectHide {
			want = effect
		}
		for _, args := range []string{`{"path":"../etc/passwd"}`, `{"path":"etc/passwd"}`, `{"path":"docs/readme"}`, `{"path":""}`} {
			d := decideArgs(r, args)
			if d.Effect != want || d.Rule != "no-etc" || !strings.Contains(d.Reason, "absolute") || d.Arguments != nil {
				t.Errorf("%s rule, %s: %+v; want %s by no-etc, saying the path must be absolute", effect, args, d, want)
			}
		}
		if d := decideArgs(r, `{"path":"/srv/x"}`); d.Effect != config.EffectAllow {
			t.Errorf("%s rule, an absolute path elsewhere: %+v, want allow", effect, d)
		}
	}
	allow := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "srv", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Matches: "^/srv/"}}}},
	}})
	if d := decideArgs(allow, `{"path":"srv/x"}`); d.Effect != config.EffectDeny || d.Rule != DefaultRule {
		t.Errorf("allow rule without root, relative path: %+v, want no match (the default denies)", d)
	}
}

// TestCaseVariantMembersAreRefused: members whose names differ only in case, on the way to
// what any argument matcher reads, are refused with or without fold_case: an upstream that
// decodes names case-insensitively (Go's encoding/json) takes the last, which the rule may
// not have read.
func TestCaseVariantMembersAreRefused(t *testing.T) {
	for _, fold := range []bool{false, true} {
		for _, effect := range []string{config.EffectDeny, config.EffectAllow} {
			r := compile(t, config.Policy{Rules: []config.Rule{
				{Name: "r", Effect: effect, Match: config.Match{Arguments: []config.ArgumentMatch{
					{Pointer: "/opts/path", Path: true, FoldCase: fold, Matches: "^/ok$"}}}},
			}})
			for _, args := range []string{
				`{"opts":{"path":"/ok","PATH":"/etc/passwd"}}`,
				`{"opts":{"Path":"/etc/passwd","path":"/ok"}}`,
				`{"opts":{"Path":"/etc/passwd","PATH":"/ok"}}`,
				`{"opts":{"path":"/ok"},"OPTS":{"path":"/etc/passwd"}}`,
				`{"opts":{"p\u0061th":"/ok","PAT\u0048":"/etc/passwd"}}`,
			} {
				d := decideArgs(r, args)
				if d.Effect != config.EffectDeny || d.Rule != "r" || !strings.Contains(d.Reason, "differ only in case") {
					t.Errorf("fold_case %v, %s rule, %s: %+v; want deny by r, saying the names differ only in case", fold, effect, args, d)
				}
			}
		}
	}
}

// TestRepeatedNestedMemberIsRefused: Decide on its own refuses arguments that repeat a member
// on the way to what a matcher reads (a decoder that merges repeated objects, as Go's does,
// would see /opts/path where a scanner taking the last opts sees none); the gateway refuses
// repeated members anywhere before any rule (TestMembersGivenTwiceAreRefused).
func TestRepeatedNestedMemberIsRefused(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/opts/path", Matches: "^/etc"}}}},
	}})
	for _, args := range []string{
		`{"opts":{"path":"/etc/passwd"},"opts":{"mode":"r"}}`,
		`{"opts":{"path":"/etc/passwd","path":"/tmp"}}`,
	} {
		d := decideArgs(r, args)
		if d.Effect != config.EffectDeny || d.Rule != "no-etc" || !strings.Contains(d.Reason, "more than once") || strings.Contains(d.Reason, "case") {
			t.Errorf("%s: %+v; want deny by no-etc, saying a member is given more than once", args, d)
		}
	}
	// Elsewhere, a repeated member is the caller's to refuse.
	if d := decideArgs(r, `{"opts":{"path":"/tmp"},"n":1,"n":2}`); d.Effect != config.EffectAllow {
		t.Errorf("a member repeated off the pointer: %+v, want allow", d)
	}
}

// TestPathMatcherRefusesValuesThatAreNotStrings: a rule that refuses or holds calls does not
// let a path argument of another type past (an array, an object, a number): the call is
// refused, saying the value must be a string path; an allowing rule does not match it.
func TestPathMatcherRefusesValuesThatAreNotStrings(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Root: "/", Matches: "^/etc(/|$)"},
			{Pointer: "/mode", Equals: ptr("read")},
		}}},
	}})
	for _, args := range []string{`{"path":["/etc/passwd"],"mode":"read"}`, `{"path":{"0":"/etc/passwd"},"mode":"read"}`, `{"path":1,"mode":"read"}`, `{"path":null,"mode":"read"}`} {
		if d := decideArgs(r, args); d.Effect != config.EffectDeny || d.Rule != "no-etc" || !strings.Contains(d.Reason, "string") {
			t.Errorf("%s: %+v; want deny by no-etc, saying the path must be a string", args, d)
		}
	}
	// The rule does not apply when its other matchers do not hold.
	if d := decideArgs(r, `{"path":["/etc/passwd"],"mode":"write"}`); d.Effect != config.EffectAllow {
		t.Errorf("wrong type, other matcher fails: %+v, want allow", d)
	}
	allow := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "srv", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Matches: "^/srv/"}}}},
	}})
	if d := decideArgs(allow, `{"path":["/srv/x"]}`); d.Rule != DefaultRule {
		t.Errorf("allow rule, an array: %+v, want no match", d)
	}
}

// TestPathMatcherReadsEveryElement: a pointer token * reads every element of an array: a rule
// that refuses or holds calls applies when one element matches (or refuses when one is not a
// string path), an allowing rule when every element does; the deciding rule hands on every
// element cleaned.
func TestPathMatcherReadsEveryElement(t *testing.T) {
	r := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/paths/*", Path: true, Root: "/srv/data", Matches: "^/etc(/|$)"}}}},
		{Name: "no-etc-edits", Effect: config.EffectDeny, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/edits/*/path", Path: true, Root: "/srv/data", Matches: "^/etc(/|$)"}}}},
		{Name: "data", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/paths/*", Path: true, Root: "/srv/data", Matches: "^/srv/data/"}}}},
	}})
	for _, tt := range []struct{ args, effect, rule, rewritten, reason string }{
		{`{"paths":["/srv/data/a","/etc/passwd"]}`, "deny", "no-etc", "", ""},
		{`{"paths":["a","../../../etc/passwd"]}`, "deny", "no-etc", "", ""},
		{`{"paths":["/srv/data/a",["/etc/passwd"]]}`, "deny", "no-etc", "", "string"},
		{`{"paths":"/etc/passwd"}`, "deny", "no-etc", "", "array"},
		{`{"edits":[{"path":"/tmp/x"},{"path":"/etc/passwd"}]}`, "deny", "no-etc-edits", "", ""},
		{`{"edits":[{"path":"/tmp/x"},{"path":"/etc/x","PATH":"/tmp"}]}`, "deny", "no-etc-edits", "", "differ only in case"},
		{`{"paths":["/srv/data/a","b/./c"]}`, "allow", "data", `{"paths":["/srv/data/a","/srv/data/b/c"]}`, ""},
		{`{"paths":["/srv/data/a","/srv/other"]}`, "deny", "default", "", ""},
		{`{"paths":[]}`, "deny", "default", "", ""},
	} {
		d := decideArgs(r, tt.args)
		if d.Effect != tt.effect || d.Rule != tt.rule || string(d.Arguments) != tt.rewritten || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s: %s by %s (%q), handing on %s; want %s by %s (%q), handing on %s", tt.args, d.Effect, d.Rule, d.Reason, d.Arguments, tt.effect, tt.rule, tt.reason, tt.rewritten)
		}
	}
}

// TestExplainTellsRefusalsOfArguments: explain says why a rule refused arguments it could not
// read, and its decision is Decide's: a member given twice (in the same name, or in names
// that differ in case, each said as such), a member given only in a name that differs in
// case, a path that is not a string, a relative path without root, a list that is not an
// array (when the rule's other matchers hold); and why an allowing rule did not match them.
func TestExplainTellsRefusalsOfArguments(t *testing.T) {
	deny := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Line: 3, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/opts/path", Path: true, Matches: "^/etc(/|$)"},
			{Pointer: "/more/*", Path: true, Matches: "^/etc(/|$)"},
		}}},
	}})
	allow := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "srv", Effect: config.EffectAllow, Line: 3, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/opts/path", Path: true, Matches: "^/srv/"},
			{Pointer: "/more/*", Path: true, Matches: "^/srv/"},
		}}},
	}})
	for _, tt := range []struct {
		r                 *Rules
		args, why, reason string
	}{
		{deny, `{"opts":{"path":"/a"},"opts":{"x":1},"more":[]}`, "arguments: /opts is given more than once: the request is refused", "the arguments give /opts more than once: send it once"},
		{deny, `{"opts":{"path":"/a","Path":"/etc"},"more":[]}`, "arguments: /opts/path is given more than once, in names that differ only in case: the request is refused", "differ only in case"},
		{deny, `{"opts":{"path":["/etc"]},"more":["/etc"]}`, `arguments: /opts/path is ["/etc"], not a string (a file path): the request is refused`, "the argument /opts/path must be a file path, a string, not an array"},
		{deny, `{"opts":{"path":"../etc"},"more":["/etc"]}`, `arguments: /opts/path is "../etc", a relative path, and the matcher has no root: the request is refused`, "must be an absolute path"},
		{deny, `{"opts":{"path":"/etc"},"more":{"a":"/etc"}}`, `arguments: /more/* meets {"a":"/etc"}, not an array: the request is refused`, "the argument /more must be an array of file paths, not an object"},
		{deny, `{"opts":{"PATH":"/etc"},"more":["/etc"]}`, "arguments: /opts/path is given in a name that differs only in case: the request is refused", "the arguments give /opts/path in a name that differs only in case"},
		{deny, `{"opts":{"path":"/a"},"more":[]}`, "arguments: /opts/path is \"/a\", which does not match \"^/etc(/|$)\"", ""},
		{allow, `{"opts":{"path":"/srv/a"},"more":[]}`, "arguments: /more/* reaches no value (an array without elements)", defaultDenyReason},
		{allow, `{"opts":{"path":"srv/a"},"more":["/srv/b"]}`, `arguments: /opts/path is "srv/a", a relative path, and the matcher has no root`, defaultDenyReason},
		{allow, `{"opts":{"path":"/srv/a"},"more":["/srv/b",1]}`, `arguments: /more/* is 1, not a string (a file path)`, defaultDenyReason},
	} {
		steps, d := tt.r.Explain(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(tt.args)})
		if len(steps) != 1 || steps[0].Why != tt.why {
			t.Errorf("%s: steps %+v\nwant Why %q", tt.args, steps, tt.why)
		}
		if !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s: reason %q, want it to say %q", tt.args, d.Reason, tt.reason)
		}
		if want := tt.r.Decide(Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(tt.args)}); !cmp.Equal(d, want) {
			t.Errorf("%s: Explain decides %+v, Decide %+v", tt.args, d, want)
		}
	}
}

// TestHideRuleRefusalDoesNotRevealTheTool: a hide rule that refuses arguments it cannot read
// (a member given twice, in one name or in names that differ in case; a lone case variant;
// a value that is not a path, a relative path without root) refuses with its own effect,
// hide, so that the caller learns what it learns of a missing tool and nothing of the rule;
// Explain decides alike.
func TestHideRuleRefusalDoesNotRevealTheTool(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "secret-tool", Effect: config.EffectHide, Match: config.Match{Tools: []string{"t"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Matches: "^/secret(/|$)"},
			{Pointer: "/cmd", Matches: "^rm"}}}},
	}})
	for _, args := range []string{
		`{"path":"/secret","path":"/ok","cmd":"rm"}`,
		`{"path":"/ok","PATH":"/secret","cmd":"rm"}`,
		`{"PATH":"/secret","cmd":"rm"}`,
		`{"path":["/secret"],"cmd":"rm"}`,
		`{"path":"../secret","cmd":"rm"}`,
		`{"path":"/secret","cmd":["rm"]}`,
	} {
		in := Input{Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(args)}
		d := r.Decide(in)
		if d.Effect != config.EffectHide || d.Rule != "secret-tool" {
			t.Errorf("%s: %s by %s (%q), want hide by secret-tool", args, d.Effect, d.Rule, d.Reason)
		}
		if _, explained := r.Explain(in); !cmp.Equal(explained, d) {
			t.Errorf("%s: Explain decides %+v, Decide %+v", args, explained, d)
		}
	}
	if d := decideArgs(r, `{"path":"/ok","cmd":"rm"}`); d.Effect != config.EffectAllow {
		t.Errorf("arguments the hide rule reads and does not match: %+v, want allow", d)
	}
}

// TestLoneCaseVariantIsRefusedByRestrictiveRules: a member the rule reads given only in a
// name that differs in case ({"PATH": …} where the rule reads /path) is read as /path by an
// upstream that decodes names case-insensitively (Go's encoding/json); a deny, hide or approve
// rule without fold_case refuses it (when its other matchers hold) rather than let it past,
// an allow rule does not match it, and with fold_case it is the member.
func TestLoneCaseVariantIsRefusedByRestrictiveRules(t *testing.T) {
	for _, effect := range []string{config.EffectDeny, config.EffectHide, config.EffectApprove} {
		r := compile(t, config.Policy{Rules: []config.Rule{
			{Name: "no-etc", Effect: effect, Match: config.Match{Arguments: []config.ArgumentMatch{
				{Pointer: "/opts/path", Path: true, Matches: "^/etc(/|$)"},
				{Pointer: "/cmd", Matches: "^rm"},
				{Pointer: "/mode", Equals: ptr("write")}}}},
		}})
		want := config.EffectDeny
		if effect == config.EffectHide {
			want = effect
		}
		for _, args := range []string{
			`{"opts":{"PATH":"/etc/passwd"},"cmd":"rm","mode":"write"}`,
			`{"OPTS":{"path":"/etc/passwd"},"cmd":"rm","mode":"write"}`,
			`{"opts":{"path":"/etc/passwd"},"Cmd":"rm","mode":"write"}`,
			`{"opts":{"path":"/etc/passwd"},"cmd":"rm","MODE":"write"}`,
			`{"opts":{"p\u0041th":"/etc/passwd"},"cmd":"rm","mode":"write"}`,
		} {
			if d := decideArgs(r, args); d.Effect != want || d.Rule != "no-etc" || !strings.Contains(d.Reason, "differs only in case") {
				t.Errorf("%s rule, %s: %s by %s (%q); want %s by no-etc, saying the name differs only in case", effect, args, d.Effect, d.Rule, d.Reason, want)
			}
		}
		// The rule does not apply when its other matchers do not hold.
		if d := decideArgs(r, `{"opts":{"PATH":"/etc/passwd"},"cmd":"ls","mode":"write"}`); d.Effect != config.EffectAllow {
			t.Errorf("%s rule, a case variant, another matcher fails: %+v, want allow", effect, d)
		}
	}
	allow := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "srv", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, Matches: "^/srv/"}}}},
	}})
	if d := decideArgs(allow, `{"PATH":"/srv/x"}`); d.Effect != config.EffectDeny || d.Rule != DefaultRule {
		t.Errorf("allow rule, a lone case variant: %+v, want no match (the default denies)", d)
	}
	folded := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-etc", Effect: config.EffectDeny, Reason: "not /etc", Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/path", Path: true, FoldCase: true, Matches: "^/etc(/|$)"}}}},
	}})
	if d := decideArgs(folded, `{"PATH":"/etc/passwd"}`); d.Effect != config.EffectDeny || d.Reason != "not /etc" {
		t.Errorf("deny rule with fold_case, a lone case variant: %+v, want it matched (deny with the rule's reason)", d)
	}
	if d := decideArgs(folded, `{"PATH":"/tmp/x"}`); d.Effect != config.EffectAllow {
		t.Errorf("deny rule with fold_case, a lone case variant elsewhere: %+v, want allow", d)
	}
}

// TestRestrictiveRuleRefusesContainersWhereItReadsAScalar: a matches or equals matcher of a
// deny, hide or approve rule that meets an array or an object where it reads one value
// ({"cmd":["rm","-rf"]} for a rule on /cmd matching ^rm), or a * pointer that meets what is
// not an array, refuses the call when the rule's other matchers hold, rather than let it past;
// an allow rule does not match it. equals compares what it can as before: a string as text,
// another scalar as its JSON, and an array or object with an equals that is one as compact
// JSON; a number, a boolean or null never matches a regular expression.
func TestRestrictiveRuleRefusesContainersWhereItReadsAScalar(t *testing.T) {
	r := compile(t, config.Policy{Rules: []config.Rule{
		{Name: "no-rm", Effect: config.EffectDeny, Reason: "no rm", Match: config.Match{Tools: []string{"sh"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/cmd", Matches: "^rm"}}}},
		{Name: "no-writes", Effect: config.EffectDeny, Reason: "no writes", Match: config.Match{Tools: []string{"open"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/mode", Equals: ptr("write")},
			{Pointer: "/n", Equals: ptr("10")}}}},
		{Name: "no-rm-lists", Effect: config.EffectDeny, Reason: "no rm", Match: config.Match{Tools: []string{"batch"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/cmds/*", Matches: "^rm"}}}},
		{Name: "no-rm-jobs", Effect: config.EffectDeny, Reason: "no rm", Match: config.Match{Tools: []string{"jobs"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/jobs/*/cmds/*", Matches: "^rm"}}}},
		{Name: "no-flags", Effect: config.EffectDeny, Reason: "no flags", Match: config.Match{Tools: []string{"flags"}, Arguments: []config.ArgumentMatch{
			{Pointer: "/flags", Equals: ptr(`["-rf"]`)}}}},
	}})
	for _, tt := range []struct{ tool, args, effect, rule, reason string }{
		{"sh", `{"cmd":["rm","-rf","/"]}`, "deny", "no-rm", "the argument /cmd must be a string, not an array"},
		{"sh", `{"cmd":{"0":"rm"}}`, "deny", "no-rm", "the argument /cmd must be a string, not an object"},
		{"sh", `{"cmd":"rm -rf /"}`, "deny", "no-rm", "no rm"},
		{"sh", `{"cmd":"ls"}`, "allow", "default", ""},
		{"sh", `{"cmd":5}`, "allow", "default", ""},
		{"sh", `{"cmd":null}`, "allow", "default", ""},
		{"open", `{"mode":["write"],"n":10}`, "deny", "no-writes", "the argument /mode must be one value (a string, a number, a boolean or null), not an array"},
		{"open", `{"mode":"write","n":{"v":10}}`, "deny", "no-writes", "the argument /n must be one value"},
		{"open", `{"mode":"write","n":10}`, "deny", "no-writes", "no writes"},
		{"open", `{"mode":"write","n":"10"}`, "deny", "no-writes", "no writes"},
		{"open", `{"mode":"write","n":11}`, "allow", "default", ""},
		// The rule does not apply when its other matchers do not hold.
		{"open", `{"mode":["write"],"n":11}`, "allow", "default", ""},
		{"batch", `{"cmds":"rm -rf /"}`, "deny", "no-rm-lists", "the argument /cmds must be an array, not a string"},
		{"batch", `{"cmds":["ls",["rm"]]}`, "deny", "no-rm-lists", "the argument /cmds/* must be a string, not an array"},
		{"batch", `{"cmds":["ls","rm x"]}`, "deny", "no-rm-lists", "no rm"},
		{"batch", `{"cmds":["ls"]}`, "allow", "default", ""},
		{"jobs", `{"jobs":[{"cmds":["ls"]},{"cmds":"rm -rf /"}]}`, "deny", "no-rm-jobs", "the argument /jobs/*/cmds must be an array, not a string"},
		{"jobs", `{"jobs":"rm -rf /"}`, "deny", "no-rm-jobs", "the argument /jobs must be an array, not a string"},
		// An equals that is an array compares arrays, as compact JSON.
		{"flags", `{"flags":[ "-rf" ]}`, "deny", "no-flags", "no flags"},
		{"flags", `{"flags":["-r"]}`, "allow", "default", ""},
		{"flags", `{"flags":"-rf"}`, "allow", "default", ""},
	} {
		in := Input{Kind: pipeline.Tool, Name: tt.tool, Arguments: json.RawMessage(tt.args)}
		d := r.Decide(in)
		if d.Effect != tt.effect || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s %s: %s by %s (%q); want %s by %s (%q)", tt.tool, tt.args, d.Effect, d.Rule, d.Reason, tt.effect, tt.rule, tt.reason)
		}
		if _, explained := r.Explain(in); !cmp.Equal(explained, d) {
			t.Errorf("%s %s: Explain decides %+v, Decide %+v", tt.tool, tt.args, explained, d)
		}
	}
	for _, tt := range []struct{ tool, args, why string }{
		{"sh", `{"cmd":["rm","-rf"]}`, `arguments: /cmd is ["rm","-rf"], not a string (matches "^rm"): the request is refused`},
		{"open", `{"mode":{"m":"write"},"n":10}`, `arguments: /mode is {"m":"write"}, not one value (equals "write"): the request is refused`},
		{"batch", `{"cmds":"rm"}`, `arguments: /cmds/* meets "rm", not an array: the request is refused`},
	} {
		steps, _ := r.Explain(Input{Kind: pipeline.Tool, Name: tt.tool, Arguments: json.RawMessage(tt.args)})
		if last := steps[len(steps)-1]; last.Why != tt.why {
			t.Errorf("explain %s %s: %+v, want Why %q", tt.tool, tt.args, last, tt.why)
		}
	}
	allow := compile(t, config.Policy{Default: config.EffectDeny, Rules: []config.Rule{
		{Name: "reads", Effect: config.EffectAllow, Match: config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/mode", Equals: ptr("read")}, {Pointer: "/cmd", Matches: "^ls"}}}},
	}})
	for _, args := range []string{`{"mode":["read"],"cmd":"ls"}`, `{"mode":"read","cmd":["ls"]}`} {
		if d := decideArgs(allow, args); d.Rule != DefaultRule {
			t.Errorf("allow rule, %s: %+v, want no match (the default denies)", args, d)
		}
	}
	if d := decideArgs(allow, `{"mode":"read","cmd":"ls -l"}`); d.Rule != "reads" {
		t.Errorf("allow rule, values it reads: %+v, want allow by reads", d)
	}
}

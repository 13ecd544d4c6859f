package policy

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
)

func ptr[T any](v T) *T { return &v }

var (
	alice = session.Principal{Issuer: "https://idp", Subject: "alice", Groups: []string{"dev", "ops"}, Roles: []string{"admin"}, Scopes: []string{"tools:call"}}
	bob   = session.Principal{Issuer: "https://idp", Subject: "bob", Groups: []string{"dev"}}
	ciKey = session.Principal{Issuer: session.APIKeyIssuer, Subject: "ci-deploy"}
	anon  = session.Principal{}
)

// compile compiles rules (and a default, in the policy) or fails the test. fs and github
// trust their annotations.
func compile(t testing.TB, p config.Policy) *Rules {
	t.Helper()
	r, err := Compile(&p, func(u string) bool { return u == "fs" || u == "github" })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMatchers runs one rule (deny) against inputs: each case says whether it matches.
func TestMatchers(t *testing.T) {
	tool := func(p session.Principal, upstream, name string) Input {
		return Input{Principal: p, Upstream: upstream, Kind: pipeline.Tool, Name: name}
	}
	withArgs := func(args string) Input {
		in := tool(alice, "fs", "write")
		if args != "" {
			in.Arguments = json.RawMessage(args)
		}
		return in
	}
	withHints := func(upstream string, a *Annotations) Input {
		in := tool(alice, upstream, "t")
		in.Annotations = a
		return in
	}
	type check struct {
		name string
		in   Input
		want bool
	}
	tests := []struct {
		name   string
		match  config.Match
		checks []check
	}{
		{"empty match matches all", config.Match{}, []check{
			{"tool", tool(alice, "fs", "read"), true},
			{"anonymous gateway", Input{Kind: pipeline.Gateway}, true},
		}},
		{"subjects", config.Match{Principal: config.PrincipalMatch{Subjects: []string{"ali*", "carol"}}}, []check{
			{"glob", tool(alice, "fs", "x"), true},
			{"other", tool(bob, "fs", "x"), false},
			{"anonymous has no subject", tool(anon, "fs", "x"), false},
			{"API key's subject is its name", tool(session.Principal{Issuer: session.APIKeyIssuer, Subject: "carol"}, "fs", "x"), true},
		}},
		{"subjects star", config.Match{Principal: config.PrincipalMatch{Subjects: []string{"*"}}}, []check{
			{"signed in", tool(bob, "fs", "x"), true},
			{"anonymous", tool(anon, "fs", "x"), false},
		}},
		{"groups", config.Match{Principal: config.PrincipalMatch{Groups: []string{"ops", "sec"}}}, []check{
			{"holds one", tool(alice, "fs", "x"), true},
			{"holds none", tool(bob, "fs", "x"), false},
			{"anonymous", tool(anon, "fs", "x"), false},
		}},
		{"groups are not globs", config.Match{Principal: config.PrincipalMatch{Groups: []string{"o*"}}}, []check{
			{"literal", tool(alice, "fs", "x"), false},
		}},
		{"roles", config.Match{Principal: config.PrincipalMatch{Roles: []string{"admin"}}}, []check{
			{"holds", tool(alice, "fs", "x"), true},
			{"not", tool(bob, "fs", "x"), false},
		}},
		{"scopes", config.Match{Principal: config.PrincipalMatch{Scopes: []string{"tools:call"}}}, []check{
			{"holds", tool(alice, "fs", "x"), true},
			{"not", tool(bob, "fs", "x"), false},
		}},
		{"empty list matches nothing", config.Match{Principal: config.PrincipalMatch{Groups: []string{}}}, []check{
			{"alice", tool(alice, "fs", "x"), false},
		}},
		{"api keys", config.Match{Principal: config.PrincipalMatch{APIKeys: []string{"ci-*"}}}, []check{
			{"key", tool(ciKey, "fs", "x"), true},
			{"other key", tool(session.Principal{Issuer: session.APIKeyIssuer, Subject: "backup"}, "fs", "x"), false},
			{"token with the same subject", tool(session.Principal{Issuer: "https://idp", Subject: "ci-deploy"}, "fs", "x"), false},
			{"anonymous", tool(anon, "fs", "x"), false},
		}},
		{"all principal fields must match", config.Match{Principal: config.PrincipalMatch{Subjects: []string{"alice", "bob"}, Groups: []string{"ops"}}}, []check{
			{"both", tool(alice, "fs", "x"), true},
			{"subject only", tool(bob, "fs", "x"), false},
		}},
		{"anonymous true", config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(true)}}, []check{
			{"anonymous", tool(anon, "fs", "x"), true},
			{"alice", tool(alice, "fs", "x"), false},
			{"key", tool(ciKey, "fs", "x"), false},
		}},
		{"anonymous false", config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(false)}}, []check{
			{"anonymous", tool(anon, "fs", "x"), false},
			{"alice", tool(alice, "fs", "x"), true},
			{"key", tool(ciKey, "fs", "x"), true},
		}},
		{"upstreams", config.Match{Upstreams: []string{"fs*", "git?ub"}}, []check{
			{"glob", tool(alice, "fs-home", "x"), true},
			{"question mark", tool(alice, "github", "x"), true},
			{"other", tool(alice, "slack", "x"), false},
			{"prefix only", tool(alice, "myfs", "x"), false},
		}},
		{"tools", config.Match{Tools: []string{"read_*"}}, []check{
			{"tool", tool(alice, "fs", "read_file"), true},
			{"other tool", tool(alice, "fs", "write_file"), false},
			{"prompt of that name", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "read_file"}, false},
			{"resource", Input{Upstream: "fs", Kind: pipeline.Resource, Name: "read_file"}, false},
			{"completion kind", Input{Upstream: "fs", Kind: pipeline.Completion, Name: "read_file"}, false},
			{"task", Input{Upstream: "fs", Kind: pipeline.Task, Name: "read_file"}, false},
		}},
		{"prompts", config.Match{Prompts: []string{"summarize"}}, []check{
			{"prompt", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "summarize"}, true},
			{"other prompt", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "translate"}, false},
			{"tool", tool(alice, "fs", "summarize"), false},
		}},
		{"resources", config.Match{Resources: []string{"file:///secret/*"}}, []check{
			{"uri", Input{Upstream: "fs", Kind: pipeline.Resource, Name: "file:///secret/a/b"}, true},
			{"template", Input{Upstream: "fs", Kind: pipeline.Resource, Name: "file:///secret/{path}"}, true},
			{"other uri", Input{Upstream: "fs", Kind: pipeline.Resource, Name: "file:///public/a"}, false},
			{"tool", tool(alice, "fs", "file:///secret/a"), false},
		}},
		{"tools and prompts", config.Match{Tools: []string{"a"}, Prompts: []string{"b"}}, []check{
			{"tool a", tool(alice, "fs", "a"), true},
			{"tool b", tool(alice, "fs", "b"), false},
			{"prompt b", Input{Kind: pipeline.Prompt, Name: "b"}, true},
			{"resource a", Input{Kind: pipeline.Resource, Name: "a"}, false},
		}},
		{"argument equals string", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/path", Equals: ptr("/etc/passwd")}}}, []check{
			{"equal", withArgs(`{"path":"/etc/passwd"}`), true},
			{"escaped equal", withArgs(`{"path":"\/etc\/passwd"}`), true},
			{"escaped key", withArgs(`{"p\u0061th":"/etc/passwd"}`), true},
			{"last of duplicate keys", withArgs(`{"path":"/tmp","path":"/etc/passwd"}`), true},
			{"not equal", withArgs(`{"path":"/etc/passwd2"}`), false},
			{"missing", withArgs(`{"other":"/etc/passwd"}`), false},
			{"no arguments", withArgs(""), false},
			{"null arguments", withArgs("null"), false},
			{"invalid JSON", withArgs(`{"path":"/etc/passwd"`), false},
			// A deny rule refuses what it cannot read (TestRestrictiveRuleRefusesContainersWhereItReadsAScalar).
			{"array, refused", withArgs(`{"path":["/etc/passwd"]}`), true},
		}},
		{"argument equals number and others", config.Match{Arguments: []config.ArgumentMatch{
			{Pointer: "/n", Equals: ptr("10")},
			{Pointer: "/o", Equals: ptr(`{"a":[1,true]}`)},
		}}, []check{
			{"both", withArgs(`{"n": 10, "o": { "a": [1, true] }}`), true},
			{"number as text", withArgs(`{"n": "10", "o": {"a":[1,true]}}`), true},
			{"other number form", withArgs(`{"n": 1e1, "o": {"a":[1,true]}}`), false},
			{"second fails", withArgs(`{"n": 10, "o": {"a":[1,false]}}`), false},
		}},
		{"argument nested pointer", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/files/1/name", Equals: ptr("b")}}}, []check{
			{"found", withArgs(`{"files":[{"name":"a"},{"name":"b"}]}`), true},
			{"out of range", withArgs(`{"files":[{"name":"b"}]}`), false},
		}},
		{"argument matches", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/cmd", Matches: `rm\s+-rf`}}}, []check{
			{"unanchored", withArgs(`{"cmd":"sudo rm  -rf /"}`), true},
			{"escaped", withArgs(`{"cmd":"rm\t-rf"}`), true},
			{"no match", withArgs(`{"cmd":"ls"}`), false},
			{"array, refused", withArgs(`{"cmd":["rm -rf"]}`), true},
			{"number", withArgs(`{"cmd":1}`), false},
			{"missing", withArgs(`{}`), false},
		}},
		{"annotations", config.Match{ReadOnlyHint: ptr(true)}, []check{
			{"declared", withHints("fs", &Annotations{ReadOnly: ptr(true)}), true},
			{"declared false", withHints("fs", &Annotations{ReadOnly: ptr(false)}), false},
			{"default false", withHints("fs", &Annotations{}), false},
			{"unknown is default", withHints("fs", nil), false},
			{"untrusted upstream", withHints("slack", &Annotations{ReadOnly: ptr(true)}), false},
			{"prompt", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "t"}, false},
		}},
		{"annotation defaults", config.Match{DestructiveHint: ptr(true), OpenWorldHint: ptr(true), ReadOnlyHint: ptr(false)}, []check{
			{"none declared", withHints("fs", nil), true},
			{"declared otherwise", withHints("fs", &Annotations{OpenWorld: ptr(false)}), false},
			{"untrusted", withHints("slack", nil), false},
		}},
		{"annotation destructive false", config.Match{DestructiveHint: ptr(false)}, []check{
			{"declared", withHints("github", &Annotations{Destructive: ptr(false)}), true},
			{"default", withHints("github", nil), false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := compile(t, config.Policy{Rules: []config.Rule{{Name: "r", Effect: config.EffectDeny, Match: tt.match}}})
			for _, c := range tt.checks {
				d := r.Decide(c.in)
				if got := d.Rule == "r"; got != c.want {
					steps, _ := r.Explain(c.in)
					t.Errorf("%s: matched = %v, want %v (%+v)", c.name, got, c.want, steps)
				}
			}
		})
	}
}

func TestDecide(t *testing.T) {
	rules := []config.Rule{
		{Name: "hide admin tools", Effect: config.EffectHide, Match: config.Match{Tools: []string{"admin_*"}}},
		{Name: "ops write", Effect: config.EffectAllow, Reason: "ops may", Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"ops"}}, Tools: []string{"write_*"}}},
		{Name: "no writes", Effect: config.EffectDeny, Reason: "writes are off", Match: config.Match{Tools: []string{"write_*"}}},
		{Effect: config.EffectApprove, Match: config.Match{Tools: []string{"deploy"}}},
		{Name: "no writes again", Effect: config.EffectDeny, Match: config.Match{Tools: []string{"write_*"}}},
	}
	tool := func(p session.Principal, name string) Input {
		return Input{Principal: p, Upstream: "fs", Kind: pipeline.Tool, Name: name}
	}
	tests := []struct {
		name   string
		policy config.Policy
		in     Input
		want   Decision
	}{
		{"first match wins", config.Policy{Rules: rules}, tool(alice, "write_file"),
			Decision{Effect: config.EffectAllow, Rule: "ops write", Reason: "ops may"}},
		{"next rule", config.Policy{Rules: rules}, tool(bob, "write_file"),
			Decision{Effect: config.EffectDeny, Rule: "no writes", Reason: "writes are off"}},
		{"hide, default reason", config.Policy{Rules: rules}, tool(bob, "admin_reset"),
			Decision{Effect: config.EffectHide, Rule: "hide admin tools", Reason: defaultHideReason}},
		{"approve, default name and reason", config.Policy{Rules: rules}, tool(bob, "deploy"),
			Decision{Effect: config.EffectApprove, Rule: "rule 4", Reason: defaultApproveReason}},
		{"default allow", config.Policy{Rules: rules}, tool(bob, "read_file"),
			Decision{Effect: config.EffectAllow, Rule: DefaultRule}},
		{"default deny", config.Policy{Default: config.EffectDeny, Rules: rules}, tool(bob, "read_file"),
			Decision{Effect: config.EffectDeny, Rule: DefaultRule, Reason: defaultDenyReason}},
		{"default hide", config.Policy{Default: config.EffectHide}, tool(bob, "read_file"),
			Decision{Effect: config.EffectHide, Rule: DefaultRule, Reason: defaultHideReason}},
		{"dry run rule", config.Policy{DryRun: true, Rules: rules}, tool(bob, "write_file"),
			Decision{Effect: config.EffectDeny, Rule: "no writes", Reason: "writes are off", DryRun: true}},
		{"dry run default", config.Policy{DryRun: true, Default: config.EffectDeny}, tool(bob, "x"),
			Decision{Effect: config.EffectDeny, Rule: DefaultRule, Reason: defaultDenyReason, DryRun: true}},
		{"no policy", config.Policy{}, tool(anon, "x"),
			Decision{Effect: config.EffectAllow, Rule: DefaultRule}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := compile(t, tt.policy).Decide(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			_, explained := compile(t, tt.policy).Explain(tt.in)
			if diff := cmp.Diff(got, explained); diff != "" {
				t.Errorf("Explain's decision differs from Decide's (-decide +explain):\n%s", diff)
			}
		})
	}
}

func TestNilRules(t *testing.T) {
	var r *Rules
	if d := r.Decide(Input{Name: "x"}); d.Effect != config.EffectAllow || d.Rule != DefaultRule {
		t.Errorf("nil Rules: Decide = %+v", d)
	}
	if !r.Visible(Input{}) || r.ViewKey(alice) != "" {
		t.Error("nil Rules: not visible, or a view key")
	}
	if steps, d := r.Explain(Input{}); steps != nil || d.Effect != config.EffectAllow {
		t.Errorf("nil Rules: Explain = %v, %+v", steps, d)
	}
	r, err := Compile(nil, nil)
	if err != nil || r.Decide(Input{}).Effect != config.EffectAllow {
		t.Errorf("Compile(nil, nil) = %v, %v", r, err)
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name string
		p    config.Policy
	}{
		{"default", config.Policy{Default: "maybe"}},
		{"effect", config.Policy{Rules: []config.Rule{{Effect: "block"}}}},
		{"glob", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Tools: []string{"a["}}}}}},
		{"empty glob", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Principal: config.PrincipalMatch{Subjects: []string{""}}}}}}},
		{"regexp", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a", Matches: "("}}}}}}},
		{"pointer", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "a", Equals: ptr("x")}}}}}}},
		{"neither", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a"}}}}}}},
		{"both", config.Policy{Rules: []config.Rule{{Effect: "deny", Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a", Equals: ptr("x"), Matches: "x"}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Compile(&tt.p, nil); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestUntrustedByDefault(t *testing.T) {
	p := config.Policy{Rules: []config.Rule{{Name: "ro", Effect: config.EffectDeny, Match: config.Match{ReadOnlyHint: ptr(false)}}}}
	r, err := Compile(&p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Decide(Input{Upstream: "fs", Kind: pipeline.Tool, Name: "x"}); d.Rule != DefaultRule {
		t.Errorf("nil trusted: annotations matched (%+v)", d)
	}
}

func TestTrustedAskedOnce(t *testing.T) {
	asked := 0
	p := config.Policy{Rules: []config.Rule{
		{Effect: config.EffectDeny, Match: config.Match{ReadOnlyHint: ptr(true)}},
		{Effect: config.EffectDeny, Match: config.Match{DestructiveHint: ptr(false)}},
	}}
	r, err := Compile(&p, func(string) bool { asked++; return true })
	if err != nil {
		t.Fatal(err)
	}
	r.Decide(Input{Upstream: "fs", Kind: pipeline.Tool, Name: "x"})
	if asked != 1 {
		t.Errorf("trusted was called %d times for one decision, want 1", asked)
	}
}

func TestVisible(t *testing.T) {
	p := config.Policy{Rules: []config.Rule{
		{Name: "args allow", Effect: config.EffectAllow, Match: config.Match{Tools: []string{"maybe"}, Arguments: []config.ArgumentMatch{{Pointer: "/x", Equals: ptr("1")}}}},
		{Name: "args hide", Effect: config.EffectHide, Match: config.Match{Tools: []string{"run"}, Arguments: []config.ArgumentMatch{{Pointer: "/x", Equals: ptr("1")}}}},
		{Name: "ops see secrets", Effect: config.EffectAllow, Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"ops"}}, Tools: []string{"secret_*"}}},
		{Name: "hide secrets", Effect: config.EffectHide, Match: config.Match{Tools: []string{"secret_*"}}},
		{Name: "deny delete", Effect: config.EffectDeny, Match: config.Match{Tools: []string{"delete"}}},
		{Name: "approve deploy", Effect: config.EffectApprove, Match: config.Match{Tools: []string{"deploy"}}},
		{Name: "hide private prompts", Effect: config.EffectHide, Match: config.Match{Prompts: []string{"private_*"}}},
		{Name: "hide secret files", Effect: config.EffectHide, Match: config.Match{Resources: []string{"file:///secret/*"}}},
		{Name: "hide destructive", Effect: config.EffectHide, Match: config.Match{Upstreams: []string{"github"}, DestructiveHint: ptr(true)}},
		{Name: "hide maybe", Effect: config.EffectHide, Match: config.Match{Tools: []string{"maybe"}}},
	}}
	tool := func(pr session.Principal, name string) Input {
		return Input{Principal: pr, Upstream: "fs", Kind: pipeline.Tool, Name: name}
	}
	tests := []struct {
		name string
		in   Input
		want bool
	}{
		{"plain tool", tool(bob, "read"), true},
		{"hidden", tool(bob, "secret_key"), false},
		{"an argument allow rule keeps what a later rule hides listed: the call decides", tool(bob, "maybe"), true},
		{"arguments play no part in listing", Input{Principal: bob, Upstream: "fs", Kind: pipeline.Tool, Name: "secret_key", Arguments: json.RawMessage(`{"x":"1"}`)}, false},
		{"argument hide rule skipped", tool(bob, "run"), true},
		{"allowed by an earlier rule", tool(alice, "secret_key"), true},
		{"denied is listed", tool(bob, "delete"), true},
		{"approve is listed", tool(bob, "deploy"), true},
		{"hidden prompt", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "private_notes"}, false},
		{"visible prompt", Input{Upstream: "fs", Kind: pipeline.Prompt, Name: "notes"}, true},
		{"hidden resource template", Input{Upstream: "fs", Kind: pipeline.Resource, Name: "file:///secret/{name}"}, false},
		{"destructive by default", Input{Upstream: "github", Kind: pipeline.Tool, Name: "push"}, false},
		{"declared not destructive", Input{Upstream: "github", Kind: pipeline.Tool, Name: "get", Annotations: &Annotations{Destructive: ptr(false)}}, true},
	}
	r := compile(t, p)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Visible(tt.in); got != tt.want {
				t.Errorf("Visible = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("default hide", func(t *testing.T) {
		r := compile(t, config.Policy{Default: config.EffectHide, Rules: []config.Rule{
			{Effect: config.EffectAllow, Match: config.Match{Tools: []string{"read"}}},
		}})
		if !r.Visible(tool(bob, "read")) || r.Visible(tool(bob, "write")) {
			t.Error("default hide: read hidden or write visible")
		}
	})
	t.Run("dry run", func(t *testing.T) {
		dry := p
		dry.DryRun = true
		if !compile(t, dry).Visible(tool(bob, "secret_key")) {
			t.Error("dry run: hidden")
		}
	})
}

func TestViewKey(t *testing.T) {
	admins := session.Principal{Issuer: "https://idp", Subject: "root", Groups: []string{"admins"}}
	carol := session.Principal{Issuer: "https://idp", Subject: "carol", Groups: []string{"ops"}}
	p := config.Policy{Rules: []config.Rule{
		{Name: "ops see secrets", Effect: config.EffectAllow, Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"ops"}}, Tools: []string{"secret_*"}}},
		{Name: "hide secrets", Effect: config.EffectHide, Match: config.Match{Tools: []string{"secret_*"}}},
		{Name: "hide admin from non-admins", Effect: config.EffectHide, Match: config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(true)}, Tools: []string{"admin_*"}}},
		{Name: "deny bob", Effect: config.EffectDeny, Match: config.Match{Principal: config.PrincipalMatch{Subjects: []string{"bob"}}}},
		{Name: "by argument", Effect: config.EffectHide, Match: config.Match{Principal: config.PrincipalMatch{Subjects: []string{"alice"}}, Arguments: []config.ArgumentMatch{{Pointer: "/x", Equals: ptr("1")}}}},
	}}
	r := compile(t, p)
	tests := []struct {
		name  string
		a, b  session.Principal
		equal bool
	}{
		{"same groups, other subjects", alice, carol, true},
		{"a deny rule does not split", bob, admins, true},
		{"an argument rule does not split", alice, carol, true},
		{"an allow before a hide splits", alice, bob, false},
		{"anonymous differs", anon, bob, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := r.ViewKey(tt.a), r.ViewKey(tt.b)
			if (ka == kb) != tt.equal {
				t.Errorf("ViewKey(%v) = %q, ViewKey(%v) = %q; want equal: %v", tt.a, ka, tt.b, kb, tt.equal)
			}
		})
	}

	t.Run("allow before a hide default splits", func(t *testing.T) {
		r := compile(t, config.Policy{Default: config.EffectHide, Rules: []config.Rule{
			{Effect: config.EffectAllow, Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"ops"}}}},
		}})
		if r.ViewKey(alice) == r.ViewKey(bob) {
			t.Error("equal keys")
		}
	})
	t.Run("dry run", func(t *testing.T) {
		dry := p
		dry.DryRun = true
		r := compile(t, dry)
		if r.ViewKey(alice) != r.ViewKey(anon) {
			t.Error("dry run: keys differ")
		}
	})
}

// TestViewKeyDecidesVisibility checks the contract of ViewKey by brute force: principals
// with equal keys see the same items, over every combination of a few rules.
func TestViewKeyDecidesVisibility(t *testing.T) {
	principals := []session.Principal{alice, bob, ciKey, anon,
		{Issuer: "https://idp", Subject: "carol", Groups: []string{"ops"}},
		{Issuer: "https://idp", Subject: "dave", Roles: []string{"admin"}}}
	matches := []config.Match{
		{Principal: config.PrincipalMatch{Groups: []string{"ops"}}},
		{Principal: config.PrincipalMatch{Roles: []string{"admin"}}, Tools: []string{"a*"}},
		{Principal: config.PrincipalMatch{Anonymous: ptr(false)}, Tools: []string{"b"}},
		{Principal: config.PrincipalMatch{APIKeys: []string{"ci-*"}}},
		{Tools: []string{"a"}},
		{Principal: config.PrincipalMatch{Subjects: []string{"bob"}}, Tools: []string{"b"}},
	}
	effects := []string{config.EffectAllow, config.EffectHide, config.EffectDeny}
	items := []string{"a", "ab", "b", "c"}
	for seed := range 2000 {
		// A deterministic pseudo-random policy of 4 rules.
		x := uint32(seed*2654435761 + 1)
		next := func(n int) int { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return int(x % uint32(n)) }
		var p config.Policy
		p.Default = effects[next(2)]
		for range 4 {
			p.Rules = append(p.Rules, config.Rule{Effect: effects[next(3)], Match: matches[next(len(matches))]})
		}
		r := compile(t, p)
		for _, a := range principals {
			for _, b := range principals {
				if r.ViewKey(a) != r.ViewKey(b) {
					continue
				}
				for _, item := range items {
					in := Input{Upstream: "fs", Kind: pipeline.Tool, Name: item}
					ia, ib := in, in
					ia.Principal, ib.Principal = a, b
					if r.Visible(ia) != r.Visible(ib) {
						t.Fatalf("policy %+v: %v and %v have key %q but differ on %q", p, a, b, r.ViewKey(a), item)
					}
				}
			}
		}
	}
}

// benchRules is a policy of 20 rules like an operator would write.
func benchRules(tb testing.TB) *Rules {
	var rules []config.Rule
	for i := range 6 {
		rules = append(rules,
			config.Rule{Effect: config.EffectHide, Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"contractors"}}, Upstreams: []string{fmt.Sprintf("internal-%d", i)}}},
			config.Rule{Effect: config.EffectDeny, Match: config.Match{Upstreams: []string{fmt.Sprintf("db-%d*", i)}, Tools: []string{"drop_*", "truncate"}}},
			config.Rule{Effect: config.EffectAllow, Match: config.Match{Principal: config.PrincipalMatch{Subjects: []string{fmt.Sprintf("svc-%d-*", i)}, Roles: []string{"admin"}}}},
		)
	}
	rules = append(rules,
		config.Rule{Effect: config.EffectDeny, Match: config.Match{Upstreams: []string{"fs"}, Tools: []string{"write_*"}, Arguments: []config.ArgumentMatch{{Pointer: "/path", Matches: `^/etc/`}}}},
		config.Rule{Effect: config.EffectApprove, Match: config.Match{Upstreams: []string{"github"}, DestructiveHint: ptr(true)}},
	)
	return compile(tb, config.Policy{Default: config.EffectAllow, Rules: rules})
}

var benchInput = Input{
	Principal: session.Principal{Issuer: "https://idp", Subject: "alice", Groups: []string{"dev", "ops"}, Roles: []string{"user"}},
	Upstream:  "fs",
	Kind:      pipeline.Tool,
	Name:      "write_file",
	Arguments: json.RawMessage(`{"path":"/home/alice/notes.txt","content":"hello, world"}`),
}

func TestDecideDoesNotAllocate(t *testing.T) {
	r := benchRules(t)
	in := benchInput
	var d Decision
	allocs := testing.AllocsPerRun(100, func() { d = r.Decide(in) })
	if allocs != 0 && !raceEnabled {
		t.Errorf("Decide allocates %v times per call", allocs)
	}
	if d.Rule != DefaultRule {
		t.Errorf("Decide = %+v, want the default", d)
	}
	in.Arguments = json.RawMessage(`{"path":"/etc/passwd"}`)
	if d := r.Decide(in); d.Effect != config.EffectDeny {
		t.Errorf("Decide(/etc/passwd) = %+v, want deny", d)
	}
}

func BenchmarkDecide(b *testing.B) {
	r := benchRules(b)
	b.ReportAllocs()
	for b.Loop() {
		r.Decide(benchInput)
	}
}

func BenchmarkVisible(b *testing.B) {
	r := benchRules(b)
	in := benchInput
	in.Arguments = nil
	b.ReportAllocs()
	for b.Loop() {
		r.Visible(in)
	}
}

package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
)

func TestExplain(t *testing.T) {
	p := config.Policy{Rules: []config.Rule{
		{Name: "fs only", Effect: config.EffectDeny, Line: 10, Match: config.Match{Upstreams: []string{"fs*"}}},
		{Name: "prompts", Effect: config.EffectDeny, Line: 12, Match: config.Match{Prompts: []string{"p"}, Resources: []string{"r"}}},
		{Name: "read tools", Effect: config.EffectDeny, Line: 14, Match: config.Match{Tools: []string{"read_*"}}},
		{Name: "anonymous", Effect: config.EffectDeny, Line: 16, Match: config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(true)}}},
		{Name: "not anonymous", Effect: config.EffectDeny, Line: 17, Match: config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(false)}, Tools: []string{"never"}}},
		{Name: "carol", Effect: config.EffectDeny, Line: 18, Match: config.Match{Principal: config.PrincipalMatch{Subjects: []string{"carol"}}}},
		{Name: "keys", Effect: config.EffectDeny, Line: 20, Match: config.Match{Principal: config.PrincipalMatch{APIKeys: []string{"ci"}}}},
		{Name: "sec", Effect: config.EffectDeny, Line: 22, Match: config.Match{Principal: config.PrincipalMatch{Groups: []string{"sec"}}}},
		{Name: "admins", Effect: config.EffectDeny, Line: 24, Match: config.Match{Principal: config.PrincipalMatch{Roles: []string{"admin"}}}},
		{Name: "scoped", Effect: config.EffectDeny, Line: 26, Match: config.Match{Principal: config.PrincipalMatch{Scopes: []string{"write"}}}},
		{Name: "slack hints", Effect: config.EffectDeny, Line: 28, Match: config.Match{Upstreams: []string{"slack"}, ReadOnlyHint: ptr(true)}},
		{Name: "read-only", Effect: config.EffectDeny, Line: 30, Match: config.Match{ReadOnlyHint: ptr(true)}},
		{Name: "not open", Effect: config.EffectDeny, Line: 32, Match: config.Match{OpenWorldHint: ptr(false)}},
		{Name: "path", Effect: config.EffectDeny, Line: 34, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/path", Equals: ptr("/etc")}}}},
		{Name: "mode", Effect: config.EffectDeny, Line: 36, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/mode", Matches: "^w"}}}},
		{Name: "count", Effect: config.EffectDeny, Line: 38, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/count", Matches: "^1"}}}},
		{Name: "missing", Effect: config.EffectDeny, Line: 40, Match: config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/none", Equals: ptr("x")}}}},
		{Name: "github", Effect: config.EffectApprove, Line: 42, Reason: "ask", Match: config.Match{Upstreams: []string{"github"}}},
		{Name: "never reached", Effect: config.EffectDeny, Line: 44},
	}}
	r, err := Compile(&p, func(u string) bool { return u == "github" })
	if err != nil {
		t.Fatal(err)
	}
	in := Input{
		Principal:   session.Principal{Issuer: "https://idp", Subject: "bob", Groups: []string{"dev"}},
		Upstream:    "github",
		Kind:        pipeline.Tool,
		Name:        "create_issue",
		Arguments:   json.RawMessage(`{"path": "/home", "mode": "read", "count": 12}`),
		Annotations: &Annotations{ReadOnly: ptr(false)},
	}
	steps, d := r.Explain(in)
	want := []Step{
		{Rule: "fs only", Line: 10, Why: `upstreams: "github" matches none of ["fs*"]`},
		{Rule: "prompts", Line: 12, Why: `prompts, resources: the request is for a tool`},
		{Rule: "read tools", Line: 14, Why: `tools: "create_issue" matches none of ["read_*"]`},
		{Rule: "anonymous", Line: 16, Why: `anonymous: the principal is not anonymous`},
		{Rule: "not anonymous", Line: 17, Why: `tools: "create_issue" matches none of ["never"]`},
		{Rule: "carol", Line: 18, Why: `subjects: "bob" matches none of ["carol"]`},
		{Rule: "keys", Line: 20, Why: `api_keys: the principal is not an API key`},
		{Rule: "sec", Line: 22, Why: `groups: the principal holds none of ["sec"] (it holds ["dev"])`},
		{Rule: "admins", Line: 24, Why: `roles: the principal holds none of ["admin"] (it holds [])`},
		{Rule: "scoped", Line: 26, Why: `scopes: the principal holds none of ["write"] (it holds [])`},
		{Rule: "slack hints", Line: 28, Why: `upstreams: "github" matches none of ["slack"]`},
		{Rule: "read-only", Line: 30, Why: `annotations: readOnlyHint is false, not true`},
		{Rule: "not open", Line: 32, Why: `annotations: openWorldHint is true (not declared: the default), not false`},
		{Rule: "path", Line: 34, Why: `arguments: /path is "/home", not "/etc"`},
		{Rule: "mode", Line: 36, Why: `arguments: /mode is "read", which does not match "^w"`},
		{Rule: "count", Line: 38, Why: `arguments: /count is 12, not a string (matches "^1")`},
		{Rule: "missing", Line: 40, Why: `arguments: /none is missing`},
		{Rule: "github", Line: 42, Matched: true},
	}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("Explain steps (-want +got):\n%s", diff)
	}
	if want := (Decision{Effect: config.EffectApprove, Rule: "github", Reason: "ask"}); !cmp.Equal(d, want) {
		t.Errorf("Explain decision = %+v, want %+v", d, want)
	}
}

func TestExplainWhy(t *testing.T) {
	tests := []struct {
		name  string
		match config.Match
		in    Input
		want  string
	}{
		{"untrusted annotations", config.Match{DestructiveHint: ptr(true)},
			Input{Upstream: "slack", Kind: pipeline.Tool, Name: "post"},
			"annotations of slack are not trusted"},
		{"annotations of a prompt", config.Match{DestructiveHint: ptr(true)},
			Input{Upstream: "github", Kind: pipeline.Prompt, Name: "p"},
			"annotations: the request is for a prompt, which has none"},
		{"no arguments", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a", Equals: ptr("x")}}},
			Input{Upstream: "fs", Kind: pipeline.Tool, Name: "t"},
			"arguments: /a is missing (the request has no arguments)"},
		{"invalid arguments", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a", Equals: ptr("x")}}},
			Input{Upstream: "fs", Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"a":`)},
			"arguments: the request's arguments are not valid JSON"},
		{"whole arguments", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "", Equals: ptr("{}")}}},
			Input{Upstream: "fs", Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"a": 1}`)},
			`arguments: "" (the whole arguments) is {"a": 1}, not "{}"`},
		{"long value", config.Match{Arguments: []config.ArgumentMatch{{Pointer: "/a", Equals: ptr("x")}}},
			Input{Upstream: "fs", Kind: pipeline.Tool, Name: "t", Arguments: json.RawMessage(`{"a":"` + strings.Repeat("x", 100) + `"}`)},
			`arguments: /a is "` + strings.Repeat("x", 79) + `…, not "x"`},
		{"subjects of anonymous", config.Match{Principal: config.PrincipalMatch{Subjects: []string{"*"}}},
			Input{Upstream: "fs", Kind: pipeline.Tool, Name: "t"},
			"subjects: the principal is anonymous"},
		{"other key", config.Match{Principal: config.PrincipalMatch{APIKeys: []string{"ci"}}},
			Input{Principal: session.Principal{Issuer: session.APIKeyIssuer, Subject: "backup"}},
			`api_keys: "backup" matches none of ["ci"]`},
		{"anonymous false", config.Match{Principal: config.PrincipalMatch{Anonymous: ptr(false)}},
			Input{},
			"anonymous: the principal is anonymous"},
		{"resource", config.Match{Resources: []string{"file:///a/*"}},
			Input{Kind: pipeline.Resource, Name: "file:///b"},
			`resources: "file:///b" matches none of ["file:///a/*"]`},
		{"prompt", config.Match{Prompts: []string{"p"}},
			Input{Kind: pipeline.Prompt, Name: "q"},
			`prompts: "q" matches none of ["p"]`},
		{"completion", config.Match{Tools: []string{"t"}},
			Input{Kind: pipeline.Completion, Name: "q"},
			`tools: the request is for a completion`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Compile(&config.Policy{Rules: []config.Rule{{Effect: config.EffectDeny, Match: tt.match}}}, func(u string) bool { return u == "github" })
			if err != nil {
				t.Fatal(err)
			}
			steps, d := r.Explain(tt.in)
			if len(steps) != 1 || steps[0].Matched || d.Rule != DefaultRule {
				t.Fatalf("Explain = %+v, %+v; want one step that did not match", steps, d)
			}
			if steps[0].Why != tt.want {
				t.Errorf("Why = %q\nwant  %q", steps[0].Why, tt.want)
			}
		})
	}
}

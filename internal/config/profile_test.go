package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestParseProfiles(t *testing.T) {
	all := []string{"*"}
	tests := []struct {
		name string
		yaml string // after the upstreams a and b
		want []config.Profile
	}{
		{"absent", "", nil},
		{"no value", "profiles:\n", nil},
		{"empty", "profiles: []\n", []config.Profile{}},
		{
			name: "selectors",
			yaml: `profiles:
  - name: dev
    include:
      - upstream: a
      - upstream: b
        tools: ["b__read_*"]
      - {prompts: ["*"], resources: ["file:///docs/*"], resource_templates: []}
  - name: ops_2
    include: [{tools: ["a__*", "b__*"]}]
`,
			want: []config.Profile{
				{Name: "dev", File: "gw.yaml", Line: 5, Include: []config.Selector{
					{Upstream: "a", Tools: all, Prompts: all, Resources: all, ResourceTemplates: all},
					{Upstream: "b", Tools: []string{"b__read_*"}},
					{Prompts: all, Resources: []string{"file:///docs/*"}, ResourceTemplates: []string{}},
				}},
				{Name: "ops_2", File: "gw.yaml", Line: 11, Include: []config.Selector{{Tools: []string{"a__*", "b__*"}}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "upstreams:\n  - {name: a, command: ./a}\n  - {name: b, command: ./b, enabled: false}\n" + tt.yaml
			c, err := config.Parse("gw.yaml", []byte(yaml), nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, c.Profiles); diff != "" {
				t.Errorf("profiles mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProfileSelectsImported: a selector may name an upstream of an imported server list.
func TestProfileSelectsImported(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "gw.yaml", "profiles:\n  - {name: files, include: [{upstream: filesystem}]}\n")
	claude := writeFile(t, dir, "claude.json", `{"mcpServers": {"filesystem": {"command": "npx"}}}`)
	c, err := config.Build(cfg, []string{claude}, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	all := []string{"*"}
	want := []config.Profile{{Name: "files", File: cfg, Line: 2, Include: []config.Selector{
		{Upstream: "filesystem", Tools: all, Prompts: all, Resources: all, ResourceTemplates: all},
	}}}
	if diff := cmp.Diff(want, c.Profiles); diff != "" {
		t.Errorf("profiles mismatch (-want +got):\n%s", diff)
	}
}

func TestProfileProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"names", `upstreams:
  - {name: a, command: ./a}
profiles:
  - include: [{upstream: a}]
  - name: "dev/1"
    include: [{upstream: a}]
  - name: ` + strings.Repeat("p", 65) + `
    include: [{upstream: a}]
  - name: dev
    include: [{upstream: a}]
  - name: dev
    include: [{upstream: a}]
  - name: ""
    include: [{upstream: a}]
`, []config.Problem{
			p(4, "profiles[0].name", "required: a unique name for this profile, like dev; it is served at /mcp/<name>"),
			p(5, "profiles[1].name", `"dev/1" is not a valid profile name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
			p(7, "profiles[2].name", `"pppppppppppppppppppppppppppppppppppppppp..." is not a valid profile name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
			p(11, "profiles[4].name", `"dev" is also the name of profiles[3] (line 9): profile names must be unique`),
			p(13, "profiles[5].name", `"" is not a valid profile name: use 1 to 64 characters from A-Z a-z 0-9 _ -`),
		}},
		{"include", `upstreams: []
profiles:
  - name: a
  - name: b
    include: []
  - name: c
    include:
  - name: d
    include: {upstream: a}
  - name: e
    include: [{}, x]
`, []config.Problem{
			p(3, "profiles[0].include", "required: a list of selectors, like - upstream: github"),
			p(5, "profiles[1].include", "empty: list at least one selector, like - upstream: github"),
			p(7, "profiles[2].include", "empty: list at least one selector, like - upstream: github"),
			p(9, "profiles[3].include", "want a list of selectors (lines starting with `- upstream:` or `- tools:`), got a mapping"),
			p(11, "profiles[4].include[0]", `an empty selector would select every item of every upstream: set upstream: NAME to select all of one upstream's items, or list patterns of exposed names under tools, prompts, resources or resource_templates, like tools: ["github__*"]`),
			p(11, "profiles[4].include[1]", "want a mapping with upstream: and/or tools:, prompts:, resources:, resource_templates: (lists of patterns), got a single value"),
		}},
		{"selectors", `upstreams:
  - {name: a, command: ./a}
  - {name: b, command: ./b, enabled: false}
profiles:
  - name: dev
    include:
      - upstream: c
      - upstream: ""
      - upstream: b
        tools: ["b__*", "[b", ""]
        prompts:
        resources: ["file:///docs/*"]
        resource_templates: ["\\"]
        tool: [x]
`, []config.Problem{
			p(7, "profiles[0].include[0].upstream", `"c" names no upstream: use one of a, b`),
			p(8, "profiles[0].include[1].upstream", "empty: name an upstream, or remove the key to select from every upstream"),
			p(10, "profiles[0].include[2].tools[1]", `"[b" has a [ without its closing ]: write \[ for a literal bracket`),
			p(10, "profiles[0].include[2].tools[2]", "empty pattern: write * to match everything"),
			p(11, "profiles[0].include[2].prompts", `no value: write a list of patterns like ["github__*"], or remove the key`),
			p(13, "profiles[0].include[2].resource_templates[0]", `"\\" ends in a lone \: write \\ for a backslash`),
			p(14, "profiles[0].include[2].tool", "unknown field (known: upstream, tools, prompts, resources, resource_templates)"),
		}},
		{"no upstreams to select", "upstreams: []\nprofiles:\n  - {name: dev, include: [{upstream: a}]}\n", []config.Problem{
			p(3, "profiles[0].include[0].upstream", `"a" names no upstream, and there are none: add it to upstreams, or import the server list that has it`),
		}},
		{"wrong shapes", "upstreams: []\nprofiles: {dev: {}}\n", []config.Problem{
			p(2, "profiles", "want a list of profiles (lines starting with `- name:`), got a mapping"),
		}},
		{"profile not a mapping", "upstreams: []\nprofiles: [dev]\n", []config.Problem{
			p(2, "profiles[0]", "want a mapping with `name:` and `include:`, a list of selectors like {upstream: github}, got a single value"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), nil)
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Parse error = %v, want a *config.Error", err)
			}
			if diff := cmp.Diff(tt.want, cerr.Problems); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

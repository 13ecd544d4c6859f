package config_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// shapingOf is the shaping fields of an upstream, for tests that compare only those.
type shapingOf struct {
	Tools, Prompts               config.Shaping
	Resources, ResourceTemplates config.Filter
}

func shapingFields(u config.Upstream) shapingOf {
	return shapingOf{u.Tools, u.Prompts, u.Resources, u.ResourceTemplates}
}

func TestParseShaping(t *testing.T) {
	tests := []struct {
		name string
		yaml string // the keys of upstream fs, indented by 4
		want shapingOf
	}{
		{
			name: "none",
			yaml: "",
			want: shapingOf{},
		},
		{
			name: "every key",
			yaml: `
    tools:
      include: ["read_*", list_directory]
      exclude: ["*_dangerous"]
      overrides:
        read_text_file:
          name: read
          title: Read a file
          description: Reads a text file.
          annotations: {readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false}
        list_directory: {title: List}
    prompts:
      include: ["*"]
      exclude: [secret]
      overrides:
        summarize: {name: sum, title: Summary, description: Sums up.}
    resources: {include: ["file:///docs/*"], exclude: ["file:///docs/private/*"]}
    resource_templates: {exclude: ["file:///{path}"]}
`,
			want: shapingOf{
				Tools: config.Shaping{
					Filter: config.Filter{Include: []string{"read_*", "list_directory"}, Exclude: []string{"*_dangerous"}},
					Overrides: map[string]config.ItemOverride{
						"read_text_file": {
							Name: "read", Title: "Read a file", Description: "Reads a text file.",
							Annotations: map[string]bool{"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
							Line:        8,
						},
						"list_directory": {Title: "List", Line: 13},
					},
				},
				Prompts: config.Shaping{
					Filter:    config.Filter{Include: []string{"*"}, Exclude: []string{"secret"}},
					Overrides: map[string]config.ItemOverride{"summarize": {Name: "sum", Title: "Summary", Description: "Sums up.", Line: 18}},
				},
				Resources:         config.Filter{Include: []string{"file:///docs/*"}, Exclude: []string{"file:///docs/private/*"}},
				ResourceTemplates: config.Filter{Exclude: []string{"file:///{path}"}},
			},
		},
		{
			name: "include empty keeps none, include with no value keeps all",
			yaml: `
    tools: {include: []}
    prompts:
      include:
      exclude:
    resources: {include: [], exclude: []}
`,
			want: shapingOf{
				Tools:     config.Shaping{Filter: config.Filter{Include: []string{}}},
				Resources: config.Filter{Include: []string{}, Exclude: []string{}},
			},
		},
		{
			name: "overrides and annotations empty or with no value",
			yaml: `
    tools:
      overrides:
        a: {annotations: {}}
    prompts:
      overrides:
`,
			want: shapingOf{
				Tools: config.Shaping{Overrides: map[string]config.ItemOverride{"a": {Annotations: map[string]bool{}, Line: 6}}},
			},
		},
		{
			name: "names with dots and variables in values",
			yaml: `
    tools:
      include: ["${TOOLS:-*}"]
      overrides:
        files.read: {name: "${NEW_NAME}", description: "Reads ${WHAT}"}
`,
			want: shapingOf{
				Tools: config.Shaping{
					Filter:    config.Filter{Include: []string{"*"}},
					Overrides: map[string]config.ItemOverride{"files.read": {Name: "read.v2", Description: "Reads files", Line: 7}},
				},
			},
		},
	}
	vars := env(map[string]string{"NEW_NAME": "read.v2", "WHAT": "files"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := "upstreams:\n  - name: fs\n    command: ./fs" + tt.yaml + "\n"
			c, err := config.Parse("gw.yaml", []byte(yaml), vars)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, shapingFields(c.Upstreams[0])); diff != "" {
				t.Errorf("shaping mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShapingProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	long := strings.Repeat("n", 60) // with "fs__", 64 characters: the most
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"bad patterns", `upstreams:
  - name: fs
    command: ./fs
    tools: {include: ["read_*", "[a-z"], exclude: [""]}
    prompts: {exclude: ["x\\"]}
    resources:
      include: ["file:///[docs"]
    resource_templates: {exclude: ["ok", "[!"]}
`, []config.Problem{
			p(4, "upstreams[0].tools.include[1]", `"[a-z" has a [ without its closing ]: write \[ for a literal bracket`),
			p(4, "upstreams[0].tools.exclude[0]", "empty pattern: write * to match everything"),
			p(5, "upstreams[0].prompts.exclude[0]", `"x\\" ends in a lone \: write \\ for a backslash`),
			p(7, "upstreams[0].resources.include[0]", `"file:///[docs" has a [ without its closing ]: write \[ for a literal bracket`),
			p(8, "upstreams[0].resource_templates.exclude[1]", `"[!" has a [ without its closing ]: write \[ for a literal bracket`),
		}},
		{"wrong shapes", `upstreams:
  - name: fs
    command: ./fs
    tools: [read_file]
    prompts:
    resources: {include: "file:///*"}
    resource_templates: {includes: ["*"]}
  - name: gh
    command: ./gh
    tools:
      overrides: [a]
    prompts:
      overrides:
        a: read
        b: {name: [x], color: red}
`, []config.Problem{
			p(4, "upstreams[0].tools", "want a mapping with include:, exclude: (lists of tool name patterns) and/or overrides:, got a list"),
			p(5, "upstreams[0].prompts", "want a mapping with include:, exclude: (lists of prompt name patterns) and/or overrides:, got no value"),
			p(6, "upstreams[0].resources.include", `want a list of strings, like ["a", "b"]; got a single value`),
			p(7, "upstreams[0].resource_templates.includes", "unknown field (known: include, exclude)"),
			p(11, "upstreams[1].tools.overrides", "want a mapping of the upstream's own tool names to their overrides, like read_file: {name: read}, got a list"),
			p(14, "upstreams[1].prompts.overrides.a", "want a mapping with name, title or description, like {name: summarize}, got a single value"),
			p(15, "upstreams[1].prompts.overrides.b.name", "want a string, got a list"),
			p(15, "upstreams[1].prompts.overrides.b.color", "unknown field (known: name, title, description)"),
		}},
		{"annotations", `upstreams:
  - name: fs
    command: ./fs
    tools:
      overrides:
        a:
          annotations: {readOnlyHint: yes, readOnly: true}
        b: {annotations: [readOnlyHint]}
    prompts:
      overrides:
        c: {annotations: {readOnlyHint: true}}
`, []config.Problem{
			p(7, "upstreams[0].tools.overrides.a.annotations.readOnlyHint", `want true or false, got "yes"`),
			p(7, "upstreams[0].tools.overrides.a.annotations.readOnly", "unknown field (known: readOnlyHint, destructiveHint, idempotentHint, openWorldHint)"),
			p(8, "upstreams[0].tools.overrides.b.annotations", "want a mapping of hints to true or false, like {readOnlyHint: true}, got a list"),
			p(11, "upstreams[0].prompts.overrides.c.annotations", "only tools have annotations: remove it from this prompt override"),
		}},
		{"names, titles and descriptions", `upstreams:
  - name: fs
    command: ./fs
    tools:
      overrides:
        a: {name: "read file"}
        b: {name: ""}
        c: {name: ` + strings.Repeat("x", 65) + `}
        d: {title: "", description: ""}
        "": {name: e}
        f: {name: ` + long + `}
        g: {name: ` + long + `x}
`, []config.Problem{
			p(6, "upstreams[0].tools.overrides.a.name", `"read file" is not a valid tool name: use 1 to 64 characters from A-Z a-z 0-9 _ . -`),
			p(7, "upstreams[0].tools.overrides.b.name", `"" is not a valid tool name: use 1 to 64 characters from A-Z a-z 0-9 _ . -`),
			p(8, "upstreams[0].tools.overrides.c.name", `"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..." is not a valid tool name: use 1 to 64 characters from A-Z a-z 0-9 _ . -`),
			p(9, "upstreams[0].tools.overrides.d.title", "empty: remove the key to keep the upstream's title"),
			p(9, "upstreams[0].tools.overrides.d.description", "empty: remove the key to keep the upstream's description"),
			p(10, "upstreams[0].tools.overrides.", "an empty name matches no tool: write the tool's name as the upstream lists it"),
			p(12, "upstreams[0].tools.overrides.g.name", `clients would see "fs__nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...", 65 characters, and hosts cap tool names at 64: choose a name of at most 60 characters`),
		}},
		{"a long name is fine unprefixed", "upstreams:\n  - name: fs\n    command: ./fs\n    prefix: \"\"\n    tools: {overrides: {a: {name: " + strings.Repeat("x", 64) + "}}}\n", nil},
		{"the length with the prefix is not checked when the separator is invalid", "separator: \"/\"\nupstreams:\n  - name: fs\n    command: ./fs\n    tools: {overrides: {a: {name: " + strings.Repeat("x", 64) + "}}}\n", []config.Problem{
			p(1, "separator", `"/" is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __`),
		}},
		{"the length counts a custom prefix and separator", "separator: \".\"\nupstreams:\n  - name: fs\n    command: ./fs\n    prefix: files\n    prompts: {overrides: {a: {name: " + strings.Repeat("x", 59) + "}}}\n", []config.Problem{
			p(6, "upstreams[0].prompts.overrides.a.name", `clients would see "files.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...", 65 characters, and hosts cap prompt names at 64: choose a name of at most 58 characters`),
		}},
		{"overrides the filter drops", `upstreams:
  - name: fs
    command: ./fs
    tools:
      include: ["read_*", list_directory]
      exclude: ["*_dangerous"]
      overrides:
        read_file: {name: read}
        read_dangerous: {name: rd}
        write_file: {title: Write}
    prompts:
      include: []
      overrides:
        summarize: {name: sum}
`, []config.Problem{
			p(9, "upstreams[0].tools.overrides.read_dangerous", `this override never applies, the filter drops "read_dangerous": exclude[0] "*_dangerous" matches it; remove the override, or change the filter to keep the tool`),
			p(10, "upstreams[0].tools.overrides.write_file", `this override never applies, the filter drops "write_file": no pattern of include matches it; remove the override, or change the filter to keep the tool`),
			p(14, "upstreams[0].prompts.overrides.summarize", `this override never applies, the filter drops "summarize": include is empty, which keeps nothing; remove the override, or change the filter to keep the prompt`),
		}},
		{"a filter with a bad pattern is not used to judge overrides", `upstreams:
  - name: fs
    command: ./fs
    tools: {include: ["[x"], overrides: {write_file: {name: w}}}
`, []config.Problem{
			p(4, "upstreams[0].tools.include[0]", `"[x" has a [ without its closing ]: write \[ for a literal bracket`),
		}},
		{"new names clash within an upstream", `upstreams:
  - name: fs
    command: ./fs
    tools:
      overrides:
        read_text_file: {name: read}
        read_media_file: {name: read}
        list_directory: {name: ls}
        ls: {title: Lists}
        a: {name: b}
        b: {name: a}
        c: {name: c}
    prompts:
      overrides:
        read_text_file: {name: read}
`, []config.Problem{
			p(7, "upstreams[0].tools.overrides.read_media_file.name", `"read" is also the new name of tool "read_text_file" (line 6): give each its own name`),
			p(8, "upstreams[0].tools.overrides.list_directory.name", `"ls" is the name of another tool of this upstream, which keeps it (its override on line 9 sets no new name): choose another name, or rename that tool too`),
		}},
		{"exposed names clash across upstreams", `upstreams:
  - name: fs
    command: ./fs
    tools:
      overrides:
        read_text_file: {name: read}
        search: {title: Search}
    prompts:
      overrides:
        p: {name: read}
  - name: local
    command: ./local
    prefix: ""
    tools:
      overrides:
        a: {name: fs__read}
        fs__search: {title: Also search}
        b: {name: fs__search}
    prompts:
      overrides:
        q: {name: fs__other}
  - name: files
    command: ./files
    prefix: fs
    enabled: false
`, []config.Problem{
			p(16, "upstreams[1].tools.overrides.a.name", `clients would see "fs__read" for this tool and for tool "read_text_file" of upstreams[0] "fs" (line 6): choose another name`),
			p(18, "upstreams[1].tools.overrides.b.name", `"fs__search" is the name of another tool of this upstream, which keeps it (its override on line 17 sets no new name): choose another name, or rename that tool too`),
			p(24, "upstreams[2].prefix", `prefix "fs" is also the prefix of upstreams[0] "fs" (line 2): give one of them a distinct prefix`),
		}},
		{"a renamed tool clashes with a named one of another upstream", `upstreams:
  - name: local
    command: ./local
    prefix: ""
    tools: {overrides: {fs__read: {title: Read}}}
  - name: fs
    command: ./fs
    tools: {overrides: {read_text_file: {name: read}}}
`, []config.Problem{
			p(8, "upstreams[1].tools.overrides.read_text_file.name", `clients would see "fs__read" for this tool and for tool "fs__read" of upstreams[0] "local" (line 5): choose another name`),
		}},
		{"the earlier is reported when the later keeps its name", `upstreams:
  - name: fs
    command: ./fs
    tools: {overrides: {read_text_file: {name: read}}}
  - name: local
    command: ./local
    prefix: ""
    tools: {overrides: {fs__read: {title: Read}}}
`, []config.Problem{
			p(4, "upstreams[0].tools.overrides.read_text_file.name", `clients would see "fs__read" for this tool and for tool "fs__read" of upstreams[1] "local" (line 8): choose another name`),
		}},
		{"tools and prompts have their own names", `upstreams:
  - name: fs
    command: ./fs
    tools: {overrides: {a: {name: x}}}
    prompts: {overrides: {b: {name: x}}}
`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), nil)
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

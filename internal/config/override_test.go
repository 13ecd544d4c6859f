package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestOverrideImported: the main use of overrides, settings of the gateway for a server of
// a host's list, which cannot carry them.
func TestOverrideImported(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "gw.yaml", `upstreams:
  - name: github
    command: ./github
overrides:
  - name: filesystem
    isolation: session
    prefix: files
    dir: work
    env: {ROOT: /srv}
    enabled: false
    tools:
      exclude: ["write_*"]
      overrides:
        read_text_file: {name: read, annotations: {readOnlyHint: true}}
    resources: {include: ["file:///srv/*"]}
  - name: notes
    request_timeout: 5s
`)
	claude := writeFile(t, dir, "claude.json", `{"mcpServers": {
  "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"], "env": {"HOME": "/home/me"}},
  "other": {"command": "other"}
}}`)
	vscode := writeFile(t, dir, "vscode.json", `{"servers": {"notes": {"type": "http", "url": "https://notes.example.com/mcp"}}}`)

	got, err := config.Build(cfg, []string{claude, vscode}, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := []config.Upstream{
		configUpstream(cfg, config.Upstream{Name: "github", Command: filepath.Join(dir, "github"), Prefix: "github", RequestTimeout: time.Minute, Enabled: true, Line: 2}),
		imported(claude, config.Upstream{
			Name: "filesystem", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-filesystem"},
			Env: map[string]string{"ROOT": "/srv"}, Dir: filepath.Join(dir, "work"), Transport: "stdio",
			Isolation: "session", Prefix: "files", Enabled: false,
			Tools: config.Shaping{
				Filter: config.Filter{Exclude: []string{"write_*"}},
				Overrides: map[string]config.ItemOverride{
					"read_text_file": {Name: "read", Annotations: map[string]bool{"readOnlyHint": true}, Line: 14},
				},
			},
			Resources: config.Filter{Include: []string{"file:///srv/*"}},
			Line:      2,
		}),
		imported(claude, config.Upstream{Name: "other", Command: "other", Transport: "stdio", Enabled: true, Line: 3}),
		imported(vscode, config.Upstream{Name: "notes", URL: "https://notes.example.com/mcp", Transport: "streamable-http", RequestTimeout: 5 * time.Second, Enabled: true, Line: 1}),
	}
	if diff := cmp.Diff(want, got.Upstreams); diff != "" {
		t.Errorf("upstreams mismatch (-want +got):\n%s", diff)
	}
}

// TestOverrideConfigUpstream: an override of an upstream of the config file itself sets the
// keys it has, replacing lists and mappings whole, and leaves the others, defaults included.
func TestOverrideConfigUpstream(t *testing.T) {
	const yaml = `upstreams:
  - name: a
    command: ./a
    args: [one]
    env: {A: "1", B: "2"}
    inherit_env: all
    request_timeout: 5s
    isolation: principal
    tools: {include: ["x_*"], exclude: [x_y]}
  - name: b
    command: ./b
    enabled: false
  - name: c
    command: ./c
overrides:
  - name: a
    args: [two, three]
    env: {C: "3"}
    inherit_env: [HOME]
    tools: {exclude: [x_z]}
    enabled: false
  - name: b
    prefix: bee
    max_connections: 3
  - name: c
`
	got, err := config.Parse("gw.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := withDefaults(
		config.Upstream{
			Name: "a", Command: "./a", Args: []string{"two", "three"}, Env: map[string]string{"C": "3"}, InheritEnv: []string{"HOME"},
			RequestTimeout: 5 * time.Second, Isolation: "principal", Prefix: "a", Enabled: false,
			Tools: config.Shaping{Filter: config.Filter{Exclude: []string{"x_z"}}}, // replaced whole
			Line:  2,
		},
		config.Upstream{Name: "b", Command: "./b", Prefix: "bee", MaxConnections: 3, RequestTimeout: time.Minute, Enabled: false, Line: 10},
		config.Upstream{Name: "c", Command: "./c", Prefix: "c", RequestTimeout: time.Minute, Enabled: true, Line: 13},
	)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestOverrideProblems(t *testing.T) {
	dir := t.TempDir()
	const (
		claude = `{"mcpServers": {
  "filesystem": {"command": "npx"},
  "fs": {"command": "fs"}
}}`
		vscode = `{"servers": {"notes": {"type": "http", "url": "https://notes.example.com/mcp"}}}`
	)
	tests := []struct {
		name    string
		config  string
		imports []string
		want    func(cfg string, imports []string) []config.Problem
	}{
		{
			name:    "names no upstream",
			config:  "upstreams:\n  - {name: a, command: ./a}\noverrides:\n  - name: filesytem\n    isolation: session\n",
			imports: []string{claude},
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{{File: cfg, Line: 4, Field: "overrides[0].name",
					Message: `"filesytem" names no upstream: use the name of one from upstreams or an imported server list (a, filesystem, fs)`}}
			},
		},
		{
			name:   "there are no upstreams",
			config: "overrides:\n  - {name: filesystem, isolation: session}\n",
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{{File: cfg, Line: 2, Field: "overrides[0].name",
					Message: `"filesystem" names no upstream, and there are none: add the upstream to upstreams, or import the server list that has it`}}
			},
		},
		{
			name:    "two overrides of one upstream, and one with no name",
			config:  "overrides:\n  - name: filesystem\n    isolation: session\n  - isolation: session\n  - name: filesystem\n    prefix: files\n",
			imports: []string{claude},
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{
					{File: cfg, Line: 4, Field: "overrides[1].name", Message: "required: the name of the upstream to change, from upstreams or an imported server list, like filesystem"},
					{File: cfg, Line: 5, Field: "overrides[2].name", Message: `"filesystem" has an override already, overrides[0] (line 2): merge the two into one entry`},
				}
			},
		},
		{
			name:    "keys an override cannot set",
			config:  "overrides:\n  - name: filesystem\n    command: uvx\n    url: https://x.example.com\n    transport: sse\n    isolaton: session\n",
			imports: []string{claude},
			want: func(cfg string, _ []string) []config.Problem {
				const refused = "an override cannot change which server an upstream is: remove %s here, and edit the server's own entry if it must change"
				return []config.Problem{
					{File: cfg, Line: 3, Field: "overrides[0].command", Message: strings.ReplaceAll(refused, "%s", "command")},
					{File: cfg, Line: 4, Field: "overrides[0].url", Message: strings.ReplaceAll(refused, "%s", "url")},
					{File: cfg, Line: 5, Field: "overrides[0].transport", Message: strings.ReplaceAll(refused, "%s", "transport")},
					{File: cfg, Line: 6, Field: "overrides[0].isolaton", Message: "unknown field (known: name, args, env, inherit_env, dir, headers, credentials, trust_annotations, pinning, protocol, input_bridge, prefix, request_timeout, initialize_timeout, max_response_bytes, isolation, isolation_idle_timeout, max_connections, attribution_window, enabled, include_instructions, broadcast_logs, tools, prompts, resources, resource_templates)"},
				}
			},
		},
		{
			name:   "wrong shapes",
			config: "upstreams: []\noverrides: {name: a}\n",
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{{File: cfg, Line: 2, Field: "overrides", Message: "want a list of overrides (lines starting with `- name:`, the upstream to change), got a mapping"}}
			},
		},
		{
			name:   "an entry that is not a mapping",
			config: "upstreams: []\noverrides:\n  - filesystem\n  - name: [a]\n",
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{
					{File: cfg, Line: 3, Field: "overrides[0]", Message: "want a mapping with `name:`, the upstream to change, and the keys to set, like {name: filesystem, isolation: session}, got a single value"},
					{File: cfg, Line: 4, Field: "overrides[1].name", Message: "want a string, got a list"},
				}
			},
		},
		{
			name: "values an override sets are checked where it sets them",
			config: `overrides:
  - name: filesystem
    isolation: bogus
    headers: {Authorization: x}
    request_timeout: 0s
    tools:
      include: ["[x"]
      overrides:
        read: {name: "r d"}
  - name: notes
    args: [-y]
    env: {"A=B": c}
    max_response_bytes: 1MiB
`,
			imports: []string{claude, vscode},
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{
					{File: cfg, Line: 3, Field: "overrides[0].isolation", Message: `"bogus" is not an isolation mode: use shared, principal or session`},
					{File: cfg, Line: 4, Field: "overrides[0].headers", Message: "headers are for HTTP upstreams (with url): remove them, or pass values to the command through env"},
					{File: cfg, Line: 5, Field: "overrides[0].request_timeout", Message: "must be greater than 0, like 60s"},
					{File: cfg, Line: 7, Field: "overrides[0].tools.include[0]", Message: `"[x" has a [ without its closing ]: write \[ for a literal bracket`},
					{File: cfg, Line: 9, Field: "overrides[0].tools.overrides.read.name", Message: `"r d" is not a valid tool name: use 1 to 64 characters from A-Z a-z 0-9 _ . -`},
					{File: cfg, Line: 11, Field: "overrides[1].args", Message: "only for a stdio upstream (with command): remove it from this HTTP upstream"},
					{File: cfg, Line: 12, Field: "overrides[1].env", Message: "only for a stdio upstream (with command): remove it from this HTTP upstream"},
					{File: cfg, Line: 12, Field: "overrides[1].env.A=B", Message: "not a valid environment variable name: it must be non-empty, without = or NUL"},
					{File: cfg, Line: 13, Field: "overrides[1].max_response_bytes", Message: `want a whole number like 1000, got "1MiB"`},
				}
			},
		},
		{
			name:    "a prefix an override sets is that prefix, not the server key",
			config:  "upstreams:\n  - {name: github, command: ./gh}\noverrides:\n  - name: filesystem\n    prefix: github\n  - name: fs\n    prefix: a__b\n",
			imports: []string{claude},
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{
					{File: cfg, Line: 5, Field: "overrides[0].prefix", Message: `prefix "github" is also the prefix of upstreams[0] "github" (` + cfg + `:2): give one of them a distinct prefix`},
					{File: cfg, Line: 7, Field: "overrides[1].prefix", Message: `prefix "a__b" clashes with the separator "__": in "a__b__tool" the separator is found too early; choose another prefix or separator`},
				}
			},
		},
		{
			name:    "an override can settle a clash of prefixes",
			config:  "upstreams:\n  - {name: files, command: ./f, prefix: fs}\noverrides:\n  - {name: fs, prefix: fs2}\n",
			imports: []string{claude},
		},
		{
			name:    "the length of a new name counts the prefix the override sets",
			config:  "overrides:\n  - name: fs\n    prefix: " + strings.Repeat("p", 32) + "\n    tools: {overrides: {a: {name: " + strings.Repeat("n", 32) + "}}}\n",
			imports: []string{claude},
			want: func(cfg string, _ []string) []config.Problem {
				return []config.Problem{{File: cfg, Line: 4, Field: "overrides[0].tools.overrides.a.name",
					Message: `clients would see "` + strings.Repeat("p", 32) + `__nnnnnn...", 66 characters, and hosts cap tool names at 64: choose a name of at most 30 characters`}}
			},
		},
		{
			name:    "renames of imported servers clash",
			config:  "overrides:\n  - {name: fs, prefix: \"\", tools: {overrides: {x: {name: filesystem__read}}}}\n  - {name: filesystem, tools: {overrides: {read_text_file: {name: read}}}}\n",
			imports: []string{claude},
			want: func(cfg string, imports []string) []config.Problem {
				// Reported at the later upstream, as for names and prefixes.
				return []config.Problem{{File: cfg, Line: 2, Field: "overrides[0].tools.overrides.x.name",
					Message: `clients would see "filesystem__read" for this tool and for tool "read_text_file" of mcpServers.filesystem "filesystem" (line 3): choose another name`}}
			},
		},
		{
			name:    "problems of the entry stay at the entry",
			config:  "overrides:\n  - {name: filesystem, isolation: session}\n",
			imports: []string{`{"mcpServers": {"filesystem": {"url": "ftp://x"}}}`},
			want: func(_ string, imports []string) []config.Problem {
				return []config.Problem{{File: imports[0], Line: 1, Field: "mcpServers.filesystem.url", Message: `scheme "ftp" is not supported: want an absolute http or https URL, like https://mcp.example.com/mcp`}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeFile(t, dir, "gw.yaml", tt.config)
			var imports []string
			for i, data := range tt.imports {
				imports = append(imports, writeFile(t, dir, "import"+string(rune('a'+i))+".json", data))
			}
			_, err := config.Build(cfg, imports, nil)
			var want []config.Problem
			if tt.want != nil {
				want = tt.want(cfg, imports)
			}
			checkProblems(t, "Build", err, want)
		})
	}
}

// TestOverrideProblemInParse: without imports, an override of an upstream of the config file
// is checked where it is written too.
func TestOverrideProblemInParse(t *testing.T) {
	const yaml = "upstreams:\n  - name: a\n    url: https://a.example.com/mcp\n    isolation: session\noverrides:\n  - name: a\n    isolation: bogus\n    inherit_env: all\n"
	_, err := config.Parse("gw.yaml", []byte(yaml), nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse error = %v, want a *config.Error", err)
	}
	want := []config.Problem{
		{File: "gw.yaml", Line: 7, Field: "overrides[0].isolation", Message: `"bogus" is not an isolation mode: use shared, principal or session`},
		{File: "gw.yaml", Line: 8, Field: "overrides[0].inherit_env", Message: "only for a stdio upstream (with command): remove it from this HTTP upstream"},
	}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

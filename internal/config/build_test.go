package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

var (
	buildConfig = filepath.Join("testdata", "build", "gw.yaml")
	buildClaude = filepath.Join("testdata", "build", "claude.json")
	buildVSCode = filepath.Join("testdata", "build", "vscode.json")
	buildClash  = filepath.Join("testdata", "build", "clash.json")
)

func TestBuild(t *testing.T) {
	got, err := config.Build(buildConfig, []string{buildClaude, buildVSCode}, env(map[string]string{"SEARCH_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := &config.Config{
		File:                   buildConfig,
		Listen:                 "127.0.0.1:8700",
		Separator:              "__",
		LogLevel:               "info",
		LogFormat:              "text",
		Tracing:                config.Tracing{SampleRatio: 1, ServiceName: "manifold"},
		AllowedOrigins:         loopbackOrigins,
		MaxBodyBytes:           4194304,
		BodyReadTimeout:        30 * time.Second,
		StreamAfter:            time.Second,
		StreamRetention:        time.Minute,
		DrainTimeout:           10 * time.Second,
		FirstListWait:          5 * time.Second,
		HTTPIdleTimeout:        2 * time.Minute,
		MaxSessions:            1000,
		SessionIdleTimeout:     30 * time.Minute,
		MaxBatchEntries:        64,
		MaxCallsPerSession:     64,
		MaxCallsPerPrincipal:   256,
		MaxListensPerPrincipal: 16,
		MaxCalls:               4096,
		PageSize:               100,
		Audit:                  config.Audit{Sink: "off", Buffer: 4096},
		SessionStore:           config.SessionStore{Type: "memory", KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
		Auth:                   config.Auth{Resource: "http://127.0.0.1:8700/mcp", MaxSessionsPerPrincipal: 64, MaxSessionsPerAddress: 125},
		Policy:                 config.Policy{Default: "allow", SharedLimitFailure: "open", Approval: config.Approval{Timeout: 2 * time.Minute, By: "auto"}},

		MaxConnectionsPerAddress: 1000,
		SessionEvictIdle:         5 * time.Minute,
		Upstreams: []config.Upstream{
			configUpstream(buildConfig, config.Upstream{
				Name: "github", Command: mustAbs(t, filepath.Join(filepath.Dir(buildConfig), "github-mcp")), Prefix: "github", RequestTimeout: time.Minute, Enabled: true, Line: 3,
			}),
			configUpstream(buildConfig, config.Upstream{
				Name: "search", URL: "https://search.example.com/mcp", Transport: "auto",
				Headers: map[string]string{"Authorization": "Bearer s3cret"},
				Prefix:  "search", RequestTimeout: time.Minute, Enabled: true, Line: 5,
			}),
			imported(buildClaude, config.Upstream{
				Name: "filesystem", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-filesystem"},
				Transport: "stdio", Enabled: true, Line: 3,
			}),
			imported(buildVSCode, config.Upstream{
				Name: "notes", URL: "https://notes.example.com/mcp", Transport: "streamable-http", Enabled: true, Line: 3,
			}),
		},

		StreamBudgetBytes:   64 << 20,
		EventLogBudgetBytes: 256 << 20,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Build mismatch (-want +got):\n%s", diff)
	}
}

func TestBuildWithoutConfigFile(t *testing.T) {
	got, err := config.Build("", []string{buildClaude, buildVSCode}, nil)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := withDefaults()
	want.File = buildClaude // named by the first import
	want.Upstreams = []config.Upstream{
		imported(buildClaude, config.Upstream{
			Name: "filesystem", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-filesystem"},
			Transport: "stdio", Enabled: true, Line: 3,
		}),
		imported(buildVSCode, config.Upstream{
			Name: "notes", URL: "https://notes.example.com/mcp", Transport: "streamable-http", Enabled: true, Line: 3,
		}),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Build mismatch (-want +got):\n%s", diff)
	}
}

// TestBuildReportsAllProblems checks that Build reports the problems of
// every file at once, the config file's first, and that a clash across files
// names both places.
func TestBuildReportsAllProblems(t *testing.T) {
	_, err := config.Build(buildConfig, []string{buildClaude, buildClash}, nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Build error = %v, want a *config.Error", err)
	}
	want := []config.Problem{
		{File: buildConfig, Line: 9, Field: "upstreams[1].headers.Authorization", Message: "environment variable SEARCH_TOKEN is not set: set it, or give a default with ${SEARCH_TOKEN:-default}"},
		{File: buildClash, Line: 4, Field: "mcpServers.github", Message: `"github" is also the name of upstreams[0] (` + buildConfig + `:3): names must be unique; rename one of them`},
		{File: buildClash, Line: 5, Field: "mcpServers.filesystem", Message: `"filesystem" is also the name of mcpServers.filesystem (` + buildClaude + `:3): names must be unique; rename one of them`},
	}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

func TestBuildProblems(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		config  string // "" for no config file
		imports []string
		want    func(cfg string, imports []string) []config.Problem
	}{
		{
			name:    "prefix clash across files",
			config:  "upstreams:\n  - {name: filesystem, command: x, prefix: fs}\n",
			imports: []string{"{\"mcpServers\": {\n\"fs\": {\"command\": \"y\"}}}"},
			want: func(cfg string, imports []string) []config.Problem {
				return []config.Problem{{File: imports[0], Line: 2, Field: "mcpServers.fs",
					Message: `prefix "fs" (taken from the server key) is also the prefix of upstreams[0] "filesystem" (` + cfg + `:2): rename the server, or give the other a distinct prefix`}}
			},
		},
		{
			name:    "name and prefix clashes across three files",
			config:  "upstreams:\n  - {name: a, command: x, prefix: b}\n",
			imports: []string{"{\"mcpServers\": {\"b\": {\"command\": \"y\"}}}", "{\"servers\": {\n\n\"b\": {\"command\": \"z\"}}}"},
			want: func(cfg string, imports []string) []config.Problem {
				return []config.Problem{
					{File: imports[0], Line: 1, Field: "mcpServers.b", Message: `prefix "b" (taken from the server key) is also the prefix of upstreams[0] "a" (` + cfg + `:2): rename the server, or give the other a distinct prefix`},
					{File: imports[1], Line: 3, Field: "servers.b", Message: `"b" is also the name of mcpServers.b (` + imports[0] + `:1): names must be unique; rename one of them`},
				}
			},
		},
		{
			name:    "separator checked against imports",
			imports: []string{"{\"mcpServers\": {\"my__server\": {\"command\": \"y\"}}}"},
			want: func(cfg string, imports []string) []config.Problem {
				return []config.Problem{{File: imports[0], Line: 1, Field: "mcpServers.my__server",
					Message: `prefix "my__server" (taken from the server key) clashes with the separator "__": in "my__server__tool" the separator is found too early; rename the server, or choose another separator`}}
			},
		},
		{
			name:    "separator from the config",
			config:  "separator: \".\"\n",
			imports: []string{"{\"mcpServers\": {\"my__server\": {\"command\": \"y\"}}}"},
		},
		{
			name:    "a broken config file does not hide the imports' problems",
			config:  "upstreams: [\n",
			imports: []string{"{\"mcpServers\": {\"my__server\": {\"command\": \"y\"},\n\"a\": {}}}"},
			want: func(cfg string, imports []string) []config.Problem {
				return []config.Problem{
					{File: cfg, Line: 1, Message: "not valid YAML: did not find expected node content (check indentation and quoting)"},
					// The separator is unknown: no clash is reported.
					{File: imports[0], Line: 2, Field: "mcpServers.a.command", Message: "required: set command, the program to start for a stdio upstream, or url, the endpoint of an HTTP upstream"},
				}
			},
		},
		{
			name:    "an empty config file is still a problem",
			config:  "# nothing\n",
			imports: []string{"{\"mcpServers\": {}}"},
			want: func(cfg string, imports []string) []config.Problem {
				return []config.Problem{{File: cfg, Message: "empty config: add at least `upstreams: []` (the gateway can start with no upstreams)"}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg string
			if tt.config != "" {
				cfg = writeFile(t, dir, "gw.yaml", tt.config)
			}
			var imports []string
			for i, data := range tt.imports {
				imports = append(imports, writeFile(t, dir, "import"+string(rune('a'+i))+".json", data))
			}
			c, err := config.Build(cfg, imports, nil)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				return
			}
			if c != nil {
				t.Errorf("Build returned a Config along with an error")
			}
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Build error = %v, want a *config.Error", err)
			}
			if diff := cmp.Diff(tt.want(cfg, imports), cerr.Problems); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildIOErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := config.Build(filepath.Join(dir, "absent.yaml"), []string{buildClaude, filepath.Join(dir, "absent.json")}, nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Build error = %v, want one wrapping fs.ErrNotExist", err)
	}
	var cerr *config.Error
	if errors.As(err, &cerr) {
		t.Errorf("Build error is a *config.Error; want I/O errors")
	}
	if joined, ok := err.(interface{ Unwrap() []error }); !ok || len(joined.Unwrap()) != 2 {
		t.Errorf("Build error = %v, want one error per missing file (2)", err)
	}

	if _, err := config.Build("", nil, nil); err == nil {
		t.Errorf("Build with no files: got no error")
	}
}

// mustAbs is path made absolute, as Build makes a relative command of a config file.
func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// TestRelativePathsResolveAgainstTheConfigFile: a config read from disk means its relative
// dir and command paths from where it lies, not from wherever the gateway was started.
func TestRelativePathsResolveAgainstTheConfigFile(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "conf", "gw.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	text := `upstreams:
  - name: here
    command: ./bin/server
  - name: within
    command: ./server
    dir: work
  - name: onpath
    command: mcp-server
    dir: ../elsewhere
  - name: absolute
    command: /opt/server
    dir: /srv
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(root, "conf")
	want := map[string][2]string{ // command, dir
		"here":     {filepath.Join(base, "bin", "server"), ""},
		"within":   {filepath.Join(base, "work", "server"), filepath.Join(base, "work")},
		"onpath":   {"mcp-server", filepath.Join(root, "elsewhere")},
		"absolute": {"/opt/server", "/srv"},
	}
	for _, u := range cfg.Upstreams {
		if got := [2]string{u.Command, u.Dir}; got != want[u.Name] {
			t.Errorf("%s: command, dir = %q, want %q", u.Name, got, want[u.Name])
		}
	}
}

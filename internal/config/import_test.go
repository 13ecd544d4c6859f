package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// imported returns u, read from file, with the defaults Import gives every
// upstream filled in where u leaves them zero; Prefix defaults to Name.
// Enabled is left as given.
func imported(file string, u config.Upstream) config.Upstream {
	if u.Prefix == "" {
		u.Prefix = u.Name
	}
	if u.RequestTimeout == 0 {
		u.RequestTimeout = time.Minute
	}
	if u.InitializeTimeout == 0 {
		u.InitializeTimeout = 30 * time.Second
	}
	if u.MaxResponseBytes == 0 {
		u.MaxResponseBytes = 16 << 20
	}
	if u.Isolation == "" {
		u.Isolation = "shared"
	}
	if u.Pinning == "" {
		u.Pinning = "off"
	}
	if u.Protocol == "" {
		u.Protocol = "2025-11-25"
	}
	if u.InputBridge == "" {
		u.InputBridge = "park"
	}
	if u.IsolationIdleTimeout == 0 {
		u.IsolationIdleTimeout = 5 * time.Minute
	}
	if u.MaxConnections == 0 {
		u.MaxConnections = 100
	}
	if u.AttributionWindow == 0 {
		u.AttributionWindow = 2 * time.Second
	}
	u.File = file
	return u
}

func TestImportFiles(t *testing.T) {
	vars := env(map[string]string{
		"GITHUB_TOKEN": "ghp_test",
		"LINEAR_TOKEN": "lin_test",
		"HOME":         "/home/me",
		"GH_TOKEN":     "gho_test",
	})
	claude := filepath.Join("testdata", "import", "claude_desktop.json")
	cursor := filepath.Join("testdata", "import", "cursor.json")
	vscode := filepath.Join("testdata", "import", "vscode.jsonc")
	tests := []struct {
		file string
		want []config.Upstream
	}{
		{claude, []config.Upstream{
			imported(claude, config.Upstream{
				Name: "filesystem", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"},
				Transport: "stdio", Enabled: true, Line: 3,
			}),
			imported(claude, config.Upstream{
				Name: "github", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-github"},
				Env:       map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_test"},
				Transport: "stdio", Enabled: true, Line: 7,
			}),
			imported(claude, config.Upstream{
				Name: "sqlite-db", Command: "uvx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"mcp-server-sqlite", "--db-path", "/tmp/test.db"},
				Transport: "stdio", Enabled: false, Line: 14,
			}),
		}},
		{cursor, []config.Upstream{
			imported(cursor, config.Upstream{
				Name: "linear", URL: "https://mcp.linear.app/mcp", Headers: map[string]string{"Authorization": "Bearer lin_test"},
				Transport: "streamable-http", Enabled: true, Line: 3,
			}),
			imported(cursor, config.Upstream{
				Name: "legacy", URL: "http://localhost:8931/sse", Transport: "sse", Enabled: true, Line: 9,
			}),
			imported(cursor, config.Upstream{
				Name: "local", Command: "node", Args: []string{"server.js"}, Env: map[string]string{"PORT": "3000"},
				Transport: "stdio", Enabled: true, Line: 10,
			}),
		}},
		{vscode, []config.Upstream{
			imported(vscode, config.Upstream{
				Name: "memory", Command: "npx", FirstInitializeTimeout: 2 * time.Minute, Args: []string{"-y", "@modelcontextprotocol/server-memory", "src/**/*.json"},
				Env: map[string]string{"MEMORY_FILE": "/home/me/memory.json", "RETRIES": "3"}, Dir: "/srv/memory",
				Transport: "stdio", Enabled: true, Line: 9,
			}),
			imported(vscode, config.Upstream{
				Name: "github-remote", URL: "https://api.githubcopilot.com/mcp/", Headers: map[string]string{"Authorization": "Bearer gho_test"},
				Transport: "streamable-http", Enabled: true, Line: 16,
			}),
			imported(vscode, config.Upstream{
				Name: "old-sse", URL: "http://127.0.0.1:9000/sse", Transport: "sse", Enabled: true, Line: 21,
			}),
			imported(vscode, config.Upstream{
				Name: "inferred", URL: "https://example.com/mcp", Transport: "streamable-http", Enabled: true, Line: 22,
			}),
		}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			got, err := config.Import(tt.file, vars)
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Import mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImport(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		name string
		json string
		env  map[string]string
		want []config.Upstream // File is set by the test
	}{
		{"empty list", `{"mcpServers": {}}`, nil, nil},
		{"null list", `{"mcpServers": null}`, nil, nil},
		{"null values count as absent", `{"mcpServers": {"a": {"command": "x", "args": null, "env": null, "url": null, "type": null, "disabled": null}}}`, nil, []config.Upstream{
			{Name: "a", Command: "x", Transport: "stdio", Enabled: true, Line: 1},
		}},
		{"both lists, in file order", "{\n\"servers\": {\"v\": {\"url\": \"https://v.example.com\"}},\n\"mcpServers\": {\"c\": {\"command\": \"c\"}}\n}", nil, []config.Upstream{
			{Name: "v", URL: "https://v.example.com", Transport: "streamable-http", Enabled: true, Line: 2},
			{Name: "c", Command: "c", Transport: "stdio", Enabled: true, Line: 3},
		}},
		{"type names", `{"mcpServers": {
"a": {"type": "http", "url": "https://a.example.com"},
"b": {"type": "streamableHttp", "url": "https://b.example.com"},
"c": {"type": "streamable-http", "url": "https://c.example.com"},
"d": {"type": "sse", "url": "https://d.example.com"},
"e": {"type": "stdio", "command": "e"}}}`, nil, []config.Upstream{
			{Name: "a", URL: "https://a.example.com", Transport: "streamable-http", Enabled: true, Line: 2},
			{Name: "b", URL: "https://b.example.com", Transport: "streamable-http", Enabled: true, Line: 3},
			{Name: "c", URL: "https://c.example.com", Transport: "streamable-http", Enabled: true, Line: 4},
			{Name: "d", URL: "https://d.example.com", Transport: "sse", Enabled: true, Line: 5},
			{Name: "e", Command: "e", Transport: "stdio", Enabled: true, Line: 6},
		}},
		{"keys made into names", `{"mcpServers": {
"Ünïcode/ser ver": {"command": "x"},
"` + long + `": {"command": "x"},
"my__server": {"command": "x"}}}`, nil, []config.Upstream{
			{Name: "-n-code-ser-ver", Command: "x", Transport: "stdio", Enabled: true, Line: 2},
			{Name: long[:64], Prefix: long[:32], Command: "x", Transport: "stdio", Enabled: true, Line: 3},
			// The separator belongs to the config: Build checks it.
			{Name: "my__server", Command: "x", Transport: "stdio", Enabled: true, Line: 4},
		}},
		{"disabled false", `{"mcpServers": {"a": {"command": "x", "disabled": false}}}`, nil, []config.Upstream{
			{Name: "a", Command: "x", Transport: "stdio", Enabled: true, Line: 1},
		}},
		{"variables", `{"servers": {"a": {"command": "${env:BIN}", "args": ["${A}", "${NOPE:-d}", "$$x", "${env:NOPE:-e}"]}}}`, map[string]string{"BIN": "/bin/srv", "A": "1"}, []config.Upstream{
			{Name: "a", Command: "/bin/srv", Args: []string{"1", "d", "$x", "e"}, Transport: "stdio", Enabled: true, Line: 1},
		}},
		{"byte order mark and comments everywhere", "\xEF\xBB\xBF/* a */ {// b\n\"mcpServers\" /* c */ : { \"a\" : {\"command\": \"x//y\", \"args\": [\"/*z*/\"]} /* d */ , } , }\n// e", nil, []config.Upstream{
			{Name: "a", Command: "x//y", Args: []string{"/*z*/"}, Transport: "stdio", Enabled: true, Line: 2},
		}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, dir, "list.json", tt.json)
			got, err := config.Import(path, env(tt.env))
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			var want []config.Upstream
			for _, u := range tt.want {
				want = append(want, imported(path, u))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Import mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestImportProblems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "list.json")
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: file, Line: line, Field: field, Message: msg}
	}
	a41, a42 := strings.Repeat("a", 40)+"1", strings.Repeat("a", 40)+"2"
	tests := []struct {
		name string
		json string
		env  map[string]string
		want []config.Problem
	}{
		// The file as a whole.
		{"empty file", " \n", nil, []config.Problem{
			p(0, "", `empty file: want a JSON object with "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code)`),
		}},
		{"no server list", "{\n  \"preferences\": {}\n}\n", nil, []config.Problem{
			p(0, "", `no "mcpServers" or "servers" object: this is not a server list of Claude Desktop, Cursor or VS Code`),
		}},
		{"top level is an array", "\n[]", nil, []config.Problem{
			p(2, "", `want a JSON object with "mcpServers" (Claude Desktop, Cursor) or "servers" (VS Code), got an array`),
		}},
		{"missing comma", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n    \"b\": {}\n  }\n}\n", nil, []config.Problem{
			p(4, "", `not valid JSON: invalid character '"' after object key:value pair (check commas, quotes and brackets)`),
		}},
		{"unclosed brace", "{\n  \"mcpServers\": {\n", nil, []config.Problem{
			p(2, "", "not valid JSON: unexpected end of file (a bracket, brace or quote is not closed)"),
		}},
		{"unclosed comment", "{\n  /* no end\n  \"mcpServers\": {}\n}\n", nil, []config.Problem{
			p(2, "", "not valid JSON: a /* comment is not closed: end it with */"),
		}},
		{"text after the object", "{\"mcpServers\": {}}\n{}", nil, []config.Problem{
			p(2, "", "not valid JSON: more text after the end of the top-level value"),
		}},
		{"nested too deep", `{"x": ` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `, "mcpServers": {}}`, nil, []config.Problem{
			p(1, "", "not valid here: arrays and objects nested more than 200 deep"),
		}},
		{"list that is not an object", "{\n\"mcpServers\": [{\"command\": \"x\"}]}", nil, []config.Problem{
			p(2, "mcpServers", `want an object of servers by name, like {"github": {"command": "npx"}}, got an array`),
		}},
		{"duplicate list", "{\"servers\": {},\n\"servers\": {}}", nil, []config.Problem{
			p(2, "servers", "duplicate key, first set on line 1: remove one of them"),
		}},

		// Servers.
		{"duplicate server key", "{\"mcpServers\": {\n\"a\": {\"command\": \"x\"},\n\"a\": {\"command\": \"y\"}}}", nil, []config.Problem{
			p(3, "mcpServers.a", "duplicate server key, first on line 2: remove one of them"),
		}},
		{"duplicate field", "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"command\": \"y\"}}}", nil, []config.Problem{
			p(2, "mcpServers.a.command", "duplicate key, first set on line 1: remove one of them"),
		}},
		{"keys that make the same name", "{\"mcpServers\": {\n\"my server\": {\"command\": \"x\"},\n\"my-server\": {\"command\": \"y\"},\n\"my.server\": {\"command\": \"z\"}}}", nil, []config.Problem{
			p(3, "mcpServers.my-server", `"my-server" is also the name of mcpServers."my server" (line 2): names must be unique; rename one of them`),
			p(4, `mcpServers."my.server"`, `"my-server" (made from the server key "my.server") is also the name of mcpServers."my server" (line 2): names must be unique; rename one of them`),
		}},
		{"long keys that make the same prefix", "{\"mcpServers\": {\n\"" + a41 + "\": {\"command\": \"x\"},\n\"" + a42 + "\": {\"command\": \"y\"}}}", nil, []config.Problem{
			p(3, "mcpServers."+a42, `prefix "`+strings.Repeat("a", 32)+`" (taken from the server key) is also the prefix of mcpServers.`+a41+` "`+a41+`" (line 2): rename one of them`),
		}},
		{"empty key", "{\"mcpServers\": {\n\"\": {\"command\": \"x\"}}}", nil, []config.Problem{
			p(2, `mcpServers.""`, "an empty server key cannot name an upstream: rename the server (1 to 64 characters from A-Z a-z 0-9 _ -)"),
		}},
		{"server that is a string", "{\"mcpServers\": {\n\"a\": \"npx a\"}}", nil, []config.Problem{
			p(2, "mcpServers.a", `want an object with "command" (a program to start) or "url" (an HTTP server), got a string`),
		}},
		{"no command or url", "{\"mcpServers\": {\n\"a\": {\"args\": []}}}", nil, []config.Problem{
			p(2, "mcpServers.a.command", "required: set command, the program to start for a stdio upstream, or url, the endpoint of an HTTP upstream"),
		}},
		{"type that does not fit", "{\"mcpServers\": {\n\"a\": {\"type\": \"http\", \"command\": \"x\"},\n\"b\": {\"type\": \"stdio\", \"url\": \"https://b.example.com\"}}}", nil, []config.Problem{
			p(2, "mcpServers.a.type", `type "http" needs "url", and this server has "command": use "stdio", or remove "type"`),
			p(3, "mcpServers.b.type", `type "stdio" needs "command", and this server has "url": use "http" or "sse", or remove "type"`),
		}},
		{"stdio fields with url", "{\"mcpServers\": {\"a\": {\"url\": \"https://a.example.com\",\n\"env\": {},\n\"cwd\": \"/tmp\"}}}", nil, []config.Problem{
			p(2, "mcpServers.a.env", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
			p(3, "mcpServers.a.cwd", "only for a stdio upstream (with command): remove it from this HTTP upstream"),
		}},
		{"headers with command", "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"headers\": {\"A\": \"b\"}}}}", nil, []config.Problem{
			p(2, "mcpServers.a.headers", "headers are for HTTP upstreams (with url): remove them, or pass values to the command through env"),
		}},
		{"header values", "{\"mcpServers\": {\"a\": {\"url\": \"https://a.example.com\", \"headers\": {\n\"X-Key\": \"${K}\",\n\"x-key\": \"b\",\n\"X-Num\": 1}}}}", map[string]string{"K": "a\nb"}, []config.Problem{
			p(2, "mcpServers.a.headers.X-Key", "the value holds a line break or NUL, which an HTTP header cannot carry (the value is not shown)"),
			p(3, "mcpServers.a.headers.x-key", `same header as "X-Key" (header names are case-insensitive): keep one`),
			p(4, "mcpServers.a.headers.X-Num", "want a string, got a number"),
		}},
		{"url without host", "{\"mcpServers\": {\"a\": {\"url\": \"https:///mcp?key=secret\"}}}", nil, []config.Problem{
			p(1, "mcpServers.a.url", "no host: want an absolute http or https URL, like https://mcp.example.com/mcp"),
		}},
		{"env value null", "{\"servers\": {\"a\": {\"command\": \"x\", \"env\": {\n\"A\": null}}}}", nil, []config.Problem{
			p(2, "servers.a.env.A", "want a string, got null"),
		}},

		// Variables.
		{"unset variables", "{\"servers\": {\"a\": {\"command\": \"x\", \"env\": {\n\"A\": \"${TOKEN}\",\n\"B\": \"${env:KEY}\"}}}}", nil, []config.Problem{
			p(2, "servers.a.env.A", "environment variable TOKEN is not set: set it, or give a default with ${TOKEN:-default}"),
			p(3, "servers.a.env.B", "environment variable KEY is not set: set it, or give a default with ${KEY:-default}"),
		}},
		{"editor variables", "{\"servers\": {\"a\": {\"command\": \"x\",\n\"cwd\": \"${workspaceFolder}\",\n\"args\": [\"${config:editor.fontSize}\", \"${input:key}\", \"${env:}\"]}}}", nil, []config.Problem{
			p(2, "servers.a.cwd", `"${workspaceFolder}" is an editor variable the gateway cannot resolve: write the value, or ${env:NAME}`),
			p(3, "servers.a.args[0]", `"${config:editor.fontSize}" is an editor variable the gateway cannot resolve: write the value, or ${env:NAME}`),
			p(3, "servers.a.args[1]", `"${input:key}" asks the editor to prompt for a value, which the gateway cannot do: write ${env:NAME} instead and set NAME`),
			p(3, "servers.a.args[2]", `"${env:}" is not a variable reference: write ${NAME} or ${NAME:-default}, or $$ for a literal $`),
		}},
		{"editor variable names are environment variables outside servers", "{\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"cwd\": \"${workspaceFolder}\"}}}", nil, []config.Problem{
			p(2, "mcpServers.a.cwd", "environment variable workspaceFolder is not set: set it, or give a default with ${workspaceFolder:-default}"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, dir, "list.json", tt.json)
			ups, err := config.Import(file, env(tt.env))
			if ups != nil {
				t.Errorf("Import returned upstreams along with an error")
			}
			var cerr *config.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("Import error = %v, want a *config.Error", err)
			}
			if diff := cmp.Diff(tt.want, cerr.Problems); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestImportInvalidGolden pins the text of Error for a VS Code file with many
// problems. Run with -update to rewrite testdata/import/invalid.golden.
func TestImportInvalidGolden(t *testing.T) {
	path := filepath.Join("testdata", "import", "invalid.jsonc")
	_, err := config.Import(path, nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Import error = %v, want a *config.Error", err)
	}
	checkGolden(t, filepath.Join("testdata", "import", "invalid.golden"), cerr.Error()+"\n")
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("Error() mismatch (-want +got):\n%s", diff)
	}
}

func TestImportMissingFile(t *testing.T) {
	_, err := config.Import(filepath.Join(t.TempDir(), "absent.json"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Import error = %v, want one wrapping fs.ErrNotExist", err)
	}
}

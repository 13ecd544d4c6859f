package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// TestCallCommand runs gateway call against a gateway that serves the demo (this test binary
// as "@self") behind an API key, with a policy rule and a profile.
func TestCallCommand(t *testing.T) {
	const key = "mfk_call-test-key"
	addr := freePort(t)
	cfg, err := config.Parse("call.yaml", fmt.Appendf(nil, `
listen: %s
auth:
  api_keys: [{name: tester, hash: %q}]
upstreams:
  - {name: demo, command: "@self", args: [demo], env: {%[3]s: %[4]s}}
  - name: notes
    command: "@self"
    args: [demo, -name, notes]
    env: {%[3]s: %[4]s}
    tools: {include: [echo], overrides: {echo: {name: say, description: "Say it back.\nA second line."}}}
profiles:
  - name: lean
    include: [{upstream: demo, tools: [demo__echo]}]
policy:
  rules:
    - {name: no-deletes, effect: deny, reason: deleting is off here, match: {tools: [delete_note]}}
`, addr, auth.HashAPIKey(key), testupstream.EnvRun, testupstream.Marker), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := serveConfig(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", g.logs.String())
		}
	})
	t.Setenv(envAPIKey, key)
	waitFor(t, "demo__echo to answer through gateway call", func() bool {
		return run([]string{"call", "-url", g.url, "demo__echo", `{"text":"ready"}`}, new(bytes.Buffer), new(bytes.Buffer)) == 0
	})

	tests := []struct {
		name       string
		key        string // MANIFOLD_API_KEY; "" unsets it
		args       []string
		wantCode   int
		wantStdout []string
		wantStderr []string
		notStdout  []string
	}{
		{"list", key, []string{"-url", g.url}, 0,
			[]string{"demo__echo          Return the given text unchanged.\n", "notes__say          Say it back.\n"},
			nil, []string{"A second line", "notes__echo"}},
		{"list of a profile", key, []string{"-url", g.url + "/lean"}, 0,
			[]string{"demo__echo  Return the given text unchanged.\n"}, nil, []string{"demo__add"}},
		{"call", key, []string{"-url", g.url, "notes__say", `{"text": "hello there"}`}, 0,
			[]string{"hello there\n"}, nil, nil},
		{"call without arguments", key, []string{"-url", g.url, "demo__current_time"}, 0,
			[]string{"Z\n"}, nil, nil},
		{"tool error", key, []string{"-url", g.url, "demo__current_time", `{"timezone": "Nowhere/Land"}`}, 1,
			nil, []string{`unknown time zone "Nowhere/Land"`}, nil},
		{"denied by policy", key, []string{"-url", g.url, "demo__delete_note", `{"id": "7"}`}, 1,
			nil, []string{`deleting is off here (rule "no-deletes")`}, nil},
		{"unknown tool", key, []string{"-url", g.url, "demo__nope"}, 1,
			nil, []string{"gateway call: unknown tool: demo__nope"}, nil},
		{"missing key", "", []string{"-url", g.url}, 1,
			nil, []string{"requires a credential (HTTP 401)", "set MANIFOLD_API_KEY"}, nil},
		{"wrong key", "mfk_wrong", []string{"-url", g.url}, 1,
			nil, []string{"did not accept the credential in MANIFOLD_API_KEY (HTTP 401: unknown API key)"}, nil},
		{"no such endpoint", key, []string{"-url", g.url + "/nope"}, 1,
			nil, []string{"no MCP endpoint at " + g.url + "/nope (HTTP 404)"}, nil},
		{"nothing listening", key, []string{"-url", "http://" + freePort(t) + "/mcp"}, 1,
			nil, []string{"is the gateway running? start it with `gateway serve"}, nil},
		{"arguments that are not an object", key, []string{"-url", g.url, "demo__echo", `["hi"]`}, 2,
			nil, []string{"are not a JSON object"}, nil},
		{"too many arguments", key, []string{"-url", g.url, "demo__echo", `{}`, "extra"}, 2,
			nil, []string{`unexpected argument "extra"`}, nil},
		{"a flag after the tool", key, []string{"demo__echo", "-url", g.url}, 2,
			nil, []string{"flag -url after the tool's name: put the flags first"}, nil},
		{"a URL that is not one", key, []string{"-url", "127.0.0.1:8080"}, 2,
			nil, []string{"want the gateway's MCP endpoint"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envAPIKey, tc.key)
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"call"}, tc.args...), &stdout, &stderr); code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			for _, unwanted := range tc.notStdout {
				if strings.Contains(stdout.String(), unwanted) {
					t.Errorf("stdout has %q:\n%s", unwanted, stdout.String())
				}
			}
		})
	}
}

// TestPrintResult: text is printed as it is, other content in one line each, structured
// content as JSON when there is no text.
func TestPrintResult(t *testing.T) {
	size := int64(3)
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{"text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "one"}, &mcp.TextContent{Text: "two\n"}}}, "one\ntwo\n"},
		{"text wins over structured", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"sum":5}`}}, StructuredContent: map[string]any{"sum": 5}}, "{\"sum\":5}\n"},
		{"structured only", &mcp.CallToolResult{StructuredContent: map[string]any{"sum": 5}}, "{\n  \"sum\": 5\n}\n"},
		{"other kinds", &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.ImageContent{MIMEType: "image/png", Data: []byte("png")},
			&mcp.AudioContent{MIMEType: "audio/wav", Data: []byte("wav!")},
			&mcp.ResourceLink{URI: "file:///a.txt", Name: "a", Size: &size},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///b.txt", MIMEType: "text/plain", Text: "b"}},
		}}, "[image: image/png, 3 bytes]\n[audio: audio/wav, 4 bytes]\n[resource link: file:///a.txt]\n[resource: file:///b.txt, text/plain]\n"},
		{"nothing", &mcp.CallToolResult{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			printResult(&out, tc.res)
			if out.String() != tc.want {
				t.Errorf("printed %q, want %q", out.String(), tc.want)
			}
		})
	}
}

package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

const testPluginSum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParsePlugins(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`plugins:
  - name: guard
    path: /opt/manifold/guard
    sha256: `+testPluginSum+`
    config:
      block: ["(?i)password", 'rm -rf']
      defaults: {limit: 10, ratio: 0.5, deep: true, none: null, token: "${TOKEN}"}
    upstreams: [github]
    tools: ["delete_*"]
    methods: [tools/call, prompts/get]
    timeout: 250ms
    failure: fail_open
    env: {GUARD_MODE: strict}
  - {name: bare, path: /opt/manifold/bare, sha256: `+testPluginSum+`}
upstreams: []
`), env(map[string]string{"TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Plugin{
		{Name: "guard", Path: "/opt/manifold/guard", SHA256: testPluginSum,
			Config:  []byte(`{"block":["(?i)password","rm -rf"],"defaults":{"deep":true,"limit":10,"none":null,"ratio":0.5,"token":"s3cret"}}`),
			Methods: []string{"tools/call", "prompts/get"}, Upstreams: []string{"github"}, Tools: []string{"delete_*"},
			Timeout: 250 * time.Millisecond, Failure: "fail_open", Env: map[string]string{"GUARD_MODE": "strict"}, Line: 2},
		{Name: "bare", Path: "/opt/manifold/bare", SHA256: testPluginSum, Methods: []string{"tools/call"}, Timeout: time.Second, Failure: "fail_closed", Line: 14},
	}
	if diff := cmp.Diff(want, c.Plugins); diff != "" {
		t.Errorf("plugins (-want +got):\n%s", diff)
	}
}

func TestPluginProblems(t *testing.T) {
	_, err := config.Parse("gw.yaml", []byte(`plugins:
  - {path: "", sha256: ABC, methods: [tools/list], timeout: 0s, failure: maybe, upstreams: ["[a"]}
  - {name: x, path: /p, sha256: `+testPluginSum+`}
  - {name: x, path: /p, sha256: `+testPluginSum+`, config: {token: "${MISSING}"}}
upstreams: []
`), env(nil))
	if err == nil {
		t.Fatal("no problems")
	}
	for _, want := range []string{
		"gw.yaml:2: plugins[0].name: required",
		"gw.yaml:2: plugins[0].path: required",
		"gw.yaml:2: plugins[0].sha256: required: the executable's SHA-256",
		`gw.yaml:2: plugins[0].methods[0]: "tools/list": a plugin sees tools/call, prompts/get, resources/read or completion/complete`,
		"gw.yaml:2: plugins[0].timeout: must be greater than 0",
		`gw.yaml:2: plugins[0].failure: "maybe": use fail_closed`,
		"gw.yaml:2: plugins[0].upstreams[0]:",
		`gw.yaml:4: plugins[2].name: "x" names another plugin too`,
		"gw.yaml:4: plugins[2].config.token:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the problems lack %q:\n%v", want, err)
		}
	}
}

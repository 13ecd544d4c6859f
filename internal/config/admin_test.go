package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

const testAdminHash = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseAdmin(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`state_dir: /var/lib/manifold
admin:
  listen: 127.0.0.1:8081
  api_keys: [{name: ops, hash: "`+testAdminHash+`"}]
  allowed_origins: ["https://ops.example.com"]
  webhook: https://hooks.example.com/manifold
policy:
  approval: {by: operator, remember_any_arguments: true, allow_self_approval: true}
upstreams:
  - {name: a, command: x, pinning: withhold}
  - {name: b, command: x}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Admin{Listen: "127.0.0.1:8081", APIKeys: []config.APIKey{{Name: "ops", Hash: testAdminHash}},
		AllowedOrigins: []string{"https://ops.example.com"}, Webhook: "https://hooks.example.com/manifold", File: "gw.yaml", Line: 3}
	if diff := cmp.Diff(want, c.Admin); diff != "" {
		t.Errorf("admin (-want +got):\n%s", diff)
	}
	if c.StateDir != "/var/lib/manifold" || c.Policy.Approval.By != "operator" || !c.Policy.Approval.RememberAnyArguments || !c.Policy.Approval.AllowSelfApproval {
		t.Errorf("state_dir %q, approval %+v", c.StateDir, c.Policy.Approval)
	}
	if c.Upstreams[0].Pinning != "withhold" || c.Upstreams[1].Pinning != "off" {
		t.Errorf("pinning %q %q, want withhold and the default off", c.Upstreams[0].Pinning, c.Upstreams[1].Pinning)
	}
}

func TestAdminProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	tests := []struct {
		name string
		yaml string
		want []config.Problem
	}{
		{"nobody can sign in", "admin:\n  listen: 127.0.0.1:8081\nupstreams: []\n", []config.Problem{
			p(1, "admin", "admin.listen is set but nobody can sign in: add api_keys (made by `gateway apikey -name ops`) or roles (with auth.oidc)"),
		}},
		{"settings without a listener", "admin:\n  roles: [ops]\npolicy:\n  approval: {by: operator}\nupstreams: []\n", []config.Problem{
			p(2, "admin.roles", "has no effect without admin.listen: set the admin listener's address, like 127.0.0.1:8081"),
			p(4, "policy.approval.by", "operator needs the admin API, where operators decide: set admin.listen, like 127.0.0.1:8081"),
		}},
		{"the MCP listener's port", "listen: 127.0.0.1:8080\nadmin:\n  listen: 127.0.0.1:8080\n  api_keys: [{name: ops, hash: \"" + testAdminHash + "\"}]\nupstreams: []\n", []config.Problem{
			p(3, "admin.listen", "is the MCP listener's address too: the admin API needs a port of its own, like 127.0.0.1:8081"),
		}},
		{"roles need issuers; bad keys, origins and webhook", "admin:\n  listen: 127.0.0.1:8081\n  roles: [ops]\n  api_keys: [{name: \"\", hash: x}]\n  allowed_origins: [\"ops.example.com\"]\n  webhook: hooks\nupstreams: []\n", []config.Problem{
			p(3, "admin.roles", "needs auth.oidc: the roles are read from tokens of its issuers"),
			p(4, "admin.api_keys[0].name", "required: the admin's name, which the audit trail shows"),
			p(4, "admin.api_keys[0].hash", "not a key hash: want sha256: and 64 lower-case hex digits; `gateway apikey` makes a key and its hash (never put the key itself here)"),
			p(5, "admin.allowed_origins[0]", `"ops.example.com" is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path`),
			p(6, "admin.webhook", `"hooks" is not an absolute http(s) URL, like https://mcp.example.com`),
		}},
		{"pins settings", "pins:\n  meta: [com.example/ui, \"\"]\n  forget_after: 0s\nupstreams: []\n", []config.Problem{
			p(2, "pins.meta[1]", "is empty: name a key of the tools' _meta, like com.example/ui"),
			p(3, "pins.forget_after", "must be greater than 0, like 720h: how long the pin of a tool its upstream no longer lists is kept"),
		}},
		{"pinning and approval values", "policy:\n  approval: {by: anyone}\nupstreams:\n  - {name: a, command: x, pinning: strict}\n", []config.Problem{
			p(2, "policy.approval.by", `"anyone": use auto (the client's user when it can be asked, else an operator) or operator`),
			p(4, "upstreams[0].pinning", `"strict" is not a pinning mode: use withhold, log or off`),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml), env(nil))
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}

// TestParsePins: the _meta keys pinned and how long a missing tool's pin is kept; the
// default is 30 days.
func TestParsePins(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte("pins:\n  meta: [com.example/ui]\n  forget_after: 48h\nupstreams: []\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Pins{Meta: []string{"com.example/ui"}, ForgetAfter: 48 * time.Hour}); !cmp.Equal(want, c.Pins) || c.Pins.KeepMissing() != 48*time.Hour {
		t.Errorf("pins = %+v, want %+v", c.Pins, want)
	}
	c, err = config.Parse("gw.yaml", []byte("upstreams: []\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pins.KeepMissing(); got != 720*time.Hour {
		t.Errorf("the default time a missing tool's pin is kept: %v, want 720h", got)
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
)

// TestAuditRedactsSecretsByDefault: with audit.arguments on and no redact list, the values
// of members that name secrets (password, apiKey, access_token, ... at any depth, in any
// case and spelling) never reach a record; audit.redact_defaults: false keeps them, and a
// redact list adds to the defaults.
func TestAuditRedactsSecretsByDefault(t *testing.T) {
	args := map[string]any{
		"text":     "kept-text",
		"password": "hunter2",
		"account":  map[string]any{"apiKey": "k-123", "Access_Token": "at-456"},
		"headers":  []any{map[string]any{"Authorization": "Bearer b-789", "X-Trace": "kept-trace"}},
		"extra":    "e-000",
	}
	secrets := []string{"hunter2", "k-123", "at-456", "b-789"}
	run := func(auditYAML string) string {
		t.Helper()
		var out lockedBuffer
		trail := audit.New(&out, nil)
		t.Cleanup(func() { _ = trail.Close() })
		tg := startGateway(t, "listen: 127.0.0.1:0\naudit: "+auditYAML+"\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{Audit: trail})
		cs := connect(t, tg.url, nil)
		if _, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "a__echo", Arguments: args}); err != nil {
			t.Fatal(err)
		}
		_ = cs.Close()
		tg.close()
		if err := trail.Close(); err != nil {
			t.Fatal(err)
		}
		for _, rec := range auditLines(t, out.String()) {
			if rec["method"] == "tools/call" {
				return out.String()
			}
		}
		t.Fatalf("no record of the call:\n%s", out.String())
		return ""
	}

	defaults := run("{arguments: true}")
	for _, s := range secrets {
		if strings.Contains(defaults, s) {
			t.Errorf("with no redact list, the record holds the secret %q:\n%s", s, defaults)
		}
	}
	for _, kept := range []string{"kept-text", "kept-trace", "e-000"} {
		if !strings.Contains(defaults, kept) {
			t.Errorf("the record lost %q, which names no secret:\n%s", kept, defaults)
		}
	}

	added := run("{arguments: true, redact: [extra]}")
	for _, s := range append(secrets, "e-000") {
		if strings.Contains(added, s) {
			t.Errorf("with redact: [extra], the record holds %q (the list adds to the defaults):\n%s", s, added)
		}
	}

	off := run("{arguments: true, redact_defaults: false, redact: [password]}")
	if strings.Contains(off, "hunter2") {
		t.Errorf("redact_defaults: false with redact: [password]: the password is in the record:\n%s", off)
	}
	for _, s := range []string{"k-123", "at-456", "b-789"} {
		if !strings.Contains(off, s) {
			t.Errorf("redact_defaults: false: %q was redacted, want only the listed members:\n%s", s, off)
		}
	}
}

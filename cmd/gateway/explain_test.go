package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/auth"
)

// TestExplainTakesTheAPIKeysGroups: `gateway explain -api-key NAME` decides for the principal
// the running gateway authenticates with that key, groups and all, from auth.api_keys or
// auth.api_keys_file: a rule on the key's group applies, as it does when the key calls.
func TestExplainTakesTheAPIKeysGroups(t *testing.T) {
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, fmt.Appendf(nil, "- {name: filed, hash: %q, groups: [contractors]}\n", auth.HashAPIKey("mfk_filed")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`auth:
  api_keys:
    - {name: ci, hash: %q, groups: [contractors], roles: [builder]}
  api_keys_file: %s
upstreams:
  - {name: docs, command: x}
policy:
  rules:
    - name: contractors-no-delete
      effect: hide
      match: {principal: {groups: [contractors]}, tools: ["delete_*"]}
`, auth.HashAPIKey("mfk_ci"), keysFile))
	for _, key := range []string{"ci", "filed"} {
		var out, errOut bytes.Buffer
		code := run([]string{"explain", "-config", cfg, "-api-key", key, "-upstream", "docs", "-tool", "delete_all"}, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), "decision: hide by contractors-no-delete") || !strings.Contains(out.String(), "apikey:"+key) {
			t.Errorf("explain -api-key %s: exit %d, %s%s; want hide by the rule on the key's group", key, code, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), `groups ["contractors"]`) {
			t.Errorf("explain -api-key %s does not show the key's groups:\n%s", key, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"explain", "-config", cfg, "-api-key", "nobody", "-upstream", "docs", "-tool", "delete_all"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `no API key named "nobody"`) || !strings.Contains(errOut.String(), "ci, filed") {
		t.Errorf("explain -api-key of an unknown name: exit %d, %s%s; want 2 and the configured names", code, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"explain", "-config", cfg, "-api-key", "ci", "-groups", "eng", "-upstream", "docs", "-tool", "delete_all"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "-groups") {
		t.Errorf("explain -api-key with -groups: exit %d, %s%s; want 2: the key's groups are the config's", code, out.String(), errOut.String())
	}
}

// TestExplainRefusesASecretKey: a key itself given to -api-key, where its name belongs, is
// refused without being printed back: one of the configured keys (whose name it says to pass
// instead), or any value that looks like a key.
func TestExplainRefusesASecretKey(t *testing.T) {
	secret := "mfk_" + strings.Repeat("s3cr3t", 7)
	cfg := writeConfig(t, fmt.Sprintf(`auth:
  api_keys:
    - {name: ci, hash: %q, groups: [eng]}
upstreams:
  - {name: docs, command: x}
`, auth.HashAPIKey(secret)))
	for _, tt := range []struct{ value, want string }{
		{secret, "-api-key ci"},
		{"mfk_not-a-configured-key", "the key's name"},
	} {
		var out, errOut bytes.Buffer
		code := run([]string{"explain", "-config", cfg, "-api-key", tt.value, "-upstream", "docs", "-tool", "search"}, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("explain -api-key <a key>: exit %d, stderr %q; want 2, saying %q", code, errOut.String(), tt.want)
		}
		if strings.Contains(out.String()+errOut.String(), tt.value) {
			t.Errorf("explain printed the key it was given:\n%s%s", out.String(), errOut.String())
		}
	}
}

// TestValidateWarnsOfPathRegexpsWithoutPathForm: `gateway validate` warns of a rule whose
// regular expression reads an absolute path without path: true, and still passes the config;
// explain tells a path walked around as the rule read it.
func TestValidateWarnsOfPathRegexpsWithoutPathForm(t *testing.T) {
	cfg := writeConfig(t, `upstreams:
  - {name: fs, command: /bin/sh}
policy:
  rules:
    - name: no-system-paths
      effect: deny
      match: {tools: [read_file], arguments: [{pointer: /path, matches: "^/etc/"}]}
    - name: no-etc
      effect: deny
      match: {tools: [read_file], arguments: [{pointer: /path, path: true, matches: "^/etc(/|$)"}]}
`)
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "-config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("validate: exit %d, %s", code, errOut.String())
	}
	if w := errOut.String(); strings.Count(w, "warning:") != 1 || !strings.Contains(w, "gw.yaml:7: policy.rules[0].match.arguments[0].matches") || !strings.Contains(w, "add path: true") {
		t.Errorf("validate's warnings %q, want one for rule 0 saying to add path: true", w)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"explain", "-config", cfg, "-upstream", "fs", "-tool", "read_file", "-args", `{"path":"/tmp/../etc/passwd"}`}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), `no  no-system-paths (`+cfg+`:5): arguments: /path is "/tmp/../etc/passwd", which does not match "^/etc/"`) || !strings.Contains(out.String(), "decision: deny by no-etc") {
		t.Errorf("explain of a path walked around: exit %d:\n%s%s", code, out.String(), errOut.String())
	}
}

// TestExplainSaysWhatTheUpstreamGets: explain prints the arguments as the deciding rule
// cleaned their paths, as what the upstream gets; in dry run, the upstream gets them as sent,
// and explain says so.
func TestExplainSaysWhatTheUpstreamGets(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		cfg := writeConfig(t, fmt.Sprintf(`upstreams:
  - {name: fs, command: /bin/sh}
policy:
  dry_run: %t
  rules:
    - name: data
      effect: allow
      match: {tools: [read_file], arguments: [{pointer: /path, path: true, root: /srv/data, matches: "^/srv/data/"}]}
`, dryRun))
		var out, errOut bytes.Buffer
		if code := run([]string{"explain", "-config", cfg, "-upstream", "fs", "-tool", "read_file", "-args", `{"path":"notes/./a"}`}, &out, &errOut); code != 0 {
			t.Fatalf("explain: exit %d, %s", code, errOut.String())
		}
		want := `arguments the upstream gets, paths cleaned by data: {"path":"/srv/data/notes/a"}`
		if dryRun {
			want = `arguments as data cleaned their paths (in dry run the upstream gets them as sent): {"path":"/srv/data/notes/a"}`
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "decision: allow by data") {
			t.Errorf("explain, dry run %v:\n%s\nwant the line %s", dryRun, out.String(), want)
		}
	}
}

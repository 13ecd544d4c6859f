// Package archtest checks the shape of the module: that imports between its packages point one
// way (cmd → gateway → pipeline, hub, catalog, upstream, session, audit, config → protocol;
// catalog → upstream; pipeline → session), and that only the public face lives outside
// internal/, so that neither can erode unnoticed.
package archtest

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/manifold-mcp/manifold/"

// allowed lists, per package, the packages of this module it may import (tests aside).
var allowed = map[string][]string{
	"internal/protocol":          {},
	"internal/session":           {},
	"internal/config":            {"internal/glob"},
	"internal/glob":              {},
	"internal/audit":             {},
	"internal/tracing":           {"internal/protocol"},
	"upstream":                   {"internal/protocol", "internal/loglimit", "internal/modern"},
	"internal/catalog":           {"internal/protocol", "upstream", "internal/glob"},
	"gateway":                    {"internal/protocol", "internal/session", "internal/config", "upstream", "internal/catalog", "internal/glob", "internal/hub", "internal/pipeline", "internal/audit", "auth", "internal/auth/credential", "policy", "internal/policy/limit", "internal/loglimit", "internal/admin", "internal/approval", "internal/pin", "internal/loopback", "internal/policy/plugin", "internal/replica", "internal/admin/backend", "internal/backend", "internal/replicabus", "internal/modern", "internal/seal", "internal/tracing", "internal/metrics", "internal/grants", "internal/connect", "internal/oauthclient"},
	"internal/admin":             {"internal/loopback", "internal/grants"},
	"internal/admin/adminclient": {"internal/admin", "internal/grants"},
	"internal/admin/admintest":   {"internal/admin", "internal/grants"},
	"internal/admin/backend":     {"internal/admin", "internal/approval", "internal/audit", "internal/catalog", "internal/pin", "internal/session", "upstream", "internal/grants"},
	"internal/approval":          {"internal/pipeline"},
	"internal/replica":           {"internal/hub", "internal/protocol", "internal/session"},
	"internal/seal":              {},
	"internal/seal/sealtest":     {"internal/seal"},
	"internal/backend":           {"internal/config", "internal/session", "internal/hub", "internal/protocol", "internal/approval", "internal/pin", "internal/policy/limit", "internal/replicabus", "internal/seal", "internal/grants", "internal/connect"},
	"internal/replicabus":        {"internal/session"},
	"internal/pin":               {"internal/statefile"},
	"internal/grants":            {"internal/seal", "internal/statefile"},
	"internal/connect":           {"internal/grants", "internal/oauthclient", "internal/seal", "auth"},
	"internal/statefile":         {},
	"internal/pipeline":          {"internal/protocol", "internal/session", "internal/audit"},
	"auth":                       {"internal/session", "internal/pipeline"},
	"internal/auth/credential":   {"internal/session"},
	"policy":                     {"internal/config", "internal/glob", "internal/session", "internal/pipeline", "internal/protocol", "internal/audit", "internal/policy/principal"},
	"internal/policy/limit":      {"internal/config", "internal/glob", "internal/session", "internal/policy/principal"},
	"internal/policy/principal":  {"internal/config", "internal/glob", "internal/session"},
	"internal/hub":               {"internal/protocol"},
	"internal/modern":            {"internal/protocol"},
	"cmd/gateway":                {"internal/config", "gateway", "upstream", "internal/audit", "auth", "policy", "internal/pipeline", "internal/session", "internal/heapfloor", "internal/demo", "internal/backend", "internal/loglimit", "internal/tracing", "internal/admin", "internal/admin/adminclient", "internal/demo/issuer", "internal/grants"},
	"cmd/demo-server":            {"internal/demo"},
	"cmd/echo-server":            {},
	"cmd/mcpload":                {},
	"bench/sidebyside":           {},
	"bench/allowplugin":          {"plugin/sdk"},
	"internal/testupstream":      {"internal/testissuer"},
	"internal/archtest":          {},
	"internal/loglimit":          {},
	"internal/heapfloor":         {},
	"internal/demo":              {},
	"internal/demo/issuer":       {"internal/loopback"},
	"internal/testclock":         {},
	"internal/tcprelay":          {},
	"internal/session/storetest": {"internal/session", "internal/testclock"},
	"internal/testredis":         {"internal/testwait"},
	"internal/browser":           {},
	"internal/loopback":          {},
	"internal/testwait":          {},
	"internal/docpage":           {},
	"internal/metrics":           {"internal/protocol"},
	"internal/testissuer":        {"internal/loopback"},
	"internal/oauthclient":       {"internal/loopback"},

	// Policy plugins: the contract, the host, the SDK, and plugins built with it.
	"policy/pluginpb":        {},
	"internal/policy/plugin": {"plugin/sdk", "policy/pluginpb"},
	"plugin/sdk":             {"policy/pluginpb"},
	"examples/plugins/guard": {"plugin/sdk"},
	"internal/testplugin":    {"plugin/sdk"},
}

func TestImportsPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		for _, imp := range fields[1:] {
			if dep, ok := strings.CutPrefix(imp, module); ok {
				imports[pkg] = append(imports[pkg], dep)
			}
		}
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
	}
	if len(imports) < 8 {
		t.Errorf("checked only %d packages; is go list seeing the module?", len(imports))
	}
	for _, v := range violations(imports, allowed) {
		t.Error(v)
	}
}

// TestViolationsAreReported: the check itself fails on an edge the layering forbids, and on a
// package it has no rule for.
func TestViolationsAreReported(t *testing.T) {
	tests := []struct {
		name    string
		imports map[string][]string
		want    string
	}{
		{"upstream imports gateway", map[string][]string{"upstream": {"internal/protocol", "gateway"}}, "upstream imports gateway"},
		{"the hub holds sessions of the face", map[string][]string{"internal/hub": {"gateway"}}, "internal/hub imports gateway"},
		{"the replica layer reaches back into the gateway", map[string][]string{"internal/replica": {"internal/hub", "gateway"}}, "internal/replica imports gateway"},
		{"approvals reach back into the gateway", map[string][]string{"internal/approval": {"internal/pipeline", "gateway"}}, "internal/approval imports gateway"},
		{"the admin backend reaches back into the gateway", map[string][]string{"internal/admin/backend": {"internal/admin", "gateway"}}, "internal/admin/backend imports gateway"},
		{"protocol imports anything", map[string][]string{"internal/protocol": {"internal/session"}}, "internal/protocol imports internal/session"},
		{"a package without a rule", map[string][]string{"newpkg": nil}, "package newpkg has no import rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violations(tt.imports, allowed)
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Errorf("violations = %q, want one naming %q", got, tt.want)
			}
		})
	}
	if got := violations(map[string][]string{"gateway": {"internal/hub", "internal/pipeline", "internal/catalog"}}, allowed); len(got) != 0 {
		t.Errorf("allowed edges reported: %q", got)
	}
}

// violations lists the imports of this module's packages that rules does not allow.
func violations(imports map[string][]string, rules map[string][]string) []string {
	var out []string
	for pkg, deps := range imports {
		may, known := rules[pkg]
		if !known {
			out = append(out, fmt.Sprintf("package %s has no import rule here: add one", pkg))
			continue
		}
		for _, dep := range deps {
			if !slices.Contains(may, dep) {
				out = append(out, fmt.Sprintf("%s imports %s, which the layering forbids", pkg, dep))
			}
		}
	}
	slices.Sort(out)
	return out
}

// public lists the packages other modules may import: the face the project's founding card
// fixes (the binary, the gateway, upstream connections, policy and auth) and the plugin
// contract with its SDK. Everything else lives under internal/, where it can change freely.
var public = []string{
	"cmd/gateway", "gateway", "upstream", "policy", "auth",
	"policy/pluginpb", "plugin/sdk",
	// Programs and examples: importable by nobody, they are main packages.
	"cmd/demo-server", "cmd/echo-server", "cmd/mcpload",
	"bench/sidebyside", "bench/allowplugin", "examples/plugins/guard",
}

// TestPublicSurfaceStaysSmall: a new package goes under internal/ unless it is deliberately
// made part of the public face (added to public above, with a reason).
func TestPublicSurfaceStaysSmall(t *testing.T) {
	out, err := exec.Command("go", "list", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var outside []string
	for _, pkg := range strings.Fields(string(out)) {
		pkg = strings.TrimPrefix(pkg, module)
		if strings.HasPrefix(pkg, "internal/") {
			continue
		}
		outside = append(outside, pkg)
		if !slices.Contains(public, pkg) {
			t.Errorf("package %s is outside internal/: move it there, or add it to the public face with a reason", pkg)
		}
	}
	if len(outside) < 5 {
		t.Errorf("found only %d packages outside internal/ (%q); is go list seeing the module?", len(outside), outside)
	}
}

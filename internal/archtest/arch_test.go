// Package archtest checks that imports between Manifold's packages point one way (design.md:
// cmd → gateway → pipeline, hub, catalog, upstream, session, audit, config → protocol;
// catalog → upstream; pipeline → session), so that the layering cannot erode unnoticed.
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
	"protocol":              {},
	"session":               {},
	"config":                {"glob"},
	"glob":                  {},
	"audit":                 {},
	"upstream":              {"protocol", "internal/loglimit"},
	"catalog":               {"protocol", "upstream", "glob"},
	"gateway":               {"protocol", "session", "config", "upstream", "catalog", "glob", "hub", "pipeline", "audit", "auth", "auth/credential", "policy", "policy/limit", "internal/loglimit", "admin", "hold", "pin", "internal/loopback", "policy/plugin"},
	"admin":                 {"internal/loopback"},
	"hold":                  {},
	"pin":                   {},
	"pipeline":              {"protocol", "session", "audit"},
	"auth":                  {"session", "pipeline"},
	"auth/credential":       {"session"},
	"policy":                {"config", "glob", "session", "pipeline", "protocol", "audit", "policy/principal"},
	"policy/limit":          {"config", "glob", "session", "policy/principal"},
	"policy/principal":      {"config", "glob", "session"},
	"hub":                   {"protocol"},
	"cmd/gateway":           {"config", "gateway", "upstream", "audit", "auth", "policy", "pipeline", "session", "internal/heapfloor", "internal/demo"},
	"cmd/demo-server":       {"internal/demo"},
	"cmd/echo-server":       {},
	"cmd/mcpload":           {},
	"bench/sidebyside":      {},
	"bench/allowplugin":     {"plugin/sdk"},
	"internal/testupstream": {},
	"internal/archtest":     {},
	"internal/loglimit":     {},
	"internal/heapfloor":    {},
	"internal/demo":         {},
	"internal/testclock":    {},
	"internal/tcprelay":     {},
	"session/storetest":     {"session", "internal/testclock"},
	"internal/testredis":    {"internal/testwait"},
	"internal/browser":      {},
	"internal/loopback":     {},
	"internal/testwait":     {},
	"internal/testissuer":   {},

	// Policy plugins: the contract, the host, the SDK, and plugins built with it.
	"policy/pluginpb":        {},
	"policy/plugin":          {"plugin/sdk", "policy/pluginpb"},
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
		{"upstream imports gateway", map[string][]string{"upstream": {"protocol", "gateway"}}, "upstream imports gateway"},
		{"the hub holds sessions of the face", map[string][]string{"hub": {"gateway"}}, "hub imports gateway"},
		{"protocol imports anything", map[string][]string{"protocol": {"session"}}, "protocol imports session"},
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
	if got := violations(map[string][]string{"gateway": {"hub", "pipeline", "catalog"}}, allowed); len(got) != 0 {
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

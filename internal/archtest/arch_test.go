// Package archtest checks that imports between Manifold's packages point one way (design.md:
// cmd → gateway → catalog, upstream, session, config → protocol; catalog → upstream), so that
// the layering cannot erode unnoticed.
package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/manifold-mcp/manifold/"

// allowed lists, per package, the packages of this module it may import (tests aside).
var allowed = map[string][]string{
	"protocol":              {},
	"session":               {},
	"config":                {},
	"audit":                 {},
	"upstream":              {"protocol", "internal/loglimit"},
	"catalog":               {"protocol", "upstream"},
	"gateway":               {"protocol", "session", "config", "upstream", "catalog", "hub", "pipeline", "audit", "internal/loglimit"},
	"pipeline":              {"protocol", "session"},
	"hub":                   {"protocol"},
	"cmd/gateway":           {"config", "gateway", "upstream", "audit"},
	"cmd/demo-server":       {},
	"cmd/echo-server":       {},
	"cmd/mcpload":           {},
	"bench/sidebyside":      {},
	"internal/testupstream": {},
	"internal/archtest":     {},
	"internal/loglimit":     {},
	"internal/testclock":    {},
}

func TestImportsPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		may, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no import rule here: add one", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			ok := false
			for _, m := range may {
				ok = ok || m == dep
			}
			if !ok {
				t.Errorf("%s imports %s, which the layering forbids", pkg, dep)
			}
		}
	}
	if seen < 8 {
		t.Errorf("checked only %d packages; is go list seeing the module?", seen)
	}
}

package main

import (
	"bytes"
	"regexp"
	"slices"
	"testing"

	"github.com/manifold-mcp/manifold/internal/docpage"
)

const commandsDoc = "../../docs/commands.md"

// TestCommandsPage fails when docs/commands.md is not what the table of commands makes of
// it now.
func TestCommandsPage(t *testing.T) {
	docpage.Check(t, commandsDoc, []byte(commandsPage()), "go generate ./cmd/gateway/")
}

// flagLine is a flag in the help a flag set prints.
var flagLine = regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)

// TestUsageNamesEveryFlag fails when a command's synopsis leaves out a flag the command
// takes, unless the table says it is left out.
func TestUsageNamesEveryFlag(t *testing.T) {
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			c.run([]string{"-h"}, &stdout, &stderr)
			flags := flagLine.FindAllStringSubmatch(stderr.String(), -1)
			if c.name != "version" && len(flags) == 0 {
				t.Fatalf("gateway %s -h lists no flags:\n%s", c.name, stderr.String())
			}
			for _, f := range flags {
				named := regexp.MustCompile(`(^|[\[| ])-` + regexp.QuoteMeta(f[1]) + `\b`).MatchString(c.args)
				if !named && !slices.Contains(c.unlisted, f[1]) {
					t.Errorf("the usage of gateway %s leaves out -%s: add it to the command's arguments", c.name, f[1])
				}
			}
		})
	}
}

package config_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// TestSelfCommandRunsOnlyTheDemo: command "@self" starts the gateway's own program, for its
// demo server only: args [demo], with the demo's -name flag at most. Anything else after
// @self is refused, at the line that says it, so that "@self" cannot start another of the
// gateway's commands (serve, apikey, …) as an upstream.
func TestSelfCommandRunsOnlyTheDemo(t *testing.T) {
	good := `upstreams:
  - name: demo
    command: "@self"
    args: [demo]
  - name: notes
    command: "@self"
    args: [demo, -name, notes]
  - name: other
    command: "@self"
    args: [demo, --name=other]
`
	if _, err := config.Parse("gw.yaml", []byte(good), nil); err != nil {
		t.Fatalf("the demo through @self: %v", err)
	}

	const (
		noArgs  = `command "@self" runs this gateway's own program, for its demo server only: add args: [demo] (or [demo, -name, NAME])`
		notDemo = `after command "@self" only the demo server may be named: args: [demo], or [demo, -name, NAME]`
	)
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	bad := `upstreams:
  - name: bare
    command: "@self"
  - name: serve
    command: "@self"
    args: [serve, -config, other.yaml]
  - name: extra
    command: "@self"
    args: [demo, -name, x, -v]
  - name: dangling
    command: "@self"
    args: [demo, -name]
`
	_, err := config.Parse("gw.yaml", []byte(bad), nil)
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Parse = %v, want a *config.Error", err)
	}
	want := []config.Problem{
		p(3, "upstreams[0].command", noArgs),
		p(6, "upstreams[1].args", notDemo),
		p(9, "upstreams[2].args", notDemo),
		p(12, "upstreams[3].args", notDemo),
	}
	if diff := cmp.Diff(want, cerr.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

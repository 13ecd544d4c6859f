package gateway_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// TestStdioChildDoesNotSeeGatewaySecrets pins the fix for stdio children inheriting the
// gateway's whole environment: a token the gateway holds for one upstream (here one meant
// for an HTTP upstream's headers) was readable through any stdio server. A child now gets the
// base set, what its inherit_env names, and its own env; only inherit_env: all brings the
// rest.
func TestStdioChildDoesNotSeeGatewaySecrets(t *testing.T) {
	const (
		secret = "MANIFOLD_TEST_SECRET_TOKEN"
		listed = "MANIFOLD_TEST_LISTED"
		prefix = "MANIFOLD_TEST_PREFIXED_ONE"
		own    = "MANIFOLD_TEST_OWN"
	)
	t.Setenv(secret, "s3cret")
	t.Setenv(listed, "listed-value")
	t.Setenv(prefix, "prefixed-value")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tg := startGateway(t, fmt.Sprintf(`listen: 127.0.0.1:0
upstreams:
  - name: narrow
    command: %[1]q
    env:
      %[2]s: env
      %[3]s: %[4]s
      %[5]s: own-value
    inherit_env: [%[6]s, "MANIFOLD_TEST_PREFIXED_*", GOCOVERDIR, GORACE]
  - name: wide
    command: %[1]q
    env: {%[2]s: env, %[3]s: %[4]s}
    inherit_env: all
`, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker, own, listed), nil)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	getenv := func(tool, name string) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"name": name}})
		if err != nil {
			t.Fatalf("%s %s: %v", tool, name, err)
		}
		if res.IsError {
			t.Fatalf("%s %s: tool error %q", tool, name, textOf(t, res))
		}
		return textOf(t, res)
	}

	for _, tt := range []struct{ tool, name, want string }{
		{"narrow__getenv", secret, secret + " is not set"},
		{"narrow__getenv", listed, listed + "=listed-value"},
		{"narrow__getenv", prefix, prefix + "=prefixed-value"},
		{"narrow__getenv", own, own + "=own-value"},
		{"narrow__getenv", "PATH", "PATH=" + os.Getenv("PATH")},
		{"wide__getenv", secret, secret + "=s3cret"},
	} {
		if got := getenv(tt.tool, tt.name); got != tt.want {
			t.Errorf("%s %s = %q, want %q", tt.tool, tt.name, got, tt.want)
		}
	}
}

// Command allowplugin is the benchmark's policy plugin: it allows every call and inspects no
// result, so that the gateway-plugin target measures what one Decide costs on the hot path.
package main

import (
	"context"

	"github.com/manifold-mcp/manifold/plugin/sdk"
)

type allow struct{}

func (allow) Decide(context.Context, *sdk.Call) (*sdk.Decision, error) { return sdk.Allow(), nil }

func main() { sdk.Serve(allow{}) }

package plugin

import (
	"context"
	"os/exec"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/manifold-mcp/manifold/plugin/sdk"
	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// The two benchmarks below ask the same plugin (internal/testplugin, Decide only, allowing
// everything) about the same call: BenchmarkDecide through the Host, BenchmarkBareRoundTrip
// through go-plugin's gRPC connection and the generated client alone. The difference is what
// the Host adds to a plugin's round trip (the wire form of the call, the per-call timeout,
// checking the answer, the Outcome).

func BenchmarkDecide(b *testing.B) {
	h, err := Start(context.Background(), []Spec{testSpec("t", `{}`)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	call := aCall(`{"q":"go","limit":10}`)
	b.ReportAllocs()
	for b.Loop() {
		out, err := h.Decide(ctx, call)
		if err != nil || out.Effect != Allow {
			b.Fatalf("Decide = %+v, %v", out, err)
		}
	}
}

func BenchmarkBareRoundTrip(b *testing.B) {
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  sdk.ProtocolVersion,
			MagicCookieKey:   sdk.MagicCookieKey,
			MagicCookieValue: sdk.MagicCookieValue,
		},
		Plugins:          goplugin.PluginSet{dispenseName: grpcClientPlugin{}},
		Cmd:              exec.Command(testpluginBin),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	defer client.Kill()
	proto, err := client.Client()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := proto.Dispense(dispenseName)
	if err != nil {
		b.Fatal(err)
	}
	rpc := pluginpb.NewPolicyPluginClient(raw.(*grpc.ClientConn))
	ctx := context.Background()
	if _, err := rpc.Configure(ctx, &pluginpb.ConfigureRequest{ConfigJson: []byte(`{}`)}); err != nil {
		b.Fatal(err)
	}
	call := aCall(`{"q":"go","limit":10}`)
	wire := call.toWire()
	b.ReportAllocs()
	for b.Loop() {
		d, err := rpc.Decide(ctx, wire)
		if err != nil || d.GetEffect() != pluginpb.Effect_EFFECT_ALLOW {
			b.Fatalf("Decide = %v, %v", d, err)
		}
	}
}

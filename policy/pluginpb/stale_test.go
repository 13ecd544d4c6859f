package pluginpb_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// protoPath is the name the .proto is compiled and registered under (buf.gen.yaml).
const protoPath = "policy/pluginpb/policy.proto"

// TestGeneratedCodeIsCurrent fails when policy.pb.go or policy_grpc.pb.go no longer match
// policy.proto: someone changed the contract without running scripts/protogen. It compiles
// the .proto in pure Go (no protoc or buf needed) and compares its descriptor with the one
// the generated code embeds, comments aside.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	compiler := protocompile.Compiler{
		SourceInfoMode: protocompile.SourceInfoStandard,
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				if path != protoPath {
					return nil, os.ErrNotExist
				}
				return os.Open("policy.proto")
			},
		}),
	}
	files, err := compiler.Compile(context.Background(), protoPath)
	if err != nil {
		t.Fatalf("compile policy.proto: %v", err)
	}
	fromSource := protodesc.ToFileDescriptorProto(files[0])
	comments := fromSource.GetSourceCodeInfo().GetLocation()
	if len(comments) == 0 {
		t.Fatal("compiled without source info: the comments cannot be checked")
	}
	fromSource.SourceCodeInfo = nil
	generated := protodesc.ToFileDescriptorProto(pluginpb.File_policy_pluginpb_policy_proto)
	generated.SourceCodeInfo = nil

	if diff := cmp.Diff(generated, fromSource, protocmp.Transform()); diff != "" {
		t.Fatalf("policy/pluginpb's generated code is stale: run scripts/protogen (-generated +policy.proto):\n%s", diff)
	}

	// The comments are the contract's documentation: the generated code must carry them
	// as they are now (the embedded descriptor has none).
	var code strings.Builder
	for _, name := range []string{"policy.pb.go", "policy_grpc.pb.go"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	for _, loc := range comments {
		for line := range strings.SplitSeq(loc.GetLeadingComments(), "\n") {
			if strings.TrimSpace(line) != "" && !strings.Contains(code.String(), "//"+line+"\n") {
				t.Fatalf("policy/pluginpb's generated code is stale: run scripts/protogen (it lacks the comment %q)", line)
			}
		}
	}

	// The gRPC stubs come from another generator: check that they serve the same methods.
	service := fromSource.GetService()[0]
	var methods []string
	for _, m := range service.GetMethod() {
		methods = append(methods, m.GetName())
	}
	var stubs []string
	for _, m := range pluginpb.PolicyPlugin_ServiceDesc.Methods {
		stubs = append(stubs, m.MethodName)
	}
	if pluginpb.PolicyPlugin_ServiceDesc.ServiceName != fromSource.GetPackage()+"."+service.GetName() || !cmp.Equal(stubs, methods) {
		t.Fatalf("policy_grpc.pb.go is stale: run scripts/protogen (it serves %s %v, policy.proto declares %v)",
			pluginpb.PolicyPlugin_ServiceDesc.ServiceName, stubs, methods)
	}
}

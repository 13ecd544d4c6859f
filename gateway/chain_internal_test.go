package gateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
)

// TestInspectedTarget: the chain's after steps see the results of the requests that address
// an upstream's item, and a task's result as its tool call's; not the gateway's own answers,
// a task's status or cancel, nor the creation of a task.
func TestInspectedTarget(t *testing.T) {
	up := &upstreamEntry{ns: &catalog.Namespace{Name: "tk"}}
	target := pipeline.Target{Kind: pipeline.Resource, Upstream: "tk", Exposed: "tk+file:///a", Original: "file:///a"}
	task := session.TaskRecord{ID: "mf-1", UpstreamID: "u-1", Tool: "job", Exposed: "tk__job"}
	tests := []struct {
		method string
		asTask bool
		want   *pipeline.Target
	}{
		{"tools/call", false, &target},
		{"tools/call", true, nil},
		{"resources/read", false, &target},
		{"prompts/get", false, &target},
		{"completion/complete", false, &target},
		{"tasks/result", false, &pipeline.Target{Kind: pipeline.Tool, Upstream: "tk", Exposed: "tk__job", Original: "job"}},
		{"tasks/get", false, nil},
		{"tasks/cancel", false, nil},
		{"tools/list", false, nil},
		{"resources/subscribe", false, nil},
		{"ping", false, nil},
	}
	for _, tt := range tests {
		res := &resolved{target: target, upstream: up, task: task, asTask: tt.asTask}
		if diff := cmp.Diff(tt.want, inspectedTarget(tt.method, res)); diff != "" {
			t.Errorf("%s (as a task: %v) (-want +got):\n%s", tt.method, tt.asTask, diff)
		}
	}
}

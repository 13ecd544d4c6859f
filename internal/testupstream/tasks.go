package testupstream

import (
	"context"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"
)

// serveTasks serves the "tasks" flavor over stdio: a mark3labs/mcp-go server (the go-sdk has
// no tasks) with tool "job" {text}, which must run as a task and completes with
// "done:<text>", and tool "now", which may not.
func serveTasks() error {
	s := mcpgoserver.NewMCPServer("test-tasks", "1.0.0",
		mcpgoserver.WithTaskCapabilities(true, true, true),
		mcpgoserver.WithToolCapabilities(true),
	)
	s.AddTaskTool(mcpgo.NewTool("job",
		mcpgo.WithDescription("a job that runs as a task"),
		mcpgo.WithTaskSupport(mcpgo.TaskSupportRequired),
		mcpgo.WithString("text"),
	), func(_ context.Context, req mcpgo.CallToolRequest) (*mcpgo.CreateTaskResult, error) {
		// mcp-go v1.2.1 runs a task under the context of the request that created it and
		// cancels that context once the request is answered, so a task that waits is
		// cancelled (server/request_handler.go); this job therefore finishes at once.
		return &mcpgo.CreateTaskResult{Content: []mcpgo.Content{mcpgo.NewTextContent("done:" + req.GetString("text", ""))}}, nil
	})
	s.AddTool(mcpgo.NewTool("now", mcpgo.WithDescription("answers at once")),
		func(context.Context, mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			return mcpgo.NewToolResultText("now"), nil
		})
	return mcpgoserver.ServeStdio(s)
}

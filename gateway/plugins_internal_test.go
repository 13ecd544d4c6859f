package gateway

import "testing"

// TestPluginSees: a plugin is asked about the methods its config names, and a task's result
// counts as its tool call's; without methods: (config's default, tools/call) it sees what it
// always saw: tool calls and task results.
func TestPluginSees(t *testing.T) {
	byDefault := []string{"tools/call"}
	others := []string{"prompts/get", "resources/read", "completion/complete"}
	tests := []struct {
		methods []string
		method  string
		want    bool
	}{
		{byDefault, "tools/call", true},
		{byDefault, "tasks/result", true},
		{byDefault, "prompts/get", false},
		{byDefault, "resources/read", false},
		{byDefault, "completion/complete", false},
		{others, "tools/call", false},
		{others, "tasks/result", false},
		{others, "prompts/get", true},
		{others, "resources/read", true},
		{others, "completion/complete", true},
		{others, "resources/subscribe", false},
	}
	for _, tt := range tests {
		if got := pluginSees(tt.methods, tt.method); got != tt.want {
			t.Errorf("methods %v, %s: sees %v, want %v", tt.methods, tt.method, got, tt.want)
		}
	}
}

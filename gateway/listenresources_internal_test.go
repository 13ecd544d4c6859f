package gateway

import "testing"

// TestCoversURI: a listen's subscription covers an update of its URI and of the resources
// below it in its path (mcp-2026-notes §1.8), not of a URI that merely begins the same way.
func TestCoversURI(t *testing.T) {
	tests := []struct {
		name, subscribed, updated string
		want                      bool
	}{
		{"the same URI", "file:///dir", "file:///dir", true},
		{"a sub-resource", "file:///dir", "file:///dir/a.txt", true},
		{"a sub-resource of a URI ending in a slash", "file:///dir/", "file:///dir/a.txt", true},
		{"a deeper sub-resource", "file:///dir", "file:///dir/sub/a.txt", true},
		{"a sibling with the same prefix", "file:///dir", "file:///dir2/a.txt", false},
		{"a longer name", "file:///a.txt", "file:///a.txt.bak", false},
		{"the parent", "file:///dir/a.txt", "file:///dir", false},
		{"another URI", "file:///watched.txt", "file:///linked.txt", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := coversURI(tt.subscribed, tt.updated); got != tt.want {
				t.Errorf("coversURI(%q, %q) = %v, want %v", tt.subscribed, tt.updated, got, tt.want)
			}
		})
	}
}

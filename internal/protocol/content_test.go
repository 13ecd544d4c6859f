package protocol

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMapContentBlocks(t *testing.T) {
	// upper replaces text blocks by a marker and leaves every other block alone.
	upper := func(b json.RawMessage) (json.RawMessage, bool) {
		if typ, _, _ := StringMember(b, "type"); typ != "text" {
			return b, false
		}
		return json.RawMessage(`{"type":"text","text":"X"}`), true
	}
	tests := []struct {
		name, result, want string
	}{
		{
			name:   "tool result content",
			result: `{"content":[{"type":"text","text":"a"},{"type":"image","data":"AA=="}],"isError":false}`,
			want:   `{"content":[{"type":"text","text":"X"},{"type":"image","data":"AA=="}],"isError":false}`,
		},
		{
			name:   "prompt messages keep their other members",
			result: `{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"a"}},{"role":"assistant","content":{"type":"audio"}}]}`,
			want:   `{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"X"}},{"role":"assistant","content":{"type":"audio"}}]}`,
		},
		{
			name:   "nothing changed keeps every byte",
			result: `{ "content" : [ {"type":"image"} ], "structuredContent": {"text":"a"} }`,
			want:   `{ "content" : [ {"type":"image"} ], "structuredContent": {"text":"a"} }`,
		},
		{
			name:   "content that is not an array is left alone",
			result: `{"content":"text"}`,
			want:   `{"content":"text"}`,
		},
		{
			name:   "no blocks at all",
			result: `{"contents":[{"uri":"file:///a","text":"a"}]}`,
			want:   `{"contents":[{"uri":"file:///a","text":"a"}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MapContentBlocks(json.RawMessage(tt.result), upper)
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("MapContentBlocks (-want +got):\n%s", diff)
			}
		})
	}
}

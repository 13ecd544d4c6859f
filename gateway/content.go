package gateway

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/protocol"
)

// blockFunc rewrites one content block, reporting whether it changed it.
type blockFunc func(block json.RawMessage) (json.RawMessage, bool)

// mapContentBlocks applies f to every content block of a tools/call result (content[]) and of
// a prompts/get result (messages[].content); members it does not change keep their bytes.
func mapContentBlocks(result json.RawMessage, f blockFunc) json.RawMessage {
	if content, ok, _ := protocol.Member(result, "content"); ok {
		var blocks []json.RawMessage
		if json.Unmarshal(content, &blocks) == nil {
			changed := false
			for i, b := range blocks {
				if out, ok := f(b); ok {
					blocks[i], changed = out, true
				}
			}
			if changed {
				result = setMarshalled(result, "content", blocks)
			}
		}
	}
	if messages, ok, _ := protocol.Member(result, "messages"); ok {
		var msgs []json.RawMessage
		if json.Unmarshal(messages, &msgs) == nil {
			changed := false
			for i, m := range msgs {
				block, ok, _ := protocol.Member(m, "content")
				if !ok {
					continue
				}
				if out, ok := f(block); ok {
					if nm, err := protocol.SetMember(m, "content", out); err == nil {
						msgs[i], changed = nm, true
					}
				}
			}
			if changed {
				result = setMarshalled(result, "messages", msgs)
			}
		}
	}
	return result
}

// setMarshalled sets obj's member key to v, marshalled; on failure obj is returned unchanged.
func setMarshalled(obj json.RawMessage, key string, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return obj
	}
	out, err := protocol.SetMember(obj, key, raw)
	if err != nil {
		return obj
	}
	return out
}

// dropToolFields removes the given fields from every tool of a tools/list page.
func dropToolFields(page json.RawMessage, fields ...string) json.RawMessage {
	tools, ok, _ := protocol.Member(page, "tools")
	if !ok {
		return page
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(tools, &items) != nil {
		return page
	}
	for _, it := range items {
		for _, f := range fields {
			delete(it, f)
		}
	}
	return setMarshalled(page, "tools", items)
}

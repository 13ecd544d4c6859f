package gateway

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

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

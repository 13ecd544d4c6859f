package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/upstream"
)

// Version bridging (mcp-notes §13): a client and an upstream may speak different protocol
// versions; what the gateway sends a client must parse under the client's version.

// olderThan reports whether protocol version v predates version than (versions compare as
// their dates).
func olderThan(v, than string) bool { return v < than }

// bridgeToolResult makes a tools/call result readable by an older client: structured output
// also as text before 2025-06-18, and content blocks its version lacks converted.
func bridgeToolResult(result json.RawMessage, version string) json.RawMessage {
	if !olderThan(version, protocol.Version20250618) {
		return result
	}
	content, _, _ := protocol.Member(result, "content")
	var blocks []json.RawMessage
	_ = json.Unmarshal(content, &blocks)
	changed := false
	for i, b := range blocks {
		if out, ok := bridgeBlock(b, version); ok {
			blocks[i], changed = out, true
		}
	}
	if structured, ok, _ := protocol.Member(result, "structuredContent"); ok && !hasTextBlock(blocks) {
		// A 2025-06-18 server SHOULD also return the JSON as text; when it did not, older
		// clients would see nothing (mcp-notes §13, row 13).
		text, _ := json.Marshal(map[string]string{"type": "text", "text": string(compactJSON(structured))})
		blocks, changed = append(blocks, text), true
	}
	if !changed {
		return result
	}
	out, err := json.Marshal(blocks)
	if err != nil {
		return result
	}
	if r, err := protocol.SetMember(result, "content", out); err == nil {
		return r
	}
	return result
}

// bridgePromptResult converts the prompt messages' content blocks an older client lacks.
func bridgePromptResult(result json.RawMessage, version string) json.RawMessage {
	if !olderThan(version, protocol.Version20250618) {
		return result
	}
	messages, ok, _ := protocol.Member(result, "messages")
	if !ok {
		return result
	}
	var msgs []json.RawMessage
	if json.Unmarshal(messages, &msgs) != nil {
		return result
	}
	changed := false
	for i, m := range msgs {
		block, ok, _ := protocol.Member(m, "content")
		if !ok {
			continue
		}
		if out, ok := bridgeBlock(block, version); ok {
			if nm, err := protocol.SetMember(m, "content", out); err == nil {
				msgs[i], changed = nm, true
			}
		}
	}
	if !changed {
		return result
	}
	out, _ := json.Marshal(msgs)
	if r, err := protocol.SetMember(result, "messages", out); err == nil {
		return r
	}
	return result
}

// bridgeBlock converts one content block a client's version lacks: resource_link (from
// 2025-06-18) into text naming the link, audio (from 2025-03-26) into text saying it was
// left out.
func bridgeBlock(block json.RawMessage, version string) (json.RawMessage, bool) {
	typ, _, _ := protocol.StringMember(block, "type")
	var text string
	switch {
	case typ == "resource_link" && olderThan(version, protocol.Version20250618):
		uri, _, _ := protocol.StringMember(block, "uri")
		name, _, _ := protocol.StringMember(block, "name")
		desc, _, _ := protocol.StringMember(block, "description")
		text = fmt.Sprintf("[resource %s: %s]", name, uri)
		if desc != "" {
			text += " " + desc
		}
	case typ == "audio" && olderThan(version, protocol.Version20250326):
		mime, _, _ := protocol.StringMember(block, "mimeType")
		text = fmt.Sprintf("[audio (%s) left out: this client's protocol version has no audio content]", mime)
	default:
		return block, false
	}
	out, err := json.Marshal(map[string]string{"type": "text", "text": text})
	return out, err == nil
}

func hasTextBlock(blocks []json.RawMessage) bool {
	for _, b := range blocks {
		if t, _, _ := protocol.StringMember(b, "type"); t == "text" {
			return true
		}
	}
	return false
}

func compactJSON(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// bridgeListPage removes from a tools/list page what an older client's schema does not know:
// outputSchema before 2025-06-18, annotations before 2025-03-26.
func bridgeListPage(page json.RawMessage, k upstream.Kind, version string) json.RawMessage {
	if k != upstream.Tools || !olderThan(version, protocol.Version20250618) {
		return page
	}
	tools, ok, _ := protocol.Member(page, "tools")
	if !ok {
		return page
	}
	var items []map[string]json.RawMessage
	if json.Unmarshal(tools, &items) != nil {
		return page
	}
	for _, it := range items {
		delete(it, "outputSchema")
		if olderThan(version, protocol.Version20250326) {
			delete(it, "annotations")
		}
	}
	out, err := json.Marshal(items)
	if err != nil {
		return page
	}
	if r, err := protocol.SetMember(page, "tools", out); err == nil {
		return r
	}
	return page
}

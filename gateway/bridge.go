package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/protocol"
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
	result = protocol.MapContentBlocks(result, func(b json.RawMessage) (json.RawMessage, bool) { return bridgeBlock(b, version) })
	structured, ok, _ := protocol.Member(result, "structuredContent")
	if !ok {
		return result
	}
	content, _, _ := protocol.Member(result, "content")
	var blocks []json.RawMessage
	_ = json.Unmarshal(content, &blocks)
	if hasTextBlock(blocks) {
		return result
	}
	// A 2025-06-18 server SHOULD also return the JSON as text; when it did not, older clients
	// would see nothing (mcp-notes §13, row 13).
	text, _ := json.Marshal(map[string]string{"type": "text", "text": string(compactJSON(structured))})
	return setMarshalled(result, "content", append(blocks, text))
}

// bridgePromptResult converts the prompt messages' content blocks an older client lacks.
func bridgePromptResult(result json.RawMessage, version string) json.RawMessage {
	if !olderThan(version, protocol.Version20250618) {
		return result
	}
	return protocol.MapContentBlocks(result, func(b json.RawMessage) (json.RawMessage, bool) { return bridgeBlock(b, version) })
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
	switch {
	case k != upstream.Tools || !olderThan(version, protocol.Version20250618):
		return page
	case olderThan(version, protocol.Version20250326):
		return dropToolFields(page, "outputSchema", "annotations")
	}
	return dropToolFields(page, "outputSchema")
}

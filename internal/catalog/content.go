package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// The URIs an upstream puts in its results are in its own terms; these rewrite them into the
// exposed form, so that a client can read what a result names through the gateway (design
// decision 2). scheme is the upstream's Namespace.Scheme; "" leaves results unchanged.

// ExposeContentURIs rewrites the URIs of resource_link and embedded resource blocks in a
// tools/call result (content[]), a prompts/get result (messages[].content) or a tasks/result
// answer. structuredContent is left alone: its shape belongs to the tool. Members it does not
// rewrite keep their bytes.
func ExposeContentURIs(result json.RawMessage, scheme string) json.RawMessage {
	if scheme == "" || !bytes.Contains(result, []byte(`"resource`)) {
		return result
	}
	return protocol.MapContentBlocks(result, func(b json.RawMessage) (json.RawMessage, bool) { return exposeBlock(b, scheme) })
}

// exposeBlock rewrites one content block's URI, reporting whether it changed.
func exposeBlock(block json.RawMessage, scheme string) (json.RawMessage, bool) {
	typ, _, _ := protocol.StringMember(block, "type")
	switch typ {
	case "resource_link":
		uri, ok, _ := protocol.StringMember(block, "uri")
		if !ok {
			return block, false
		}
		out, err := protocol.SetMember(block, "uri", protocol.AppendString(nil, ExposeURI(scheme, uri)))
		return out, err == nil
	case "resource":
		res, ok, _ := protocol.Member(block, "resource")
		if !ok {
			return block, false
		}
		uri, ok, _ := protocol.StringMember(res, "uri")
		if !ok {
			return block, false
		}
		nres, err := protocol.SetMember(res, "uri", protocol.AppendString(nil, ExposeURI(scheme, uri)))
		if err != nil {
			return block, false
		}
		out, err := protocol.SetMember(block, "resource", nres)
		return out, err == nil
	}
	return block, false
}

// ExposeReadURIs rewrites contents[].uri of a resources/read result, so that what a client
// read names what it can read again. It fails only when the result is not a JSON object;
// contents it cannot parse are left as they are.
func ExposeReadURIs(result json.RawMessage, scheme string) (json.RawMessage, error) {
	if scheme == "" {
		return result, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, fmt.Errorf("upstream resources/read result: %w", err)
	}
	var contents []map[string]json.RawMessage
	if err := json.Unmarshal(m["contents"], &contents); err != nil {
		return result, nil
	}
	for _, c := range contents {
		var uri string
		if json.Unmarshal(c["uri"], &uri) == nil && uri != "" {
			c["uri"], _ = json.Marshal(ExposeURI(scheme, uri))
		}
	}
	m["contents"], _ = json.Marshal(contents)
	return json.Marshal(m)
}

package main

import (
	"encoding/json"
	"errors"
	"strconv"
)

// Protocol versions, newest first. The server speaks whichever of these the client asks
// for, else the first (mcp-notes §1.2).
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// serverVersion is the version reported in serverInfo.
const serverVersion = "0.1.0"

// JSON-RPC error codes the server answers with (mcp-notes §2.3).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
)

// Errors of parse. Each maps to one JSON-RPC error response without an id.
var (
	errParse   = errors.New("parse error")
	errInvalid = errors.New("invalid request")
)

// toolSchema is the input schema of every tool the server lists.
const toolSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// server answers JSON-RPC messages. It holds only immutable data, so it is safe for
// concurrent use; the transports (stdio.go, http.go) own all I/O.
type server struct {
	// toolsList is the precomputed result of tools/list.
	toolsList []byte
}

// newServer returns a server that lists the echo tool and extra further tools named
// tool_000, tool_001, … with the same schema (for catalog-size benchmarks). The extra
// tools cannot be called: a call gets an isError result, like any unknown tool.
func newServer(extra int) *server {
	b := []byte(`{"tools":[{"name":"echo","description":"Returns its text argument unchanged.","inputSchema":` + toolSchema + `}`)
	for i := range extra {
		b = append(b, `,{"name":"tool_`...)
		if i < 100 {
			b = append(b, '0')
		}
		if i < 10 {
			b = append(b, '0')
		}
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `","description":"A catalog filler tool; calling it fails.","inputSchema":`+toolSchema+`}`...)
	}
	b = append(b, `]}`...)
	return &server{toolsList: b}
}

// message is one JSON-RPC message as raw tokens: sub-slices of the input.
type message struct {
	id     []byte // raw id token (string or integer); nil when absent
	method []byte // raw method token (a JSON string); nil when absent
	params []byte // raw params value; nil when absent
}

// isRequest reports whether m expects a response.
func (m *message) isRequest() bool { return m.id != nil && m.method != nil }

// isNotification reports whether m needs no response: a notification, or a response to
// a request (this server never sends any, so responses are dropped).
func (m *message) isNotification() bool { return m.id == nil || m.method == nil }

// parse splits one JSON-RPC message into raw tokens. It returns errParse when b is not
// JSON and errInvalid when it is JSON but not a single JSON-RPC 2.0 message (batches
// included, mcp-notes §2.2).
func parse(b []byte) (message, error) {
	if !json.Valid(b) {
		return message{}, errParse
	}
	s, ok := newObjectScanner(b)
	if !ok {
		return message{}, errInvalid
	}
	var m message
	var version, result []byte
	for {
		k, v, ok := s.next()
		if !ok {
			break
		}
		switch {
		case keyIs(k, "id"):
			m.id = v
		case keyIs(k, "method"):
			m.method = v
		case keyIs(k, "params"):
			m.params = v
		case keyIs(k, "jsonrpc"):
			version = v
		case keyIs(k, "result"), keyIs(k, "error"):
			result = v
		}
	}
	switch {
	case !stringIs(version, "2.0"),
		m.id != nil && !validID(m.id),
		m.method != nil && m.method[0] != '"',
		m.method == nil && (m.id == nil || result == nil):
		return message{}, errInvalid
	}
	return m, nil
}

// validID reports whether a raw id token is a string or an integer (mcp-notes §2.1: MCP
// ids are never null or fractional).
func validID(id []byte) bool {
	if id[0] == '"' {
		return true
	}
	for _, c := range id {
		if c == '.' || c == 'e' || c == 'E' || c == 'n' {
			return false
		}
	}
	return id[0] == '-' || id[0] >= '0' && id[0] <= '9'
}

// appendError appends an error response for the parse error err, which has no id.
func appendParseError(dst []byte, err error) []byte {
	if errors.Is(err, errParse) {
		return appendError(dst, nil, codeParseError, "parse error")
	}
	return appendError(dst, nil, codeInvalidRequest, "invalid request")
}

// respond appends the response to the request m to dst. m must be a request.
func (s *server) respond(dst []byte, m *message) []byte {
	switch string(stringBytes(m.method)) { // no allocation: the compiler sees the conversion
	case "tools/call":
		return s.appendCall(dst, m)
	case "tools/list":
		return appendResult(dst, m.id, s.toolsList)
	case "ping":
		return appendResult(dst, m.id, []byte(`{}`))
	case "initialize":
		return appendInitialize(dst, m)
	}
	return appendError(dst, m.id, codeMethodNotFound, "method not found")
}

// appendInitialize answers initialize with the client's protocol version when the server
// supports it, else with the newest one (mcp-notes §1.2).
func appendInitialize(dst []byte, m *message) []byte {
	version := protocolVersions[0]
	if p, ok := newObjectScanner(m.params); ok {
		for {
			k, v, ok := p.next()
			if !ok {
				break
			}
			if keyIs(k, "protocolVersion") {
				for _, pv := range protocolVersions {
					if stringIs(v, pv) {
						version = pv
					}
				}
			}
		}
	}
	dst = appendHead(dst, m.id)
	dst = append(dst, `,"result":{"protocolVersion":"`...)
	dst = append(dst, version...)
	dst = append(dst, `","capabilities":{"tools":{}},"serverInfo":{"name":"echo-server","version":"`+serverVersion+`"}}}`...)
	return dst
}

// appendCall answers tools/call. The echo tool copies its text argument's raw token into
// the result: json.Valid has checked it is a well-formed JSON string, so decoding and
// re-encoding it would give back the same text at a cost. Tool failures are isError
// results, not JSON-RPC errors (mcp-notes §6.1).
func (s *server) appendCall(dst []byte, m *message) []byte {
	var name, text []byte
	if p, ok := newObjectScanner(m.params); ok {
		for {
			k, v, ok := p.next()
			if !ok {
				break
			}
			switch {
			case keyIs(k, "name"):
				name = v
			case keyIs(k, "arguments"):
				text = argument(v, "text")
			}
		}
	}
	dst = appendHead(dst, m.id)
	switch {
	case name == nil || name[0] != '"':
		dst = append(dst, `,"result":{"content":[{"type":"text","text":"tools/call needs a tool name"}],"isError":true}}`...)
	case !stringIs(name, "echo"):
		// The raw token's inner bytes are already an escaped JSON string body.
		dst = append(dst, `,"result":{"content":[{"type":"text","text":"unknown tool: `...)
		dst = append(dst, name[1:len(name)-1]...)
		dst = append(dst, `"}],"isError":true}}`...)
	case text == nil || text[0] != '"':
		dst = append(dst, `,"result":{"content":[{"type":"text","text":"echo needs a string argument \"text\""}],"isError":true}}`...)
	default:
		dst = append(dst, `,"result":{"content":[{"type":"text","text":`...)
		dst = append(dst, text...)
		dst = append(dst, `}]}}`...)
	}
	return dst
}

// argument returns the raw value of the member name of the object args, or nil.
func argument(args []byte, name string) []byte {
	a, ok := newObjectScanner(args)
	if !ok {
		return nil
	}
	for {
		k, v, ok := a.next()
		if !ok {
			return nil
		}
		if keyIs(k, name) {
			return v
		}
	}
}

// appendHead appends the start of a response, up to and including the id when there is one.
func appendHead(dst, id []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0"`...)
	if id != nil {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	return dst
}

// appendResult appends a result response; result is a raw JSON object.
func appendResult(dst, id, result []byte) []byte {
	dst = appendHead(dst, id)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// appendError appends an error response; id may be nil (omitted, as the 2025-11-25 schema
// wants when the id could not be read). message must need no JSON escaping.
func appendError(dst, id []byte, code int, message string) []byte {
	dst = appendHead(dst, id)
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":"`...)
	dst = append(dst, message...)
	return append(dst, `"}}`...)
}

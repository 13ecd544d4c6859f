package modern

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// The standard request headers of 2026-07-28 Streamable HTTP (SEP-2243). Names are matched
// case-insensitively, values case-sensitively.
const (
	HeaderProtocolVersion = "MCP-Protocol-Version"
	HeaderMethod          = "Mcp-Method"
	HeaderName            = "Mcp-Name"
	// HeaderParamPrefix starts the name of a header that mirrors a tool argument annotated
	// with x-mcp-header; the annotation's value follows it.
	HeaderParamPrefix = "Mcp-Param-"
)

// Caps on a request's Mcp-* headers, checked before any of them is decoded.
const (
	// MaxMCPHeaders is the most Mcp-* header lines a request may carry.
	MaxMCPHeaders = 64
	// MaxMCPHeaderBytes is the most bytes the names and values of a request's Mcp-* headers
	// may take together.
	MaxMCPHeaderBytes = 16 << 10
)

// The markers around a base64-encoded header value (SEP-2243), matched exactly.
const (
	sentinelPrefix = "=?base64?"
	sentinelSuffix = "?="
)

// errHeaderValue is returned by DecodeHeaderValue for a value that cannot be decoded.
var errHeaderValue = errors.New("invalid header value")

// EncodeHeaderValue returns s as a standard header value: s itself when it is plain visible
// ASCII (spaces allowed inside), else =?base64?…?= around the standard base64 of its bytes.
// Leading or trailing whitespace, control characters, non-ASCII bytes, and a value that
// starts like the encoded form are all encoded (SEP-2243), so [DecodeHeaderValue] gives s
// back.
func EncodeHeaderValue(s string) string {
	if isPlainHeaderValue(s) {
		return s
	}
	return sentinelPrefix + base64.StdEncoding.EncodeToString([]byte(s)) + sentinelSuffix
}

func isPlainHeaderValue(s string) bool {
	if strings.HasPrefix(s, sentinelPrefix) {
		return false
	}
	if s != "" && (s[0] == ' ' || s[len(s)-1] == ' ') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// DecodeHeaderValue returns what a standard header value stands for. Leading and trailing
// spaces and tabs are trimmed (RFC 9110 OWS); a value of the form =?base64?…?= (lowercase
// markers) is base64-decoded; any other value stands for itself. A value is refused when it
// holds control characters other than tab, or when its base64 is malformed. Bytes above
// 0x7F are accepted as they are: some clients send a non-ASCII name raw, and it then
// compares equal to the body's UTF-8.
func DecodeHeaderValue(v string) (string, error) {
	v = trimOWS(v)
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return "", fmt.Errorf("%w: control character at offset %d", errHeaderValue, i)
		}
	}
	if len(v) < len(sentinelPrefix)+len(sentinelSuffix) || !strings.HasPrefix(v, sentinelPrefix) || !strings.HasSuffix(v, sentinelSuffix) {
		return v, nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(v[len(sentinelPrefix) : len(v)-len(sentinelSuffix)])
	if err != nil {
		return "", fmt.Errorf("%w: malformed base64", errHeaderValue)
	}
	return string(b), nil
}

// trimOWS trims the optional whitespace (spaces and tabs) of RFC 9110 around a field value.
func trimOWS(v string) string { return strings.Trim(v, " \t") }

// mcpHeaders is the Mcp-* headers of one request, each name as http.Header keys it; names
// are compared case-insensitively. A slice, not a map: a request carries a few, and they are
// read on every modern request.
type mcpHeaders []mcpHeader

type mcpHeader struct {
	name   string
	values []string
}

// collectMCPHeaders returns h's Mcp-* headers, whatever the case of their names, or a
// -32020 failure when they pass MaxMCPHeaders or MaxMCPHeaderBytes.
func collectMCPHeaders(h http.Header) (mcpHeaders, error) {
	var out mcpHeaders
	count, size := 0, 0
	for name, values := range h {
		if len(name) < 4 || !strings.EqualFold(name[:4], "mcp-") {
			continue
		}
		for _, v := range values {
			count++
			size += len(name) + len(v)
		}
		out = append(out, mcpHeader{name: name, values: values})
	}
	if count > MaxMCPHeaders || size > MaxMCPHeaderBytes {
		return nil, headerMismatch("Header mismatch: the request carries %d Mcp-* headers of %d bytes, more than the %d headers of %d bytes accepted",
			count, size, MaxMCPHeaders, MaxMCPHeaderBytes)
	}
	return out, nil
}

// raw returns the value of the header name (any case) as sent, whether it is present, and
// a -32020 failure when it is given more than once.
func (m mcpHeaders) raw(name string) (string, bool, error) {
	n, first := 0, ""
	for _, h := range m {
		if !strings.EqualFold(h.name, name) {
			continue
		}
		if n == 0 && len(h.values) > 0 {
			first = h.values[0]
		}
		n += len(h.values)
	}
	switch n {
	case 0:
		return "", false, nil
	case 1:
		return first, true, nil
	}
	return "", true, headerMismatch("Header mismatch: %s is given %d times", name, n)
}

// value returns the decoded value of the header name (any case), whether it is present,
// and a -32020 failure when it is given more than once or cannot be decoded.
func (m mcpHeaders) value(name string) (string, bool, error) {
	v, ok, err := m.raw(name)
	if err != nil || !ok {
		return "", ok, err
	}
	if v, err = DecodeHeaderValue(v); err != nil {
		return "", true, headerMismatch("Header mismatch: %s has an invalid value: %v", name, err)
	}
	return v, true, nil
}

// CheckHeaders checks a modern request's Mcp-Method, Mcp-Name and Mcp-Param-* headers
// against its body (SEP-2243; step 7 of the validation order in mcp-2026-notes §1.5):
//
//   - the Mcp-* headers together stay within MaxMCPHeaders and MaxMCPHeaderBytes;
//   - Mcp-Method is present on every request (a notification may omit it) and equals the
//     method;
//   - Mcp-Name is present on tools/call and prompts/get and equals params.name, and on
//     resources/read and equals params.uri;
//   - on tools/call, each of toolParams (the called tool's annotations, from [HeaderParams];
//     nil when it has none or is unknown) is mirrored: an argument present and not null
//     needs its header, with an equal value, and a header needs its argument. Mcp-Param-*
//     headers that name no annotation are ignored.
//
// Values are decoded with [DecodeHeaderValue] before they are compared. A refusal is a
// *[Failure]: HTTP 400 with -32020, or -32602 when the body lacks the member a header
// mirrors.
func CheckHeaders(h http.Header, method string, params json.RawMessage, toolParams []Param) error {
	headers, err := collectMCPHeaders(h)
	if err != nil {
		return err
	}
	return headers.check(method, params, toolParams)
}

// check is CheckHeaders on headers already collected.
func (headers mcpHeaders) check(method string, params json.RawMessage, toolParams []Param) error {
	got, ok, err := headers.value(HeaderMethod)
	switch {
	case err != nil:
		return err
	case !ok && !strings.HasPrefix(method, "notifications/"):
		return headerMismatch("Header mismatch: the %s header is required", HeaderMethod)
	case ok && got != method:
		return headerMismatch("Header mismatch: %s is %s but the method is %s", HeaderMethod, quoteValue(got), quoteValue(method))
	}
	if member := nameMember(method); member != "" {
		if err := checkName(headers, method, params, member); err != nil {
			return err
		}
	}
	if method == protocol.MethodCallTool && len(toolParams) > 0 {
		return checkParams(headers, params, toolParams)
	}
	return nil
}

// nameMember returns the params member Mcp-Name mirrors for method, or "".
func nameMember(method string) string {
	switch method {
	case protocol.MethodCallTool, protocol.MethodGetPrompt:
		return "name"
	case protocol.MethodReadResource:
		return "uri"
	}
	return ""
}

func checkName(headers mcpHeaders, method string, params json.RawMessage, member string) error {
	body, ok, err := stringParam(params, member)
	if err != nil || !ok {
		return invalidParams("Invalid params: %s needs params.%s as a string", method, member)
	}
	got, present, err := headers.value(HeaderName)
	switch {
	case err != nil:
		return err
	case !present:
		return headerMismatch("Header mismatch: the %s header is required for %s", HeaderName, method)
	case got != body:
		return headerMismatch("Header mismatch: %s is %s but params.%s is %s", HeaderName, quoteValue(got), member, quoteValue(body))
	}
	return nil
}

// stringParam returns the string member key of params; ok is false when it is absent or
// not a string.
func stringParam(params json.RawMessage, key string) (string, bool, error) {
	if len(params) == 0 {
		return "", false, nil
	}
	return protocol.StringMember(params, key)
}

// quoteValue quotes a header or body value for an error message: between single quotes,
// with anything but printable ASCII escaped, and cut after 96 bytes.
func quoteValue(s string) string {
	const most = 96
	cut := false
	if len(s) > most {
		s, cut = s[:most], true // a rune cut in two is escaped byte by byte
	}
	q := strconv.QuoteToASCII(s)
	q = q[1 : len(q)-1]
	if cut {
		q += "..."
	}
	return "'" + q + "'"
}

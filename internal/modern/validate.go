package modern

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// SupportedVersions returns the versions server/discover lists, newest first: the modern
// ones, served per request, then the session-based ones, reached through initialize. The
// supported list of a -32022 refusal names only the modern ones, a subset of these. The
// caller owns the returned slice.
func SupportedVersions() []string {
	return slices.Concat(protocol.ModernVersions, protocol.SupportedVersions)
}

// methods are the methods a modern request may call: the 2026-07-28 core ones, and
// notifications/cancelled for a transport that delivers it. The session-era methods
// (initialize, ping, logging/setLevel, resources/subscribe and unsubscribe, tasks/*) are
// not among them, and neither are the tasks extension's, which Manifold does not advertise.
var methods = map[string]bool{
	protocol.MethodDiscover:              true,
	protocol.MethodComplete:              true,
	protocol.MethodListPrompts:           true,
	protocol.MethodGetPrompt:             true,
	protocol.MethodListResources:         true,
	protocol.MethodListResourceTemplates: true,
	protocol.MethodReadResource:          true,
	protocol.MethodListen:                true,
	protocol.MethodListTools:             true,
	protocol.MethodCallTool:              true,
	protocol.NotificationCancelled:       true,
}

// IsModernMethod reports whether method may be called by a modern request.
func IsModernMethod(method string) bool { return methods[method] }

// Request is what a modern request declares of itself in params._meta, as [Validate] read
// it. It stands in for what a session's initialize gave: each request brings its own.
type Request struct {
	// Version is the protocol version the request speaks, one of protocol.ModernVersions.
	Version string
	// Capabilities are the client capabilities declared for this request alone.
	Capabilities ClientCapabilities
	// ClientInfo is the client's self-description; nil when not sent. It is for display and
	// logs only: nothing may depend on it.
	ClientInfo *protocol.Implementation
	// LogLevel is the least severe level of notifications/message the client wants for this
	// request, one of protocol.LogLevels; "" when it wants none.
	LogLevel string
	// ProgressToken is the progress token as sent (a JSON string or number); nil when absent.
	ProgressToken json.RawMessage
	// Trace holds the W3C trace context members (traceparent, tracestate, baggage) as sent,
	// keyed by name; nil when there are none.
	Trace map[string]json.RawMessage
	// Meta is the whole _meta object as sent; it shares the bytes of the params given to
	// Validate.
	Meta json.RawMessage
}

// ClientCapabilities are a modern request's declared client capabilities: the object as
// sent, and what the gateway reads of it to relay input requests.
type ClientCapabilities struct {
	// Raw is the capabilities object exactly as sent.
	Raw json.RawMessage
	// Sampling is set when sampling is declared; SamplingTools and SamplingContext when its
	// tools and context members are.
	Sampling, SamplingTools, SamplingContext bool
	// ElicitationForm and ElicitationURL are the elicitation modes declared; an elicitation
	// object with neither member declares form only.
	ElicitationForm, ElicitationURL bool
	// Roots is set when roots is declared.
	Roots bool
	// Extensions are the keys of the extensions object, sorted; nil when there are none.
	Extensions []string
}

// Validate checks a modern request, one that [Classify] found Modern, in the order the
// conformance suite expects (mcp-2026-notes §1.5, steps 3 to 9), and returns what its _meta
// declares. A refusal is a *[Failure]:
//
//  3. the MCP-Protocol-Version header is missing, or the Mcp-* headers pass
//     MaxMCPHeaders or MaxMCPHeaderBytes: 400 -32020;
//  4. _meta, its protocolVersion or its clientCapabilities is missing or of the wrong type,
//     or its clientInfo is not an object: 400 -32602;
//  5. the header and _meta name different versions: 400 -32020;
//  6. the version is not a modern one Manifold serves (a session-based one included, which
//     is reached only through initialize): 400 -32022 with data {supported, requested};
//  7. the standard headers fail [CheckHeaders]: 400 -32020. For tools/call, toolParams
//     gives the called tool's x-mcp-header annotations (nil: no tool has any);
//  8. the method is not one a modern request may call ([IsModernMethod]): 404 -32601;
//  9. the log level is not one of protocol.LogLevels, or the progress token or a trace
//     context member is of the wrong type: 400 -32602.
//
// A nil h is a request of a transport with no header layer (stdio, mcp-2026-notes §1.14):
// the steps about headers (3, 5 and 7) are skipped, and everything is read from params.
func Validate(h http.Header, method string, params json.RawMessage, toolParams func(tool string) []Param) (*Request, error) {
	headerless := h == nil
	headers, err := collectMCPHeaders(h)
	if err != nil {
		return nil, err
	}
	headerVersion, _, err := headers.raw(HeaderProtocolVersion)
	if err != nil {
		return nil, err
	}
	if headerVersion = trimOWS(headerVersion); headerVersion == "" && !headerless {
		return nil, headerMismatch("Header mismatch: the %s header is required", HeaderProtocolVersion)
	}

	meta, members, failure := readMeta(params)
	if failure != nil {
		return nil, failure
	}
	req := &Request{Meta: meta}
	if err := unmarshalString(members.version, &req.Version); err != nil || req.Version == "" {
		return nil, invalidParams("Invalid params: _meta[%q] must be a protocol version string", protocol.MetaProtocolVersion)
	}
	caps := members.capabilities
	if caps == nil {
		return nil, invalidParams("Invalid params: _meta[%q] is required", protocol.MetaClientCapabilities)
	}
	if req.Capabilities, failure = readCapabilities(caps); failure != nil {
		return nil, failure
	}
	if info := members.clientInfo; info != nil && !isNull(info) {
		if !isObject(info) || json.Unmarshal(info, &req.ClientInfo) != nil {
			return nil, invalidParams("Invalid params: _meta[%q] must be an object", protocol.MetaClientInfo)
		}
	}

	if !headerless && headerVersion != req.Version {
		return nil, headerMismatch("Header mismatch: %s is %s but _meta[%q] is %s",
			HeaderProtocolVersion, quoteValue(headerVersion), protocol.MetaProtocolVersion, quoteValue(req.Version))
	}
	if !slices.Contains(protocol.ModernVersions, req.Version) {
		return nil, unsupportedVersion(req.Version)
	}

	if !headerless {
		var called []Param
		if method == protocol.MethodCallTool && toolParams != nil {
			if name, ok, err := stringParam(params, "name"); err == nil && ok {
				called = toolParams(name)
			}
		}
		if err := headers.check(method, params, called); err != nil {
			return nil, err
		}
	}
	if !IsModernMethod(method) {
		return nil, refuse(protocol.Errorf(protocol.CodeMethodNotFound, "Method not found: %s", quoteValue(method)))
	}

	if failure := req.readOptional(members); failure != nil {
		return nil, failure
	}
	return req, nil
}

// unsupportedVersion is the -32022 refusal of a request for version requested.
func unsupportedVersion(requested string) *Failure {
	data, _ := json.Marshal(struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}{protocol.ModernVersions, requested})
	return refuse(&protocol.Error{
		Code:    protocol.CodeUnsupportedProtocolVersion,
		Message: "Unsupported protocol version: send one of data.supported; the session-based versions start with initialize",
		Data:    data,
	})
}

// metaMembers are the members of a request's _meta that [Validate] reads, as sent; nil when
// absent. A member given more than once is read as its last value, as encoding/json would.
type metaMembers struct {
	version, capabilities, clientInfo, logLevel, progressToken json.RawMessage
	// trace are the members named by traceKeys, in that order.
	trace [len(traceKeys)]json.RawMessage
}

// traceKeys are the W3C trace context members of _meta.
var traceKeys = [...]string{protocol.MetaTraceparent, protocol.MetaTracestate, protocol.MetaBaggage}

// readMeta returns params._meta and the members Validate reads of it, or a -32602 refusal
// when either is missing or not an object. _meta is walked once, and only what Validate
// reads is decoded: this runs on every modern request.
func readMeta(params json.RawMessage) (json.RawMessage, *metaMembers, *Failure) {
	const missing = "Invalid params: a 2026-07-28 request carries params._meta with its protocol version and client capabilities"
	if len(params) == 0 || isNull(params) {
		return nil, nil, invalidParams(missing)
	}
	if !isObject(params) {
		return nil, nil, invalidParams("Invalid params: params must be an object")
	}
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok || isNull(meta) {
		return nil, nil, invalidParams(missing)
	}
	members := new(metaMembers)
	if !isObject(meta) || protocol.EachMember(meta, members.read) != nil {
		return nil, nil, invalidParams("Invalid params: params._meta must be an object")
	}
	return meta, members, nil
}

// read keeps value when name is a member Validate reads; for protocol.EachMember.
func (m *metaMembers) read(name, value []byte) bool {
	switch string(name) {
	case protocol.MetaProtocolVersion:
		m.version = value
	case protocol.MetaClientCapabilities:
		m.capabilities = value
	case protocol.MetaClientInfo:
		m.clientInfo = value
	case protocol.MetaLogLevel:
		m.logLevel = value
	case protocol.MetaProgressToken:
		m.progressToken = value
	default:
		for i, key := range traceKeys {
			if string(name) == key {
				m.trace[i] = value
			}
		}
	}
	return true
}

// unmarshalString is json.Unmarshal of raw, a valid JSON value, into s, without reflection
// for a plain string (no escapes, valid UTF-8).
func unmarshalString(raw []byte, s *string) error {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		*s = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, s)
}

// readCapabilities reads the clientCapabilities object raw; the members the gateway reads
// must be objects.
func readCapabilities(raw json.RawMessage) (ClientCapabilities, *Failure) {
	c := ClientCapabilities{Raw: raw}
	members, ok := objectMembers(raw)
	if !ok {
		return c, invalidParams("Invalid params: _meta[%q] must be an object", protocol.MetaClientCapabilities)
	}
	for _, key := range []string{"sampling", "elicitation", "roots", "extensions", "experimental"} {
		if v, ok := members[key]; ok && !isNull(v) && !isObject(v) {
			return c, invalidParams("Invalid params: _meta[%q].%s must be an object", protocol.MetaClientCapabilities, key)
		}
	}
	if sampling, ok := objectMembers(members["sampling"]); ok {
		c.Sampling = true
		c.SamplingTools = declared(sampling, "tools")
		c.SamplingContext = declared(sampling, "context")
	}
	if elicitation, ok := objectMembers(members["elicitation"]); ok {
		c.ElicitationForm = declared(elicitation, "form")
		c.ElicitationURL = declared(elicitation, "url")
		if !c.ElicitationForm && !c.ElicitationURL {
			c.ElicitationForm = true
		}
	}
	c.Roots = declared(members, "roots")
	if extensions, ok := objectMembers(members["extensions"]); ok && len(extensions) > 0 {
		for key := range extensions {
			c.Extensions = append(c.Extensions, key)
		}
		slices.Sort(c.Extensions)
	}
	return c, nil
}

// readOptional reads the optional members of _meta: the log level, the progress token and
// the trace context.
func (r *Request) readOptional(members *metaMembers) *Failure {
	if raw := members.logLevel; raw != nil && !isNull(raw) {
		if unmarshalString(raw, &r.LogLevel) != nil || !slices.Contains(protocol.LogLevels, r.LogLevel) {
			r.LogLevel = ""
			return invalidParams("Invalid params: _meta[%q] must be one of %v", protocol.MetaLogLevel, protocol.LogLevels)
		}
	}
	if raw := members.progressToken; raw != nil && !isNull(raw) {
		if raw[0] != '"' && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return invalidParams("Invalid params: _meta.progressToken must be a string or a number")
		}
		r.ProgressToken = raw
	}
	for i, key := range traceKeys {
		raw := members.trace[i]
		if raw == nil || isNull(raw) {
			continue
		}
		if raw[0] != '"' {
			return invalidParams("Invalid params: _meta.%s must be a string", key)
		}
		if r.Trace == nil {
			r.Trace = map[string]json.RawMessage{}
		}
		r.Trace[key] = raw
	}
	return nil
}

// objectMembers returns the members of raw when it is a JSON object (nil for an empty one),
// the last of a name given twice kept, as encoding/json would.
func objectMembers(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if !isObject(raw) {
		return nil, false
	}
	var m map[string]json.RawMessage
	err := protocol.EachMember(raw, func(name, value []byte) bool {
		if m == nil {
			m = make(map[string]json.RawMessage)
		}
		m[string(name)] = value
		return true
	})
	return m, err == nil
}

// declared reports whether the capability object m declares key (present and not null).
func declared(m map[string]json.RawMessage, key string) bool {
	v, ok := m[key]
	return ok && !isNull(v)
}

func isObject(raw []byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '{'
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

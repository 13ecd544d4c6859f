package protocol

import (
	"encoding/json"
	"fmt"
)

// JSON-RPC and MCP error codes (mcp-notes §2.3).
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeResourceNotFound is MCP's code for resources/read of an unknown URI (2025-11-25).
	CodeResourceNotFound = -32002
	// CodeURLElicitationRequired (2025-11-25) says a request needs the user to complete URL
	// elicitations first; its data lists them.
	CodeURLElicitationRequired = -32042
	// CodeHeaderMismatch (2026-07-28) refuses an HTTP request whose standard headers
	// (MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-*) are missing, invalid, or
	// disagree with its body; it is sent with HTTP 400 (SEP-2243).
	CodeHeaderMismatch = -32020
	// CodeMissingRequiredClientCapability (2026-07-28) refuses a request that needs a client
	// capability the request did not declare; its data is {"requiredCapabilities": {...}}, a
	// ClientCapabilities object of what is missing, and it is sent with HTTP 400.
	CodeMissingRequiredClientCapability = -32021
	// CodeUnsupportedProtocolVersion is the 2026-07-28 code for a request whose protocol
	// version the server does not serve; its data is {"supported": [...], "requested": "..."}.
	CodeUnsupportedProtocolVersion = -32022
)

// Manifold's own codes, from the implementation-defined range -32000…-32019 (2026-07-28 reserves
// -32020…-32099 and MCP uses -32002). docs/protocol.md documents them.
const (
	// CodeSessionNotFound is sent with HTTP 404 for an unknown or ended MCP-Session-Id.
	CodeSessionNotFound = -32001
	// CodeUpstreamUnavailable is returned for a method other than tools/call whose upstream is
	// not connected: it did not run, and may be sent again later.
	CodeUpstreamUnavailable = -32003
	// CodeUpstreamTimeout is returned when an upstream did not answer within its timeout.
	CodeUpstreamTimeout = -32004
	// CodeSessionLimit is sent with HTTP 503 when the gateway holds its maximum of sessions.
	CodeSessionLimit = -32005
	// CodeRequestRejected is sent with an HTTP 4xx status for transport-level problems:
	// disallowed origin, oversized body, wrong headers.
	CodeRequestRejected = -32006
	// CodeTooManyRequests is returned for a request (other than tools/call) past the caps on
	// requests in flight, per session or in the whole gateway.
	CodeTooManyRequests = -32007
	// CodeDenied is returned for a request (other than tools/call) that a check of the
	// gateway's policy chain refused.
	CodeDenied = -32008
	// CodeShuttingDown is sent with HTTP 503 for a new session or request while the gateway
	// drains, and as the answer of a request not yet sent upstream when the drain ends: it did
	// not run, and may be sent again (another replica serves the session).
	CodeShuttingDown = -32009
	// CodeInterrupted is the answer of a request that went out and was cut off before it was
	// answered: its upstream's connection ended (data.reason "upstream_interrupted"), the drain
	// ended with it still running, or the replica running it stopped. It may have run in part,
	// so it is not one to send again as it is, unlike CodeUpstreamUnavailable and
	// CodeShuttingDown.
	CodeInterrupted = -32010
)

// IsSpecDefined reports whether a JSON-RPC error code is defined by JSON-RPC or MCP with a
// meaning a client acts on (parse error, invalid request, method not found, invalid params,
// resource not found, URL elicitation required, missing required client capability), as
// opposed to internal errors and the implementation-defined range, whose text may carry an
// implementation's internals. The other codes of 2026-07-28, -32020 and -32022, are about the
// hop that answered them: from an upstream they say the gateway erred, not the client.
func IsSpecDefined(code int64) bool {
	switch code {
	case CodeParseError, CodeInvalidRequest, CodeMethodNotFound, CodeInvalidParams, CodeResourceNotFound, CodeURLElicitationRequired,
		CodeMissingRequiredClientCapability:
		return true
	}
	return false
}

// Error is a JSON-RPC error object. It implements error, so a handler may return one to send
// exactly that error to the peer.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// Is makes errors.Is match two *Error values with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code int64, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

package modern

import (
	"fmt"
	"net/http"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Failure is a modern request refused before dispatch: the JSON-RPC error to answer it with
// and the HTTP status to send that answer with. Every 4xx on the modern face carries a
// JSON-RPC error body, since clients read a 4xx without one as the end of the connection
// (mcp-2026-notes §1.6). errors.Is matches a Failure against a *protocol.Error of the same
// code.
type Failure struct {
	// Status is the HTTP status of the answer.
	Status int
	// Err is the JSON-RPC error of the answer; never nil.
	Err *protocol.Error
}

// Error implements error.
func (f *Failure) Error() string {
	return fmt.Sprintf("modern request refused (HTTP %d): %v", f.Status, f.Err)
}

// Unwrap returns the JSON-RPC error.
func (f *Failure) Unwrap() error { return f.Err }

// HTTPStatus returns the HTTP status of a modern request's JSON-RPC error answered as a
// single JSON body, the same mapping the Go SDK's servers use so that a client sees one
// status for one error whether or not Manifold stands between: 404 for -32601 (the spec's
// MUST for unknown methods, and methods gated by a capability not advertised), 400 for
// -32602, -32020, -32021 and -32022 (the spec's MUSTs for bad _meta and the three new codes;
// dispatch-time -32602 such as an unknown tool follows them), and 200 for every other code,
// whose meaning lies in the body, not in the transport.
func HTTPStatus(code int64) int {
	switch code {
	case protocol.CodeMethodNotFound:
		return http.StatusNotFound
	case protocol.CodeInvalidParams, protocol.CodeHeaderMismatch, protocol.CodeMissingRequiredClientCapability, protocol.CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// refuse returns a Failure for err with the status HTTPStatus gives its code.
func refuse(err *protocol.Error) *Failure {
	return &Failure{Status: HTTPStatus(err.Code), Err: err}
}

func headerMismatch(format string, args ...any) *Failure {
	return refuse(protocol.Errorf(protocol.CodeHeaderMismatch, format, args...))
}

func invalidParams(format string, args ...any) *Failure {
	return refuse(protocol.Errorf(protocol.CodeInvalidParams, format, args...))
}

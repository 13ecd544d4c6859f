package auth

import (
	"errors"
	"net/http"
)

// ErrNoCredentials is returned by Authenticate for a request without an Authorization header
// (and without a token in the query string). The face answers it with a bare challenge (see
// Challenge): RFC 6750 §3.1 says such a response should carry no error code.
var ErrNoCredentials = errors.New("no credentials")

// Error codes of RFC 6750 §3.1 that Authenticate returns in an *Error.
const (
	CodeInvalidRequest = "invalid_request" // status 400: the Authorization header is malformed
	CodeInvalidToken   = "invalid_token"   // status 401: the credential is not accepted
)

// Error is a failed authentication, as the client should see it: Status is the HTTP status,
// Code the RFC 6750 error code and Description a message for the client that says what is
// wrong. The description never contains the token, a URL of the issuer, or a library's
// message; Error() adds the internal cause, for logs only.
type Error struct {
	Status      int
	Code        string
	Description string

	cause error // internal detail for logs; may be nil
}

// Error returns the code, the description and the internal cause. Send only Description to
// clients.
func (e *Error) Error() string {
	s := e.Code + ": " + e.Description
	if e.cause != nil {
		s += ": " + e.cause.Error()
	}
	return s
}

// Unwrap returns the internal cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same Code (and Description when target
// has one), so errors.Is(err, &Error{Code: CodeInvalidToken}) tests the code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Description == "" || t.Description == e.Description)
}

func invalidRequest(desc string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Description: desc}
}

func invalidToken(desc string, cause error) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: CodeInvalidToken, Description: desc, cause: cause}
}

// Client-facing descriptions of refused tokens. Tests compare against them.
const (
	descQueryToken      = "send the access token in the Authorization header, not in the query string"
	descTwoHeaders      = "send exactly one Authorization header"
	descNotBearer       = "the Authorization header must be: Bearer <token>"
	descTokenSyntax     = "the bearer token has characters a token cannot have"
	descTooLong         = "token is too long"
	descNotJWT          = "token is not a well-formed JWT"
	descAlg             = "token signing algorithm is not accepted"
	descNoIssuer        = "token has no issuer"
	descUntrusted       = "token issuer is not trusted"
	descUnknownKey      = "unknown signing key"
	descBadSignature    = "token signature is invalid"
	descKeysUnavailable = "the token issuer's signing keys are unavailable; try again later"
	descNotVerified     = "token could not be verified in time; try again"
	descInvalid         = "token is invalid"
	descExpired         = "token is expired"
	descNoExpiry        = "token has no expiry"
	descNotYetValid     = "token is not yet valid"
	descIssuedInFuture  = "token was issued in the future"
	descAudience        = "token audience does not include this resource"
	descNoSubject       = "token has no subject"
	descUnknownAPIKey   = "unknown API key"
)

// Package credential provides the gateway's own credentials toward HTTP upstreams. The token a
// client presents authenticates it to the gateway only and is never forwarded (MCP
// 2025-11-25, Authorization, "Token Passthrough"; mcp-notes §11.4): each upstream gets a
// header from a Source instead, set by the RoundTripper that Transport wraps around the
// upstream's HTTP transport.
//
// Three sources are built in: a header read from a file (a mounted secret, re-read when it is
// rotated), the OAuth 2.0 client credentials grant, and RFC 8693 token exchange of the
// principal's own token for one the upstream's authorization server issues for that upstream.
//
//	static := credential.FileHeader("Authorization", "/run/secrets/search-token", "Bearer ")
//	service := credential.ClientCredentials(credential.ClientCredentialsConfig{
//		TokenURL: "https://as.example.com/token", ClientID: "manifold", ClientSecret: secret,
//		Resource: "https://search.example.com/mcp",
//	})
//	rt := credential.Transport(http.DefaultTransport, service)
//
//	// Per principal: the gateway remembers each authenticated request's token, and the
//	// upstream connection of that principal uses the token exchanged for it.
//	ex := credential.NewExchanger(credential.ExchangeConfig{TokenURL: ..., Resource: ...})
//	ex.Remember(principal, bearerToken, tokenExpiry)
//	rt = credential.Transport(http.DefaultTransport, ex.For(principal))
//
// The package does not log; its errors never carry a token, a secret or a header value.
package credential

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrUnavailable is wrapped by the error of a request that Transport failed because a Source
// could not give its header: the upstream was not called.
var ErrUnavailable = errors.New("upstream credential unavailable")

// ErrNoSubjectToken is wrapped by an Exchanger's error when the principal has no current token
// to exchange: none was remembered, it expired, or the principal was forgotten. The client must
// call again with a fresh token.
var ErrNoSubjectToken = errors.New("principal has no current token to exchange")

// TokenError is an error answer of a token endpoint (RFC 6749 §5.2): its HTTP status and, when
// the body was OAuth error JSON, the error code and description. It never holds a token.
type TokenError struct {
	// StatusCode is the HTTP status of the answer (200 when the AS put an error in one).
	StatusCode int
	// Code is the `error` member, e.g. "invalid_grant"; empty if the body had none.
	Code string
	// Description is the `error_description` member, cut to 256 bytes; may be empty.
	Description string
}

func (e *TokenError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "token endpoint answered %d", e.StatusCode)
	if e.Code != "" {
		fmt.Fprintf(&b, ": %s", e.Code)
	}
	if e.Description != "" {
		fmt.Fprintf(&b, ": %q", e.Description)
	}
	return b.String()
}

// newTokenError builds a TokenError, cutting an over-long description.
func newTokenError(status int, code, description string) *TokenError {
	const maxDescription = 256
	if len(description) > maxDescription {
		description = description[:maxDescription]
	}
	return &TokenError{StatusCode: status, Code: code, Description: description}
}

// Source gives the value of one header (e.g. Authorization) for a request to an upstream.
// Implementations are safe for concurrent use; Header honours ctx while it waits, and its
// error never includes the header's value.
type Source interface {
	Header(ctx context.Context) (name, value string, err error)
}

// Transport returns a RoundTripper that, for every request, asks each source in order and
// sets its header, replacing any header of that name already on the request (a later source
// wins over an earlier one of the same name), then calls base. The caller's request is not
// modified: a clone is sent. A nil base means http.DefaultTransport.
//
// If a source fails, or gives an invalid header name or value, the request fails with an error
// wrapping ErrUnavailable and the source's error, and base is not called. Header values are
// never logged nor put in errors.
//
// The RoundTripper is safe for concurrent use; its CloseIdleConnections is base's.
func Transport(base http.RoundTripper, sources ...Source) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, sources: append([]Source(nil), sources...)}
}

// transport is what Transport returns.
type transport struct {
	base    http.RoundTripper
	sources []Source
}

// Interface guards.
var (
	_ http.RoundTripper                   = (*transport)(nil)
	_ interface{ CloseIdleConnections() } = (*transport)(nil)
	_ Source                              = (*fileHeader)(nil)
	_ Source                              = (*clientCredentials)(nil)
	_ Source                              = exchangerSource{}
)

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	out := req.Clone(ctx)
	for _, s := range t.sources {
		name, value, err := s.Header(ctx)
		if err == nil {
			err = checkHeader(name, value)
		}
		if err != nil {
			// A RoundTripper closes the body, even on error (http.RoundTripper).
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		out.Header.Set(name, value)
	}
	return t.base.RoundTrip(out)
}

// CloseIdleConnections closes base's idle connections, when it can.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// checkHeader reports a header name that is not an RFC 9110 token, or a value with a control
// character other than tab; the error names the header, never the value.
func checkHeader(name, value string) error {
	if name == "" {
		return errors.New("source gave no header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("source gave an invalid header name %q", name)
		}
	}
	if !validValue(value) {
		return fmt.Errorf("source gave an invalid value for header %s", name)
	}
	return nil
}

// validValue reports whether v may be a header field value: no control characters but tab.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c may appear in an RFC 9110 token (a header name).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

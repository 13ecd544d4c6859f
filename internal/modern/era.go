package modern

import (
	"encoding/json"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Era says which rules serve one HTTP request on an endpoint that speaks both 2026-07-28 and
// the session-based revisions (mcp-2026-notes §2.2).
type Era int

const (
	// LegacySessionless is a request with no modern signal, no session and no initialize:
	// the session-based rules refuse it for its missing session.
	LegacySessionless Era = iota
	// Modern is a stateless 2026-07-28 request: it is validated by [Validate] and served with
	// no session; any Mcp-Session-Id it carries is ignored.
	Modern
	// LegacySession is a request of an initialized session (it carries Mcp-Session-Id).
	LegacySession
	// LegacyHandshake is an initialize that starts a session.
	LegacyHandshake
)

// String returns the era's name as logs and audit records show it.
func (e Era) String() string {
	switch e {
	case Modern:
		return "modern"
	case LegacySession:
		return "legacy_session"
	case LegacyHandshake:
		return "legacy_handshake"
	default:
		return "legacy_sessionless"
	}
}

// Classify returns the era of one HTTP POST from its MCP-Protocol-Version header value
// (versionHeader, "" when absent), whether it carries an Mcp-Session-Id, and its method and
// params (mcp-2026-notes §2.2):
//
//   - Modern when the header names a version other than the session-based ones
//     (2026-07-28, a later one, or one Manifold does not know), or when params._meta holds
//     a protocol version (of any type). Either signal alone is enough, so that a request
//     showing one is never served by the session rules; [Validate] then insists on both.
//     One exception: a request of a session whose _meta names a session-based version
//     speaks its session's era.
//   - otherwise LegacySession when it carries a session, LegacyHandshake for initialize,
//     and LegacySessionless for anything else.
func Classify(versionHeader string, hasSession bool, method string, params json.RawMessage) Era {
	if v := trimOWS(versionHeader); v != "" && !protocol.IsSupportedVersion(v) {
		return Modern
	}
	if v, ok := metaVersion(params); ok && !(hasSession && protocol.IsSupportedVersion(v)) {
		return Modern
	}
	switch {
	case hasSession:
		return LegacySession
	case method == protocol.MethodInitialize:
		return LegacyHandshake
	default:
		return LegacySessionless
	}
}

// metaVersion returns the protocol version params._meta holds (as a string when it is one)
// and whether it holds one at all.
func metaVersion(params json.RawMessage) (string, bool) {
	if len(params) == 0 {
		return "", false
	}
	meta, ok, err := protocol.Member(params, "_meta")
	if err != nil || !ok {
		return "", false
	}
	raw, ok, err := protocol.Member(meta, protocol.MetaProtocolVersion)
	if err != nil || !ok {
		return "", false
	}
	var v string
	_ = unmarshalString(raw, &v) // a version of another type is still a modern signal
	return v, true
}

package gateway

import (
	"crypto/sha256"
	"encoding/hex"
)

// fingerprint names a session in logs. A session id is a bearer secret: whoever holds it can
// act in the session, so logs carry a short hash of it instead.
func fingerprint(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:6])
}

// sessionFingerprint is fingerprint for a request's session, "" for a request without one
// (2026-07-28).
func sessionFingerprint(sessionID string) string {
	if sessionID == "" {
		return ""
	}
	return fingerprint(sessionID)
}

package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/session"
)

// TestApprovalRememberedBeforeUpgradeIsAskedAgain: an approval remembered under the key of
// earlier releases (the principal's key, not marked as a principal's) is not honoured: the
// call is asked again, never let through on it; the README's approval section says so.
func TestApprovalRememberedBeforeUpgradeIsAskedAgain(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	who := pipeline.ClientContext{Principal: session.Principal{Issuer: session.APIKeyIssuer, Subject: "alice"}, SessionID: "s1"}
	target := &pipeline.Target{Upstream: "crm", Original: "wipe", Arguments: json.RawMessage(`{"all":true}`)}
	// The key as releases before the principal/session marker made it.
	h := sha256.New()
	for _, s := range []string{who.Principal.Key(), target.Upstream, target.Original} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(CanonicalJSON(target.Arguments))
	earlier := hex.EncodeToString(h.Sum(nil))

	a := &Remembered{TTL: time.Hour, Now: func() time.Time { return now }, granted: map[string]time.Time{earlier: now.Add(time.Hour)}}
	key := a.Key(who, target)
	if key == earlier || a.Holds(context.Background(), key) {
		t.Errorf("an approval remembered under the earlier key is honoured (key %s)", key)
	}
	a.Grant(context.Background(), key)
	if !a.Holds(context.Background(), key) {
		t.Error("the approval asked again is not remembered")
	}
}

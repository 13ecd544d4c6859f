package gateway

import (
	"testing"

	"github.com/manifold-mcp/manifold/internal/audit"
)

// TestApprovalOutcome: each approval decision the chain records counts once, as its outcome;
// a question asked, a round that continues an approved call and a replayed state do not.
func TestApprovalOutcome(t *testing.T) {
	for _, tt := range []struct {
		effect, rule, reason, want string
	}{
		{"allow", "operator", "", "approved"},
		{"allow", "elicitation", "", "approved"},
		{"allow", "remembered", "", "remembered"},
		{"deny", "operator", reasonApprovalDeclined, "declined"},
		{"deny", "elicitation:decline", reasonApprovalDeclined, "declined"},
		{"deny", "timeout", reasonApprovalTimeout, "timed_out"},
		{"deny", "operator:timeout", reasonApprovalTimeout, "timed_out"},
		{"deny", "needs-a-person", reasonApprovalNeeded, "unavailable"},
		{"deny", "operator:taken-over", reasonApprovalNeeded, "unavailable"},
		{"ask", "elicitation", "", ""},
		{"allow", "continued", "", ""},
		{"deny", "continued:replayed", "", ""},
		{"deny", "elicitation:replayed", "", ""},
	} {
		if got := approvalOutcome(audit.Decision{Check: "approval", Effect: tt.effect, Rule: tt.rule}, tt.reason); got != tt.want {
			t.Errorf("approvalOutcome(%s, %s, %s) = %q, want %q", tt.effect, tt.rule, tt.reason, got, tt.want)
		}
	}
}

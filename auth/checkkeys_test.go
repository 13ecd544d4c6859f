package auth_test

import (
	"testing"

	"github.com/manifold-mcp/manifold/auth"
)

// TestCheckAPIKeys: CheckAPIKeys refuses what SetAPIKeys refuses (two keys of one name), and
// accepts what it accepts.
func TestCheckAPIKeys(t *testing.T) {
	one := auth.APIKey{Name: "ci", Hash: auth.HashAPIKey("mfk_one-key-of-the-tests-0001")}
	two := auth.APIKey{Name: "ci", Hash: auth.HashAPIKey("mfk_two-key-of-the-tests-0002")}
	if err := auth.CheckAPIKeys([]auth.APIKey{one}); err != nil {
		t.Errorf("one key: %v", err)
	}
	if err := auth.CheckAPIKeys([]auth.APIKey{one, two}); err == nil {
		t.Error("two keys named ci were accepted")
	}
}

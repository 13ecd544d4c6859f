package audit_test

import (
	"encoding/json"
	"testing"

	"github.com/manifold-mcp/manifold/audit"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, args string
		names      []string
		want       string
	}{
		{"nothing to redact", `{"path":"/tmp","n":12345678901234567890}`, nil, `{"path":"/tmp","n":12345678901234567890}`},
		{"a member at any depth, any case", `{"user":"a","Password":"p","nested":[{"token":{"x":1}},{"keep":2}]}`, []string{"password", "TOKEN"},
			`{"nested":[{"token":"[redacted]"},{"keep":2}],"Password":"[redacted]","user":"a"}`},
		{"big numbers stay exact", `{"n":12345678901234567890,"secret":1}`, []string{"secret"}, `{"n":12345678901234567890,"secret":"[redacted]"}`},
		{"not JSON is redacted whole", `{"secret":`, []string{"secret"}, `"[redacted]"`},
		{"no arguments", ``, []string{"secret"}, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := audit.Redact(json.RawMessage(tt.args), tt.names)
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("Redact = %s, want %s", got, tt.want)
			}
		})
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	if len(got) == 0 || want == "" {
		return len(got) == 0 && want == ""
	}
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

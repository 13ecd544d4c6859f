package audit_test

import (
	"encoding/json"
	"testing"

	"github.com/manifold-mcp/manifold/internal/audit"
)

// TestRedactArgumentsNamed: the configured names alone (SkipDefaults), at any depth and in any
// case; big numbers kept exact; what is not JSON redacted whole.
func TestRedactArgumentsNamed(t *testing.T) {
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
			got := audit.RedactArguments(json.RawMessage(tt.args), audit.Redaction{Names: tt.names, SkipDefaults: true})
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("RedactArguments = %s, want %s", got, tt.want)
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

// TestRedactArgumentsRedactsSecretsByDefault: the common names of secrets are redacted
// without any configuration, at any depth and in any spelling; a configured list adds to
// them; SkipRedactDefaults leaves only the list.
func TestRedactArgumentsRedactsSecretsByDefault(t *testing.T) {
	args := json.RawMessage(`{"path":"/tmp","max_tokens":5,"author":"a","ssn":"1",
		"password":"p","passwd":"p","apiKey":"k","API-KEY":"k","x_api_key":"k","access_token":"t","idToken":"t",
		"client_secret":"s","private_key":"k","Authorization":"b","cookie":"c","Set-Cookie":"c",
		"credentials":{"user":"u"},"basic_auth":"b","nested":[{"refresh_token":"t","keep":2}]}`)
	tests := []struct {
		name string
		r    audit.Redaction
		want string
	}{
		{"defaults", audit.Redaction{}, `{"path":"/tmp","max_tokens":5,"author":"a","ssn":"1",
			"password":"[redacted]","passwd":"[redacted]","apiKey":"[redacted]","API-KEY":"[redacted]","x_api_key":"[redacted]",
			"access_token":"[redacted]","idToken":"[redacted]","client_secret":"[redacted]","private_key":"[redacted]",
			"Authorization":"[redacted]","cookie":"[redacted]","Set-Cookie":"[redacted]","credentials":"[redacted]",
			"basic_auth":"[redacted]","nested":[{"refresh_token":"[redacted]","keep":2}]}`},
		{"a list adds to the defaults", audit.Redaction{Names: []string{"SSN"}}, `{"path":"/tmp","max_tokens":5,"author":"a","ssn":"[redacted]",
			"password":"[redacted]","passwd":"[redacted]","apiKey":"[redacted]","API-KEY":"[redacted]","x_api_key":"[redacted]",
			"access_token":"[redacted]","idToken":"[redacted]","client_secret":"[redacted]","private_key":"[redacted]",
			"Authorization":"[redacted]","cookie":"[redacted]","Set-Cookie":"[redacted]","credentials":"[redacted]",
			"basic_auth":"[redacted]","nested":[{"refresh_token":"[redacted]","keep":2}]}`},
		{"defaults off", audit.Redaction{SkipDefaults: true, Names: []string{"password"}}, `{"path":"/tmp","max_tokens":5,"author":"a","ssn":"1",
			"password":"[redacted]","passwd":"p","apiKey":"k","API-KEY":"k","x_api_key":"k","access_token":"t","idToken":"t",
			"client_secret":"s","private_key":"k","Authorization":"b","cookie":"c","Set-Cookie":"c",
			"credentials":{"user":"u"},"basic_auth":"b","nested":[{"refresh_token":"t","keep":2}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := string(args)
			got := audit.RedactArguments(args, tt.r)
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("RedactArguments = %s\nwant %s", got, tt.want)
			}
			if string(args) != before {
				t.Errorf("RedactArguments modified its input")
			}
		})
	}
	if got := audit.RedactArguments(json.RawMessage(`{"token":`), audit.Redaction{}); string(got) != `"[redacted]"` {
		t.Errorf("not JSON: %s, want it redacted whole", got)
	}
	if got := audit.RedactArguments(nil, audit.Redaction{}); got != nil {
		t.Errorf("no arguments: %s, want nil", got)
	}
}

package modern

import (
	"encoding/json"
	"testing"
)

func TestClassify(t *testing.T) {
	const modernMeta = `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`
	tests := []struct {
		name       string
		header     string
		hasSession bool
		method     string
		params     string
		want       Era
	}{
		{"modern header", "2026-07-28", false, "tools/list", `{}`, Modern},
		{"later version header", "2027-01-01", false, "tools/list", ``, Modern},
		{"unknown version header", "v999.0.0", false, "tools/list", ``, Modern},
		{"header with OWS", " \t2026-07-28 ", false, "tools/list", ``, Modern},
		{"meta version without header", "", false, "tools/list", modernMeta, Modern},
		{"meta version under a legacy header", "2025-11-25", false, "tools/list", modernMeta, Modern},
		{"meta version of the wrong type is still a signal", "", false, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}`, Modern},
		{"modern header beats a session", "2026-07-28", true, "tools/call", `{}`, Modern},
		{"modern header on initialize", "2026-07-28", false, "initialize", `{}`, Modern},
		{"meta version beats a session", "2025-11-25", true, "tools/list", modernMeta, Modern},
		{"session with legacy header", "2025-11-25", true, "tools/list", `{}`, LegacySession},
		{"session whose meta names its legacy version", "2025-11-25", true, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`, LegacySession},
		{"session whose meta names an unknown version", "2025-11-25", true, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0"}}`, Modern},
		{"legacy meta version without a session", "", false, "tools/list", `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}`, Modern},
		{"session without header", "", true, "tools/list", ``, LegacySession},
		{"legacy header with OWS", " 2025-06-18\t", true, "tools/list", ``, LegacySession},
		{"initialize without header", "", false, "initialize", `{"protocolVersion":"2025-11-25"}`, LegacyHandshake},
		{"initialize with legacy header", "2025-06-18", false, "initialize", `{}`, LegacyHandshake},
		{"nothing", "", false, "tools/list", ``, LegacySessionless},
		{"meta without version", "", false, "tools/list", `{"_meta":{"progressToken":1}}`, LegacySessionless},
		{"meta not an object", "", false, "tools/list", `{"_meta":[1]}`, LegacySessionless},
		{"params not an object", "", false, "tools/list", `[1,2]`, LegacySessionless},
		{"legacy header, no session", "2025-11-25", false, "server/discover", `{}`, LegacySessionless},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var params json.RawMessage
			if tt.params != "" {
				params = json.RawMessage(tt.params)
			}
			if got := Classify(tt.header, tt.hasSession, tt.method, params); got != tt.want {
				t.Errorf("Classify(%q, %v, %q, %s) = %v, want %v", tt.header, tt.hasSession, tt.method, tt.params, got, tt.want)
			}
		})
	}
}

func TestEraString(t *testing.T) {
	for era, want := range map[Era]string{Modern: "modern", LegacySession: "legacy_session", LegacyHandshake: "legacy_handshake", LegacySessionless: "legacy_sessionless"} {
		if got := era.String(); got != want {
			t.Errorf("Era(%d).String() = %q, want %q", era, got, want)
		}
	}
}

package config_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// testKeysYAML is a key list for configs that need one (a Redis session store), as the last
// line of a file so that the lines of the others do not move. Its secret decodes to
// testKeySecret.
const testKeysYAML = "keys: [{id: k1, secret: \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"}]\n"

const testKeySecret = "0123456789abcdef0123456789abcdef"

// Messages and values of TestKeys.
const (
	short    = "too short: 16 bytes once decoded, want at least 32 random ones; make one with `openssl rand -base64 32`"
	notB64   = "not base64: write the secret in base64 (the value is not shown); make one with `openssl rand -base64 32`"
	required = "required with session_store type redis (replicas seal the messages they send each other with it): add `keys: [{id: k1, secret: ${MANIFOLD_KEY_1}}]` with the same secret on every replica; make one with `openssl rand -base64 32`"
	redis    = "session_store:\n  type: redis\n  url: redis://a:6379\n"
	good     = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
)

// TestKeys: the key list as read, and the problems of one that cannot be used, never quoting
// a secret.
func TestKeys(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	secret2 := bytes.Repeat([]byte{0xfb}, 48)
	tests := []struct {
		name, yaml string
		env        map[string]string
		want       []config.Key
		problems   []config.Problem
	}{
		{name: "absent", yaml: "upstreams: []\n"},
		{name: "standard base64, padded", yaml: testKeysYAML, want: []config.Key{{ID: "k1", Secret: []byte(testKeySecret)}}},
		{name: "from the environment, URL-safe or unpadded, rotation order kept", yaml: "keys:\n  - {id: k2, secret: \"${MANIFOLD_KEY_2}\"}\n  - {id: k1, secret: \"${MANIFOLD_KEY_1}\"}\n",
			env:  map[string]string{"MANIFOLD_KEY_1": strings.TrimSuffix(good, "="), "MANIFOLD_KEY_2": strings.Repeat("-_v7", 16) + "\n"},
			want: []config.Key{{ID: "k2", Secret: secret2}, {ID: "k1", Secret: []byte(testKeySecret)}}},
		{name: "with a memory store: allowed", yaml: "session_store: {type: memory}\n" + testKeysYAML, want: []config.Key{{ID: "k1", Secret: []byte(testKeySecret)}}},
		{name: "with redis", yaml: redis + testKeysYAML, want: []config.Key{{ID: "k1", Secret: []byte(testKeySecret)}}},
		{name: "redis without keys", yaml: redis + "upstreams: []\n", problems: []config.Problem{p(2, "keys", required)}},
		{name: "redis with an empty list", yaml: redis + "keys: []\n", problems: []config.Problem{p(2, "keys", required)}},
		{name: "short secret", yaml: "keys:\n  - id: k1\n    secret: MDEyMzQ1Njc4OWFiY2RlZg==\n", problems: []config.Problem{p(3, "keys[0].secret", short)}},
		{name: "not base64, not quoted", yaml: "keys:\n  - id: k1\n    secret: \"hunter2 is my password!!\"\n", problems: []config.Problem{p(3, "keys[0].secret", notB64)}},
		{name: "missing id and secret", yaml: "keys:\n  - {}\n", problems: []config.Problem{
			p(2, "keys[0]", "required: id, a name for the key like k1 (it is written into what the key seals)"),
			p(2, "keys[0]", "required: secret, at least 32 random bytes in base64, like ${MANIFOLD_KEY_1}: make one with `openssl rand -base64 32`"),
		}},
		{name: "bad and duplicate ids", yaml: "keys:\n  - {id: k1, secret: " + good + "}\n  - {id: \"k 2\", secret: " + good + "}\n  - {id: k1, secret: " + good + "}\n  - {id: \"\", secret: " + good + "}\n", problems: []config.Problem{
			p(3, "keys[1].id", `"k 2" is not a key id: use 1 to 32 characters from A-Z a-z 0-9 _ - .`),
			p(4, "keys[2].id", `"k1" is also the id of keys[0] (line 2): ids must be unique`),
			p(5, "keys[3].id", `"" is not a key id: use 1 to 32 characters from A-Z a-z 0-9 _ - .`),
		}},
		{name: "not a list", yaml: "keys: {id: k1}\n", problems: []config.Problem{p(1, "keys", "want a list of keys (lines starting with `- id:`), got a mapping")}},
		{name: "unknown field", yaml: "keys:\n  - {id: k1, secret: " + good + ", purpose: bus}\n", problems: []config.Problem{
			p(2, "keys[0].purpose", "unknown field (known: id, secret)"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("gw.yaml", []byte(tt.yaml), env(tt.env))
			checkProblems(t, "Parse", err, tt.problems)
			if err != nil {
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("a message quotes the secret: %v", err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, cfg.Keys); diff != "" {
				t.Errorf("Keys (-want +got):\n%s", diff)
			}
		})
	}
}

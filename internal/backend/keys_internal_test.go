package backend

import (
	"errors"
	"testing"

	"github.com/manifold-mcp/manifold/internal/config"
)

// testKeysYAML is the key list of test gateways on Redis, a line of top-level YAML.
const testKeysYAML = "keys: [{id: test, secret: \"dGhlIGtleSBvZiB0aGUgZ2F0ZXdheSB0ZXN0cyAwMTIz\"}]\n"

// TestKeysOf: a gateway on Redis without keys is refused, naming what to add; one with keys
// seals, and one with neither runs without.
func TestKeysOf(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		shared  bool
		wantErr error
		want    bool
	}{
		{name: "memory, no keys", yaml: "upstreams: []\n"},
		{name: "memory, keys", yaml: testKeysYAML, want: true},
		{name: "redis, keys", yaml: testKeysYAML, shared: true, want: true},
		{name: "redis given without keys", yaml: "upstreams: []\n", shared: true, wantErr: errNoKeys},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("t.yaml", []byte(tt.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			keys, err := keysOf(cfg, tt.shared)
			if !errors.Is(err, tt.wantErr) || (keys != nil) != tt.want {
				t.Errorf("keysOf = %v, %v; want keys %v, error %v", keys, err, tt.want, tt.wantErr)
			}
		})
	}
}

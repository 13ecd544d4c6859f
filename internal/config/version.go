package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Version names the configuration a gateway runs: the first 16 hex digits of the SHA-256 of
// the built configuration (after imports, overrides and the expansion of environment
// variables), so that two replicas show the same version exactly when they run the same
// settings. A digest cannot be turned back into the secrets it covers; a secret that differs
// between replicas shows as a different version, which is what an operator comparing them
// needs to see.
func (c *Config) Version() string {
	data, err := json.Marshal(c)
	if err != nil {
		// Every field of Config encodes; were one not to, the version still names the
		// failure rather than a configuration.
		data = []byte("unencodable: " + err.Error())
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

package gateway

// testKeysYAML is the key list of test gateways on Redis, a line of top-level YAML.
const testKeysYAML = "keys: [{id: test, secret: \"dGhlIGtleSBvZiB0aGUgZ2F0ZXdheSB0ZXN0cyAwMTIz\"}]\n"

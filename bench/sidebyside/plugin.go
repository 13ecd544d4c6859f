package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// pluginGateway starts a gateway over the stdio echo upstream, like gateway-stdio, with one
// policy plugin asked about every call (allowplugin: Decide only, it allows).
func (f *fleet) pluginGateway(bin, echo string, floor []string) (target, error) {
	path := filepath.Join(bin, "allow-plugin")
	data, err := os.ReadFile(path)
	if err != nil {
		return target{}, fmt.Errorf("the benchmark's plugin (bench/run builds it): %w", err)
	}
	sum := sha256.Sum256(data)
	abs, err := filepath.Abs(path)
	if err != nil {
		return target{}, err
	}
	settings := fmt.Sprintf("plugins:\n  - {name: allow, path: %q, sha256: %s}\n", abs, hex.EncodeToString(sum[:]))
	url, err := f.gateway(bin, "plugin", settings, fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo))
	if err != nil {
		return target{}, err
	}
	return target{name: "gateway-plugin", url: url, floor: floor, versus: "gateway-stdio"}, nil
}

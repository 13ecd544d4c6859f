package backend

import (
	"errors"
	"fmt"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// errNoKeys is returned by Open for a gateway that shares a Redis session store without a
// key list: its replicas could not seal what they send each other through Redis.
var errNoKeys = errors.New("a Redis session store needs the gateway's keys (config `keys`), with which replicas seal what they send each other through Redis: add `keys: [{id: k1, secret: ${MANIFOLD_KEY_1}}]`, the same on every replica, with a secret made by `openssl rand -base64 32`")

// keysOf builds the gateway's key list from the config (`keys`); nil when it has none, which
// is an error (errNoKeys) when shared says that the session store is Redis.
func keysOf(cfg *config.Config, shared bool) (*seal.Keys, error) {
	if len(cfg.Keys) == 0 {
		if shared {
			return nil, errNoKeys
		}
		return nil, nil
	}
	list := make([]seal.Key, len(cfg.Keys))
	for i, k := range cfg.Keys {
		list[i] = seal.Key{ID: k.ID, Secret: k.Secret}
	}
	keys, err := seal.NewKeys(list)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	return keys, nil
}

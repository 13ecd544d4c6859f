// Package sealtest gives tests sealers of fixed keys: stores and buses that seal, as the
// gateway's replicas do, and others whose keys differ.
package sealtest

import (
	"bytes"

	"github.com/manifold-mcp/manifold/internal/seal"
)

// Sealer returns the sealer of purpose of a key list of one key: id, with a secret of fill
// bytes. Two calls with the same id and fill open each other's seals.
func Sealer(purpose, id string, fill byte) *seal.Sealer {
	keys, err := seal.NewKeys([]seal.Key{{ID: id, Secret: bytes.Repeat([]byte{fill}, seal.MinSecretLen)}})
	if err != nil {
		panic("sealtest: " + err.Error()) // fixed, valid keys
	}
	return keys.Sealer(purpose)
}

package config

import (
	"encoding/base64"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds the gateway's own keys (top-level `keys`), with which it seals what it
// hands to others without trusting them with its content: the messages between replicas
// on Redis, and what a held call's record keeps of its session.

// Limits of a key entry.
const (
	// MinKeySecretLen is the least length of a key's secret once decoded, in bytes: 256
	// random bits.
	MinKeySecretLen = 32
	// maxKeyIDLen bounds a key's id, which travels in everything sealed with it.
	maxKeyIDLen = 32
)

// makeKeyHint says how to make a secret, in messages.
const makeKeyHint = "make one with `openssl rand -base64 32`"

// Key is one of the gateway's keys (an entry of the top-level `keys` list). The first key
// of the list seals; every key of the list opens what it sealed, so a key is rotated by
// putting a new one first and keeping the old one after it until what it sealed has expired
// (the longest of the replica lease, stream retention and approval timeout; a few minutes).
// Every replica sharing a session store needs the same list.
type Key struct {
	// ID names the key in what it sealed (key `id`): 1 to 32 characters from A-Z a-z 0-9 _
	// - ., unique in the list. Never reuse the id of a retired key for another secret.
	ID string

	// Secret is the key's secret, decoded (key `secret`: base64, standard or URL-safe,
	// padding optional, of at least 32 random bytes, like the output of `openssl rand
	// -base64 32`; usually `${MANIFOLD_KEY_1}`, from the environment).
	//
	// Security: whoever holds it can read and forge what the replicas send each other.
	// Messages never quote it.
	Secret []byte
}

// keyList decodes the top-level `keys` list.
func keyList(dst *[]Key) decodeFunc {
	return listOf(dst, "a list of keys (lines starting with `- id:`)", func(k *Key) decodeFunc {
		return func(d *decoder, n *yaml.Node, path string) bool {
			return d.mapping(n, path, "a mapping with `id:` and `secret:`", []field{
				{key: "id", decode: str(&k.ID)},
				{key: "secret", decode: keySecret(&k.Secret)},
			})
		}
	})
}

// keySecret decodes a key's secret from base64, never quoting it.
func keySecret(dst *[]byte) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		var s string
		if !str(&s)(d, n, path) {
			return false
		}
		b, ok := decodeKeySecret(s)
		if !ok {
			d.problemf(n.Line, path, "not base64: write the secret in base64 (the value is not shown); %s", makeKeyHint)
			return false
		}
		*dst = b
		return true
	}
}

// decodeKeySecret decodes s, base64 in the standard or the URL-safe alphabet, with or
// without padding, surrounding space ignored.
func decodeKeySecret(s string) ([]byte, bool) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// keys checks the key list, and that there is one where something needs it.
func (v *validator) keys(c *Config, w where) {
	ids := map[string]int{}
	for i, k := range c.Keys {
		p := fmt.Sprintf("keys[%d]", i)
		switch j, dup := ids[k.ID]; {
		case !w.ix.present(p + ".id"):
			v.check(w, p, "required: id, a name for the key like k1 (it is written into what the key seals)")
		case !validKeyID(k.ID):
			v.check(w, p+".id", fmt.Sprintf("%s is not a key id: use 1 to %d characters from A-Z a-z 0-9 _ - .", quote(k.ID), maxKeyIDLen))
		case dup:
			v.check(w, p+".id", fmt.Sprintf("%s is also the id of keys[%d] (line %d): ids must be unique", quote(k.ID), j, w.ix.line(fmt.Sprintf("keys[%d]", j))))
		default:
			ids[k.ID] = i
		}
		switch {
		case !w.ix.present(p + ".secret"):
			v.check(w, p, "required: secret, at least 32 random bytes in base64, like ${MANIFOLD_KEY_1}: "+makeKeyHint)
		case len(k.Secret) < MinKeySecretLen:
			v.check(w, p+".secret", fmt.Sprintf("too short: %d bytes once decoded, want at least %d random ones; %s", len(k.Secret), MinKeySecretLen, makeKeyHint))
		}
	}
	if len(c.Keys) == 0 && c.SessionStore.Type == StoreRedis && w.ix.usable("keys") && w.ix.usable("session_store.type") {
		v.problems = append(v.problems, Problem{File: w.file, Line: w.ix.line("session_store.type"), Field: "keys",
			Message: "required with session_store type redis (replicas seal the messages they send each other with it): add `keys: [{id: k1, secret: ${MANIFOLD_KEY_1}}]` with the same secret on every replica; " + makeKeyHint})
	}
}

// validKeyID reports whether s is a key id: 1 to maxKeyIDLen characters from A-Z a-z 0-9
// _ - .
func validKeyID(s string) bool {
	return s != "" && len(s) <= maxKeyIDLen && onlyChars(s, "_-.")
}

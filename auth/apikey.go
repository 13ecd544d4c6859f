package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/manifold-mcp/manifold/internal/session"
)

// APIKeyPrefix begins every API key. A bearer token with this prefix is looked up among the
// API keys and never reaches the OIDC verifier.
const APIKeyPrefix = "mfk_"

// hashPrefix begins APIKey.Hash.
const hashPrefix = "sha256:"

// APIKey is one configured API key. The key itself is not stored, only its hash. A request
// that presents it is made by the principal {Issuer: session.APIKeyIssuer, Subject: Name}
// with the claims below.
type APIKey struct {
	// Name is the principal's subject; unique among the keys.
	Name string `json:"name" yaml:"name"`
	// Hash is "sha256:" and the 64 hex digits of the SHA-256 of the whole key string (prefix
	// included), as HashAPIKey returns it.
	Hash string `json:"hash" yaml:"hash"`
	// Email, Groups, Roles and Scopes are what policy reads of the principal.
	Email  string   `json:"email,omitempty" yaml:"email,omitempty"`
	Groups []string `json:"groups,omitempty" yaml:"groups,omitempty"`
	Roles  []string `json:"roles,omitempty" yaml:"roles,omitempty"`
	Scopes []string `json:"scopes,omitempty" yaml:"scopes,omitempty"`
}

// Principal returns the principal a request that presents the key is made by: the subject is
// the key's name, the claims its Email, Groups, Roles and Scopes (copied). It is what the
// Authenticator gives such a request, and what `gateway explain -api-key NAME` decides for.
func (k *APIKey) Principal() session.Principal {
	return session.Principal{
		Issuer:  session.APIKeyIssuer,
		Subject: k.Name,
		Email:   k.Email,
		Groups:  slices.Clone(k.Groups),
		Roles:   slices.Clone(k.Roles),
		Scopes:  slices.Clone(k.Scopes),
	}
}

// FindAPIKey returns the entry of keys whose Hash is the hash of key, the key itself (as a
// client presents it), and whether there is one. An entry with a malformed Hash matches
// nothing.
func FindAPIKey(keys []APIKey, key string) (APIKey, bool) {
	want := HashAPIKey(key)
	for _, k := range keys {
		if subtle.ConstantTimeCompare([]byte(strings.ToLower(k.Hash)), []byte(want)) == 1 {
			return k, true
		}
	}
	return APIKey{}, false
}

// NewAPIKey returns a new random key, APIKeyPrefix followed by 32 bytes from crypto/rand in
// base64url without padding, and its hash for APIKey.Hash. Give the key to its user once;
// keep only the hash.
func NewAPIKey() (key, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("new API key: %w", err)
	}
	key = APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, HashAPIKey(key), nil
}

// HashAPIKey returns the hash of key in the form APIKey.Hash takes: "sha256:<64 hex>".
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// parseHash decodes an APIKey.Hash, accepting upper- or lower-case hex digits.
func parseHash(h string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(h, hashPrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return out, fmt.Errorf(`must be "sha256:" followed by 64 hex digits (see HashAPIKey)`)
	}
	if _, err := hex.Decode(out[:], []byte(hexPart)); err != nil {
		return out, fmt.Errorf(`must be "sha256:" followed by 64 hex digits (see HashAPIKey)`)
	}
	return out, nil
}

// apiKey is a validated APIKey, ready for lookups.
type apiKey struct {
	hash      [sha256.Size]byte
	principal session.Principal
}

// buildAPIKeys validates keys and returns them ready for lookups, or every problem found.
// where(i) names entry i in messages.
func buildAPIKeys(keys []APIKey, where func(i int) string) ([]apiKey, error) {
	var errs []error
	out := make([]apiKey, 0, len(keys))
	names := make(map[string]int, len(keys))
	hashes := make(map[[sha256.Size]byte]int, len(keys))
	for i, k := range keys {
		if k.Name == "" {
			errs = append(errs, fmt.Errorf("%s: name: must not be empty", where(i)))
		} else if j, dup := names[k.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: name: %q is already the name of %s; names must be unique", where(i), k.Name, where(j)))
		} else {
			names[k.Name] = i
		}
		h, err := parseHash(k.Hash)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: hash: %w", where(i), err))
		} else if j, dup := hashes[h]; dup {
			errs = append(errs, fmt.Errorf("%s: hash: same as the hash of %s; each key must be different", where(i), where(j)))
		} else {
			hashes[h] = i
		}
		out = append(out, apiKey{hash: h, principal: k.Principal()})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// lookupAPIKey returns the key whose hash is the hash of key, or nil. It compares the hash
// with every configured one in constant time and does not stop at a match, so its timing
// says nothing about which key matched or how much of a hash did.
func lookupAPIKey(keys []apiKey, key string) *apiKey {
	sum := sha256.Sum256([]byte(key))
	match := -1
	for i := range keys {
		eq := subtle.ConstantTimeCompare(sum[:], keys[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil
	}
	return &keys[match]
}

// apiKeyFields are the keys an entry of an API key file may have.
var apiKeyFields = []string{"name", "hash", "email", "groups", "roles", "scopes"}

// LoadAPIKeys reads API keys from a YAML or JSON file holding a list of entries with the
// fields name, hash, email, groups, roles and scopes, and validates them as New does. Errors
// name the file, the line and the entry (by index from 0), and all problems are reported at
// once. An empty file holds no keys.
//
//	# api-keys.yaml
//	- name: ci
//	  hash: sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//	  scopes: [tools.read]
func LoadAPIKeys(path string) ([]APIKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load API keys: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("load API keys: %s: %w", path, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("load API keys: %s:%d: want a list of API keys (name, hash, ...)", path, root.Line)
	}
	lines := make([]int, len(root.Content))
	where := func(i int) string { return fmt.Sprintf("%s:%d: entry %d", path, lines[i], i) }
	var errs []error
	keys := make([]APIKey, 0, len(root.Content))
	index := make([]int, 0, len(root.Content)) // index[k]: the entry keys[k] came from
	for i, n := range root.Content {
		lines[i] = n.Line
		if n.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s: want a mapping with name and hash", where(i)))
			continue
		}
		bad := false
		for j := 0; j+1 < len(n.Content); j += 2 {
			if f := n.Content[j].Value; !slices.Contains(apiKeyFields, f) {
				errs = append(errs, fmt.Errorf("%s: unknown field %q (want one of %s)", where(i), f, strings.Join(apiKeyFields, ", ")))
				bad = true
			}
		}
		var k APIKey
		if err := n.Decode(&k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where(i), err))
			bad = true
		}
		if !bad {
			keys = append(keys, k)
			index = append(index, i)
		}
	}
	// Validate the entries that decoded, so that one report holds every problem.
	if _, err := buildAPIKeys(keys, func(k int) string { return where(index[k]) }); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("load API keys: %w", errors.Join(errs...))
	}
	return keys, nil
}

// Package seal encrypts and authenticates what the gateway must hand to others it does not
// trust with its content, such as messages between replicas that cross a shared Redis: a
// Sealer seals with the first key of the gateway's key list and opens with any of them.
//
// Each secret of the list is never used as it is: a separate key per use (a purpose, like
// "bus") is derived from it with HKDF-SHA256, so that what one use sealed never opens in
// another. Each sealed message gets a key of its own too, derived from the purpose's key and
// a random 128-bit salt, and is encrypted with AES-256-GCM; the number of messages sealed
// under one secret is therefore not bounded by GCM's limit on random nonces (2^32).
//
//	keys, err := seal.NewKeys([]seal.Key{{ID: "k2", Secret: newSecret}, {ID: "k1", Secret: oldSecret}})
//	bus := keys.Sealer(seal.PurposeBus)
//	sealed := bus.Seal(message, []byte(channel)) // sealed with k2
//	message, err = bus.Open(sealed, []byte(channel)) // opens what k2 or k1 sealed
//
// Rotation: put a new key first, keep the old one after it until nothing it sealed is still
// to be opened, then remove it.
//
// The sealed form, version 1:
//
//	0x01 | len(id) (1 byte) | id | salt (16 bytes) | AES-256-GCM ciphertext and tag (16 bytes)
//
// The bytes before the ciphertext (the header) are authenticated along with the caller's
// associated data.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// Purposes of the keys derived from each secret: one per use, so that what one use sealed
// never opens in another.
const (
	// PurposeBus seals the messages replicas publish to each other on Redis pub/sub.
	PurposeBus = "bus"
	// PurposeHold seals what a held call's record keeps of its session: the session's id.
	PurposeHold = "hold"
	// PurposeRequestState seals the requestState of the input-required results the gateway
	// relays to 2026-07-28 clients: what it must get back unchanged, from the same caller, to
	// continue a call with its upstream.
	PurposeRequestState = "mrtr"
	// PurposeGrants seals the tokens of the upstream grants users connect (package grants),
	// bound to the principal and upstream they belong to.
	PurposeGrants = "grants"
	// PurposeConnect seals what the pages where users connect upstreams keep and hand out
	// (package connect): the records of connect links and authorizations in flight, the
	// sign-in cookie and the CSRF tokens of their forms.
	PurposeConnect = "connect"
)

// MinSecretLen is the least length of a secret, in bytes: 256 bits, from a random source.
const MinSecretLen = 32

// MaxIDLen is the longest key id: it travels in every sealed message.
const MaxIDLen = 64

const (
	version  = 1
	saltLen  = 16
	overhead = 16 // the GCM tag
)

// Errors of Open. Each is wrapped in ErrCannotOpen, so that callers that only need to know
// that a message is not theirs test that one.
var (
	// ErrCannotOpen is what every failure of Open wraps.
	ErrCannotOpen = errors.New("cannot open sealed data")
	// ErrMalformed: the input is not a sealed form this version reads (truncated, another
	// version, not sealed at all).
	ErrMalformed = fmt.Errorf("%w: not a sealed form this build reads", ErrCannotOpen)
	// ErrUnknownKey: the key id of the sealed form is not in the key list (sealed by a
	// gateway with other keys, or with a key removed since).
	ErrUnknownKey = fmt.Errorf("%w: sealed with a key not in the key list", ErrCannotOpen)
	// ErrTampered: authentication failed: the data was changed, the associated data differs,
	// it was sealed for another purpose, or with another secret of the same id.
	ErrTampered = fmt.Errorf("%w: authentication failed", ErrCannotOpen)
)

// Key is one entry of the key list: an id that names it in sealed forms, and its secret.
type Key struct {
	// ID names the key: 1 to MaxIDLen bytes, unique in the list.
	ID string
	// Secret is at least MinSecretLen random bytes.
	Secret []byte
}

// Keys is the key list, ready to derive Sealers. It is safe for concurrent use.
type Keys struct {
	// prks are the secrets after HKDF's extract step, in list order.
	prks []prk
}

type prk struct {
	id  string
	key []byte
}

// NewKeys checks the key list (not empty; ids unique, 1 to MaxIDLen bytes; secrets at least
// MinSecretLen bytes) and returns it. The first key seals; every key opens. It copies what it
// keeps.
func NewKeys(list []Key) (*Keys, error) {
	if len(list) == 0 {
		return nil, errors.New("seal: no keys: give at least one")
	}
	ks := &Keys{}
	seen := map[string]bool{}
	for i, k := range list {
		switch {
		case k.ID == "" || len(k.ID) > MaxIDLen:
			return nil, fmt.Errorf("seal: key %d: the id must have 1 to %d bytes", i, MaxIDLen)
		case seen[k.ID]:
			return nil, fmt.Errorf("seal: key %d: id %q is taken by an earlier key: ids must be unique", i, k.ID)
		case len(k.Secret) < MinSecretLen:
			return nil, fmt.Errorf("seal: key %q: the secret has %d bytes, want at least %d random ones", k.ID, len(k.Secret), MinSecretLen)
		}
		seen[k.ID] = true
		key, err := hkdf.Extract(sha256.New, k.Secret, []byte("manifold seal v1"))
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", k.ID, err)
		}
		ks.prks = append(ks.prks, prk{id: k.ID, key: key})
	}
	return ks, nil
}

// Sealer returns the Sealer of purpose (PurposeBus, PurposeHold, ...): its keys are derived
// from every secret for that purpose alone.
func (ks *Keys) Sealer(purpose string) *Sealer {
	s := &Sealer{byID: map[string]int{}}
	for i, p := range ks.prks {
		key, err := hkdf.Expand(sha256.New, p.key, "purpose "+purpose, 32)
		if err != nil {
			// Expand fails only for a length beyond 255 hash blocks.
			panic("seal: derive a key: " + err.Error())
		}
		s.keys = append(s.keys, derived{id: p.id, key: key})
		s.byID[p.id] = i
	}
	return s
}

// Sealer seals with the first key of the list and opens with any, for one purpose. It is
// safe for concurrent use.
type Sealer struct {
	keys []derived
	byID map[string]int
}

type derived struct {
	id  string
	key []byte
}

// Seal encrypts plaintext and authenticates it with ad (associated data: what the sealed
// form is bound to, like the channel it is published on; it is not part of the result and
// must be given to Open again). It returns a new slice.
func (s *Sealer) Seal(plaintext, ad []byte) []byte {
	k := s.keys[0]
	hdrLen := 2 + len(k.id) + saltLen
	out := make([]byte, hdrLen, hdrLen+len(plaintext)+overhead)
	out[0] = version
	out[1] = byte(len(k.id))
	copy(out[2:], k.id)
	salt := out[2+len(k.id) : hdrLen]
	_, _ = rand.Read(salt) // crypto/rand.Read never fails on supported platforms
	aead := messageAEAD(k.key, salt)
	return aead.Seal(out, zeroNonce[:], plaintext, associated(out, ad))
}

// Open checks and decrypts sealed, which Seal made with the same purpose and ad and a key of
// the list. Every error wraps ErrCannotOpen: ErrMalformed, ErrUnknownKey or ErrTampered.
func (s *Sealer) Open(sealed, ad []byte) ([]byte, error) {
	if len(sealed) < 2 || sealed[0] != version {
		return nil, ErrMalformed
	}
	idLen := int(sealed[1])
	hdrLen := 2 + idLen + saltLen
	if idLen == 0 || len(sealed) < hdrLen+overhead {
		return nil, ErrMalformed
	}
	i, ok := s.byID[string(sealed[2:2+idLen])]
	if !ok {
		return nil, ErrUnknownKey
	}
	hdr := sealed[:hdrLen]
	aead := messageAEAD(s.keys[i].key, hdr[2+idLen:])
	plain, err := aead.Open(nil, zeroNonce[:], sealed[hdrLen:], associated(hdr, ad))
	if err != nil {
		return nil, ErrTampered
	}
	return plain, nil
}

// zeroNonce is the nonce of every message: each has a key of its own (messageAEAD), used
// once.
var zeroNonce [12]byte

// messageAEAD returns AES-256-GCM under the key of one message: derived from the purpose's
// key and the message's random salt.
func messageAEAD(key, salt []byte) cipher.AEAD {
	mk, err := hkdf.Expand(sha256.New, key, "message "+string(salt), 32)
	if err != nil {
		panic("seal: derive a message key: " + err.Error())
	}
	block, err := aes.NewCipher(mk)
	if err != nil {
		panic("seal: " + err.Error()) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("seal: " + err.Error())
	}
	return aead
}

// associated is what GCM authenticates besides the ciphertext: the header, then the
// caller's associated data. The header's length is fixed by its own bytes, so no two
// (header, ad) pairs give the same input.
func associated(hdr, ad []byte) []byte {
	out := make([]byte, 0, len(hdr)+len(ad))
	return append(append(out, hdr...), ad...)
}

package grants

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/manifold-mcp/manifold/internal/seal"
)

// codec seals grants for storage and opens them.
type codec struct{ sealer *seal.Sealer }

func newCodec(keys *seal.Keys) codec {
	if keys == nil {
		panic("grants: no keys: the grants are sealed with the gateway's keys")
	}
	return codec{sealer: keys.Sealer(seal.PurposeGrants)}
}

// grantWire is the sealed plaintext of a Grant, version 1. Fields added since are optional,
// so that every grant sealed before still opens.
type grantWire struct {
	V        int       `json:"v"`
	Issuer   string    `json:"iss"`
	Subject  string    `json:"sub"`
	Upstream string    `json:"upstream"`
	Token    tokenWire `json:"token"`
	ASIssuer string    `json:"as,omitempty"`
	// Resource is absent from the grants sealed before it was recorded: they open with "".
	Resource  string    `json:"resource,omitempty"`
	Granted   time.Time `json:"granted,omitzero"`
	Refreshed time.Time `json:"refreshed,omitzero"`
}

// tokenWire is the sealed form of a Token: the one encoding that carries its tokens (Token's
// own MarshalJSON shows none).
type tokenWire struct {
	AccessToken  string    `json:"access_token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	TokenType    string    `json:"token_type,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Scopes       []string  `json:"scopes,omitempty"`
}

// associated is what a sealed grant is bound to: its principal and upstream, so that a value
// copied under another key does not open. No name may contain NUL (checkKey).
func associated(p Principal, upstream string) []byte {
	return []byte("manifold grant v1\x00" + p.Issuer + "\x00" + p.Subject + "\x00" + upstream)
}

func (c codec) seal(g Grant) ([]byte, error) {
	b, err := json.Marshal(grantWire{V: 1, Issuer: g.Principal.Issuer, Subject: g.Principal.Subject, Upstream: g.Upstream,
		Token: tokenWire(g.Token), ASIssuer: g.Issuer, Resource: g.Resource, Granted: g.Granted, Refreshed: g.Refreshed})
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return c.sealer.Seal(b, associated(g.Principal, g.Upstream)), nil
}

// open opens the grant of p and upstream sealed as sealed; every failure wraps
// ErrUnreadable.
func (c codec) open(p Principal, upstream string, sealed []byte) (Grant, error) {
	b, err := c.sealer.Open(sealed, associated(p, upstream))
	if err != nil {
		return Grant{}, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	var w grantWire
	if err := json.Unmarshal(b, &w); err != nil {
		return Grant{}, fmt.Errorf("%w: decode: %w", ErrUnreadable, err)
	}
	if w.V != 1 {
		return Grant{}, fmt.Errorf("%w: version %d, this build reads 1", ErrUnreadable, w.V)
	}
	if w.Issuer != p.Issuer || w.Subject != p.Subject || w.Upstream != upstream {
		return Grant{}, fmt.Errorf("%w: %w", ErrUnreadable, errors.New("it names another principal or upstream"))
	}
	return Grant{Principal: p, Upstream: upstream, Token: Token(w.Token), Issuer: w.ASIssuer, Resource: w.Resource, Granted: w.Granted, Refreshed: w.Refreshed}, nil
}

// sealPrincipal seals p, for ListAll to learn whose grants it reads: keys and file names
// hold only its hash.
func (c codec) sealPrincipal(p Principal) []byte {
	b, _ := json.Marshal(p) // two strings: Marshal does not fail
	return c.sealer.Seal(b, []byte("manifold grant principal v1\x00"+p.Hash()))
}

// openPrincipal opens the principal of hash h sealed as sealed.
func (c codec) openPrincipal(h string, sealed []byte) (Principal, error) {
	b, err := c.sealer.Open(sealed, []byte("manifold grant principal v1\x00"+h))
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the principal: %w", ErrUnreadable, err)
	}
	var p Principal
	if err := json.Unmarshal(b, &p); err != nil || p.Hash() != h {
		return Principal{}, fmt.Errorf("%w: the principal does not match its key", ErrUnreadable)
	}
	return p, nil
}

// infoOf opens the sealed grant of p and upstream for a list: its Info, or an Unreadable
// entry.
func (c codec) infoOf(p Principal, upstream string, sealed []byte) GrantInfo {
	g, err := c.open(p, upstream, sealed)
	if err != nil {
		return GrantInfo{Principal: p, Upstream: upstream, Unreadable: true}
	}
	return g.Info()
}

package seal_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/manifold-mcp/manifold/internal/seal"
)

func secret(b byte) []byte { return bytes.Repeat([]byte{b}, seal.MinSecretLen) }

func keys(t *testing.T, list ...seal.Key) *seal.Keys {
	t.Helper()
	ks, err := seal.NewKeys(list)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestSealOpen: what one key list seals, which list, purpose and associated data open it.
func TestSealOpen(t *testing.T) {
	k1 := seal.Key{ID: "k1", Secret: secret(1)}
	k2 := seal.Key{ID: "k2", Secret: secret(2)}
	k1Other := seal.Key{ID: "k1", Secret: secret(3)} // the same id, another secret
	msg, ad := []byte(`{"k":"x","d":"a token"}`), []byte("manifold:bus")
	tests := []struct {
		name     string
		sealWith []seal.Key
		openWith []seal.Key
		openFor  string
		openAD   []byte
		change   func([]byte) []byte
		wantErr  error
	}{
		{name: "round trip", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}},
		{name: "rotation: sealed with the old key, opened after a new key is put first", sealWith: []seal.Key{k1}, openWith: []seal.Key{k2, k1}},
		{name: "rotation: sealed with the new key, opened by a list that still has the old", sealWith: []seal.Key{k2, k1}, openWith: []seal.Key{k1, k2}},
		{name: "old key removed", sealWith: []seal.Key{k1}, openWith: []seal.Key{k2}, wantErr: seal.ErrUnknownKey},
		{name: "same id, another secret", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1Other}, wantErr: seal.ErrTampered},
		{name: "wrong purpose", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, openFor: seal.PurposeHold, wantErr: seal.ErrTampered},
		{name: "other associated data", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, openAD: []byte("manifold:replica:a"), wantErr: seal.ErrTampered},
		{name: "ciphertext changed", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrTampered,
			change: func(b []byte) []byte { b[len(b)-20] ^= 1; return b }},
		{name: "salt changed", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrTampered,
			change: func(b []byte) []byte { b[2+len("k1")] ^= 1; return b }},
		{name: "key id changed to another key's", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1, k2}, wantErr: seal.ErrTampered,
			change: func(b []byte) []byte { b[3] = '2'; return b }},
		{name: "key id changed to an unknown one", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrUnknownKey,
			change: func(b []byte) []byte { b[3] = '9'; return b }},
		{name: "tag truncated", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrTampered,
			change: func(b []byte) []byte { return b[:len(b)-1] }},
		{name: "truncated to the header", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrMalformed,
			change: func(b []byte) []byte { return b[:2+len("k1")+16] }},
		{name: "truncated in the id", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrMalformed,
			change: func(b []byte) []byte { return b[:3] }},
		{name: "empty", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrMalformed,
			change: func([]byte) []byte { return nil }},
		{name: "not sealed: plain JSON", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrMalformed,
			change: func([]byte) []byte { return []byte(`{"k":"x","d":"a token","padding":"................."}`) }},
		{name: "another version", sealWith: []seal.Key{k1}, openWith: []seal.Key{k1}, wantErr: seal.ErrMalformed,
			change: func(b []byte) []byte { b[0] = 2; return b }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			openFor, openAD := seal.PurposeBus, ad
			if tt.openFor != "" {
				openFor = tt.openFor
			}
			if tt.openAD != nil {
				openAD = tt.openAD
			}
			sealed := keys(t, tt.sealWith...).Sealer(seal.PurposeBus).Seal(msg, ad)
			if bytes.Contains(sealed, msg) || bytes.Contains(sealed, []byte("token")) {
				t.Fatalf("the sealed form holds the plaintext: %q", sealed)
			}
			if tt.change != nil {
				sealed = tt.change(sealed)
			}
			got, err := keys(t, tt.openWith...).Sealer(openFor).Open(sealed, openAD)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, seal.ErrCannotOpen) {
					t.Fatalf("Open: %v, want %v (and ErrCannotOpen)", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("Open returned %q with its error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, msg) {
				t.Errorf("Open = %q, want %q", got, msg)
			}
		})
	}
}

// TestSealFresh: the same message sealed twice gives two different forms (a salt of each
// own), and both open.
func TestSealFresh(t *testing.T) {
	s := keys(t, seal.Key{ID: "k1", Secret: secret(1)}).Sealer(seal.PurposeBus)
	a, b := s.Seal([]byte("m"), nil), s.Seal([]byte("m"), nil)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of one message are equal")
	}
	for _, x := range [][]byte{a, b} {
		if got, err := s.Open(x, nil); err != nil || string(got) != "m" {
			t.Errorf("Open = %q, %v", got, err)
		}
	}
}

// TestNewKeys: a key list that cannot seal safely is refused.
func TestNewKeys(t *testing.T) {
	tests := []struct {
		name string
		list []seal.Key
		ok   bool
	}{
		{"one key", []seal.Key{{ID: "k1", Secret: secret(1)}}, true},
		{"two keys", []seal.Key{{ID: "k1", Secret: secret(1)}, {ID: "k2", Secret: secret(2)}}, true},
		{"none", nil, false},
		{"empty id", []seal.Key{{ID: "", Secret: secret(1)}}, false},
		{"id too long", []seal.Key{{ID: string(bytes.Repeat([]byte("k"), seal.MaxIDLen+1)), Secret: secret(1)}}, false},
		{"duplicate id", []seal.Key{{ID: "k1", Secret: secret(1)}, {ID: "k1", Secret: secret(2)}}, false},
		{"short secret", []seal.Key{{ID: "k1", Secret: secret(1)[:seal.MinSecretLen-1]}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := seal.NewKeys(tt.list)
			if (err == nil) != tt.ok {
				t.Errorf("NewKeys: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

package pin

import (
	"context"
	"encoding/json"
	"testing"
)

// TestPinAdmits: a definition is the accepted one when its hash with the asking replica's
// scheme is the pin's, or when the pin's own hash, by the pin's scheme, still holds for it;
// a pin of a version this package does not know is checked by the hash alone.
func TestPinAdmits(t *testing.T) {
	wide, narrow := NewScheme([]string{"com.example/ui"}), NewScheme(nil)
	page := json.RawMessage(`{"name": "render", "_meta": {"com.example/ui": "page"}}`)
	evil := json.RawMessage(`{"name": "render", "_meta": {"com.example/ui": "<script>"}}`)
	described := json.RawMessage(`{"name": "render", "description": "Reads ~/.ssh.", "_meta": {"com.example/ui": "page"}}`)
	hash := func(s Scheme, def json.RawMessage) string {
		t.Helper()
		h, err := s.Hash(def)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	pinOf := func(s Scheme, def json.RawMessage) Pin {
		d, err := s.Definition(def)
		if err != nil {
			t.Fatal(err)
		}
		return Pin{Upstream: "u", Tool: "render", Hash: hash(s, def), Scheme: s, Definition: d}
	}
	unknown := Pin{Upstream: "u", Tool: "render", Hash: hash(narrow, page), Scheme: Scheme{Version: 99}}
	for _, tt := range []struct {
		name string
		p    Pin
		def  json.RawMessage
		sc   Scheme
		want bool
	}{
		{"the pinned definition, same scheme", pinOf(wide, page), page, wide, true},
		{"a changed key, same scheme", pinOf(wide, page), evil, wide, false},
		{"a wider pin that holds", pinOf(wide, page), page, narrow, true},
		{"a wider pin whose key changed", pinOf(wide, page), evil, narrow, false},
		{"a wider pin whose description changed", pinOf(wide, page), described, narrow, false},
		{"a narrower pin that holds", pinOf(narrow, page), page, wide, true},
		{"a narrower pin that does not hold", pinOf(narrow, page), described, wide, false},
		{"a pin of an unknown version, another hash", unknown, page, wide, false},
		{"a pin of an unknown version, its hash", unknown, page, narrow, true},
	} {
		if got := tt.p.Admits(tt.def, tt.sc, hash(tt.sc, tt.def)); got != tt.want {
			t.Errorf("%s: Admits = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPinCurrent: a pin is current for a definition and scheme exactly when observing them
// would change nothing stored, so that a caller may skip the store then; a pin of a wider
// scheme that still holds is current for a narrower one.
func TestPinCurrent(t *testing.T) {
	ctx := context.Background()
	wide, narrow := NewScheme([]string{"com.example/ui"}), NewScheme(nil)
	page := json.RawMessage(`{"name": "render", "_meta": {"com.example/ui": "page"}}`)
	evil := json.RawMessage(`{"name": "render", "_meta": {"com.example/ui": "<script>"}}`)
	for _, tt := range []struct {
		name       string
		pinned     Scheme
		def        json.RawMessage
		sc         Scheme
		wantChange bool
	}{
		{"the pinned definition", wide, page, wide, false},
		{"a changed key", wide, evil, wide, true},
		{"a wider pin that holds", wide, page, narrow, false},
		{"a wider pin whose key changed", wide, evil, narrow, true},
		{"a narrower pin, re-pinned", narrow, page, wide, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openFileStore(t, "")
			p, _, err := s.Observe(ctx, "u", "render", page, tt.pinned, tick(0))
			if err != nil {
				t.Fatal(err)
			}
			current := p.Current(tt.def, tt.sc)
			_, changed, err := s.Observe(ctx, "u", "render", tt.def, tt.sc, tick(1))
			if err != nil {
				t.Fatal(err)
			}
			if changed != tt.wantChange || current == changed {
				t.Errorf("Current = %v, Observe changed = %v; want changed %v, and Current its opposite", current, changed, tt.wantChange)
			}
		})
	}
	if (Pin{Scheme: wide}).Current(json.RawMessage(`[]`), wide) {
		t.Error("a pin is current for a definition that cannot be hashed")
	}
}

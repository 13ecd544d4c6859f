// Package pin keeps tool pins, the gateway's defence against "rug pulls": an upstream that
// changes what one of its tools says or takes after clients and operators came to trust it.
// The hash of each upstream tool's definition is pinned at first sight; a later definition
// that differs is recorded as the pin's pending Change, which the gateway withholds (or
// flags) until an operator accepts or rejects it. The package provides the hashing (Scheme:
// what counts, by version), the comparison shown to the operator (Diff), and two stores
// with the same behaviour behind Store: MemoryStore, in this process and optionally saved to
// a file, and RedisStore, shared by replicas.
//
//	scheme := pin.NewScheme([]string{"com.example/ui"}) // the _meta keys that count too
//	h, err := scheme.Hash(raw) // raw: one tool object of an upstream's tools/list
//	if err != nil { ... an unreadable definition: withhold the tool ... }
//	p, changed, err := store.Observe(ctx, "github", "create_issue", raw, scheme, time.Now())
//	if !p.Admits(raw, scheme, h) { ... withhold the tool, or warn, as the gateway's mode says ... }
//
//	// An operator reviews a pending change, and accepts (or rejects) the hash shown.
//	for _, c := range p.Diff() { ... c.Field, c.Before, c.After ... }
//	p, err = store.Accept(ctx, "github", "create_issue", p.Change.Hash, "alice", time.Now())
//	if errors.Is(err, pin.ErrStale) { ... the upstream changed again meanwhile: show the new change ... }
//
//	// The upstream lists its tools: the pins of those it no longer lists go after a while.
//	removed, err := store.Sweep(ctx, "github", []string{"create_issue"}, time.Now(), 30*24*time.Hour)
package pin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is returned for an upstream and tool that have no pin.
var ErrNotFound = errors.New("no pin for that upstream and tool")

// ErrStale is returned by Accept and Reject when the hash they name is not that of the pin's
// pending change: the upstream changed the definition again (or went back) since the
// operator looked. The operator must look again.
var ErrStale = errors.New("the pending change is not the one named: the upstream changed the tool again, look again")

// Pin is what is recorded of one tool of one upstream. It is plain data; the Pins a Store
// returns are copies, which the caller may keep and modify.
type Pin struct {
	// Upstream is the upstream's name in the gateway's config.
	Upstream string `json:"upstream"`
	// Tool is the upstream's own name of the tool, before any renaming by the gateway.
	Tool string `json:"tool"`
	// Hash is the accepted definition's hash, with Scheme.
	Hash string `json:"hash"`
	// Scheme is how Hash was computed; zero (Version1) for a pin recorded before versions
	// existed. Observe re-pins a definition whose hash by this scheme is still Hash with
	// the scheme it is given, silently, when that scheme covers this one (Scheme.Covers): a
	// new version, or a _meta key more, withholds nothing that did not change. A scheme
	// that counts less never re-pins it: it checks Hash by this scheme, and records a
	// change for an operator only when that no longer holds.
	Scheme Scheme `json:"scheme,omitzero"`
	// Definition is the accepted definition, in Scheme.Definition's form.
	Definition json.RawMessage `json:"definition"`
	// Pinned is when this hash was first seen, or accepted.
	Pinned time.Time `json:"pinned"`
	// By is who accepted the definition; empty when it was pinned at first sight.
	By string `json:"by,omitempty"`
	// Change is a definition seen since that differs from the accepted one, nil if none.
	Change *Change `json:"change,omitempty"`
	// Missing is when a Sweep first found the upstream listing its tools without this one,
	// since it last listed it; zero while it is listed. Sweep removes the pin some time after.
	Missing time.Time `json:"missing,omitzero"`
}

// Change is a definition of a pinned tool that differs from the accepted one: pending until
// an operator accepts it (it becomes the pin) or rejects it.
type Change struct {
	// Hash is the changed definition's hash, with Scheme.
	Hash string `json:"hash"`
	// Scheme is how Hash was computed (see Pin.Scheme).
	Scheme Scheme `json:"scheme,omitzero"`
	// Definition is the changed definition, in Scheme.Definition's form.
	Definition json.RawMessage `json:"definition"`
	// Seen is when this hash was first seen.
	Seen time.Time `json:"seen"`
	// Rejected is set when an operator rejected the change: the tool's changed definition is
	// still not served, and the operator is no longer asked about it. The upstream going back
	// to the pinned definition, or changing it again, ends it.
	Rejected bool `json:"rejected,omitempty"`
	// By is who rejected the change; empty unless Rejected.
	By string `json:"by,omitempty"`
	// RejectedAt is when it was rejected; zero unless Rejected.
	RejectedAt time.Time `json:"rejectedAt,omitzero"`
}

// Differs reports whether hash h is not the pin's. For a definition hashed with the pin's own
// scheme, that is whether it is not the accepted one; Admits decides for any scheme.
func (p Pin) Differs(h string) bool { return h != p.Hash }

// Admits reports whether the tool definition def, as an upstream lists it, whose hash with
// the scheme sc of the replica that asks is h, is the accepted one: the gateway serves it
// (else it withholds the tool, or serves it with a warning, as its mode says). It is when h
// is the pin's hash, or when the pin's hash, computed with the pin's own scheme, still holds
// for def: a pin that counts more than sc (another replica's pins.meta names more keys) is
// checked as it was made, and one that counts less is what Observe re-pins with sc. A pin
// of a version this package does not know is checked by h alone.
func (p Pin) Admits(def json.RawMessage, sc Scheme, h string) bool {
	return h == p.Hash || !p.Scheme.Equal(sc) && p.Scheme.holds(p.Hash, def)
}

// Current reports whether p is already what Store.Observe of the tool definition def,
// hashed with scheme sc, would make it: observing it would change nothing stored. A caller
// that keeps the pins as last read may then skip the store. It is false when def cannot be
// hashed with sc.
func (p Pin) Current(def json.RawMessage, sc Scheme) bool {
	_, changed, err := observe(&p, p.Upstream, p.Tool, def, sc, time.Time{})
	return err == nil && !changed
}

// Diff lists how p's change differs from the accepted definition (Scheme.Diff), nil without
// a change. It compares with a scheme that counts what both hashes count, so that a change
// hashed with fewer _meta keys than the pin (another replica's pins.meta) shows those keys
// as removed.
func (p Pin) Diff() []FieldChange {
	if p.Change == nil {
		return nil
	}
	s := p.Scheme.join(p.Change.Scheme)
	if _, err := s.fields(); err != nil {
		s = p.Change.Scheme // a pin of a version this package does not know
	}
	return s.Diff(p.Definition, p.Change.Definition)
}

// Pending reports whether p has a change an operator has yet to decide on: one that is
// neither accepted nor rejected.
func (p Pin) Pending() bool { return p.Change != nil && !p.Change.Rejected }

// clone returns a copy of p that shares no memory with it.
func (p Pin) clone() Pin {
	p.Definition = bytes.Clone(p.Definition)
	p.Scheme.Meta = slices.Clone(p.Scheme.Meta)
	if p.Change != nil {
		c := *p.Change
		c.Definition = bytes.Clone(c.Definition)
		c.Scheme.Meta = slices.Clone(c.Scheme.Meta)
		p.Change = &c
	}
	return p
}

// Store keeps the pins. The gateway's replicas share one when it is a RedisStore.
// Implementations are safe for concurrent use, and each of Observe, Accept and Reject is
// atomic: two replicas observing the same tool at once pin it once.
//
// Upstream names must not contain NUL (U+0000); tool names may hold anything.
type Store interface {
	// Observe records that upstream lists tool with definition def (one tool object as the
	// upstream lists it), hashed with scheme s, at now:
	//   - the first sight of the tool pins it: Pin.Hash is its hash, Pinned now;
	//   - a pin (or change) of another scheme that s covers (Scheme.Covers: a version at
	//     least its, and its _meta keys) whose hash by its own scheme is still that of def is
	//     first re-pinned with s (its hash and definition are def's with s; Pinned, By, Seen
	//     and Rejected stay): an upgrade of the hash withholds nothing;
	//   - the pinned definition again clears the pin's change, rejected or not (the upstream
	//     went back), and its Missing: def's hash with s is the pin's, or, when s does not
	//     cover the pin's scheme, the pin's hash by its own scheme still holds for def
	//     (Pin.Admits). A pin s does not cover is never re-pinned with s, but one that
	//     still holds is the tool unchanged: no change is recorded for it;
	//   - another hash is recorded as the pin's Change, Seen now, replacing a change of
	//     another hash; the hash of the current change keeps it as it is, Seen and Rejected
	//     included, and so does a change of a scheme s does not cover whose hash by its
	//     own scheme still holds. When s does not cover the pin's scheme, def's hash with s
	//     is the change, for an operator to accept; one that differs from the pin only in
	//     what s does not count (the pin's hash no longer holds, but def's hash with s is
	//     the pin's) records nothing, and leaves a change as it is.
	// It returns the pin as it is after, and whether it changed anything stored. It fails
	// when def cannot be hashed with s (Scheme.Hash).
	Observe(ctx context.Context, upstream, tool string, def json.RawMessage, s Scheme, now time.Time) (Pin, bool, error)
	// Sweep records which of upstream's tools it lists now (listed: all of them, as it
	// listed them in full): the pin of a tool it lists has its Missing cleared; one of a tool
	// it does not list gets Missing now, or is removed when Missing is after ago or longer,
	// and returned. A tool removed that comes back is pinned anew, at its next sight.
	Sweep(ctx context.Context, upstream string, listed []string, now time.Time, after time.Duration) ([]Pin, error)
	// List returns every pin, ordered by upstream, then tool (by bytes).
	List(ctx context.Context) ([]Pin, error)
	// Accept makes the pin's change of hash h, rejected or not, the pin: Hash and Definition
	// are the change's, Pinned now, By by, Change nil. It fails with ErrNotFound when the
	// tool has no pin, with ErrStale when its change is not of hash h (or it has none).
	Accept(ctx context.Context, upstream, tool, h, by string, now time.Time) (Pin, error)
	// Reject marks the pin's change of hash h rejected by by at now; rejecting it again
	// changes nothing. It fails with ErrNotFound or ErrStale as Accept does.
	Reject(ctx context.Context, upstream, tool, h, by string, now time.Time) (Pin, error)
}

// checkNames refuses an upstream name with NUL, which would make the stores' keys
// ambiguous.
func checkNames(upstream, tool string) error {
	if strings.Contains(upstream, "\x00") {
		return fmt.Errorf("pins: %q of upstream %q: the upstream name contains NUL", tool, upstream)
	}
	return nil
}

// The transitions below are the stores' one behaviour: each store loads the pin, applies
// one, and stores the result when it changed.

// stamp returns t as the stores keep it: in UTC, without monotonic reading, as it reads back
// from JSON.
func stamp(t time.Time) time.Time { return t.Round(0).UTC() }

// observe returns what p (nil: no pin yet) becomes when upstream lists tool with
// definition def, hashed with scheme sc, at now, and whether that differs from p
// (Store.Observe).
func observe(p *Pin, upstream, tool string, def json.RawMessage, sc Scheme, now time.Time) (Pin, bool, error) {
	d, err := sc.Definition(def)
	if err != nil {
		return Pin{}, false, fmt.Errorf("pins: observe %q of %q (hash %s): %w", tool, upstream, sc, err)
	}
	h := hashOf(d)
	if p == nil {
		return Pin{Upstream: upstream, Tool: tool, Hash: h, Scheme: sc, Definition: d, Pinned: stamp(now)}, true, nil
	}
	next := p.clone()
	changed := false
	if !next.Missing.IsZero() {
		next.Missing, changed = time.Time{}, true
	}
	// A pin, or a change, hashed with a scheme sc covers whose hash still holds for def is
	// re-pinned with sc: what did not change stays accepted (or pending, or rejected).
	// Re-pinned even when the hash is the same with sc (def has none of the members sc
	// adds), so that a member added later is a change, not taken for one the old hash did
	// not cover. A scheme sc does not cover (another replica's pins.meta names a key sc does
	// not, or a newer version made it) is never re-pinned with sc: that would drop from the
	// pin what the other counts, and let it re-pin a changed value of it silently in turn.
	if !next.Scheme.Equal(sc) && sc.Covers(next.Scheme) && next.Scheme.holds(next.Hash, def) {
		next.Hash, next.Scheme, next.Definition, changed = h, sc, d, true
	}
	if c := next.Change; c != nil && !c.Scheme.Equal(sc) && sc.Covers(c.Scheme) && c.Scheme.holds(c.Hash, def) {
		c.Hash, c.Scheme, c.Definition, changed = h, sc, d, true
	}
	switch {
	case h == next.Hash && next.Scheme.Equal(sc), !next.Scheme.Equal(sc) && next.Scheme.holds(next.Hash, def):
		// The pinned definition again, in everything the pin counts: the tool did not
		// change, and a change recorded since goes (the upstream went back). A pin sc does
		// not cover is checked by its own hash: it keeps what only it counts, and what
		// only sc counts was never pinned (a scheme covering both re-pins it silently).
		if next.Change != nil {
			next.Change, changed = nil, true
		}
		return next, changed, nil
	case h == next.Hash:
		// A pin sc does not cover, the same in what sc counts, whose own hash no longer
		// holds: what changed is what only the pin counts (a _meta key added to a pin that
		// had none). It records nothing sc could tell, and keeps the change a scheme that
		// sees it recorded.
		return next, changed, nil
	case next.Change != nil && h == next.Change.Hash:
		return next, changed, nil
	case next.Change != nil && !next.Change.Scheme.Equal(sc) && next.Change.Scheme.holds(next.Change.Hash, def):
		// A change hashed with a scheme sc does not cover that still holds for def: it is
		// what is listed, in what it counts; kept as it is, Seen and Rejected included.
		return next, changed, nil
	}
	// A definition that differs in what the pin counts: the operator decides, and a
	// narrower hash becomes the pin only when accepted.
	next.Change = &Change{Hash: h, Scheme: sc, Definition: d, Seen: stamp(now)}
	return next, true, nil
}

// sweep returns what p becomes when its upstream lists its tools, with (listed) or without
// it, at now, whether that differs from p, and whether p goes: Missing after ago or longer
// (Store.Sweep).
func sweep(p Pin, listed bool, now time.Time, after time.Duration) (next Pin, changed, remove bool) {
	switch {
	case listed && p.Missing.IsZero():
		return p, false, false
	case listed:
		p.Missing = time.Time{}
		return p, true, false
	case p.Missing.IsZero():
		p.Missing = stamp(now)
		return p, true, false
	}
	return p, false, !now.Before(p.Missing.Add(after))
}

// accept returns what p (nil: no pin) becomes when by accepts its change of hash h at now
// (Store.Accept).
func accept(p *Pin, upstream, tool, h, by string, now time.Time) (Pin, error) {
	if p == nil {
		return Pin{}, fmt.Errorf("pins: accept %q of %q: %w", tool, upstream, ErrNotFound)
	}
	if p.Change == nil || p.Change.Hash != h {
		return Pin{}, fmt.Errorf("pins: accept %s for %q of %q: %w", h, tool, upstream, ErrStale)
	}
	next := p.clone()
	next.Hash, next.Scheme, next.Definition = next.Change.Hash, next.Change.Scheme, next.Change.Definition
	next.Pinned, next.By, next.Change = stamp(now), by, nil
	return next, nil
}

// reject returns what p (nil: no pin) becomes when by rejects its change of hash h at now,
// and whether that differs from p (Store.Reject).
func reject(p *Pin, upstream, tool, h, by string, now time.Time) (Pin, bool, error) {
	if p == nil {
		return Pin{}, false, fmt.Errorf("pins: reject %q of %q: %w", tool, upstream, ErrNotFound)
	}
	if p.Change == nil || p.Change.Hash != h {
		return Pin{}, false, fmt.Errorf("pins: reject %s for %q of %q: %w", h, tool, upstream, ErrStale)
	}
	next := p.clone()
	if next.Change.Rejected {
		return next, false, nil
	}
	next.Change.Rejected, next.Change.By, next.Change.RejectedAt = true, by, stamp(now)
	return next, true, nil
}

// encodePin returns p as the stores keep it: JSON, with the definitions' text as it is
// (json.Marshal would escape <, > and & in them).
func encodePin(p Pin) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// comparePins orders pins by upstream, then tool.
func comparePins(a, b Pin) int {
	if c := strings.Compare(a.Upstream, b.Upstream); c != 0 {
		return c
	}
	return strings.Compare(a.Tool, b.Tool)
}

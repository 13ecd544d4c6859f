// Package pin keeps tool pins, the gateway's defence against "rug pulls": an upstream that
// changes what one of its tools says or takes after clients and operators came to trust it.
// The hash of each upstream tool's definition is pinned at first sight; a later definition
// that differs is recorded as the pin's pending Change, which the gateway withholds (or
// flags) until an operator accepts or rejects it. The package provides the hashing (Hash,
// Definition), the comparison shown to the operator (Diff), and two stores with the same
// behaviour behind Store: MemoryStore, in this process and optionally saved to a file, and
// RedisStore, shared by replicas.
//
//	h, err := pin.Hash(raw) // raw: one tool object of an upstream's tools/list
//	if err != nil { ... an unreadable definition: withhold the tool ... }
//	def, _ := pin.Definition(raw)
//	p, changed, err := store.Observe(ctx, "github", "create_issue", h, def, time.Now())
//	if p.Differs(h) { ... withhold the tool, or warn, as the gateway's mode says ... }
//
//	// An operator reviews a pending change, and accepts (or rejects) the hash shown.
//	for _, c := range pin.Diff(p.Definition, p.Change.Definition) { ... c.Field, c.Before, c.After ... }
//	p, err = store.Accept(ctx, "github", "create_issue", p.Change.Hash, "alice", time.Now())
//	if errors.Is(err, pin.ErrStale) { ... the upstream changed again meanwhile: show the new change ... }
package pin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// Hash is the accepted definition's hash (Hash).
	Hash string `json:"hash"`
	// Definition is the accepted definition, in Definition's form.
	Definition json.RawMessage `json:"definition"`
	// Pinned is when this hash was first seen, or accepted.
	Pinned time.Time `json:"pinned"`
	// By is who accepted the definition; empty when it was pinned at first sight.
	By string `json:"by,omitempty"`
	// Change is a definition seen since that differs from the accepted one, nil if none.
	Change *Change `json:"change,omitempty"`
}

// Change is a definition of a pinned tool that differs from the accepted one: pending until
// an operator accepts it (it becomes the pin) or rejects it.
type Change struct {
	// Hash is the changed definition's hash.
	Hash string `json:"hash"`
	// Definition is the changed definition, in Definition's form.
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

// Differs reports whether a definition of hash h is not the accepted one: the gateway then
// withholds the tool (in "withhold" mode) or serves it with a warning.
func (p Pin) Differs(h string) bool { return h != p.Hash }

// Pending reports whether p has a change an operator has yet to decide on: one that is
// neither accepted nor rejected.
func (p Pin) Pending() bool { return p.Change != nil && !p.Change.Rejected }

// clone returns a copy of p that shares no memory with it.
func (p Pin) clone() Pin {
	p.Definition = bytes.Clone(p.Definition)
	if p.Change != nil {
		c := *p.Change
		c.Definition = bytes.Clone(c.Definition)
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
	// Observe records that upstream lists tool with definition def (Definition's form) of
	// hash h, at now:
	//   - the first sight of the tool pins it: Pin.Hash is h, Pinned now;
	//   - the pinned hash again clears the pin's change, rejected or not (the upstream went
	//     back);
	//   - another hash is recorded as the pin's Change, Seen now, replacing a change of
	//     another hash; the hash of the current change keeps it as it is, Seen and Rejected
	//     included.
	// It returns the pin as it is after, and whether it changed anything stored.
	Observe(ctx context.Context, upstream, tool, h string, def json.RawMessage, now time.Time) (Pin, bool, error)
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

// observe returns what p (nil: no pin yet) becomes when upstream lists tool with definition
// def of hash h at now, and whether that differs from p (Store.Observe).
func observe(p *Pin, upstream, tool, h string, def json.RawMessage, now time.Time) (Pin, bool, error) {
	if h == "" {
		return Pin{}, false, fmt.Errorf("pins: observe %q of %q: empty hash", tool, upstream)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, def); err != nil {
		return Pin{}, false, fmt.Errorf("pins: observe %q of %q: definition: %w", tool, upstream, err)
	}
	switch {
	case p == nil:
		return Pin{Upstream: upstream, Tool: tool, Hash: h, Definition: compact.Bytes(), Pinned: stamp(now)}, true, nil
	case h == p.Hash:
		if p.Change == nil {
			return p.clone(), false, nil
		}
		next := p.clone()
		next.Change = nil
		return next, true, nil
	case p.Change != nil && h == p.Change.Hash:
		return p.clone(), false, nil
	}
	next := p.clone()
	next.Change = &Change{Hash: h, Definition: compact.Bytes(), Seen: stamp(now)}
	return next, true, nil
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
	next.Hash, next.Definition = next.Change.Hash, next.Change.Definition
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

package pin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/statefile"
)

// MemoryStore is a Store in this process's memory, saved to a file if it was opened with
// one: the gateway's store for a single replica. It is safe for concurrent use.
//
// The file is JSON, {"pins": [...]} with one Pin a line, written whole after each change:
// to a temporary file in the same directory, synced, then renamed over the old one, so that
// a crash leaves the old pins or the new, never a mix.
//
// Several processes may share the file (the gateways desktop hosts start on one config, one
// per client): each operation holds an exclusive lock on the file's directory (flock) while
// it reads the file again if another store wrote it since, makes its change and writes it; no
// lock is held between operations. Where flock is not available, nothing is locked.
type MemoryStore struct {
	// file is where the pins are saved, "" for nowhere. Set at open, then never changed.
	file string

	mu sync.Mutex
	// pins holds the pins by upstream and tool. Guarded by mu. Its values share no memory
	// with what callers are given.
	pins map[pinKey]Pin
	// unsaved is set when a save failed: the file lags behind pins, and the next Observe,
	// Accept or Reject saves them whether or not it changes anything. Guarded by mu.
	unsaved bool
	// ahead are the keys whose pins this store changed or removed since its last good save:
	// while unsaved, all that the file lacks of this store's, and all that it may write over
	// another store's. Invariant: empty unless unsaved. Guarded by mu; nil without a file.
	ahead map[pinKey]bool
	// seen is the file's content as this store last read or wrote it: pins are read again
	// when the file holds something else. Guarded by mu.
	seen []byte
}

// pinKey is a pin's upstream and tool.
type pinKey struct{ upstream, tool string }

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns a MemoryStore. If file is "", it starts empty and keeps its pins
// in memory only. Otherwise it loads the pins from file (none if file does not exist) and
// saves them there after each change, creating its directory (mode 0700) if need be; the
// file has mode 0600. It fails, naming the file, when the file cannot be read or is corrupt.
func NewMemoryStore(file string) (*MemoryStore, error) {
	s := &MemoryStore{file: file, pins: map[pinKey]Pin{}}
	if file == "" {
		return s, nil
	}
	s.ahead = map[pinKey]bool{}
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pins: reading %s: %w", file, err)
	}
	if err := s.load(data); err != nil {
		return nil, corrupt(file, err)
	}
	s.seen = data
	return s, nil
}

// corrupt is the error of a pins file that cannot be read as one.
func corrupt(file string, err error) error {
	return fmt.Errorf("pins: %s is corrupt: %w; move it away to start with no pins (each tool is then pinned anew at its next sight, as it is then)", file, err)
}

// errNoLock is wrapped by lockFileLocked's error when the lock could not be taken (the
// directory cannot be made): the operation works on the pins in memory, and its save fails
// with that error, as when the file cannot be written.
var errNoLock = errors.New("the pins' directory cannot be locked")

// lockFileLocked locks the store's file, if it has one, for one operation, and reads the pins
// again when another store wrote it since this one last did. When this store's pins are ahead
// of the file (a save failed), the file's pins are taken for every key but those this store
// changed since its last good save, for which its own are kept: what another store decided
// meanwhile (an accept, a reject) is not written over by the next save. The caller holds s.mu
// and calls unlock when done, also after an error that wraps errNoLock.
func (s *MemoryStore) lockFileLocked() (unlock func(), err error) {
	if s.file == "" {
		return func() {}, nil
	}
	unlock, err = lockDir(filepath.Dir(s.file))
	if errors.Is(err, statefile.ErrNoLocks) {
		// Gateways on such a system must not share a state_dir.
		unlock, err = func() {}, nil
	}
	if err != nil {
		return func() {}, fmt.Errorf("%w: %w", errNoLock, err)
	}
	data, err := os.ReadFile(s.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	case err != nil:
		unlock()
		return nil, fmt.Errorf("pins: reading %s: %w", s.file, err)
	}
	if bytes.Equal(data, s.seen) {
		return unlock, nil
	}
	fresh := &MemoryStore{pins: map[pinKey]Pin{}}
	if err := fresh.load(data); err != nil {
		unlock()
		return nil, corrupt(s.file, err)
	}
	for k := range s.ahead { // none unless a save failed
		if p, ok := s.pins[k]; ok {
			fresh.pins[k] = p
		} else {
			delete(fresh.pins, k)
		}
	}
	s.pins, s.seen = fresh.pins, data
	return unlock, nil
}

// pinFile is the form of a MemoryStore's file.
type pinFile struct {
	Pins []Pin `json:"pins"`
}

// load fills the empty s.pins with the pins of data, a file's contents.
func (s *MemoryStore) load(data []byte) error {
	var f pinFile
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	for i, p := range f.Pins {
		if p.Hash == "" || (p.Change != nil && p.Change.Hash == "") {
			return fmt.Errorf("pin %d (%q of %q) has no hash", i+1, p.Tool, p.Upstream)
		}
		if err := checkNames(p.Upstream, p.Tool); err != nil {
			return err
		}
		k := pinKey{p.Upstream, p.Tool}
		if _, dup := s.pins[k]; dup {
			return fmt.Errorf("tool %q of %q is pinned twice", p.Tool, p.Upstream)
		}
		var err error
		if p.Definition, err = compactJSON(p.Definition); err != nil {
			return fmt.Errorf("pin %d (%q of %q): definition: %w", i+1, p.Tool, p.Upstream, err)
		}
		if p.Change != nil {
			if p.Change.Definition, err = compactJSON(p.Change.Definition); err != nil {
				return fmt.Errorf("pin %d (%q of %q): changed definition: %w", i+1, p.Tool, p.Upstream, err)
			}
		}
		s.pins[k] = p
	}
	return nil
}

// compactJSON returns v without insignificant space; it fails if v is not JSON.
func compactJSON(v json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Observe implements Store.Observe. When the file cannot be written, it returns the pin as
// it is in memory, changed, with the error.
func (s *MemoryStore) Observe(_ context.Context, upstream, tool string, def json.RawMessage, sc Scheme, now time.Time) (Pin, bool, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, locked := s.lockFileLocked()
	if locked != nil && !errors.Is(locked, errNoLock) {
		return Pin{}, false, locked
	}
	defer unlock()
	k := pinKey{upstream, tool}
	next, changed, err := observe(s.getLocked(k), upstream, tool, def, sc, now)
	if err != nil {
		return Pin{}, false, err
	}
	if changed {
		s.putLocked(k, next.clone())
	}
	return next, changed, s.saveIfLocked(changed, locked)
}

// Sweep implements Store.Sweep. When the file cannot be written, it returns the pins
// removed from memory with the error.
func (s *MemoryStore) Sweep(_ context.Context, upstream string, listed []string, now time.Time, after time.Duration) ([]Pin, error) {
	if err := checkNames(upstream, ""); err != nil {
		return nil, err
	}
	isListed := make(map[string]bool, len(listed))
	for _, tool := range listed {
		isListed[tool] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, locked := s.lockFileLocked()
	if locked != nil && !errors.Is(locked, errNoLock) {
		return nil, locked
	}
	defer unlock()
	var removed []Pin
	changed := false
	for k, p := range s.pins {
		if k.upstream != upstream {
			continue
		}
		next, ch, remove := sweep(p.clone(), isListed[k.tool], now, after)
		switch {
		case remove:
			s.deleteLocked(k)
			removed = append(removed, next)
			changed = true
		case ch:
			s.putLocked(k, next)
			changed = true
		}
	}
	slices.SortFunc(removed, comparePins)
	return removed, s.saveIfLocked(changed, locked)
}

// List implements Store.List: with a file, the pins it holds now.
func (s *MemoryStore) List(context.Context) ([]Pin, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, locked := s.lockFileLocked()
	if locked != nil && !errors.Is(locked, errNoLock) {
		return nil, locked
	}
	defer unlock() // without the lock, the pins in memory
	return s.listLocked(), nil
}

// Accept implements Store.Accept. When the file cannot be written, it returns the pin as it
// is in memory, accepted, with the error.
func (s *MemoryStore) Accept(_ context.Context, upstream, tool, h, by string, now time.Time) (Pin, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, locked := s.lockFileLocked()
	if locked != nil && !errors.Is(locked, errNoLock) {
		return Pin{}, locked
	}
	defer unlock()
	k := pinKey{upstream, tool}
	next, err := accept(s.getLocked(k), upstream, tool, h, by, now)
	if err != nil {
		return Pin{}, err
	}
	s.putLocked(k, next.clone())
	return next, s.saveIfLocked(true, locked)
}

// Reject implements Store.Reject. When the file cannot be written, it returns the pin as it
// is in memory, rejected, with the error.
func (s *MemoryStore) Reject(_ context.Context, upstream, tool, h, by string, now time.Time) (Pin, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, locked := s.lockFileLocked()
	if locked != nil && !errors.Is(locked, errNoLock) {
		return Pin{}, locked
	}
	defer unlock()
	k := pinKey{upstream, tool}
	next, changed, err := reject(s.getLocked(k), upstream, tool, h, by, now)
	if err != nil {
		return Pin{}, err
	}
	if changed {
		s.putLocked(k, next.clone())
	}
	return next, s.saveIfLocked(changed, locked)
}

// putLocked sets the pin of k, which the file lacks until the next good save.
func (s *MemoryStore) putLocked(k pinKey, p Pin) {
	s.pins[k] = p
	if s.ahead != nil {
		s.ahead[k] = true
	}
}

// deleteLocked removes the pin of k, which the file holds until the next good save.
func (s *MemoryStore) deleteLocked(k pinKey) {
	delete(s.pins, k)
	if s.ahead != nil {
		s.ahead[k] = true
	}
}

// getLocked returns the pin of k, nil if none. The caller must not modify it.
func (s *MemoryStore) getLocked(k pinKey) *Pin {
	p, ok := s.pins[k]
	if !ok {
		return nil
	}
	return &p
}

// listLocked returns copies of the pins, ordered by upstream, then tool.
func (s *MemoryStore) listLocked() []Pin {
	out := make([]Pin, 0, len(s.pins))
	for _, p := range s.pins {
		out = append(out, p.clone())
	}
	slices.SortFunc(out, comparePins)
	return out
}

// saveIfLocked saves the pins to the file, if the store has one, when changed or when an
// earlier save failed. locked is lockFileLocked's error: the save fails with it.
func (s *MemoryStore) saveIfLocked(changed bool, locked error) error {
	if s.file == "" || !(changed || s.unsaved) {
		return nil
	}
	if locked != nil {
		s.unsaved = true
		return fmt.Errorf("pins: saving %s: %w", s.file, locked)
	}
	var b bytes.Buffer
	b.WriteString("{\"pins\": [")
	for i, p := range s.listLocked() {
		line, err := encodePin(p)
		if err != nil {
			s.unsaved = true
			return fmt.Errorf("pins: saving %s: %w", s.file, err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n  ")
		b.Write(line)
	}
	b.WriteString("\n]}\n")
	if err := statefile.WriteAtomic(s.file, b.Bytes()); err != nil {
		s.unsaved = true
		return fmt.Errorf("pins: saving %s: %w", s.file, err)
	}
	s.unsaved, s.seen = false, b.Bytes()
	clear(s.ahead)
	return nil
}

// lockDir takes the lock of the directory dir (made, mode 0700, if need be), waiting while
// another process or store holds it: the directory, not the file, so that no file of its own
// is left and the lock holds across the rename that replaces the file.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return statefile.Lock(dir, true)
}

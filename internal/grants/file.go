package grants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/statefile"
)

// NewFileVault returns a Vault in files under stateDir/grants (created, mode 0700, if need
// be), for a gateway without Redis: processes that share the directory share the grants.
// keys seal the grants (seal.PurposeGrants). The package doc lists its files.
func NewFileVault(stateDir string, keys *seal.Keys, opts *Options) (*Vault, error) {
	if stateDir == "" {
		return nil, errors.New("grants: no state directory: set state_dir to keep the grants users connect")
	}
	dir := filepath.Join(stateDir, "grants")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("grants: %w", err)
	}
	return newVault(&fileStore{dir: dir, c: newCodec(keys)}, opts), nil
}

// errCorrupt: a principal's file is not one this build reads.
var errCorrupt = errors.New("not a grants file this build reads")

// fileStore is a store in files, one per principal.
type fileStore struct {
	dir string
	c   codec
}

// grantFile is the form of a principal's file: its principal and grants, sealed.
type grantFile struct {
	V         int               `json:"v"`
	Principal []byte            `json:"principal"`
	Grants    map[string][]byte `json:"grants"`
}

func (s *fileStore) path(h string) string { return filepath.Join(s.dir, h+".json") }

// read reads the file of principal hash h; an absent file is an empty one.
func (s *fileStore) read(h string) (*grantFile, error) {
	b, err := os.ReadFile(s.path(h))
	if errors.Is(err, fs.ErrNotExist) {
		return &grantFile{V: 1, Grants: map[string][]byte{}}, nil
	}
	if err != nil {
		return nil, err
	}
	var f grantFile
	if err := json.Unmarshal(b, &f); err != nil || f.V != 1 {
		return nil, fmt.Errorf("%w: %s: move it away (its user then connects the upstreams again)", errCorrupt, s.path(h))
	}
	if f.Grants == nil {
		f.Grants = map[string][]byte{}
	}
	return &f, nil
}

// update runs change on the file of p under its lock, and writes the file back when change
// reports a change (removing it when no grant is left).
func (s *fileStore) update(p Principal, change func(f *grantFile) (bool, error)) error {
	h := p.Hash()
	unlock, err := statefile.Lock(filepath.Join(s.dir, h+".lock"), true)
	if errors.Is(err, statefile.ErrNoLocks) {
		return fmt.Errorf("grants kept in files need file locks, which this system lacks: keep them in Redis (session_store): %w", err)
	}
	if err != nil {
		return err
	}
	defer unlock()
	f, err := s.read(h)
	if err != nil {
		return err
	}
	changed, err := change(f)
	if err != nil || !changed {
		return err
	}
	if len(f.Grants) == 0 {
		if err := os.Remove(s.path(h)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	f.Principal = s.c.sealPrincipal(p)
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return statefile.WriteAtomic(s.path(h), b)
}

func (s *fileStore) get(_ context.Context, p Principal, upstream string) (Grant, string, error) {
	f, err := s.read(p.Hash())
	if err != nil {
		return Grant{}, "", err
	}
	v, ok := f.Grants[upstream]
	if !ok {
		return Grant{}, "", ErrNotFound
	}
	g, err := s.c.open(p, upstream, v)
	if err != nil {
		return Grant{}, string(v), fmt.Errorf("%s: %w", s.path(p.Hash()), err)
	}
	return g, string(v), nil
}

func (s *fileStore) put(_ context.Context, g Grant) error {
	sealed, err := s.c.seal(g)
	if err != nil {
		return err
	}
	return s.update(g.Principal, func(f *grantFile) (bool, error) {
		f.Grants[g.Upstream] = sealed
		return true, nil
	})
}

func (s *fileStore) swap(_ context.Context, p Principal, upstream, rev string, next *Grant) (bool, error) {
	var sealed []byte
	if next != nil {
		var err error
		if sealed, err = s.c.seal(*next); err != nil {
			return false, err
		}
	}
	swapped := false
	err := s.update(p, func(f *grantFile) (bool, error) {
		cur, ok := f.Grants[upstream]
		if !ok || string(cur) != rev {
			return false, nil
		}
		if next == nil {
			delete(f.Grants, upstream)
		} else {
			f.Grants[upstream] = sealed
		}
		swapped = true
		return true, nil
	})
	return swapped, err
}

func (s *fileStore) del(_ context.Context, p Principal, upstream string) error {
	return s.update(p, func(f *grantFile) (bool, error) {
		if _, ok := f.Grants[upstream]; !ok {
			return false, ErrNotFound
		}
		delete(f.Grants, upstream)
		return true, nil
	})
}

func (s *fileStore) list(_ context.Context, p Principal) ([]GrantInfo, error) {
	f, err := s.read(p.Hash())
	if err != nil {
		return nil, err
	}
	return s.infos(p, f), nil
}

func (s *fileStore) infos(p Principal, f *grantFile) []GrantInfo {
	out := make([]GrantInfo, 0, len(f.Grants))
	for up, v := range f.Grants {
		out = append(out, s.c.infoOf(p, up, v))
	}
	sortInfos(out)
	return out
}

func (s *fileStore) listAll(_ context.Context, after string, limit int) ([]GrantInfo, string, error) {
	if err := checkCursor(after); err != nil {
		return nil, "", err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, "", err
	}
	var hashes []string
	for _, e := range entries {
		h, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && checkCursor(h) == nil && h > after {
			hashes = append(hashes, h)
		}
	}
	slices.Sort(hashes)
	next := ""
	if len(hashes) > limit {
		hashes = hashes[:limit]
		next = hashes[limit-1]
	}
	var out []GrantInfo
	for _, h := range hashes {
		f, err := s.read(h)
		if err != nil {
			if errors.Is(err, errCorrupt) {
				out = append(out, GrantInfo{Unreadable: true})
				continue
			}
			return nil, "", err
		}
		p, err := s.c.openPrincipal(h, f.Principal)
		if err != nil {
			for up := range f.Grants {
				out = append(out, GrantInfo{Upstream: up, Unreadable: true})
			}
			continue
		}
		out = append(out, s.infos(p, f)...)
	}
	return out, next, nil
}

// refreshLockPath is the file flocked while the grant of p and upstream is refreshed.
func (s *fileStore) refreshLockPath(p Principal, upstream string) string {
	sum := sha256.Sum256([]byte(upstream))
	return filepath.Join(s.dir, p.Hash()+"."+hex.EncodeToString(sum[:8])+".refresh")
}

// tryLock flocks the refresh lock file without waiting; the lock has no ttl: it goes with
// the process that holds it.
func (s *fileStore) tryLock(_ context.Context, p Principal, upstream string, _ time.Duration) (func(), bool, error) {
	unlock, err := statefile.Lock(s.refreshLockPath(p, upstream), false)
	if errors.Is(err, statefile.ErrLocked) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return unlock, true, nil
}

func (s *fileStore) locked(ctx context.Context, p Principal, upstream string) (bool, error) {
	unlock, ok, err := s.tryLock(ctx, p, upstream, 0)
	if err != nil || !ok {
		return !ok && err == nil, err
	}
	unlock()
	return false, nil
}

func (s *fileStore) close() error { return nil }

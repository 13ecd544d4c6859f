package connect

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Store keeps short-lived, single-use records that every replica of the gateway must see: the
// connect links handed to clients and the authorizations in flight. The Service
// seals every value before it is put, so a Store never holds anything in the clear.
// Implementations are safe for concurrent use.
type Store interface {
	// Put keeps value under key for ttl, replacing any value there.
	Put(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// Get returns the value under key; ErrNotFound when it is absent or expired.
	Get(ctx context.Context, key string) ([]byte, error)
	// Take returns the value under key and deletes it in one step, so that of many callers
	// at once at most one gets it (single use); ErrNotFound when it is absent or expired.
	Take(ctx context.Context, key string) ([]byte, error)
}

// ErrNotFound is returned by a Store's Get and Take when the key holds nothing (never put,
// expired, or already taken).
var ErrNotFound = errors.New("connect: no such record (expired or already used)")

// ErrStoreFull is returned by the memory store's Put when it holds its most records and none
// has expired: the gateway is asked for more connections than it can keep; try again later.
var ErrStoreFull = errors.New("connect: too many connections are in flight; try again in a few minutes")

// OwnedPutter is an optional ability of a Store, found by type assertion: it bounds the
// records of one owner, so that one user cannot fill the Store. Ask uses it for the connect
// links, counted against their principal; a Store without it bounds links only as a whole.
type OwnedPutter interface {
	// PutOwned is Put for a record counted against owner (an opaque name, without colons):
	// it refuses with an error wrapping ErrStoreFull when owner already holds max records
	// (how each Store counts them is its own: see NewMemoryStore and NewRedisStore).
	PutOwned(ctx context.Context, owner, key string, value []byte, ttl time.Duration, max int) error
}

// Interface guards.
var (
	_ Store       = (*memoryStore)(nil)
	_ Store       = (*redisStore)(nil)
	_ OwnedPutter = (*memoryStore)(nil)
	_ OwnedPutter = (*redisStore)(nil)
)

// DefaultMemoryStoreMax is the most records a memory store holds when asked for 0.
const DefaultMemoryStoreMax = 10000

// NewMemoryStore returns a Store in this process's memory, for a gateway of one replica: at
// most max records (if max <= 0, DefaultMemoryStoreMax), expired by the clock now (if nil,
// time.Now). When full, Put drops the expired records, and refuses with ErrStoreFull if none
// has expired. Its PutOwned (OwnedPutter) counts an owner's unexpired records, and refuses
// the one beyond its max with ErrStoreFull as well.
func NewMemoryStore(max int, now func() time.Time) Store {
	if max <= 0 {
		max = DefaultMemoryStoreMax
	}
	if now == nil {
		now = time.Now
	}
	return &memoryStore{max: max, now: now, records: map[string]memoryRecord{}, owned: map[string]map[string]struct{}{}}
}

// memoryStore is the Store of NewMemoryStore.
type memoryStore struct {
	max int
	now func() time.Time

	// mu guards records and owned.
	mu sync.Mutex
	// records by key. Invariant: len(records) <= max.
	records map[string]memoryRecord
	// owned holds the keys of each owner's records. Invariant: a key is in owned[o] exactly
	// when records holds it with owner o, and no set is empty.
	owned map[string]map[string]struct{}
}

// memoryRecord is one value of a memoryStore, when it expires, and its owner ("" for none).
type memoryRecord struct {
	value   []byte
	expires time.Time
	owner   string
}

// Put keeps a copy of value under key for ttl.
func (s *memoryStore) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return s.PutOwned(ctx, "", key, value, ttl, 0)
}

// PutOwned keeps a copy of value under key for ttl, counted against owner (if not "") whose
// unexpired records must be fewer than max.
func (s *memoryStore) PutOwned(ctx context.Context, owner, key string, value []byte, ttl time.Duration, max int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	old, replaces := s.records[key]
	if owner != "" && !(replaces && old.owner == owner) && len(s.owned[owner]) >= max {
		for k := range s.owned[owner] {
			if !now.Before(s.records[k].expires) {
				s.deleteLocked(k)
			}
		}
		if len(s.owned[owner]) >= max {
			return fmt.Errorf("%w (%d records of one user)", ErrStoreFull, max)
		}
	}
	if !replaces && len(s.records) >= s.max {
		s.dropExpiredLocked(now)
		if len(s.records) >= s.max {
			return ErrStoreFull
		}
	}
	s.deleteLocked(key)
	s.records[key] = memoryRecord{value: append([]byte(nil), value...), expires: now.Add(ttl), owner: owner}
	if owner != "" {
		if s.owned[owner] == nil {
			s.owned[owner] = map[string]struct{}{}
		}
		s.owned[owner][key] = struct{}{}
	}
	return nil
}

// deleteLocked deletes the record of key, if any, and its owner's count of it. s.mu must be
// held.
func (s *memoryStore) deleteLocked(key string) {
	r, ok := s.records[key]
	if !ok {
		return
	}
	delete(s.records, key)
	if r.owner != "" {
		delete(s.owned[r.owner], key)
		if len(s.owned[r.owner]) == 0 {
			delete(s.owned, r.owner)
		}
	}
}

// Get returns a copy of the unexpired value under key.
func (s *memoryStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[key]
	if !ok {
		return nil, ErrNotFound
	}
	if !s.now().Before(r.expires) {
		s.deleteLocked(key)
		return nil, ErrNotFound
	}
	return append([]byte(nil), r.value...), nil
}

// Take returns the unexpired value under key and deletes it.
func (s *memoryStore) Take(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[key]
	s.deleteLocked(key)
	if !ok || !s.now().Before(r.expires) {
		return nil, ErrNotFound
	}
	return r.value, nil
}

// dropExpiredLocked deletes the records expired at now. s.mu must be held.
func (s *memoryStore) dropExpiredLocked(now time.Time) {
	for k, r := range s.records {
		if !now.Before(r.expires) {
			s.deleteLocked(k)
		}
	}
}

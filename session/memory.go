package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryOptions configures a MemoryStore.
type MemoryOptions struct {
	// MaxSessions caps the live sessions. If zero, there is no cap.
	MaxSessions int
	// MaxPerPrincipal caps the live sessions of each authenticated principal: those whose
	// Principal has the same Key. If zero, there is no cap.
	MaxPerPrincipal int
	// MaxPerAnonymousAddr caps the live anonymous sessions of each client address: those
	// with the same ClientAddr. Anonymous sessions without a ClientAddr are not counted. If
	// zero, there is no cap.
	MaxPerAnonymousAddr int
	// Now returns the current time. If nil, time.Now is used.
	Now func() time.Time
}

// MemoryStore is a Store in this process's memory: the gateway's default, for a single
// replica. It is safe for concurrent use.
type MemoryStore struct {
	opts MemoryOptions

	mu sync.RWMutex
	// sessions holds the live sessions by id. Guarded by mu.
	sessions map[string]*memoryEntry
	// owners counts the live sessions of each owner (ownerOf) whose kind has a cap. Guarded
	// by mu. Invariant: owners[o] is the number of entries of sessions whose owner is o, and
	// no count is zero: an owner goes with its last session.
	owners map[string]int

	// routes are the sessions' routing tables (Routes).
	routes *memoryRoutes
}

// memoryEntry must not be copied (it holds an atomic).
type memoryEntry struct {
	// rec is replaced, never mutated, so readers may keep it. Guarded by MemoryStore.mu.
	rec *Record
	// lastUsed is the unix nano time of the last Touch; updated without the write lock.
	lastUsed atomic.Int64
	// owner is who the session counts against (MemoryStore.owners), "" for no one: set at
	// Create, then never changed.
	owner string
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. A nil opts means no cap.
func NewMemoryStore(opts *MemoryOptions) *MemoryStore {
	s := &MemoryStore{sessions: make(map[string]*memoryEntry), owners: make(map[string]int), routes: newMemoryRoutes()}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	return s
}

// Create implements Store.
func (s *MemoryStore) Create(_ context.Context, rec Record) (*Record, error) {
	rec.ID = NewID()
	now := s.opts.Now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now
	}
	owner, limit := ownerCap(&rec, s.opts.MaxPerPrincipal, s.opts.MaxPerAnonymousAddr)
	e := &memoryEntry{rec: &rec, owner: owner}
	e.lastUsed.Store(now.UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.MaxSessions > 0 && len(s.sessions) >= s.opts.MaxSessions {
		return nil, ErrLimit
	}
	if owner != "" {
		if s.owners[owner] >= limit {
			return nil, ErrOwnerLimit
		}
		s.owners[owner]++
	}
	s.sessions[rec.ID] = e
	return e.rec, nil
}

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, id string) (*Record, error) {
	s.mu.RLock()
	e, ok := s.sessions[id]
	var rec *Record
	if ok {
		rec = e.rec
	}
	s.mu.RUnlock()
	if !ok {
		return nil, ErrNotFound
	}
	return rec, nil
}

// Touch implements Store.
func (s *MemoryStore) Touch(_ context.Context, id string) error {
	s.mu.RLock()
	e, ok := s.sessions[id]
	s.mu.RUnlock()
	if ok {
		e.lastUsed.Store(s.opts.Now().UnixNano())
	}
	return nil
}

// Update implements Store.
func (s *MemoryStore) Update(_ context.Context, id string, change func(*Record)) (*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[id]
	if !ok {
		return nil, ErrNotFound
	}
	next := *e.rec
	change(&next)
	next.ID = id
	e.rec = &next
	e.lastUsed.Store(s.opts.Now().UnixNano())
	return e.rec, nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	if e, ok := s.sessions[id]; ok {
		s.removeLocked(id, e)
	}
	s.mu.Unlock()
	s.routes.dropSession(id)
	return nil
}

// Expire implements Store.
func (s *MemoryStore) Expire(_ context.Context, cutoff time.Time) ([]string, error) {
	limit := cutoff.UnixNano()
	var expired []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.sessions {
		if e.lastUsed.Load() >= limit {
			continue
		}
		s.removeLocked(id, e)
		expired = append(expired, id)
	}
	for _, id := range expired {
		s.routes.dropSession(id)
	}
	return expired, nil
}

// removeLocked removes session id, whose entry is e, and its count against its owner.
func (s *MemoryStore) removeLocked(id string, e *memoryEntry) {
	delete(s.sessions, id)
	if e.owner == "" {
		return
	}
	if n := s.owners[e.owner] - 1; n > 0 {
		s.owners[e.owner] = n
	} else {
		delete(s.owners, e.owner)
	}
}

// Len returns the number of live sessions.
func (s *MemoryStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.sessions)
}

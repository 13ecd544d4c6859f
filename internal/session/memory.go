package session

import (
	"context"
	"log/slog"
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
	// EvictIdle lets Create make room in a full store (MaxSessions): it evicts the session
	// whose client made no request for longest (Touch; Keep does not count), if it made none
	// for at least EvictIdle, and announces it to WatchEnded. If zero, a full store refuses
	// new sessions (ErrLimit).
	EvictIdle time.Duration
	// Now returns the current time. If nil, time.Now is used.
	Now func() time.Time
	// Logger receives a line for each session evicted. If nil, nothing is logged.
	Logger *slog.Logger
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

	watchMu sync.Mutex
	// watchers are the functions of WatchEnded calls in progress, by a key of their own.
	// Guarded by watchMu.
	watchers map[*int]func(id string)
	// unannounced are the sessions evicted while nothing watched, for Expire to report.
	// Guarded by watchMu.
	unannounced []string
}

// memoryEntry must not be copied (it holds an atomic).
type memoryEntry struct {
	// rec is replaced, never mutated, so readers may keep it. Guarded by MemoryStore.mu.
	rec *Record
	// lastUsed is the unix nano time of the last Touch or Keep; updated without the write
	// lock.
	lastUsed atomic.Int64
	// lastRequest is the unix nano time of the last Touch (or of Create): when its client
	// last made a request. Updated without the write lock.
	lastRequest atomic.Int64
	// owner is who the session counts against (MemoryStore.owners), "" for no one: set at
	// Create, then never changed.
	owner string
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. A nil opts means no cap.
func NewMemoryStore(opts *MemoryOptions) *MemoryStore {
	s := &MemoryStore{sessions: make(map[string]*memoryEntry), owners: make(map[string]int), routes: newMemoryRoutes(), watchers: map[*int]func(string){}}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	if s.opts.Logger == nil {
		s.opts.Logger = slog.New(slog.DiscardHandler)
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
	e.lastRequest.Store(now.UnixNano())
	evicted, err := s.admit(e, limit, now)
	if evicted != "" {
		s.opts.Logger.Info("session store: evicted the session idle longest to make room for a new one",
			"session", sessionHash(evicted)[:12], "evict_idle", s.opts.EvictIdle.String())
		s.announce(evicted)
	}
	if err != nil {
		return nil, err
	}
	return e.rec, nil
}

// admit stores the new session e, whose owner may hold limit sessions, making room for it
// if need be (EvictIdle): it returns the session evicted, if any.
func (s *MemoryStore) admit(e *memoryEntry, limit int, now time.Time) (evicted string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.MaxSessions > 0 && len(s.sessions) >= s.opts.MaxSessions {
		if s.opts.EvictIdle <= 0 {
			return "", ErrLimit
		}
		if e.owner != "" && s.owners[e.owner] >= limit {
			return "", ErrOwnerLimit // evicting would make no room for it
		}
		victim, ok := s.idlestLocked(now.Add(-s.opts.EvictIdle).UnixNano())
		if !ok {
			return "", ErrLimit
		}
		s.removeLocked(victim, s.sessions[victim])
		s.routes.dropSession(victim)
		evicted = victim
	}
	if e.owner != "" {
		if s.owners[e.owner] >= limit {
			return evicted, ErrOwnerLimit
		}
		s.owners[e.owner]++
	}
	s.sessions[e.rec.ID] = e
	return evicted, nil
}

// idlestLocked returns the session whose client made no request for longest, if its last
// request was at or before cutoff (unix nano). The caller holds mu.
func (s *MemoryStore) idlestLocked(cutoff int64) (string, bool) {
	victim, oldest := "", int64(0)
	for id, e := range s.sessions {
		if at := e.lastRequest.Load(); at <= cutoff && (victim == "" || at < oldest) {
			victim, oldest = id, at
		}
	}
	return victim, victim != ""
}

// announce tells the watchers (WatchEnded) that session id was evicted, or, when none
// watches, keeps it for Expire to report.
func (s *MemoryStore) announce(id string) {
	s.watchMu.Lock()
	watchers := make([]func(string), 0, len(s.watchers))
	for _, w := range s.watchers {
		watchers = append(watchers, w)
	}
	if len(watchers) == 0 {
		s.unannounced = append(s.unannounced, id)
	}
	s.watchMu.Unlock()
	for _, w := range watchers {
		w(id)
	}
}

// WatchEnded calls ended with the id of each session the store evicts (Create, with
// EvictIdle), on the goroutine of the Create that evicted it, until ctx ends; it returns when
// ctx ends. A session evicted while nothing watches is reported by Expire instead.
func (s *MemoryStore) WatchEnded(ctx context.Context, ended func(id string)) {
	key := new(int)
	s.watchMu.Lock()
	s.watchers[key] = ended
	s.watchMu.Unlock()
	<-ctx.Done()
	s.watchMu.Lock()
	delete(s.watchers, key)
	s.watchMu.Unlock()
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
		now := s.opts.Now().UnixNano()
		e.lastUsed.Store(now)
		e.lastRequest.Store(now)
	}
	return nil
}

// Keep implements Store.
func (s *MemoryStore) Keep(_ context.Context, id string) error {
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

// Expire implements Store. It also reports the sessions evicted (Create) while nothing
// watched (WatchEnded), once each.
func (s *MemoryStore) Expire(_ context.Context, cutoff time.Time) ([]string, error) {
	limit := cutoff.UnixNano()
	s.watchMu.Lock()
	expired := s.unannounced
	s.unannounced = nil
	s.watchMu.Unlock()
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

package session

import (
	"context"
	"sync"
	"time"
)

// Bounds of a MemoryStore's task records (Tasks).
const (
	// MaxTasksPerSession is how many task records a session may hold: far more tasks than a
	// client runs at once, and few enough that a client creating tasks in a loop cannot
	// exhaust memory.
	MaxTasksPerSession = 1000
	// TaskRetention is how long a task's record is kept after the task ended: time for a
	// client that polls at a leisurely pace to read its status and result.
	TaskRetention = 10 * time.Minute
)

// memoryRoutes are the routing tables of a MemoryStore.
type memoryRoutes struct {
	mu sync.Mutex
	// All guarded by mu.
	reverse   map[[2]string]ReverseRecord // (session, id) → record
	byUpRev   map[[2]string][2]string     // (upstream, upstream id) → (session, id)
	tasks     map[string]TaskRecord       // gateway task id → record
	tasksByUp map[[2]string]string        // (upstream, upstream task id) → gateway id
	// tasksOf holds each session's task ids. Invariant: it indexes exactly the records of
	// tasks, with at most MaxTasksPerSession ids a session, and holds no empty set.
	tasksOf map[string]map[string]bool
}

func newMemoryRoutes() *memoryRoutes {
	return &memoryRoutes{
		reverse:   map[[2]string]ReverseRecord{},
		byUpRev:   map[[2]string][2]string{},
		tasks:     map[string]TaskRecord{},
		tasksByUp: map[[2]string]string{},
		tasksOf:   map[string]map[string]bool{},
	}
}

var _ Routes = (*MemoryStore)(nil)

// PutReverse implements Routes.
func (s *MemoryStore) PutReverse(_ context.Context, rec ReverseRecord) error {
	r := s.routes
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reverse[[2]string{rec.SessionID, rec.ID}] = rec
	r.byUpRev[[2]string{rec.Upstream, rec.UpstreamID}] = [2]string{rec.SessionID, rec.ID}
	return nil
}

// TakeReverse implements Routes.
func (s *MemoryStore) TakeReverse(_ context.Context, sessionID, id string) (ReverseRecord, error) {
	r := s.routes
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]string{sessionID, id}
	rec, ok := r.reverse[key]
	if !ok {
		return ReverseRecord{}, ErrNotFound
	}
	delete(r.reverse, key)
	delete(r.byUpRev, [2]string{rec.Upstream, rec.UpstreamID})
	return rec, nil
}

// ReverseByUpstream implements Routes.
func (s *MemoryStore) ReverseByUpstream(_ context.Context, upstream, upstreamID string) (ReverseRecord, error) {
	r := s.routes
	r.mu.Lock()
	defer r.mu.Unlock()
	key, ok := r.byUpRev[[2]string{upstream, upstreamID}]
	if !ok {
		return ReverseRecord{}, ErrNotFound
	}
	return r.reverse[key], nil
}

// dropSession removes every routing record of a session.
func (r *memoryRoutes) dropSession(sessionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.tasksOf[sessionID] {
		r.deleteTaskLocked(id)
	}
	for key, rec := range r.reverse {
		if key[0] == sessionID {
			delete(r.reverse, key)
			delete(r.byUpRev, [2]string{rec.Upstream, rec.UpstreamID})
		}
	}
}

var _ Tasks = (*MemoryStore)(nil)

// PutTask implements Tasks.
func (s *MemoryStore) PutTask(_ context.Context, t TaskRecord) error {
	r := s.routes
	now := s.opts.Now()
	if t.Created.IsZero() {
		t.Created = now
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.tasks[t.ID]; ok {
		r.deleteTaskLocked(old.ID) // a new record under an old id replaces it
	}
	if len(r.tasksOf[t.SessionID]) >= MaxTasksPerSession {
		for id := range r.tasksOf[t.SessionID] {
			if taskGone(r.tasks[id], now) {
				r.deleteTaskLocked(id)
			}
		}
	}
	if len(r.tasksOf[t.SessionID]) >= MaxTasksPerSession {
		id, ok := r.firstEndedLocked(t.SessionID)
		if !ok {
			return ErrTooManyTasks
		}
		r.deleteTaskLocked(id)
	}
	r.tasks[t.ID] = t
	r.tasksByUp[[2]string{t.Upstream, t.UpstreamID}] = t.ID
	if r.tasksOf[t.SessionID] == nil {
		r.tasksOf[t.SessionID] = map[string]bool{}
	}
	r.tasksOf[t.SessionID][t.ID] = true
	return nil
}

// Task implements Tasks.
func (s *MemoryStore) Task(_ context.Context, id string) (TaskRecord, error) {
	r := s.routes
	now := s.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.liveTaskLocked(id, now)
}

// TaskByUpstream implements Tasks.
func (s *MemoryStore) TaskByUpstream(_ context.Context, upstream, upstreamID string) (TaskRecord, error) {
	r := s.routes
	now := s.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.tasksByUp[[2]string{upstream, upstreamID}]
	if !ok {
		return TaskRecord{}, ErrNotFound
	}
	return r.liveTaskLocked(id, now)
}

// TasksOf implements Tasks.
func (s *MemoryStore) TasksOf(_ context.Context, sessionID string) ([]TaskRecord, error) {
	r := s.routes
	now := s.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []TaskRecord
	for id := range r.tasksOf[sessionID] {
		if t, err := r.liveTaskLocked(id, now); err == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// EndTask implements Tasks.
func (s *MemoryStore) EndTask(_ context.Context, id string) error {
	r := s.routes
	now := s.opts.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.tasks[id]; ok && t.Ended.IsZero() {
		t.Ended = now
		r.tasks[id] = t
	}
	return nil
}

// taskGone reports whether a task's record has outlived its use at now: its ttl has
// passed, or it ended longer than the retention ago.
func taskGone(t TaskRecord, now time.Time) bool {
	if t.TTL > 0 && !now.Before(t.Created.Add(t.TTL)) {
		return true
	}
	return !t.Ended.IsZero() && !now.Before(t.Ended.Add(TaskRetention))
}

// liveTaskLocked returns the task's record, or ErrNotFound; a record that is gone at now
// is dropped.
func (r *memoryRoutes) liveTaskLocked(id string, now time.Time) (TaskRecord, error) {
	t, ok := r.tasks[id]
	if !ok {
		return TaskRecord{}, ErrNotFound
	}
	if taskGone(t, now) {
		r.deleteTaskLocked(id)
		return TaskRecord{}, ErrNotFound
	}
	return t, nil
}

// firstEndedLocked returns the session's task that ended first (the earliest created among
// those that ended at once), if any has ended.
func (r *memoryRoutes) firstEndedLocked(sessionID string) (string, bool) {
	var first TaskRecord
	found := false
	for id := range r.tasksOf[sessionID] {
		t := r.tasks[id]
		if t.Ended.IsZero() {
			continue
		}
		if !found || t.Ended.Before(first.Ended) ||
			t.Ended.Equal(first.Ended) && (t.Created.Before(first.Created) || t.Created.Equal(first.Created) && t.ID < first.ID) {
			first, found = t, true
		}
	}
	return first.ID, found
}

// deleteTaskLocked drops a task's record and its index entries.
func (r *memoryRoutes) deleteTaskLocked(id string) {
	t, ok := r.tasks[id]
	if !ok {
		return
	}
	delete(r.tasks, id)
	if r.tasksByUp[[2]string{t.Upstream, t.UpstreamID}] == id {
		delete(r.tasksByUp, [2]string{t.Upstream, t.UpstreamID})
	}
	delete(r.tasksOf[t.SessionID], id)
	if len(r.tasksOf[t.SessionID]) == 0 {
		delete(r.tasksOf, t.SessionID)
	}
}

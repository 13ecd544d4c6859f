package approval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MaxMemoryHeld is the most calls a MemoryHeldCalls holds at once; Hold fails with ErrFull past it.
const MaxMemoryHeld = 10000

// MemoryHeldCalls is a HeldCalls in this process's memory, for a single gateway. It is safe for
// concurrent use. A call Grace past its deadline by this process's clock (as a Redis store's
// keys expire by Redis's) is gone at once for Get, Decide, Pending and HeldBy, and its room is
// taken back by a later Hold.
type MemoryHeldCalls struct {
	// now returns the current time, for what is gone; time.Now but in tests. Set at
	// construction, then never changed.
	now func() time.Time
	// max is the most calls held at once: MaxMemoryHeld but in tests. Set at construction,
	// then never changed.
	max int

	mu sync.RWMutex
	// calls holds the held calls by id. Guarded by mu. Invariant: len(calls) <= max. Its
	// values share nothing with a caller: Hold stores a copy of its call, with RawMessages
	// of its own, and the readers return copies (HeldCall.clone). A value is replaced, never
	// changed.
	calls map[string]*HeldCall
	// pruned is when pruneLocked last ran. Guarded by mu.
	pruned time.Time
}

var _ HeldCalls = (*MemoryHeldCalls)(nil)

// NewMemoryHeldCalls returns an empty MemoryHeldCalls that holds up to MaxMemoryHeld calls.
func NewMemoryHeldCalls() *MemoryHeldCalls {
	return &MemoryHeldCalls{now: time.Now, max: MaxMemoryHeld, calls: make(map[string]*HeldCall)}
}

// Hold implements HeldCalls. It forgets the calls gone when the store is full, or when it last did
// a Grace ago or more, so that the calls no one releases do not pile up; it fails with ErrFull
// when the store still holds MaxMemoryHeld calls.
func (s *MemoryHeldCalls) Hold(_ context.Context, c HeldCall) error {
	if err := checkHold(&c); err != nil {
		return fmt.Errorf("held calls: hold: %w", err)
	}
	var err error
	if c.Arguments, err = compactRaw(c.Arguments); err != nil {
		return fmt.Errorf("held calls: hold: arguments: %w", err)
	}
	if c.Annotations, err = compactRaw(c.Annotations); err != nil {
		return fmt.Errorf("held calls: hold: annotations: %w", err)
	}
	c.Held, c.Deadline = c.Held.Round(0), c.Deadline.Round(0)
	c.ClientID, c.Params, c.Caller = bytes.Clone(c.ClientID), bytes.Clone(c.Params), bytes.Clone(c.Caller)

	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) >= s.max || now.Sub(s.pruned) >= Grace {
		s.pruneLocked(now)
	}
	if old, ok := s.calls[c.ID]; ok && !gone(old, now) {
		return errors.New("held calls: hold: a call with that ID is held already")
	}
	if len(s.calls) >= s.max {
		return fmt.Errorf("held calls: hold: %w (at most %d)", ErrFull, s.max)
	}
	s.calls[c.ID] = &c
	return nil
}

// pruneLocked forgets the calls gone at time now. s.mu must be held for writing.
func (s *MemoryHeldCalls) pruneLocked(now time.Time) {
	for id, c := range s.calls {
		if gone(c, now) {
			delete(s.calls, id)
		}
	}
	s.pruned = now
}

// Get implements HeldCalls.
func (s *MemoryHeldCalls) Get(_ context.Context, id string) (HeldCall, error) {
	now := s.now()
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.calls[id]
	if !ok || gone(c, now) {
		return HeldCall{}, ErrNotFound
	}
	return c.clone(), nil
}

// Decide implements HeldCalls.
func (s *MemoryHeldCalls) Decide(_ context.Context, id, decision, approver string, at time.Time) (HeldCall, error) {
	if err := checkDecision(decision); err != nil {
		return HeldCall{}, fmt.Errorf("held calls: decide: %w", err)
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok || gone(c, now) {
		return HeldCall{}, ErrNotFound
	}
	next := *c
	if err := decide(&next, decision, approver, at); err != nil {
		return c.clone(), err
	}
	s.calls[id] = &next
	return next.clone(), nil
}

// Pending implements HeldCalls.
func (s *MemoryHeldCalls) Pending(_ context.Context, now time.Time) ([]HeldCall, error) {
	return s.list(func(c *HeldCall) bool { return c.Decision == "" && c.Deadline.After(now) }), nil
}

// Release implements HeldCalls.
func (s *MemoryHeldCalls) Release(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.calls, id)
	return nil
}

// HeldBy implements HeldCalls.
func (s *MemoryHeldCalls) HeldBy(_ context.Context, replica string) ([]HeldCall, error) {
	return s.list(func(c *HeldCall) bool { return c.Replica == replica }), nil
}

// All implements HeldCalls.
func (s *MemoryHeldCalls) All(context.Context) ([]HeldCall, error) {
	return s.list(func(*HeldCall) bool { return true }), nil
}

// Move implements HeldCalls.
func (s *MemoryHeldCalls) Move(_ context.Context, id, replica string) (HeldCall, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.calls[id]
	if !ok || gone(c, now) {
		return HeldCall{}, ErrNotFound
	}
	next := *c
	next.Replica = replica
	s.calls[id] = &next
	return next.clone(), nil
}

// list returns copies of the calls not gone that match keep, oldest first.
func (s *MemoryHeldCalls) list(keep func(*HeldCall) bool) []HeldCall {
	now := s.now()
	var out []HeldCall
	s.mu.RLock()
	for _, c := range s.calls {
		if !gone(c, now) && keep(c) {
			out = append(out, c.clone())
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, oldestFirst)
	return out
}

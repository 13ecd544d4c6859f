package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Listed is a session as List returns it: its record, and its digest (Digest of its id),
// since a record read by digest may not carry the id.
type Listed struct {
	Digest string
	Record Record
}

// List returns up to limit live sessions, oldest first, for operators (the admin API).
func (s *MemoryStore) List(_ context.Context, limit int) ([]Listed, error) {
	s.mu.RLock()
	out := make([]Listed, 0, min(limit, len(s.sessions)))
	for id, e := range s.sessions {
		out = append(out, Listed{Digest: Digest(id), Record: *e.rec})
	}
	s.mu.RUnlock()
	sortOldestFirst(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// List returns up to limit live sessions of every replica, oldest first, for operators (the
// admin API): one round trip for the index, one per session.
func (s *RedisStore) List(ctx context.Context, limit int) ([]Listed, error) {
	digests, err := s.client.ZRange(ctx, s.sessionsKey, 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("session store: listing sessions: %w", err)
	}
	out := make([]Listed, 0, len(digests))
	for _, d := range digests {
		rec, err := s.GetByDigest(ctx, d)
		if errors.Is(err, ErrNotFound) {
			continue // ended meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("session store: listing sessions: %w", err)
		}
		out = append(out, Listed{Digest: d, Record: *rec})
	}
	sortOldestFirst(out)
	return out, nil
}

func sortOldestFirst(recs []Listed) {
	slices.SortFunc(recs, func(a, b Listed) int { return a.Record.CreatedAt.Compare(b.Record.CreatedAt) })
}

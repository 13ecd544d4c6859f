package session

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestMemoryStore(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := NewMemoryStore(&MemoryOptions{MaxSessions: 2, Now: func() time.Time { return now }})

	a, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.ID) != 43 || a.CreatedAt != now {
		t.Errorf("record %+v: want a 43-character id and CreatedAt now", a)
	}
	b, _ := s.Create(ctx, Record{ProtocolVersion: "2024-11-05"})
	if _, err := s.Create(ctx, Record{}); !errors.Is(err, ErrLimit) {
		t.Errorf("third session: %v, want ErrLimit", err)
	}

	up, err := s.Update(ctx, a.ID, func(r *Record) { r.LogLevel = "debug"; r.ID = "forged" })
	if err != nil || up.LogLevel != "debug" || up.ID != a.ID {
		t.Errorf("Update = %+v, %v; want the level set and the id kept", up, err)
	}
	if a.LogLevel != "" {
		t.Error("Update changed a record a reader held")
	}
	if _, err := s.Update(ctx, "nope", func(*Record) {}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Update of an unknown id: %v", err)
	}

	// b is used later than a; only a is idle past the cutoff.
	now = now.Add(time.Minute)
	if _, err := s.Get(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	expired, err := s.Expire(ctx, now.Add(-30*time.Second), nil)
	if err != nil || len(expired) != 1 || expired[0] != a.ID {
		t.Errorf("Expire = %v, %v; want [%s]", expired, err, a.ID)
	}
	if _, err := s.Get(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an expired session: %v", err)
	}
	// keep spares a session in use, and counts as its use.
	now = now.Add(time.Hour)
	expired, _ = s.Expire(ctx, now.Add(-time.Second), func(id string) bool { return id == b.ID })
	if len(expired) != 0 {
		t.Errorf("Expire removed %v despite keep", expired)
	}
	if err := s.Delete(ctx, b.ID); err != nil || s.Len() != 0 {
		t.Errorf("Delete: %v, %d left", err, s.Len())
	}
	if err := s.Delete(ctx, b.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

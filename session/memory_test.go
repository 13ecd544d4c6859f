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

	// b is used later than a; only a is idle past the cutoff. Reading a does not use it.
	now = now.Add(time.Minute)
	if err := s.Touch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, a.ID); err != nil {
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

func TestMemoryRoutes(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(nil)
	a, _ := s.Create(ctx, Record{})
	b, _ := s.Create(ctx, Record{})

	if err := s.PutCall(ctx, CallRecord{SessionID: a.ID, ClientID: "7", Method: "tools/call"}); err != nil {
		t.Fatal(err)
	}
	calls, _ := s.Calls(ctx, a.ID)
	if len(calls) != 1 || calls[0].ClientID != "7" {
		t.Errorf("Calls = %+v", calls)
	}
	_ = s.DeleteCall(ctx, a.ID, "7")
	if calls, _ := s.Calls(ctx, a.ID); len(calls) != 0 {
		t.Errorf("after DeleteCall: %+v", calls)
	}

	// Two sessions' tokens are told apart by the gateway's token, not the client's.
	_ = s.PutProgress(ctx, ProgressRecord{Upstream: "u", Token: `"g1"`, SessionID: a.ID, ClientID: "1", ClientToken: `"1"`})
	_ = s.PutProgress(ctx, ProgressRecord{Upstream: "u", Token: `"g2"`, SessionID: b.ID, ClientID: "1", ClientToken: `"1"`})
	if p, err := s.Progress(ctx, "u", `"g2"`); err != nil || p.SessionID != b.ID {
		t.Errorf("Progress g2 = %+v, %v", p, err)
	}

	_ = s.PutReverse(ctx, ReverseRecord{SessionID: a.ID, ID: `"r-1"`, Upstream: "u", UpstreamID: "5"})
	if r, err := s.ReverseByUpstream(ctx, "u", "5"); err != nil || r.ID != `"r-1"` {
		t.Errorf("ReverseByUpstream = %+v, %v", r, err)
	}
	if _, err := s.TakeReverse(ctx, b.ID, `"r-1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("another session took a's request: %v", err)
	}
	if _, err := s.TakeReverse(ctx, a.ID, `"r-1"`); err != nil {
		t.Errorf("TakeReverse: %v", err)
	}
	if _, err := s.TakeReverse(ctx, a.ID, `"r-1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("a request answered twice: %v", err)
	}

	// Deleting a session drops its records, and only its.
	_ = s.PutReverse(ctx, ReverseRecord{SessionID: a.ID, ID: `"r-2"`, Upstream: "u", UpstreamID: "6"})
	_ = s.Delete(ctx, a.ID)
	if _, err := s.Progress(ctx, "u", `"g1"`); !errors.Is(err, ErrNotFound) {
		t.Errorf("a's progress record outlived the session: %v", err)
	}
	if _, err := s.ReverseByUpstream(ctx, "u", "6"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a's reverse record outlived the session: %v", err)
	}
	if _, err := s.Progress(ctx, "u", `"g2"`); err != nil {
		t.Errorf("b's progress record went with a: %v", err)
	}
}

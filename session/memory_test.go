package session

import (
	"context"
	"errors"
	"fmt"
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
	expired, err := s.Expire(ctx, now.Add(-30*time.Second))
	if err != nil || len(expired) != 1 || expired[0] != a.ID {
		t.Errorf("Expire = %v, %v; want [%s]", expired, err, a.ID)
	}
	if _, err := s.Get(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an expired session: %v", err)
	}
	// A session in use is kept by marking it used just before.
	now = now.Add(time.Hour)
	if err := s.Touch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	expired, _ = s.Expire(ctx, now.Add(-time.Second))
	if len(expired) != 0 {
		t.Errorf("Expire removed %v, used just now", expired)
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
	if _, err := s.ReverseByUpstream(ctx, "u", "6"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a's reverse record outlived the session: %v", err)
	}
	_ = s.PutReverse(ctx, ReverseRecord{SessionID: b.ID, ID: `"r-3"`, Upstream: "u", UpstreamID: "7"})
	if _, err := s.ReverseByUpstream(ctx, "u", "7"); err != nil {
		t.Errorf("b's reverse record went with a: %v", err)
	}
}

// TestMemoryTaskRecordsAreBounded: a session's task records do not grow without bound. A
// session holds at most MaxTasksPerSession; when full, the task that ended first makes room,
// and with none ended a new task is refused. Ended tasks go after TaskRetention, and any task
// once its ttl has passed; a running task without a ttl stays while its session lives.
func TestMemoryTaskRecordsAreBounded(t *testing.T) {
	ctx := context.Background()
	start := time.Unix(1000, 0)
	now := start
	s := NewMemoryStore(&MemoryOptions{Now: func() time.Time { return now }})
	a, _ := s.Create(ctx, Record{})
	b, _ := s.Create(ctx, Record{})
	put := func(session, id string, ttl time.Duration) error {
		return s.PutTask(ctx, TaskRecord{ID: id, SessionID: session, Upstream: "u", UpstreamID: "up-" + id, TTL: ttl})
	}
	found := func(id string) bool {
		t.Helper()
		rec, err := s.Task(ctx, id)
		byUp, errUp := s.TaskByUpstream(ctx, "u", "up-"+id)
		if (err == nil) != (errUp == nil) || err == nil && rec != byUp {
			t.Errorf("task %s: Task = %+v, %v but TaskByUpstream = %+v, %v", id, rec, err, byUp, errUp)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			t.Errorf("task %s: %v, want ErrNotFound", id, err)
		}
		return err == nil
	}

	for i := range MaxTasksPerSession {
		if err := put(a.ID, fmt.Sprintf("a%d", i), 0); err != nil {
			t.Fatalf("task %d of %d: %v", i+1, MaxTasksPerSession, err)
		}
	}
	if rec, _ := s.Task(ctx, "a0"); !rec.Created.Equal(start) {
		t.Errorf("Created = %v, want now (%v)", rec.Created, start)
	}
	// Full, and nothing has ended: refused, and nothing stored.
	if err := put(a.ID, "extra", 0); !errors.Is(err, ErrTooManyTasks) {
		t.Fatalf("task %d with none ended: %v, want ErrTooManyTasks", MaxTasksPerSession+1, err)
	}
	if found("extra") {
		t.Error("a refused task was stored")
	}
	// The cap is per session.
	if err := put(b.ID, "b0", 0); err != nil {
		t.Errorf("another session's first task: %v", err)
	}

	// The task that ended first makes room, whatever the order of creation; ending a task
	// twice keeps the first time, and ending an unknown one is no error.
	_ = s.EndTask(ctx, "a5")
	now = now.Add(time.Second)
	_ = s.EndTask(ctx, "a3")
	_ = s.EndTask(ctx, "a5")
	if err := s.EndTask(ctx, "nope"); err != nil {
		t.Errorf("EndTask of an unknown task: %v", err)
	}
	if rec, _ := s.Task(ctx, "a5"); !rec.Ended.Equal(start) {
		t.Errorf("a5 ended at %v, want the first EndTask's %v", rec.Ended, start)
	}
	if err := put(a.ID, "extra", 0); err != nil {
		t.Fatalf("full session with ended tasks: %v", err)
	}
	if found("a5") || !found("a3") || !found("extra") {
		t.Errorf("after making room: a5 %v, a3 %v, extra %v; want only a5 (ended first) gone", found("a5"), found("a3"), found("extra"))
	}

	// An ended task is kept for TaskRetention after it ended, then goes.
	now = start.Add(time.Second + TaskRetention - time.Nanosecond)
	if !found("a3") {
		t.Error("a3 went before TaskRetention had passed")
	}
	now = now.Add(time.Nanosecond)
	if found("a3") {
		t.Error("a3 stayed after TaskRetention")
	}
	if !found("a0") {
		t.Error("a running task without a ttl went with time")
	}
	if mine, _ := s.TasksOf(ctx, a.ID); len(mine) != MaxTasksPerSession-1 {
		t.Errorf("TasksOf = %d tasks, want %d", len(mine), MaxTasksPerSession-1)
	}

	// A task goes once its ttl has passed, running or not.
	if err := put(b.ID, "short", time.Minute); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute - time.Nanosecond)
	if !found("short") {
		t.Error("a task went before its ttl")
	}
	now = now.Add(time.Nanosecond)
	if found("short") {
		t.Error("a task stayed after its ttl")
	}
	if mine, _ := s.TasksOf(ctx, b.ID); len(mine) != 1 || mine[0].ID != "b0" {
		t.Errorf("TasksOf(b) = %+v, want b0 only", mine)
	}

	// A long-lived session whose tasks end runs any number of them in bounded memory.
	for i := range 3 * MaxTasksPerSession {
		id := fmt.Sprintf("loop%d", i)
		if err := put(b.ID, id, 0); err != nil {
			t.Fatalf("task %d of a session whose tasks end: %v", i, err)
		}
		_ = s.EndTask(ctx, id)
	}
	r := s.routes
	r.mu.Lock()
	held, indexed := len(r.tasks), len(r.tasksByUp)
	r.mu.Unlock()
	if want := 2*MaxTasksPerSession - 1; held != want || indexed != want {
		t.Errorf("the store holds %d task records (%d indexed), want %d", held, indexed, want)
	}

	// The records go with their session.
	_ = s.Delete(ctx, a.ID)
	_ = s.Delete(ctx, b.ID)
	r.mu.Lock()
	held, indexed, sessions := len(r.tasks), len(r.tasksByUp), len(r.tasksOf)
	r.mu.Unlock()
	if held+indexed+sessions != 0 {
		t.Errorf("after the sessions ended: %d records, %d indexed, %d sessions' sets left", held, indexed, sessions)
	}
}

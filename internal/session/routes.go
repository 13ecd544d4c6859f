package session

import (
	"context"
	"errors"
	"time"
)

// The routing tables of a session's work in flight: plain records, keyed so that any replica
// could find them. Requests sent to clients are recorded so that an upstream's cancel finds
// the session it went to; the live side (the stream, the channel a waiting call reads) is the
// hub's. Progress mappings are not here: they stay with the upstream connection that carries
// the call, on which the progress comes back.

// ReverseRecord is a request the gateway sent a client on an upstream's behalf, waiting for
// the client's answer.
type ReverseRecord struct {
	SessionID string `json:"sessionId"`
	// ID is the gateway's id of the request to the client, as raw JSON: unique in the session.
	ID     string `json:"id"`
	Method string `json:"method"`
	// Upstream and UpstreamID identify the upstream's own request, to answer or cancel it.
	Upstream   string    `json:"upstream"`
	UpstreamID string    `json:"upstreamId"`
	Sent       time.Time `json:"sent"`
}

// Routes keeps the routing tables. Implementations are safe for concurrent use; records of a
// session go when the session is deleted or expires.
type Routes interface {
	PutReverse(ctx context.Context, r ReverseRecord) error
	// TakeReverse removes and returns the record of the session's request id, or ErrNotFound.
	TakeReverse(ctx context.Context, sessionID, id string) (ReverseRecord, error)
	// ReverseByUpstream finds the record of an upstream's request id, or ErrNotFound.
	ReverseByUpstream(ctx context.Context, upstream, upstreamID string) (ReverseRecord, error)
}

// TaskRecord binds a gateway task id to the session that created the task and to the
// upstream's own task, and says how long the record is worth keeping.
type TaskRecord struct {
	// ID is the gateway's task id, the only one clients see.
	ID         string `json:"id"`
	SessionID  string `json:"sessionId"`
	Upstream   string `json:"upstream"`
	UpstreamID string `json:"upstreamId"`
	// Tool and Exposed name the tool the task runs, as its upstream and as the client know
	// it, for the plugins that inspect its result; empty in records of older builds.
	Tool    string `json:"tool,omitempty"`
	Exposed string `json:"exposed,omitempty"`
	// Created is when the gateway recorded the task. If zero, PutTask sets it to now.
	Created time.Time `json:"created"`
	// TTL is how long after its creation the upstream keeps the task (its ttl): the upstream
	// may then delete it whatever its status (mcp-notes §9.4), so the record goes too. If
	// zero, the task has no ttl.
	TTL time.Duration `json:"ttl,omitempty"`
	// Ended is when the gateway first saw the task in a terminal status (completed, failed or
	// cancelled); zero while it may still run. Set by EndTask.
	Ended time.Time `json:"ended,omitzero"`
}

// ErrTooManyTasks is returned by PutTask when the session already holds its maximum of task
// records and none of its tasks has ended.
var ErrTooManyTasks = errors.New("too many unfinished tasks in the session")

// Tasks keeps task records. Implementations are safe for concurrent use. The records are
// bounded: they go with their session, once their ttl has passed, and a retention period
// after their task ended; and a session holds at most a fixed number of them.
type Tasks interface {
	// PutTask stores the record of a new task. When the session already holds its maximum
	// of task records, the one whose task ended first is dropped to make room; when none
	// has ended, PutTask fails with ErrTooManyTasks and stores nothing.
	PutTask(ctx context.Context, t TaskRecord) error
	// Task finds a task by the gateway's id, or ErrNotFound.
	Task(ctx context.Context, id string) (TaskRecord, error)
	// TaskByUpstream finds a task by the upstream's id, or ErrNotFound.
	TaskByUpstream(ctx context.Context, upstream, upstreamID string) (TaskRecord, error)
	// TasksOf lists a session's tasks.
	TasksOf(ctx context.Context, sessionID string) ([]TaskRecord, error)
	// EndTask records that the task reached a terminal status; the first call sets Ended
	// and later ones change nothing. The record is kept for a retention period, so that the
	// task can still be asked about, unless it is needed to make room first. Ending an
	// unknown task is not an error.
	EndTask(ctx context.Context, id string) error
}

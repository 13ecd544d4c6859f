package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Tasks (2025-11-25, experimental; mcp-notes §9, §14.11): a task-augmented tools/call goes to
// an upstream that declared tasks; the task id it returns is replaced by a gateway id bound to
// the creating session, and every tasks/* request and task notification is mapped back. A
// task of another session does not exist for the caller.
//
// The records are bounded (session.Tasks): the gateway tells the store when it sees a task
// reach a terminal status, in a tasks/get, tasks/result or tasks/cancel answer, a tasks/list
// entry or a notifications/tasks/status; the store keeps an ended task for a while and drops
// it after, or sooner to make room, and refuses a new task to a session full of running ones.

// Task-related method names.
const (
	methodTasksGet     = "tasks/get"
	methodTasksResult  = "tasks/result"
	methodTasksList    = "tasks/list"
	methodTasksCancel  = "tasks/cancel"
	notificationStatus = "notifications/tasks/status"
	metaRelatedTask    = "io.modelcontextprotocol/related-task"
)

// terminalTaskStatus reports whether a task status is terminal: such a task never changes
// again (mcp-notes §9.3).
func terminalTaskStatus(status string) bool {
	switch status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// taskEnded reports whether a Task object (a task, a tasks/get or tasks/cancel result, a
// status notification's params) shows a terminal status.
func taskEnded(task json.RawMessage) bool {
	status, _, _ := protocol.StringMember(task, "status")
	return terminalTaskStatus(status)
}

// taskTTL reads a Task's ttl (milliseconds, or null for unlimited); 0 means none.
func taskTTL(task json.RawMessage) time.Duration {
	raw, ok, _ := protocol.Member(task, "ttl")
	if !ok {
		return 0
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil || ms < 1 || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// Time limit of the cancel of a task-augmented call refused because the session holds too
// many unfinished tasks.
const (
	// orphanCancelTimeout bounds the best-effort tasks/cancel of a task the gateway did not
	// keep.
	orphanCancelTimeout = 5 * time.Second
)

// taskCaps is what an upstream declared of tasks.
type taskCaps struct {
	List   *struct{} `json:"list"`
	Cancel *struct{} `json:"cancel"`
	// Requests.Tools.Call says it runs tools/call as tasks.
	Requests *struct {
		Tools *struct {
			Call *struct{} `json:"call"`
		} `json:"tools"`
	} `json:"requests"`
}

func upstreamTaskCaps(u *upstreamEntry) taskCaps {
	var c taskCaps
	if info := u.Server(); info != nil && len(info.Capabilities.Tasks) > 0 {
		_ = json.Unmarshal(info.Capabilities.Tasks, &c)
	}
	return c
}

func (c taskCaps) callsAsTasks() bool {
	return c.Requests != nil && c.Requests.Tools != nil && c.Requests.Tools.Call != nil
}

// taskTable keeps the tasks of task-augmented tools/call per session (mcp-notes §9): the
// gateway's task ids, bound to the session that created each task and to the upstream's own
// id, so that a session sees and reaches its own tasks only.
type taskTable struct {
	router    *messageRouter
	upstreams func() []*upstreamEntry
	// forward sends a request to an upstream on a client's behalf (the pipeline's forward).
	forward func(ctx context.Context, rq *request, res *resolved, method string, params json.RawMessage) (json.RawMessage, error)
}

// forwardTo forwards a request the gateway makes on a client's behalf to upstream u, outside
// the request's own target (tasks/list of each upstream, the cancel of an orphan task).
func (tt *taskTable) forwardTo(ctx context.Context, rq *request, u *upstreamEntry, method string, params json.RawMessage) (json.RawMessage, error) {
	return tt.forward(ctx, rq, &resolved{upstream: u, scheme: u.ns.Scheme, target: pipeline.Target{Upstream: u.ns.Name}}, method, params)
}

func newTaskID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "mf-t-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// startTask finishes a task-augmented tools/call: the upstream's task id in the result is
// recorded for the session and replaced by a gateway id.
func (tt *taskTable) start(ctx context.Context, rq *request, u *upstreamEntry, t *pipeline.Target, result json.RawMessage) (json.RawMessage, error) {
	sessionID := rq.Client.SessionID
	task, ok, _ := protocol.Member(result, "task")
	if !ok {
		return result, nil // the upstream ran it without a task
	}
	upstreamID, ok, _ := protocol.StringMember(task, "taskId")
	if !ok {
		return nil, fmt.Errorf("upstream %s created a task without a taskId", u.ns.Name)
	}
	if sessionID == "" {
		tt.cancelOrphan(ctx, rq, u, upstreamID)
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "a task needs a session: call the tool without \"task\"")
	}
	rec := session.TaskRecord{ID: newTaskID(), SessionID: sessionID, Upstream: u.connKey(sessionID), UpstreamID: upstreamID, TTL: taskTTL(task),
		Tool: t.Original, Exposed: t.Exposed}
	switch err := tt.router.store.PutTask(ctx, rec); {
	case errors.Is(err, session.ErrTooManyTasks):
		tt.router.logger.Warn("task-augmented tools/call refused: the session holds its maximum of unfinished tasks", "session", fingerprint(sessionID), "upstream", u.ns.Name)
		tt.cancelOrphan(ctx, rq, u, upstreamID)
		return nil, &pipeline.Refusal{Reason: pipeline.ReasonTooManyTasks, Upstream: u.ns.Name,
			Message: "This task was not accepted: the session already has as many unfinished tasks as the gateway keeps for one session. " +
				"Fetch the results of finished tasks with tasks/result or cancel tasks you no longer need with tasks/cancel, then try again."}
	case err != nil:
		return nil, fmt.Errorf("record task: %w", err)
	}
	if taskEnded(task) {
		tt.end(ctx, rec)
	}
	newTask, err := withMember(task, "taskId", rec.ID)
	if err != nil {
		return nil, err
	}
	return protocol.SetMember(result, "task", newTask)
}

// cancelOrphanTask asks the upstream to cancel a task it created that the gateway did not
// keep, so that it does not run for nobody; best effort, if the upstream cancels tasks.
func (tt *taskTable) cancelOrphan(ctx context.Context, rq *request, u *upstreamEntry, upstreamID string) {
	if upstreamTaskCaps(u).Cancel == nil {
		return
	}
	params, err := withMember(json.RawMessage(`{}`), "taskId", upstreamID)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanCancelTimeout)
	defer cancel()
	if _, err := tt.forwardTo(ctx, rq, u, methodTasksCancel, params); err != nil {
		tt.router.logger.Debug("cancelling a task the gateway did not keep failed", "session", fingerprint(rq.Client.SessionID), "upstream", u.ns.Name, "error", err.Error())
	}
}

// endTask tells the store that a task reached a terminal status.
func (tt *taskTable) end(ctx context.Context, rec session.TaskRecord) {
	if err := tt.router.store.EndTask(context.WithoutCancel(ctx), rec.ID); err != nil {
		tt.router.logger.Warn("recording a task's end failed", "session", fingerprint(rec.SessionID), "error", err.Error())
	}
}

// noteTaskAnswer learns from an upstream's answer to tasks/get, tasks/result or tasks/cancel
// whether the task has ended. A tasks/result answer comes only once the task is terminal,
// with its result or the original request's JSON-RPC error (mcp-notes §9.2); a -32602 error
// to tasks/get or tasks/cancel means the upstream no longer has the task or it had already
// ended (§9.4). Other failures (unavailable, timed out) say nothing about the task.
func (tt *taskTable) noteAnswer(ctx context.Context, rec session.TaskRecord, method string, result json.RawMessage, err error) {
	var rpcErr *protocol.Error
	var ended bool
	switch {
	case err == nil:
		ended = method == methodTasksResult || taskEnded(result)
	case errors.As(err, &rpcErr):
		ended = method == methodTasksResult || rpcErr.Code == protocol.CodeInvalidParams
	}
	if ended {
		tt.end(ctx, rec)
	}
}

// taskFor finds the caller's task by the gateway's id; another session's task, like a missing
// one, is an invalid taskId (mcp-notes §14.11).
func (tt *taskTable) find(ctx context.Context, rq *request, params json.RawMessage) (session.TaskRecord, *upstreamEntry, error) {
	sessionID := rq.Client.SessionID
	id, ok, err := protocol.StringMember(params, "taskId")
	if err != nil || !ok {
		return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"taskId\" must be a string")
	}
	rec, err := tt.router.store.Task(ctx, id)
	if err != nil || sessionID == "" || rec.SessionID != sessionID {
		return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown task: %s", id)
	}
	for _, u := range tt.upstreams() {
		if u.connKey(sessionID) == rec.Upstream {
			return rec, u, nil
		}
	}
	return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown task: %s", id)
}

// taskRequest serves tasks/get, tasks/result and tasks/cancel of the task res names.
func (tt *taskTable) request(ctx context.Context, rq *request, res *resolved) (json.RawMessage, error) {
	rec, u := res.task, res.upstream
	if rq.Method == methodTasksCancel && upstreamTaskCaps(u).Cancel == nil {
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream of task %s does not cancel tasks", rec.ID)
	}
	result, err := tt.forward(ctx, rq, res, rq.Method, res.params)
	tt.noteAnswer(ctx, rec, rq.Method, result, err)
	if err != nil {
		return nil, err
	}
	return mapTaskIDs(result, rec, u.ns.Scheme), nil
}

// mapTaskIDs replaces the upstream's task id by the gateway's in a task result: the top-level
// taskId (tasks/get, tasks/cancel), a nested task, and the related-task _meta (tasks/result).
func mapTaskIDs(result json.RawMessage, rec session.TaskRecord, scheme string) json.RawMessage {
	if id, ok, _ := protocol.StringMember(result, "taskId"); ok && id == rec.UpstreamID {
		if out, err := withMember(result, "taskId", rec.ID); err == nil {
			result = out
		}
	}
	if meta, ok, _ := protocol.Member(result, "_meta"); ok {
		if related, ok, _ := protocol.Member(meta, metaRelatedTask); ok {
			if nr, err := withMember(related, "taskId", rec.ID); err == nil {
				if nm, err := protocol.SetMember(meta, metaRelatedTask, nr); err == nil {
					if out, err := protocol.SetMember(result, "_meta", nm); err == nil {
						result = out
					}
				}
			}
		}
	}
	return catalog.ExposeContentURIs(result, scheme)
}

// listTasks serves tasks/list: the caller's tasks only, as each upstream reports them.
func (tt *taskTable) list(ctx context.Context, rq *request) (json.RawMessage, error) {
	sessionID := rq.Client.SessionID
	if sessionID == "" {
		return json.RawMessage(`{"tasks":[]}`), nil
	}
	mine, err := tt.router.store.TasksOf(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	byUpstream := map[string]map[string]session.TaskRecord{}
	for _, t := range mine {
		if byUpstream[t.Upstream] == nil {
			byUpstream[t.Upstream] = map[string]session.TaskRecord{}
		}
		byUpstream[t.Upstream][t.UpstreamID] = t
	}
	tasks := []json.RawMessage{}
	for _, u := range tt.upstreams() {
		own := byUpstream[u.connKey(sessionID)]
		if len(own) == 0 || upstreamTaskCaps(u).List == nil {
			continue
		}
		cursor := ""
		for page := 0; page < 100; page++ {
			var params json.RawMessage
			if cursor != "" {
				params, _ = json.Marshal(map[string]string{"cursor": cursor})
			}
			res, err := tt.forwardTo(ctx, rq, u, methodTasksList, params)
			if err != nil {
				return nil, err
			}
			var body struct {
				Tasks      []json.RawMessage `json:"tasks"`
				NextCursor string            `json:"nextCursor"`
			}
			if err := json.Unmarshal(res, &body); err != nil {
				return nil, fmt.Errorf("upstream %s tasks/list: %w", u.ns.Name, err)
			}
			for _, t := range body.Tasks {
				id, _, _ := protocol.StringMember(t, "taskId")
				if rec, ok := own[id]; ok {
					if rec.Ended.IsZero() && taskEnded(t) {
						tt.end(ctx, rec)
					}
					tasks = append(tasks, mapTaskIDs(t, rec, ""))
				}
			}
			if body.NextCursor == "" {
				break
			}
			cursor = body.NextCursor
		}
	}
	return json.Marshal(map[string]any{"tasks": tasks})
}

// deliverTaskStatus sends an upstream's notifications/tasks/status to the session that owns
// the task, on its standalone stream, with the gateway's task id.
func (tt *taskTable) deliverStatus(c *conn, n *protocol.Notification) {
	id, ok, _ := protocol.StringMember(n.Params, "taskId")
	if !ok {
		return
	}
	rec, err := tt.router.store.TaskByUpstream(tt.router.ctx, c.connKey(""), id)
	if err != nil {
		return
	}
	if taskEnded(n.Params) {
		tt.end(tt.router.ctx, rec)
	}
	params, err := withMember(n.Params, "taskId", rec.ID)
	if err != nil {
		return
	}
	tt.router.notifySessions(&protocol.Notification{Method: n.Method, Params: params}, rec.SessionID)
}

// withoutTaskRequiredTools removes from a tools/list page the tools that run only as tasks
// (execution.taskSupport "required"): a 2026-07-28 client cannot call them, as the gateway
// does not offer it the tasks extension (mcp-2026-notes §3.6, phase 1).
func withoutTaskRequiredTools(page json.RawMessage) json.RawMessage {
	if !bytes.Contains(page, []byte(`"required"`)) {
		return page
	}
	tools, ok, _ := protocol.Member(page, "tools")
	if !ok {
		return page
	}
	var items []json.RawMessage
	if json.Unmarshal(tools, &items) != nil {
		return page
	}
	kept := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		if !requiresTask(it) {
			kept = append(kept, it)
		}
	}
	if len(kept) == len(items) {
		return page
	}
	return setMarshalled(page, "tools", kept)
}

// requiresTask reports whether a tool (raw) runs only as a task.
func requiresTask(tool json.RawMessage) bool {
	var t struct {
		Execution struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	}
	return json.Unmarshal(tool, &t) == nil && t.Execution.TaskSupport == "required"
}

// hideTaskSupport removes tools' execution (taskSupport) from a tools/list page for clients
// that did not declare tasks, which must not see them (mcp-notes §13).
func hideTaskSupport(page json.RawMessage, k upstream.Kind) json.RawMessage {
	if k != upstream.Tools || !bytes.Contains(page, []byte(`"execution"`)) {
		return page
	}
	return dropToolFields(page, "execution")
}

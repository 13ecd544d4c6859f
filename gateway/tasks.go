package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/manifold-mcp/manifold/protocol"
	"github.com/manifold-mcp/manifold/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Tasks (2025-11-25, experimental; mcp-notes §9, §14.11): a task-augmented tools/call goes to
// an upstream that declared tasks; the task id it returns is replaced by a gateway id bound to
// the creating session, and every tasks/* request and task notification is mapped back. A
// task of another session does not exist for the caller.

// Task-related method names.
const (
	methodTasksGet     = "tasks/get"
	methodTasksResult  = "tasks/result"
	methodTasksList    = "tasks/list"
	methodTasksCancel  = "tasks/cancel"
	notificationStatus = "notifications/tasks/status"
	metaRelatedTask    = "io.modelcontextprotocol/related-task"
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

func upstreamTaskCaps(r *route) taskCaps {
	var c taskCaps
	if info := r.client.Server(); info != nil && len(info.Capabilities.Tasks) > 0 {
		_ = json.Unmarshal(info.Capabilities.Tasks, &c)
	}
	return c
}

func (c taskCaps) callsAsTasks() bool {
	return c.Requests != nil && c.Requests.Tools != nil && c.Requests.Tools.Call != nil
}

func newTaskID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "mf-t-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// startTask finishes a task-augmented tools/call: the upstream's task id in the result is
// recorded for the session and replaced by a gateway id.
func (g *Gateway) startTask(ctx context.Context, cc *clientContext, r *route, result json.RawMessage) (json.RawMessage, error) {
	task, ok, _ := protocol.Member(result, "task")
	if !ok {
		return result, nil // the upstream ran it without a task
	}
	upstreamID, ok, _ := protocol.StringMember(task, "taskId")
	if !ok {
		return nil, fmt.Errorf("upstream %s created a task without a taskId", r.name)
	}
	rec := session.TaskRecord{ID: newTaskID(), SessionID: cc.SessionID, Upstream: r.connKey(cc.SessionID), UpstreamID: upstreamID}
	if err := g.store.PutTask(ctx, rec); err != nil {
		return nil, fmt.Errorf("record task: %w", err)
	}
	newTask, err := withMember(task, "taskId", rec.ID)
	if err != nil {
		return nil, err
	}
	return protocol.SetMember(result, "task", newTask)
}

// taskFor finds the caller's task by the gateway's id; another session's task, like a missing
// one, is an invalid taskId (mcp-notes §14.11).
func (g *Gateway) taskFor(ctx context.Context, cc *clientContext, params json.RawMessage) (session.TaskRecord, *route, error) {
	id, ok, err := protocol.StringMember(params, "taskId")
	if err != nil || !ok {
		return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params: \"taskId\" must be a string")
	}
	rec, err := g.store.Task(ctx, id)
	if err != nil || rec.SessionID != cc.SessionID {
		return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown task: %s", id)
	}
	for _, r := range g.routes {
		if r.connKey(cc.SessionID) == rec.Upstream {
			return rec, r, nil
		}
	}
	return session.TaskRecord{}, nil, protocol.Errorf(protocol.CodeInvalidParams, "unknown task: %s", id)
}

// taskRequest serves tasks/get, tasks/result and tasks/cancel.
func (g *Gateway) taskRequest(ctx context.Context, cc *clientContext, method string, params json.RawMessage) (json.RawMessage, error) {
	rec, r, err := g.taskFor(ctx, cc, params)
	if err != nil {
		return nil, err
	}
	if method == methodTasksCancel && upstreamTaskCaps(r).Cancel == nil {
		return nil, protocol.Errorf(protocol.CodeMethodNotFound, "the upstream of task %s does not cancel tasks", rec.ID)
	}
	forward, err := withMember(params, "taskId", rec.UpstreamID)
	if err != nil {
		return nil, err
	}
	result, err := g.forward(ctx, cc, r, method, forward)
	if err != nil {
		return nil, err
	}
	return mapTaskIDs(result, rec, r.scheme), nil
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
	return exposeContentURIs(result, scheme)
}

// listTasks serves tasks/list: the caller's tasks only, as each upstream reports them.
func (g *Gateway) listTasks(ctx context.Context, cc *clientContext) (json.RawMessage, error) {
	mine, err := g.store.TasksOf(ctx, cc.SessionID)
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
	for _, r := range g.routes {
		own := byUpstream[r.connKey(cc.SessionID)]
		if len(own) == 0 || upstreamTaskCaps(r).List == nil {
			continue
		}
		cursor := ""
		for page := 0; page < 100; page++ {
			var params json.RawMessage
			if cursor != "" {
				params, _ = json.Marshal(map[string]string{"cursor": cursor})
			}
			res, err := g.forward(ctx, cc, r, methodTasksList, params)
			if err != nil {
				return nil, err
			}
			var body struct {
				Tasks      []json.RawMessage `json:"tasks"`
				NextCursor string            `json:"nextCursor"`
			}
			if err := json.Unmarshal(res, &body); err != nil {
				return nil, fmt.Errorf("upstream %s tasks/list: %w", r.name, err)
			}
			for _, t := range body.Tasks {
				id, _, _ := protocol.StringMember(t, "taskId")
				if rec, ok := own[id]; ok {
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
func (g *Gateway) deliverTaskStatus(r *route, n *protocol.Notification) {
	id, ok, _ := protocol.StringMember(n.Params, "taskId")
	if !ok {
		return
	}
	rec, err := g.store.TaskByUpstream(g.ctx, r.connKey(""), id)
	if err != nil {
		return
	}
	params, err := withMember(n.Params, "taskId", rec.ID)
	if err != nil {
		return
	}
	data, err := protocol.Encode(&protocol.Notification{Method: n.Method, Params: params})
	if err != nil {
		return
	}
	g.mu.Lock()
	ls := g.live[rec.SessionID]
	g.mu.Unlock()
	if ls != nil {
		ls.notify(data, g.logger)
	}
}

// hideTaskSupport removes tools' execution (taskSupport) from a tools/list page for clients
// that did not declare tasks, which must not see them (mcp-notes §13).
func hideTaskSupport(page json.RawMessage, k upstream.Kind) json.RawMessage {
	if k != upstream.Tools || !bytes.Contains(page, []byte(`"execution"`)) {
		return page
	}
	return dropToolFields(page, "execution")
}

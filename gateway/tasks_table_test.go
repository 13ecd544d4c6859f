package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testclock"
	"github.com/manifold-mcp/manifold/upstream"
)

// taskUpstream is a fake upstream that runs tools/call as tasks (mcp-notes §9): a task stays
// "working" until the test finishes it, and it serves tasks/get, tasks/result, tasks/cancel
// and tasks/list as the spec says. It is safe for concurrent use.
type taskUpstream struct {
	fakeUpstream

	mu sync.Mutex
	// tasks holds each task's status and ttl by upstream task id; guarded by mu.
	tasks map[string]*fakeTask
	// cancelled lists the tasks/cancel requests, by upstream task id; guarded by mu.
	cancelled []string
}

type fakeTask struct {
	status string
	ttl    json.RawMessage
}

func newTaskUpstream(name string) *taskUpstream {
	return &taskUpstream{
		fakeUpstream: fakeUpstream{
			name: name,
			catalog: upstream.NewCatalog(map[upstream.Kind][]upstream.Item{upstream.Tools: {{Key: "job",
				Raw: json.RawMessage(`{"name":"job","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}`)}}}),
			server: &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion, Capabilities: protocol.ServerCapabilities{
				Tools: &protocol.ListChangedCap{},
				Tasks: json.RawMessage(`{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`),
			}},
		},
		tasks: map[string]*fakeTask{},
	}
}

func (u *taskUpstream) taskJSON(id string) json.RawMessage {
	t := u.tasks[id]
	ttl := t.ttl
	if ttl == nil {
		ttl = json.RawMessage("null")
	}
	return json.RawMessage(fmt.Sprintf(`{"taskId":%q,"status":%q,"createdAt":"2025-11-25T00:00:00Z","lastUpdatedAt":"2025-11-25T00:00:00Z","ttl":%s}`, id, t.status, ttl))
}

// finish sets a task's status, as the upstream's work ending would.
func (u *taskUpstream) finish(id, status string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tasks[id].status = status
}

func (u *taskUpstream) cancels() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.cancelled)
}

func (u *taskUpstream) Call(_ context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	unknown := &protocol.Error{Code: protocol.CodeInvalidParams, Message: "unknown task"}
	id, _, _ := protocol.StringMember(params, "taskId")
	t := u.tasks[id]
	switch method {
	case protocol.MethodCallTool:
		spec, ok, _ := protocol.Member(params, "task")
		if !ok {
			return json.RawMessage(`{"content":[{"type":"text","text":"now"}]}`), nil
		}
		id = fmt.Sprintf("u%d", len(u.tasks))
		ttl, _, _ := protocol.Member(spec, "ttl")
		u.tasks[id] = &fakeTask{status: "working", ttl: ttl}
		return json.RawMessage(`{"task":` + string(u.taskJSON(id)) + `}`), nil
	case methodTasksGet:
		if t == nil {
			return nil, unknown
		}
		return u.taskJSON(id), nil
	case methodTasksResult:
		if t == nil || !terminalTaskStatus(t.status) {
			return nil, unknown // a real upstream would block; the test asks only finished tasks
		}
		return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"done"}],"_meta":{%q:{"taskId":%q}}}`, metaRelatedTask, id)), nil
	case methodTasksCancel:
		u.cancelled = append(u.cancelled, id)
		if t == nil || terminalTaskStatus(t.status) {
			return nil, unknown
		}
		t.status = "cancelled"
		return u.taskJSON(id), nil
	case methodTasksList:
		var all []json.RawMessage
		for id := range u.tasks {
			all = append(all, u.taskJSON(id))
		}
		return json.Marshal(map[string]any{"tasks": all})
	}
	return nil, &protocol.Error{Code: protocol.CodeMethodNotFound, Message: "method not found"}
}

// rpcReply is one JSON-RPC answer through the handler.
type rpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

// rpcSeq numbers the requests of rpc: a session must not reuse a request id.
var rpcSeq atomic.Int64

// rpc sends one request through the handler, with a fresh id, and returns its answer.
func rpc(t *testing.T, h http.Handler, sid, method, params string) rpcReply {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q`, rpcSeq.Add(1), method)
	if params != "" {
		body += `,"params":` + params
	}
	body += "}"
	rec := post(h, sid, body)
	var r rpcReply
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &r) != nil {
		t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
	}
	return r
}

// TestTaskTableIsBounded: a session's task records are bounded. A session that holds
// session.MaxTasksPerSession unfinished tasks is refused another, with a tool error that says
// why (and the upstream's orphan task is cancelled); a task the gateway saw end (in a
// tasks/get, tasks/result, tasks/cancel or tasks/list answer, or a status notification)
// makes room, and goes by itself session.TaskRetention after it ended; a task whose ttl has
// passed goes too.
func TestTaskTableIsBounded(t *testing.T) {
	clock := testclock.New(time.Date(2025, 11, 25, 0, 0, 0, 0, time.UTC))
	g := emptyGateway(t, &Options{Now: clock.Now})
	up := newTaskUpstream("tk")
	useFakeUpstreams(g, up)
	shared := g.upstreamList()[0].shared
	h := g.Handler()

	open := func() string {
		rec := post(h, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"t","version":"1"}}}`)
		sid := rec.Header().Get("Mcp-Session-Id")
		if sid == "" {
			t.Fatalf("initialize: %d %s", rec.Code, rec.Body)
		}
		post(h, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	a, b := open(), open()

	// create starts a task; it returns the gateway's task id, or "" and the tool result when
	// the call was refused.
	create := func(sid, ttl string) (string, json.RawMessage) {
		t.Helper()
		task := `{}`
		if ttl != "" {
			task = `{"ttl":` + ttl + `}`
		}
		r := rpc(t, h, sid, "tools/call", `{"name":"tk__job","task":`+task+`}`)
		if r.Error != nil {
			t.Fatalf("task-augmented call: %v", r.Error)
		}
		var created struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		_ = json.Unmarshal(r.Result, &created)
		return created.Task.TaskID, r.Result
	}
	mustCreate := func(sid string) string {
		t.Helper()
		id, res := create(sid, "")
		if id == "" {
			t.Fatalf("task-augmented call refused: %s", res)
		}
		return id
	}
	// known reports whether tasks/get finds the task; anything but a status or -32602 fails.
	known := func(sid, id string) bool {
		t.Helper()
		r := rpc(t, h, sid, "tasks/get", `{"taskId":"`+id+`"}`)
		if r.Error != nil && r.Error.Code != protocol.CodeInvalidParams {
			t.Fatalf("tasks/get %s: %v", id, r.Error)
		}
		return r.Error == nil
	}

	ids := make([]string, session.MaxTasksPerSession)
	for i := range ids {
		ids[i] = mustCreate(a)
	}

	// Full of running tasks: refused as a tool error that says why, and the task the
	// upstream created for it is cancelled.
	id, res := create(a, "")
	var refused struct {
		IsError bool              `json:"isError"`
		Meta    map[string]string `json:"_meta"`
	}
	_ = json.Unmarshal(res, &refused)
	if id != "" || !refused.IsError || refused.Meta[pipeline.MetaReason] != pipeline.ReasonTooManyTasks || refused.Meta[pipeline.MetaUpstream] != "tk" {
		t.Fatalf("task %d of a session full of running tasks: %s, want an isError result with reason %s", len(ids)+1, res, pipeline.ReasonTooManyTasks)
	}
	orphan := fmt.Sprintf("u%d", len(ids))
	if got := up.cancels(); !slices.Equal(got, []string{orphan}) {
		t.Errorf("upstream cancels %v, want the refused task %s", got, orphan)
	}
	// The cap is per session.
	mustCreate(b)

	// Each way the gateway learns that a task ended makes room for one more, and the room is
	// that task's.
	ends := []struct {
		name string
		end  func(i int)
	}{
		{"tasks/get", func(i int) {
			up.finish(fmt.Sprintf("u%d", i), "completed")
			if !known(a, ids[i]) {
				t.Fatalf("tasks/get of a running task %s failed", ids[i])
			}
		}},
		{"tasks/result", func(i int) {
			up.finish(fmt.Sprintf("u%d", i), "failed")
			if r := rpc(t, h, a, "tasks/result", `{"taskId":"`+ids[i]+`"}`); r.Error != nil {
				t.Fatalf("tasks/result: %v", r.Error)
			}
		}},
		{"tasks/cancel", func(i int) {
			if r := rpc(t, h, a, "tasks/cancel", `{"taskId":"`+ids[i]+`"}`); r.Error != nil {
				t.Fatalf("tasks/cancel: %v", r.Error)
			}
		}},
		{"tasks/list", func(i int) {
			up.finish(fmt.Sprintf("u%d", i), "completed")
			if r := rpc(t, h, a, "tasks/list", ""); r.Error != nil {
				t.Fatalf("tasks/list: %v", r.Error)
			}
		}},
		{"notifications/tasks/status", func(i int) {
			up.finish(fmt.Sprintf("u%d", i), "completed")
			g.tasks.deliverStatus(shared, &protocol.Notification{Method: notificationStatus, Params: up.taskJSON(fmt.Sprintf("u%d", i))})
		}},
	}
	for i, e := range ends {
		e.end(i)
		if id, res := create(a, ""); id == "" {
			t.Errorf("after %s showed a task ended, a new task was still refused: %s", e.name, res)
			continue
		}
		if known(a, ids[i]) {
			t.Errorf("after %s showed task %d ended and a new one took its room, it is still known", e.name, i)
		}
		if !known(a, ids[len(ends)]) {
			t.Errorf("a running task made room after %s", e.name)
		}
	}

	// An ended task is still known for the retention period after it ended, then not; a
	// running task without a ttl stays.
	done, running := ids[len(ends)], ids[len(ends)+1]
	up.finish(fmt.Sprintf("u%d", len(ends)), "completed")
	known(a, done) // the gateway sees it ended now
	clock.Advance(session.TaskRetention - time.Second)
	if !known(a, done) {
		t.Error("an ended task went before the retention period")
	}
	clock.Advance(time.Second)
	if known(a, done) {
		t.Error("an ended task stayed after the retention period")
	}
	if !known(a, running) {
		t.Error("a running task without a ttl went with time")
	}

	// A task goes once its ttl has passed.
	short, res := create(b, "60000")
	if short == "" {
		t.Fatalf("task with a ttl refused: %s", res)
	}
	clock.Advance(time.Minute - time.Second)
	if !known(b, short) {
		t.Error("a task went before its ttl")
	}
	clock.Advance(time.Second)
	if known(b, short) {
		t.Error("a task stayed after its ttl")
	}
}

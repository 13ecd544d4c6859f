package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// TestTasksBoundToTheirSession: an mcp-go upstream runs a tool as a task; the creating
// session sees the gateway's task id, polls it, reads its result and lists it; another
// session cannot see or touch it.
func TestTasksBoundToTheirSession(t *testing.T) {
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("tk", "tasks", ""), nil)
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	initTasks := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"raw","version":"1"}}}`
	open := func() map[string]string {
		r := c.do(http.MethodPost, initTasks, nil)
		sid := r.header.Get("Mcp-Session-Id")
		if sid == "" {
			t.Fatalf("initialize: %d %s", r.status, r.body)
		}
		if !strings.Contains(string(r.msg.Result), `"tasks"`) {
			t.Errorf("a 2025-11-25 session is not offered tasks: %s", r.msg.Result)
		}
		return map[string]string{"Mcp-Session-Id": sid}
	}
	a, b := open(), open()

	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, a)
	if !strings.Contains(string(r.msg.Result), `"taskSupport":"required"`) {
		t.Errorf("tools/list for a client that declared tasks lacks taskSupport: %s", r.msg.Result)
	}

	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"tk__job","arguments":{"text":"x"},"task":{"ttl":60000}}}`, a)
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.msg.Result, &created); err != nil || !strings.HasPrefix(created.Task.TaskID, "mf-t-") {
		t.Fatalf("task-augmented call: %s (%v), want a gateway task id", r.body, err)
	}
	id := created.Task.TaskID

	if !testwait.Within(waitBound, func() bool {
		r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"`+id+`"}}`, a)
		if r.msg.Error != nil {
			t.Fatalf("tasks/get: %s", r.body)
		}
		var st struct{ TaskID, Status string }
		_ = json.Unmarshal(r.msg.Result, &st)
		if st.TaskID != id {
			t.Errorf("tasks/get answered task id %q, want the gateway's %q", st.TaskID, id)
		}
		return st.Status == "completed"
	}) {
		t.Fatalf("the task never completed: %s", r.body)
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"`+id+`"}}`, a)
	if !strings.Contains(string(r.msg.Result), "done:x") || strings.Contains(string(r.body), `"taskId":"`) && !strings.Contains(string(r.body), id) {
		t.Errorf("tasks/result: %s", r.body)
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":6,"method":"tasks/list"}`, a)
	if !strings.Contains(string(r.msg.Result), id) {
		t.Errorf("tasks/list of the creator lacks its task: %s", r.body)
	}

	// The other session: the task does not exist for it.
	for _, method := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":7,"method":"`+method+`","params":{"taskId":"`+id+`"}}`, b)
		if r.msg.Error == nil || r.msg.Error.Code != -32602 {
			t.Errorf("%s from another session: %s, want -32602", method, r.body)
		}
	}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":8,"method":"tasks/list"}`, b)
	if strings.Contains(string(r.body), id) {
		t.Errorf("tasks/list of another session shows the task: %s", r.body)
	}

	// A client that did not declare tasks does not see tools' task support.
	r = c.do(http.MethodPost, initBody, nil)
	plain := map[string]string{"Mcp-Session-Id": r.header.Get("Mcp-Session-Id")}
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`, plain)
	if strings.Contains(string(r.msg.Result), "taskSupport") {
		t.Errorf("tools/list for a client without tasks shows taskSupport: %s", r.msg.Result)
	}
}

// TestEndedTaskIsForgottenAfterRetention: with a real tasks upstream (mcp-go), a task whose
// result the client fetched is still known for session.TaskRetention, then the gateway
// forgets it (its record does not stay for the session's life).
func TestEndedTaskIsForgottenAfterRetention(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2025, 11, 25, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("tk", "tasks", ""), &gateway.Options{Now: clock})
	defer tg.close()
	c := rawClient{t: t, url: tg.url}
	r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"list":{},"cancel":{}}},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	sid := map[string]string{"Mcp-Session-Id": r.header.Get("Mcp-Session-Id")}

	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tk__job","arguments":{"text":"x"},"task":{}}}`, sid)
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if err := json.Unmarshal(r.msg.Result, &created); err != nil || created.Task.TaskID == "" {
		t.Fatalf("task-augmented call: %s", r.body)
	}
	get := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/get","params":{"taskId":%q}}`, id, created.Task.TaskID)
	}

	// tasks/result waits for the end, so its answer shows the task ended.
	r = c.do(http.MethodPost, `{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"`+created.Task.TaskID+`"}}`, sid)
	if !strings.Contains(string(r.msg.Result), "done:x") {
		t.Fatalf("tasks/result: %s", r.body)
	}
	advance(session.TaskRetention - time.Second)
	if r = c.do(http.MethodPost, get(5), sid); r.msg.Error != nil {
		t.Errorf("tasks/get within the retention period: %s", r.body)
	}
	advance(time.Second)
	if r = c.do(http.MethodPost, get(6), sid); r.msg.Error == nil || r.msg.Error.Code != -32602 {
		t.Errorf("tasks/get after the retention period: %s, want -32602", r.body)
	}
}

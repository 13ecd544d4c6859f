package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// replica is a gateway process of its own (this test binary, as `gateway serve`).
type replica struct {
	*servedGateway
	cmd *exec.Cmd
}

// startReplica starts a gateway process on the config text (its listen address is added) and
// waits until it answers /readyz; the test's end stops it.
func startReplica(t *testing.T, name, configText string) *replica {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cfg := writeFile(t, name+".yaml", "listen: "+addr+"\n"+configText)
	logs := &syncBuffer{}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envServe+"=1", envServe+"_ARGS=serve -config "+cfg, testupstream.EnvRun+"="+testupstream.Marker)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("replica %s did not stop on SIGTERM:\n%s", name, logs.String())
		}
	})
	r := &replica{servedGateway: &servedGateway{t: t, url: "http://" + addr + "/mcp", logs: logs}, cmd: cmd}
	// Ready, and its upstreams with it: /readyz is 200 while an upstream still starts.
	waitWithin(t, 30*time.Second, "replica "+name+" and its upstreams to be ready", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body struct {
			Upstreams map[string]struct{ State string } `json:"upstreams"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Upstreams) == 0 {
			return false
		}
		for _, u := range body.Upstreams {
			if u.State != "ready" {
				return false
			}
		}
		return true
	})
	return r
}

// testKeysYAML is the key list of test replicas on Redis, a line of top-level YAML.
const testKeysYAML = "keys: [{id: test, secret: \"dGhlIGtleSBvZiB0aGUgZ2F0ZXdheSB0ZXN0cyAwMTIz\"}]\n"

// redisReplicaConfig is the config of a replica on Redis at addr under prefix, fronting one
// test upstream "r" of the given flavor.
func redisReplicaConfig(t *testing.T, addr, prefix, flavor string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`log_level: debug
session_store:
  type: redis
  url: redis://%s/0
  key_prefix: %s
`+testKeysYAML+`upstreams:
  - name: r
    command: %q
    env: {%s: %s, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
`, addr, prefix, exe, testupstream.EnvFlavor, flavor, testupstream.EnvRun, testupstream.Marker)
}

// twoAlphaReplicas starts two replicas on the test Redis, each fronting an alpha upstream.
func twoAlphaReplicas(t *testing.T) (a, b *replica) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs two gateway processes")
	}
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	return startReplica(t, "a", redisReplicaConfig(t, addr, prefix, "alpha")), startReplica(t, "b", redisReplicaConfig(t, addr, prefix, "alpha"))
}

// deleteSession sends DELETE for session sid to r and returns the status.
func deleteSession(t *testing.T, r *replica, sid string) int {
	t.Helper()
	del, _ := http.NewRequest(http.MethodDelete, r.url, nil)
	del.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReplicasShareSessionsThroughRedis: two gateway processes on one Redis. A session
// initialized on A lists and calls tools on B; ended on A, it is gone on B at once.
func TestReplicasShareSessionsThroughRedis(t *testing.T) {
	a, b := twoAlphaReplicas(t)
	sid := a.initialize()
	if sid == "" {
		t.Fatalf("initialize on A failed:\n%s", a.logs.String())
	}
	resp, body := b.post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if resp == nil || resp.StatusCode != http.StatusOK || !strings.Contains(body, `"r__echo"`) {
		t.Fatalf("tools/list on B with A's session: %v %s", status(resp), body)
	}
	resp, body = b.post(sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"r__echo","arguments":{"text":"from b"}}}`)
	if resp == nil || resp.StatusCode != http.StatusOK || !strings.Contains(body, "alpha:from b") {
		t.Fatalf("tools/call on B with A's session: %v %s", status(resp), body)
	}

	if code := deleteSession(t, a, sid); code != http.StatusNoContent {
		t.Fatalf("DELETE on A: %d", code)
	}
	resp, body = b.post(sid, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	if resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("tools/list on B right after DELETE on A: %v %s, want 404", status(resp), body)
	}
}

// TestDeleteEndsTheSessionOnEveryReplica: a session's stream open on B ends as soon as the
// session is deleted through A, not at B's next expiry pass (a minute away here).
func TestDeleteEndsTheSessionOnEveryReplica(t *testing.T) {
	a, b := twoAlphaReplicas(t)
	sid := a.initialize()
	if sid == "" {
		t.Fatalf("initialize on A failed:\n%s", a.logs.String())
	}
	get, _ := http.NewRequest(http.MethodGet, b.url, nil)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Mcp-Session-Id", sid)
	stream, err := http.DefaultClient.Do(get)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("the standalone stream on B: %v %v", status(stream), err)
	}
	defer stream.Body.Close()
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stream.Body)
		close(ended)
	}()

	if code := deleteSession(t, a, sid); code != http.StatusNoContent {
		t.Fatalf("DELETE on A: %d", code)
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("B's stream of the deleted session is still open:\n%s", b.logs.String())
	}
	// B's log arrives through its stderr pipe, which may lag behind the stream's end.
	testwait.Until(t, 10*time.Second, "B to log why the session ended", func() bool {
		return strings.Contains(b.logs.String(), "session ended on another replica")
	})
}

// TestResumeOnAnotherReplica: a call's stream drops on A while the call waits for the client;
// the client answers on A, and resumes the stream on B: B reads what A logged in Redis and
// sends the events after the client's last, once each, ending with the result.
func TestResumeOnAnotherReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two gateway processes")
	}
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	a := startReplica(t, "a", redisReplicaConfig(t, addr, prefix, "reverse"))
	b := startReplica(t, "b", redisReplicaConfig(t, addr, prefix, "reverse"))

	resp, _ := a.post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{},"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}`)
	if resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("initialize on A: %v", status(resp))
	}
	sid := resp.Header.Get("Mcp-Session-Id")
	a.post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	call, err := http.DefaultClient.Do(a.request(sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"r__ask","arguments":{"text":"q"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	events := sseEvents(call.Body)
	sampling := <-events
	if !strings.Contains(sampling.data, "sampling/createMessage") || sampling.id == "" {
		t.Fatalf("first event %+v, want the sampling request with an id", sampling)
	}
	call.Body.Close() // the connection drops; the call goes on, on A
	samplingID := jsonField(sampling.data, "id")
	if r, body := a.post(sid, `{"jsonrpc":"2.0","id":`+samplingID+`,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"sampled"}}}`); r == nil || r.StatusCode != http.StatusAccepted {
		t.Fatalf("the sampling answer on A: %v %s", status(r), body)
	}

	// B resumes the stream while the call goes on on A: it sends what A logged after the
	// client's last event, then what A produces, live: the elicitation, then the result,
	// once each; the sampling request the client had does not come again.
	req, _ := http.NewRequest(http.MethodGet, b.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Last-Event-ID", sampling.id)
	resumed, err := http.DefaultClient.Do(req)
	if err != nil || resumed.StatusCode != http.StatusOK {
		t.Fatalf("resume on B: %v %v", status(resumed), err)
	}
	defer resumed.Body.Close()
	got := sseEvents(resumed.Body)
	var elicitation sseEvent
	select {
	case elicitation = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no event on the stream resumed on B")
	}
	if !strings.Contains(elicitation.data, "elicitation/create") {
		t.Fatalf("first event resumed on B: %+v, want the elicitation", elicitation)
	}
	elicitID := jsonField(elicitation.data, "id")
	if r, body := a.post(sid, `{"jsonrpc":"2.0","id":`+elicitID+`,"result":{"action":"accept","content":{"answer":"yes"}}}`); r == nil || r.StatusCode != http.StatusAccepted {
		t.Fatalf("the elicitation answer on A: %v %s", status(r), body)
	}
	var rest []sseEvent
	for ev := range got {
		rest = append(rest, ev)
	}
	if len(rest) != 1 || !strings.Contains(rest[0].data, "sampled=sampled;elicited=yes") {
		t.Errorf("after the elicitation, B sent %+v; want the result alone, then the stream's end", rest)
	}
}

// sseEvent is one event of an SSE stream.
type sseEvent struct{ id, data string }

// sseEvents reads an SSE body's events with data into a channel, closed at its end.
func sseEvents(body io.Reader) <-chan sseEvent {
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "":
				if ev.data != "" {
					out <- ev
				}
				ev = sseEvent{}
			}
		}
	}()
	return out
}

// jsonField returns the raw value of a top-level member of a JSON object, crudely: enough for
// the ids of the test's messages.
func jsonField(obj, name string) string {
	i := strings.Index(obj, `"`+name+`":`)
	if i < 0 {
		return ""
	}
	rest := obj[i+len(name)+3:]
	end := strings.IndexAny(rest, ",}")
	return rest[:end]
}

func status(resp *http.Response) string {
	if resp == nil {
		return "no response"
	}
	return resp.Status
}

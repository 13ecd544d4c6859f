package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// stdioBound bounds each wait of the stdio tests for the gateway process: it fails a test
// that would otherwise hang, it never asserts speed.
const stdioBound = 30 * time.Second

// stdioConfig writes the config of a `gateway stdio` in front of three stdio upstreams run by
// this test binary, alpha and beta (echo, whoami) and rev (ask: samples, then elicits), whose
// processes carry EnvRun=marker, and a policy that denies the local user "tester" beta's
// whoami. extra are more top-level settings.
func stdioConfig(t *testing.T, marker, extra string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	upstream := func(name, flavor string) string {
		return fmt.Sprintf("  - name: %s\n    command: %q\n    env: {%s: %s, %s: %s}\n    inherit_env: [GOCOVERDIR, GORACE]\n",
			name, exe, testupstream.EnvFlavor, flavor, testupstream.EnvRun, marker)
	}
	// The first list waits for every upstream, however slowly a loaded machine starts them.
	return writeFile(t, "stdio.yaml", `log_level: debug
drain_timeout: 5s
first_list_wait: 30s
`+extra+`
policy:
  rules:
    - name: no-beta-whoami
      effect: deny
      reason: not for the tester
      match:
        principal: {subjects: [tester]}
        upstreams: [beta]
        tools: [whoami]
upstreams:
`+upstream("alpha", "alpha")+upstream("beta", "beta")+upstream("rev", "reverse"))
}

// stdioCommand is `gateway stdio` on the config, as a desktop host starts it: this test
// binary standing for the gateway; its logs go to stderr.
func stdioCommand(config string, stderr io.Writer, args ...string) *exec.Cmd {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"stdio", "-config", config}, args...)...)
	cmd.Env = append(os.Environ(), envGateway+"=1")
	cmd.Stderr = stderr
	return cmd
}

// TestStdioSDKClient runs the Go SDK's client against `gateway stdio` as a desktop host would,
// in each protocol era: it lists the three upstreams' tools, calls one, answers a sampling and
// an elicitation request of an upstream's through the gateway, is refused the tool a policy
// rule denies its principal; and closing stdin ends the gateway and its upstream processes.
func TestStdioSDKClient(t *testing.T) {
	for _, era := range []struct {
		name, config, version string
	}{
		{"2025-11-25", "", "2025-11-25"},
		{"2026-07-28", "modern_protocol: true", "2026-07-28"},
	} {
		t.Run(era.name, func(t *testing.T) {
			marker := testupstream.Marker + "-" + strings.ReplaceAll(t.Name(), "/", "-")
			logs := &syncBuffer{}
			transport := &mcp.CommandTransport{Command: stdioCommand(stdioConfig(t, marker, era.config), logs, "-principal", "tester")}
			var sampled []string
			client := mcp.NewClient(&mcp.Implementation{Name: "desktop-host", Version: "1"}, &mcp.ClientOptions{
				CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
					prompt := ""
					if len(req.Params.Messages) > 0 {
						if tc, ok := req.Params.Messages[0].Content.(*mcp.TextContent); ok {
							prompt = tc.Text
						}
					}
					sampled = append(sampled, prompt)
					return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: "model says " + prompt}}, nil
				},
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes"}}, nil
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), stdioBound)
			defer cancel()
			session, err := client.Connect(ctx, transport, nil)
			if err != nil {
				t.Fatalf("connect: %v\nlogs:\n%s", err, logs)
			}
			closed := false
			defer func() {
				if !closed {
					session.Close()
				}
			}()
			if got := session.InitializeResult().ProtocolVersion; got != era.version {
				t.Errorf("protocol version %q, want %q", got, era.version)
			}

			res, err := session.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v\nlogs:\n%s", err, logs)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			for _, want := range []string{"alpha__echo", "beta__echo", "rev__ask"} {
				if !slices.Contains(names, want) {
					t.Errorf("tools/list lacks %s: %v", want, names)
				}
			}

			if got := callText(ctx, t, session, "alpha__echo", map[string]any{"text": "hello"}, false); !strings.Contains(got, "hello") {
				t.Errorf("alpha__echo answered %q, want the text echoed", got)
			}
			if got, want := callText(ctx, t, session, "rev__ask", map[string]any{"text": "q1"}, false), "sampled=model says q1;elicited=yes"; got != want {
				t.Errorf("rev__ask answered %q, want %q (the client's sampling and elicitation answers)", got, want)
			}
			if !slices.Contains(sampled, "q1") {
				t.Errorf("the client's sampling handler saw %q, want the upstream's prompt q1", sampled)
			}
			if got := callText(ctx, t, session, "beta__whoami", map[string]any{}, true); !strings.Contains(got, "not for the tester") {
				t.Errorf("beta__whoami, denied to tester, answered %q; want the rule's reason", got)
			}
			if got := callText(ctx, t, session, "alpha__whoami", map[string]any{}, false); !strings.Contains(got, "alpha") {
				t.Errorf("alpha__whoami, which no rule denies, answered %q", got)
			}

			// A desktop host stops its server by closing stdin: the gateway drains, stops its
			// upstreams and exits 0 by itself (CommandTransport would signal it only later).
			closed = true
			if err := session.Close(); err != nil {
				t.Errorf("closing the session (stdin), the gateway exited with %v\nlogs:\n%s", err, logs)
			}
			if !strings.Contains(logs.String(), "the client closed stdin: draining") {
				t.Errorf("the gateway did not stop at the end of stdin; logs:\n%s", logs)
			}
			if left := testupstream.Leftovers(marker); len(left) > 0 {
				t.Errorf("upstream processes %v outlived the gateway", left)
			}
		})
	}
}

// callText calls a tool and returns the text of its result, which must be an error result when
// isError.
func callText(ctx context.Context, t *testing.T, session *mcp.ClientSession, tool string, args map[string]any, isError bool) string {
	t.Helper()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError != isError {
		t.Errorf("tools/call %s: isError %v, want %v (%s)", tool, res.IsError, isError, b.String())
	}
	return b.String()
}

// TestStdioStdoutCarriesProtocolOnly speaks to `gateway stdio` line by line, with its upstreams
// writing to their stderr and the gateway logging at debug level: it opens no listener, every
// line on its stdout is one JSON-RPC message, a request with no session yet (2025-11-25 before initialize) is
// answered there too, with its id, and so is a request sent just before the end of stdin.
func TestStdioStdoutCarriesProtocolOnly(t *testing.T) {
	marker := testupstream.Marker + "-" + t.Name()
	mcpAddr, adminAddr := freePort(t), freePort(t)
	p := startStdio(t, stdioConfig(t, marker, fmt.Sprintf(`listen: %s
admin:
  listen: %s
  api_keys:
    - {name: ops, hash: "sha256:a0842da159b42625b5c25302f3d4b0c4892401af05e353b7169dbce2e00f754a"}
`, mcpAddr, adminAddr)))
	p.send(`{"jsonrpc":"2.0","id":"early","method":"tools/list"}`)
	if got := p.next(`"early"`); !strings.Contains(got, `"error"`) {
		t.Errorf("tools/list before initialize answered %s, want an error", got)
	}
	p.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	p.next("1")
	// It serves: whatever it listens on is open by now. It opens neither the config's MCP
	// listener nor, without -admin, its admin listener.
	for what, addr := range map[string]string{"listen": mcpAddr, "admin.listen": adminAddr} {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			t.Errorf("gateway stdio listens on %s (%s)", addr, what)
		}
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	p.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`) // waits for the upstreams' first lists
	if got := p.next(`"list"`); !strings.Contains(got, "alpha__echo") {
		t.Fatalf("tools/list answered %s", got)
	}
	p.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"line\nbreak"}}}`)
	if got := p.next("2"); !strings.Contains(got, `line\nbreak`) {
		t.Errorf("alpha__echo answered %s", got)
	}
	// A request the client sends just before it closes stdin is still answered: the gateway
	// drains once it is, rather than refusing it as one that came during the drain.
	p.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"beta__echo","arguments":{"text":"last"}}}`)
	rest := p.end()
	if last := rest["3"]; !strings.Contains(last, `"result"`) || !strings.Contains(last, "last") {
		t.Errorf("the call sent before the end of stdin was answered %q, want its result", last)
	}
	if left := testupstream.Leftovers(marker); len(left) > 0 {
		t.Errorf("upstream processes %v outlived the gateway", left)
	}
	if !strings.Contains(p.logs.String(), "test upstream alpha serving on stdio") {
		t.Errorf("the upstreams' stderr did not reach the gateway's log:\n%s", p.logs)
	}
}

// TestStdioCancel: notifications/cancelled over stdio ends the call upstream and nothing more
// is answered for it, in each era: a 2025-11-25 session passes it on as over HTTP, and a
// 2026-07-28 request, cancelled on HTTP by closing its response, has the face end its relay.
func TestStdioCancel(t *testing.T) {
	const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, era := range []struct {
		name, config, initialize, meta string
	}{
		{"2025-11-25", "", `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, ""},
		{"2026-07-28", "modern_protocol: true", `{"jsonrpc":"2.0","id":"init","method":"server/discover","params":{` + modernMeta + `}}`, "," + modernMeta},
	} {
		t.Run(era.name, func(t *testing.T) {
			marker := testupstream.Marker + "-" + strings.ReplaceAll(t.Name(), "/", "-")
			p := startStdio(t, stdioConfig(t, marker, era.config))
			p.send(era.initialize)
			p.next(`"init"`)
			if era.meta == "" {
				p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			}
			p.send(`{"jsonrpc":"2.0","id":"list","method":"tools/list","params":{` + strings.TrimPrefix(era.meta, ",") + `}}`)
			p.next(`"list"`)
			calls := 0
			count := func(tool string) string {
				calls++
				id := fmt.Sprintf(`"%s-%d"`, tool, calls)
				p.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"rev__` + tool + `","arguments":{}` + era.meta + `}}`)
				got := p.next(id)
				_, text, _ := strings.Cut(got, `"text":"`)
				n, _, _ := strings.Cut(text, `"`)
				return n
			}
			p.send(`{"jsonrpc":"2.0","id":"blocked","method":"tools/call","params":{"name":"rev__block","arguments":{}` + era.meta + `}}`)
			waitWithin(t, stdioBound, "the block call to run upstream", func() bool { return count("blocking") == "1" })
			p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"blocked","reason":"the user stopped it"}}`)
			waitWithin(t, stdioBound, "the block call to be cancelled upstream", func() bool { return count("cancels") == "1" })
			if got, ok := p.end()[`"blocked"`]; ok {
				t.Errorf("the cancelled call was answered %s; want nothing more for it", got)
			}
			if answered := slices.ContainsFunc(p.seen, func(line string) bool { return strings.Contains(line, `"id":"blocked"`) }); answered {
				t.Errorf("the cancelled call was answered; stdout %q", p.seen)
			}
		})
	}
}

// stdioProcess is `gateway stdio` run by a test that speaks to it line by line.
type stdioProcess struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	logs  *syncBuffer
	// lines are stdout's lines, closed at its end; seen are those read so far, each checked
	// to be one JSON-RPC message.
	lines  chan string
	seen   []string
	exited bool
}

// startStdio starts `gateway stdio` on config; the test's end stops it by closing its stdin
// (killing it would leave its upstreams behind), if the test did not.
func startStdio(t *testing.T, config string) *stdioProcess {
	t.Helper()
	p := &stdioProcess{t: t, logs: &syncBuffer{}, lines: make(chan string)}
	p.cmd = stdioCommand(config, p.logs)
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !p.exited {
			p.end()
		}
	})
	return p
}

// send writes one line to the gateway's stdin.
func (p *stdioProcess) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// take notes a line of stdout, which must be one JSON-RPC message, and returns it decoded.
func (p *stdioProcess) take(line string) protocol.Message {
	p.t.Helper()
	p.seen = append(p.seen, line)
	msg, err := protocol.Decode([]byte(line))
	if err != nil {
		p.t.Errorf("stdout carries a line that is no JSON-RPC message (%v): %q", err, line)
	}
	return msg
}

// next reads stdout until the answer to id (as on the wire: "x" with its quotes), and
// returns it.
func (p *stdioProcess) next(id string) string {
	p.t.Helper()
	timeout := time.NewTimer(stdioBound)
	defer timeout.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("stdout ended before the answer to %s; logs:\n%s", id, p.logs)
			}
			if r, ok := p.take(line).(*protocol.Response); ok && r.ID.String() == id {
				return line
			}
		case <-timeout.C:
			p.t.Fatalf("no answer to %s; stdout so far %q; logs:\n%s", id, p.seen, p.logs)
		}
	}
}

// end closes stdin, reads what is left on stdout, and waits for the gateway to exit, which
// must be with status 0; it returns the answers read on the way, by id.
func (p *stdioProcess) end() map[string]string {
	p.t.Helper()
	p.exited = true
	if err := p.stdin.Close(); err != nil {
		p.t.Error(err)
	}
	answers := map[string]string{}
	timeout := time.NewTimer(stdioBound)
	defer timeout.Stop()
	for open := true; open; {
		select {
		case line, ok := <-p.lines:
			if !ok {
				open = false
				break
			}
			if r, ok := p.take(line).(*protocol.Response); ok {
				answers[r.ID.String()] = line
			}
		case <-timeout.C:
			_ = p.cmd.Process.Kill()
			go func() { // the reader ends once the killed process's stdout closes
				for range p.lines {
				}
			}()
			_ = p.cmd.Wait()
			p.t.Fatalf("the gateway still writes after the end of stdin; logs:\n%s", p.logs)
		}
	}
	if err := p.cmd.Wait(); err != nil {
		p.t.Errorf("the gateway exited with %v after the end of stdin; logs:\n%s", err, p.logs)
	}
	return answers
}

// TestStdioRefusesAuditOnStdout: audit records on stdout would break the protocol there.
func TestStdioRefusesAuditOnStdout(t *testing.T) {
	var out bytes.Buffer
	cfg := writeConfig(t, "audit: {sink: stdout}\nupstreams: []\n")
	if code := run([]string{"stdio", "-config", cfg}, &out, &out); code != 1 || !strings.Contains(out.String(), "audit.sink stdout") {
		t.Errorf("stdio with audit on stdout: exit %d, output %q; want 1 and a message naming audit.sink", code, out.String())
	}
}

// TestStdioReloadsOnSIGHUP: under `gateway stdio` as under serve, SIGHUP reloads the
// configuration rather than ending the process: an upstream added to the file appears in
// the client's list, announced by list_changed, and the session goes on. Before, SIGHUP
// ended the gateway at once, as Go does by default.
func TestStdioReloadsOnSIGHUP(t *testing.T) {
	marker := testupstream.Marker + "-" + t.Name()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	upstream := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    command: %q\n    env: {%s: %s, %s: %s}\n    inherit_env: [GOCOVERDIR, GORACE]\n",
			name, exe, testupstream.EnvFlavor, name, testupstream.EnvRun, marker)
	}
	config := writeFile(t, "stdio.yaml", "first_list_wait: 30s\nupstreams:\n"+upstream("alpha"))
	logs := &syncBuffer{}
	cmd := stdioCommand(config, logs)
	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "desktop-host", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), stdioBound)
	defer cancel()
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect: %v\nlogs:\n%s", err, logs)
	}
	defer session.Close()
	toolNames := func() []string {
		t.Helper()
		res, err := session.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v\nlogs:\n%s", err, logs)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		return names
	}
	if names := toolNames(); slices.Contains(names, "beta__echo") || !slices.Contains(names, "alpha__echo") {
		t.Fatalf("before the reload: %v", names)
	}

	if err := os.WriteFile(config, []byte("first_list_wait: 30s\nupstreams:\n"+upstream("alpha")+upstream("beta")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for !slices.Contains(toolNames(), "beta__echo") {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("beta's tools never appeared after SIGHUP\nlogs:\n%s", logs)
		}
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("the added upstream's tool: %v %v\nlogs:\n%s", res, err, logs)
	}
	// The file watcher would bring beta in by itself: the signal must have reloaded too.
	testwait.Until(t, stdioBound, "a reload triggered by SIGHUP in the log", func() bool {
		return strings.Contains(logs.String(), "hangup")
	})
}

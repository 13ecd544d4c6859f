package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testupstream"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// walkthroughSources are the files whose walkthroughs TestWalkthrough runs, relative to the
// module root.
var walkthroughSources = []string{"README.md", "docs/auth.md"}

// The walkthrough is the part of a walkthrough source between `<!-- walkthrough: begin -->` and
// `<!-- walkthrough: end -->`. Its fenced blocks run in order, as a reader would type them, by
// the marker comment before each (other comments, like the yaml examples' markers, and blank
// lines may stand between the marker and the block):
//
//   - `run`: a ```sh block, run with bash -e in the module root; it must exit 0.
//   - `run, fails`: the same, but it must exit 1 (a command that ran and said no; 2 is a usage
//     error, 127 a command that is not there).
//   - `background`: a ```sh block of one `serve` command, started and waited for until its
//     /readyz answers; it runs until the next background block replaces it, or the end. Or
//     one `demo -issuer 127.0.0.1:8090` command, waited for until its discovery document
//     answers; it runs until the end.
//   - `output contains`: a block whose every non-blank line must be in the output (stdout and
//     stderr) of the command block before it; for a background one, its output so far.
//   - `output lacks TEXT`, a marker with no block of its own: TEXT must not be in that output
//     (a reader sees no block that shows what is not printed).
//   - `excerpt of PATH`: a block that must appear, whole lines, in the file PATH.
//   - `skip`: a ```sh block not to run (one that needs the reader's own files).
//
// Every ```sh block of the walkthrough has a marker. Variables a block exports stay set for
// the blocks after it. The commands run with a HOME and XDG directories of their own;
// `go run ./cmd/gateway` and `gateway` are this test binary standing for the gateway, and
// 127.0.0.1:8080 is a free port (given to `serve` with -listen and to `call` with -url), and
// so is 127.0.0.1:8090, the demo issuer's.

// envGateway makes the test binary the gateway's program, run with the arguments it is given:
// the walkthrough's `gateway` (see TestMain).
const envGateway = "MANIFOLD_TEST_GATEWAY"

// defaultListen is the address the walkthrough's gateway listens on as the reader runs it.
const defaultListen = "127.0.0.1:8080"

// defaultIssuer is the address the walkthrough's demo issuer listens on as the reader runs it.
const defaultIssuer = "127.0.0.1:8090"

var walkMarker = regexp.MustCompile(`^<!--\s*walkthrough:\s*(.*?)\s*-->$`)

// walkBlock is one fenced block of the walkthrough and its marker.
type walkBlock struct {
	line  int    // of the opening fence
	kind  string // run, background, output contains, output lacks, excerpt, skip; "" unmarked
	fails bool   // run, fails
	path  string // the file of an excerpt
	body  string
}

// isCommand reports whether the block runs.
func (b walkBlock) isCommand() bool { return b.kind == "run" || b.kind == "background" }

// parseWalkthrough returns the blocks of the walkthrough in the Markdown file data, named
// name in messages.
func parseWalkthrough(name string, data []byte) ([]walkBlock, error) {
	var (
		blocks       []walkBlock
		inside, done bool
		pending      *walkBlock // a marker's block, until its fence
		pendingLine  int
		fence        *walkBlock // the block being read
		fenceLang    string
		line         int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line++
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		if fence != nil {
			if trimmed == "```" {
				if fence.kind == "" && slices.Contains([]string{"sh", "bash", "shell", "console"}, fenceLang) {
					return nil, fmt.Errorf("%s:%d: this ```%s block has no walkthrough marker: mark it run, background or skip", name, fence.line, fenceLang)
				}
				if fence.kind != "" {
					blocks = append(blocks, *fence)
				}
				fence = nil
				continue
			}
			fence.body += text + "\n"
			continue
		}
		m := walkMarker.FindStringSubmatch(trimmed)
		switch {
		case m != nil && m[1] == "begin":
			if inside || done {
				return nil, fmt.Errorf("%s:%d: a second walkthrough begins here", name, line)
			}
			inside = true
			continue
		case !inside:
			continue
		case m != nil && m[1] == "end":
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: the walkthrough marker is not followed by a fenced block", name, pendingLine)
			}
			inside, done = false, true
			continue
		case m != nil:
			if pending != nil {
				return nil, fmt.Errorf("%s:%d: the walkthrough marker is not followed by a fenced block", name, pendingLine)
			}
			b, err := walkKind(m[1])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
			b.line = line
			if err := checkOutputFollows(name, b, blocks); err != nil {
				return nil, err
			}
			if b.kind == "output lacks" {
				blocks = append(blocks, b) // the marker holds it all
				continue
			}
			pending, pendingLine = &b, line
			continue
		case strings.HasPrefix(trimmed, "```"):
			fenceLang = strings.TrimPrefix(trimmed, "```")
			fence = &walkBlock{}
			if pending != nil {
				fence = pending
				pending = nil
			}
			fence.line = line
			if fence.isCommand() && fenceLang != "sh" {
				return nil, fmt.Errorf("%s:%d: a %s block is ```sh, not ```%s", name, line, fence.kind, fenceLang)
			}
		case pending != nil && trimmed != "" && !strings.HasPrefix(trimmed, "<!--"):
			return nil, fmt.Errorf("%s:%d: the walkthrough marker is not followed by a fenced block", name, pendingLine)
		}
	}
	switch {
	case fence != nil:
		return nil, fmt.Errorf("%s:%d: the block has no closing fence", name, fence.line)
	case inside:
		return nil, fmt.Errorf("%s: the walkthrough has no <!-- walkthrough: end -->", name)
	case !done:
		return nil, fmt.Errorf("%s: no <!-- walkthrough: begin -->", name)
	}
	return blocks, sc.Err()
}

// walkKind is the block a marker's text describes, without its body (but for output lacks,
// whose marker has it).
func walkKind(marker string) (walkBlock, error) {
	switch marker {
	case "run", "background", "output contains", "skip":
		return walkBlock{kind: marker}, nil
	case "run, fails":
		return walkBlock{kind: "run", fails: true}, nil
	}
	if path, ok := strings.CutPrefix(marker, "excerpt of "); ok && path != "" {
		return walkBlock{kind: "excerpt", path: path}, nil
	}
	if text, ok := strings.CutPrefix(marker, "output lacks "); ok && text != "" {
		return walkBlock{kind: "output lacks", body: text + "\n"}, nil
	}
	return walkBlock{}, fmt.Errorf("unknown walkthrough marker %q: use run, run, fails, background, output contains, output lacks TEXT, excerpt of PATH or skip", marker)
}

// checkOutputFollows reports an output check b of the file name that no command block comes
// before.
func checkOutputFollows(name string, b walkBlock, before []walkBlock) error {
	if (b.kind == "output contains" || b.kind == "output lacks") && !slices.ContainsFunc(before, walkBlock.isCommand) {
		return fmt.Errorf("%s:%d: %s, but no command runs before it", name, b.line, b.kind)
	}
	return nil
}

// walker runs a walkthrough's blocks.
type walker struct {
	source string // the Markdown file, for messages
	root   string // the directory the commands run in, and excerpts' paths start from
	addr   string // where the gateway listens instead of defaultListen
	// issuerAddr is where the demo issuer listens instead of defaultIssuer.
	issuerAddr string
	env        []string
	state      string // a file of the variables exported so far, sourced by each block

	// server is the background gateway; nil when none runs.
	server *backgroundProcess
	// issuers are the background demo issuers, stopped at the end.
	issuers []*backgroundProcess
	// output is the output of the last command block.
	output func() string
}

// newWalker makes a walker whose commands run in root, each with its own home directory,
// and `gateway` standing for the test binary.
func newWalker(t *testing.T, source, root string) *walker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, home := filepath.Join(tmp, "bin"), filepath.Join(tmp, "home")
	for _, dir := range []string{bin, home} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	wrapper := fmt.Sprintf("#!/bin/sh\n%s=1 exec %s \"$@\"\n", envGateway, shellQuote(exe))
	if err := os.WriteFile(filepath.Join(bin, "gateway"), []byte(wrapper), 0o700); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(tmp, "exported.sh")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return &walker{
		source:     source,
		root:       root,
		addr:       freePort(t),
		issuerAddr: freePort(t),
		state:      state,
		env: []string{
			"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
			"HOME=" + home,
			"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
			"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
			"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
			"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
			"TMPDIR=" + tmp,
			// Under -race, each process would wait a second as it exits.
			"GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"),
			// Marks every process the walkthrough starts, for the check that none is left.
			testupstream.EnvRun + "=" + testupstream.Marker,
		},
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// callCommand is a `gateway call` in a shell command.
var callCommand = regexp.MustCompile(`(^|[\s;&|(])gateway call\b`)

// rewrite makes a command of the text run here: the test binary as the gateway, on the
// walker's address.
func (w *walker) rewrite(script string) string {
	s := strings.ReplaceAll(script, "go run ./cmd/gateway", "gateway")
	s = w.readdress(s)
	return callCommand.ReplaceAllString(s, "${1}gateway call -url http://"+w.addr+"/mcp")
}

// readdress puts the walker's addresses for the reader's in s.
func (w *walker) readdress(s string) string {
	return strings.NewReplacer(defaultListen, w.addr, defaultIssuer, w.issuerAddr).Replace(s)
}

// walk runs the blocks in order and stops the background gateway at the end; the error
// names the first block that did not do what the text says.
func (w *walker) walk(ctx context.Context, blocks []walkBlock) (err error) {
	defer func() {
		if stopErr := w.stopServer(); err == nil {
			err = stopErr
		}
		for _, p := range w.issuers {
			if stopErr := p.stop("demo issuer"); err == nil {
				err = stopErr
			}
		}
	}()
	for _, b := range blocks {
		if err := w.step(ctx, b); err != nil {
			return fmt.Errorf("%s:%d: %s block:\n%s\n%w", w.source, b.line, b.kind, indent(b.body), err)
		}
	}
	return nil
}

// step runs one block.
func (w *walker) step(ctx context.Context, b walkBlock) error {
	switch b.kind {
	case "run":
		return w.runBlock(ctx, b)
	case "background":
		return w.startServer(b)
	case "output contains", "output lacks":
		out := w.output()
		for _, want := range strings.Split(b.body, "\n") {
			want = w.readdress(strings.TrimRight(want, " "))
			if strings.TrimSpace(want) == "" {
				continue
			}
			if has := strings.Contains(out, want); has != (b.kind == "output contains") {
				return fmt.Errorf("%s: %q; the output was:\n%s", b.kind, want, indent(out))
			}
		}
	case "excerpt":
		data, err := os.ReadFile(filepath.Join(w.root, b.path))
		if err != nil {
			return err
		}
		if !strings.Contains("\n"+string(data), "\n"+b.body) {
			return fmt.Errorf("these lines are not in %s as they stand: copy them from it again", b.path)
		}
	}
	return nil
}

// runBlock runs a run block with bash and checks its exit status.
func (w *walker) runBlock(ctx context.Context, b walkBlock) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	script := fmt.Sprintf("set -e\n. %[1]s\ntrap 'export -p > %[1]s' EXIT\n%[2]s", shellQuote(w.state), w.rewrite(b.body))
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = w.root, w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	w.output = func() string { return string(out) }
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("it did not end within a minute; output:\n%s", indent(string(out)))
	case err != nil && !errors.As(err, &exit):
		return err
	case b.fails && exit == nil:
		return fmt.Errorf("exit status 0, want 1 (the text says it fails); output:\n%s", indent(string(out)))
	case b.fails && exit.ExitCode() != 1:
		return fmt.Errorf("exit status %d, want 1 (a command that ran and said no); output:\n%s", exit.ExitCode(), indent(string(out)))
	case !b.fails && exit != nil:
		return fmt.Errorf("exit status %d, want 0; output:\n%s", exit.ExitCode(), indent(string(out)))
	}
	return nil
}

// backgroundProcess is a gateway started by a background block, in a process group of its
// own.
type backgroundProcess struct {
	cmd *exec.Cmd
	out *syncBuffer
	// done is closed once the process has exited, with its status in err.
	done chan struct{}
	err  error
}

// startServer stops the background gateway, if one runs, starts b's and waits until it
// answers /readyz.
func (w *walker) startServer(b walkBlock) error {
	command := strings.TrimSpace(w.rewrite(b.body))
	if strings.HasPrefix(command, "gateway demo -issuer ") {
		p, err := w.startBackground(command, "http://"+w.issuerAddr+"/.well-known/openid-configuration")
		if p != nil {
			w.issuers = append(w.issuers, p)
		}
		return err
	}
	if err := w.stopServer(); err != nil {
		return err
	}
	if !strings.HasPrefix(command, "gateway serve ") {
		return errors.New("a background block is one `go run ./cmd/gateway serve` command, or one `go run ./cmd/gateway demo -issuer` command")
	}
	p, err := w.startBackground(command+" -listen "+w.addr, "http://"+w.addr+"/readyz")
	w.server = p
	return err
}

// startBackground starts command and waits until ready answers 200; the process is nil when
// it exited.
func (w *walker) startBackground(command, ready string) (*backgroundProcess, error) {
	script := fmt.Sprintf(". %s\nexec %s", shellQuote(w.state), command)
	p := &backgroundProcess{cmd: exec.Command("bash", "-c", script), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Dir, p.cmd.Env = w.root, w.env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		p.err = p.cmd.Wait()
	}()
	w.output = p.out.String
	exited := false
	answered := testwait.Within(30*time.Second, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	switch {
	case exited:
		return nil, fmt.Errorf("it exited (%v) before it was ready; output:\n%s", p.err, indent(p.out.String()))
	case !answered:
		return p, fmt.Errorf("%s did not answer 200 within 30s; output:\n%s", ready, indent(p.out.String()))
	}
	return p, nil
}

// stopServer stops the background gateway, if one runs: SIGTERM to its process group, and
// SIGKILL if it has not stopped within 20 seconds. An exit status other than 0 is an error.
func (w *walker) stopServer() error {
	p := w.server
	if p == nil {
		return nil
	}
	w.server = nil
	return p.stop("gateway")
}

// stop stops the process: SIGTERM to its process group, and SIGKILL if it has not stopped
// within 20 seconds. An exit status other than 0 is an error.
func (p *backgroundProcess) stop(what string) error {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("the background %s did not stop within 20s of SIGTERM; output:\n%s", what, indent(p.out.String()))
	}
	if p.err != nil {
		return fmt.Errorf("the background %s stopped with %v; output:\n%s", what, p.err, indent(p.out.String()))
	}
	return nil
}

// indent indents text for a failure message.
func indent(text string) string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(text, "\n", "\n    ")
}

// TestWalkthrough runs the walkthrough as a reader of a clean clone would: every command,
// checking what the text says each prints and whether it succeeds.
func TestWalkthrough(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, source := range walkthroughSources {
		t.Run(source, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(root, source))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseWalkthrough(source, data)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(blocks, func(b walkBlock) bool { return b.kind == "background" }) {
				t.Fatalf("%s: the walkthrough starts no gateway: has it lost its markers?", source)
			}
			w := newWalker(t, source, root)
			if err := w.walk(t.Context(), blocks); err != nil {
				t.Fatal(err)
			}
			if left := testupstream.Leftovers(testupstream.Marker); len(left) > 0 {
				t.Errorf("processes the walkthrough started are left: %v", left)
			}
		})
	}
}

// TestWalkthroughRules checks that the walkthrough fails when the text and what its commands
// do part: a wrong command, an exit status other than the text's, output that is not there.
func TestWalkthroughRules(t *testing.T) {
	const begin, end = "<!-- walkthrough: begin -->\n", "<!-- walkthrough: end -->\n"
	tests := []struct {
		name     string
		markdown string
		wantErr  string // in the error of the parse or the run; "" for none
	}{
		{"commands that do what the text says",
			"<!-- walkthrough: run -->\n```sh\nexport GREETING=hello\necho one\n```\n" +
				"<!-- walkthrough: output contains -->\n<!-- another comment -->\n```text\none\n```\n" +
				"<!-- walkthrough: run, fails -->\n```sh\necho \"$GREETING again\"; false\n```\n" +
				"<!-- walkthrough: output contains -->\n```text\nhello again\n```\n" +
				"<!-- walkthrough: output lacks one -->\n" +
				"<!-- walkthrough: excerpt of file.txt -->\n```json\nsecond line\n```\n" +
				"```yaml\nunmarked: [not run]\n```\n", ""},
		{"a command that fails", "<!-- walkthrough: run -->\n```sh\necho starting\nfalse\necho never\n```\n", "doc.md:4: run block:\n    echo starting\n    false\n    echo never\nexit status 1, want 0; output:\n    starting"},
		{"a command that is not there", "<!-- walkthrough: run, fails -->\n```sh\ngateway-typo call\n```\n", "exit status 127, want 1"},
		{"a command that should fail", "<!-- walkthrough: run, fails -->\n```sh\ntrue\n```\n", "exit status 0, want 1"},
		{"output not there", "<!-- walkthrough: run -->\n```sh\necho one\n```\n<!-- walkthrough: output contains -->\n```text\none\ntwo\n```\n", `output contains: "two"; the output was:` + "\n    one"},
		{"output there", "<!-- walkthrough: run -->\n```sh\necho one two\n```\n<!-- walkthrough: output lacks one two -->\n", `output lacks: "one two"`},
		{"excerpt not in the file", "<!-- walkthrough: excerpt of file.txt -->\n```text\nfirst line\nsecond\n```\n", "not in file.txt as they stand"},
		{"excerpt of a part of a line", "<!-- walkthrough: excerpt of file.txt -->\n```text\nline\n```\n", "not in file.txt"},
		{"a gateway that does not start", "<!-- walkthrough: background -->\n```sh\ngo run ./cmd/gateway serve -config nowhere.yaml\n```\n", "before it was ready"},
		{"an issuer that does not start", "<!-- walkthrough: background -->\n```sh\ngo run ./cmd/gateway demo -issuer 0.0.0.0:8090\n```\n", "is not a loopback address"},
		{"an issuer answers at the reader's address", "<!-- walkthrough: background -->\n```sh\ngo run ./cmd/gateway demo -issuer 127.0.0.1:8090\n```\n" +
			"<!-- walkthrough: run -->\n```sh\ncurl -s http://127.0.0.1:8090/.well-known/openid-configuration\n```\n" +
			"<!-- walkthrough: output contains -->\n```text\n\"issuer\":\"http://127.0.0.1:8090\"\n```\n", ""},
		{"a background block that is no serve command", "<!-- walkthrough: background -->\n```sh\nsleep 100\n```\n", "one `go run ./cmd/gateway serve` command"},
		{"an unmarked command", "```sh\necho one\n```\n", "doc.md:3: this ```sh block has no walkthrough marker"},
		{"a marker without a block", "<!-- walkthrough: run -->\ntext\n```sh\necho one\n```\n", "doc.md:3: the walkthrough marker is not followed by a fenced block"},
		{"an unknown marker", "<!-- walkthrough: runs -->\n```sh\necho one\n```\n", `doc.md:3: unknown walkthrough marker "runs"`},
		{"output before any command", "<!-- walkthrough: output contains -->\n```text\none\n```\n", "doc.md:3: output contains, but no command runs before it"},
		{"output lacked before any command", "<!-- walkthrough: output lacks one -->\n", "doc.md:3: output lacks, but no command runs before it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "file.txt"), []byte("first line\nsecond line\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := func() error {
				blocks, err := parseWalkthrough("doc.md", []byte("# Title\n"+begin+tc.markdown+end))
				if err != nil {
					return err
				}
				return newWalker(t, "doc.md", root).walk(t.Context(), blocks)
			}()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	for name, doc := range map[string]string{
		"no walkthrough":   "# Title\n```sh\necho one\n```\n",
		"no end":           "# Title\n" + begin,
		"two walkthroughs": begin + end + begin + end,
	} {
		if _, err := parseWalkthrough("doc.md", []byte(doc)); err == nil {
			t.Errorf("%s: parsed, want an error", name)
		}
	}
}

// TestWalkthroughListsAgree: the walkthrough's VS Code list has the servers of its Claude
// Desktop list.
func TestWalkthroughListsAgree(t *testing.T) {
	servers := func(path string) []string {
		ups, err := config.Import(filepath.Join("..", "..", "examples", "walkthrough", path), nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, u := range ups {
			out = append(out, fmt.Sprintf("%s: %s %q (%s)", u.Name, u.Command, u.Args, u.Transport))
		}
		return out
	}
	claude, vscode := servers("claude_desktop_config.json"), servers("mcp.json")
	if diff := cmp.Diff(claude, vscode); diff != "" || len(claude) == 0 {
		t.Errorf("the lists differ (-claude_desktop_config.json +mcp.json):\n%s", diff)
	}
}

package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/testwait"
)

// The plugin executables the tests run, built once per run of the package's tests by TestMain.
var (
	guardBin, testpluginBin string
	guardSum, testpluginSum string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "policyplugin-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	guardBin, guardSum, err = build(dir, "github.com/manifold-mcp/manifold/examples/plugins/guard")
	if err == nil {
		testpluginBin, testpluginSum, err = build(dir, "github.com/manifold-mcp/manifold/internal/testplugin")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds pkg into dir and returns the executable's path and SHA-256 checksum.
func build(dir, pkg string) (path, sum string, err error) {
	path = filepath.Join(dir, filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return path, fileSum(path), nil
}

func fileSum(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// guardSpec returns a Spec for the guard example with config.
func guardSpec(name, config string) Spec {
	return Spec{Name: name, Path: guardBin, SHA256: guardSum, Config: json.RawMessage(config), Timeout: 10 * time.Second}
}

// testSpec returns a Spec for internal/testplugin with config.
func testSpec(name, config string) Spec {
	return Spec{Name: name, Path: testpluginBin, SHA256: testpluginSum, Config: json.RawMessage(config), Timeout: 10 * time.Second}
}

// inspecting makes s's testplugin an Inspector.
func inspecting(s Spec) Spec {
	s.Env = append(s.Env, "TESTPLUGIN_INSPECT=1")
	return s
}

// start starts a Host for specs, and checks that Close leaves no process or goroutine behind
// when the test ends.
func start(t *testing.T, specs []Spec, opts *Options) *Host {
	t.Helper()
	goroutines := runtime.NumGoroutine()
	if opts == nil {
		opts = &Options{}
	}
	if opts.Logger == nil {
		// The log is shown when the test fails; plugins' lines may still arrive after it.
		var buf lockedBuffer
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the Host's log:\n%s", buf.String())
			}
		})
		opts.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h, err := Start(context.Background(), specs, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		pids := h.pids()
		h.Close()
		for _, pid := range pids {
			if pid != 0 && alive(pid) {
				t.Errorf("plugin process %d still runs after Close", pid)
			}
		}
		if kids := children(); len(kids) > 0 {
			t.Errorf("child processes left after Close: %v", kids)
		}
		checkGoroutines(t, goroutines)
	})
	return h
}

// checkGoroutines fails t unless the number of goroutines falls back to before (those that
// end with a plugin's connection take a moment).
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	if !testwait.Within(10*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left after Close, %d before Start:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

// pids returns the plugins' process ids, 0 for one that is down.
func (h *Host) pids() []int {
	var pids []int
	for _, p := range h.procs {
		pids = append(pids, p.pid())
	}
	return pids
}

// alive reports whether process pid exists (a zombie counts: it was not waited for).
func alive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}

// children returns the ids of this process's child processes, from /proc.
func children() []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		_, rest, ok := bytes.Cut(stat, []byte(") "))
		for ok && bytes.Contains(rest, []byte(") ")) {
			_, rest, ok = bytes.Cut(rest, []byte(") "))
		}
		if f := strings.Fields(string(rest)); len(f) > 1 && f[1] == self {
			kids = append(kids, pid)
		}
	}
	return kids
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records is a slog.Handler that keeps the records it is given, for tests that check logs.
// The handlers derived from one by WithAttrs share its list.
type records struct {
	attrs []slog.Attr
	log   *recordLog
}

type recordLog struct {
	mu   sync.Mutex
	list []slog.Record
}

func newRecords() *records { return &records{log: &recordLog{}} }

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(r.attrs...)
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.list = append(r.log.list, rec)
	return nil
}

func (r *records) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &records{attrs: append(r.attrs[:len(r.attrs):len(r.attrs)], attrs...), log: r.log}
}

func (r *records) WithGroup(string) slog.Handler { return r }

// find returns the first record at level whose message contains msg, and whether there is one.
func (r *records) find(level slog.Level, msg string) (slog.Record, bool) {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	for _, rec := range r.log.list {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			return rec, true
		}
	}
	return slog.Record{}, false
}

// attr returns the value of rec's attribute key, as a string.
func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// waitGone waits until process pid has ended and was waited for.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("the end of process %d", pid), func() bool { return !alive(pid) })
}

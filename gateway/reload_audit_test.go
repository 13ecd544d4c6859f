package gateway_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// openTestAudit opens the trail cfg names, as serve does: a file sink appended to, nothing
// when off.
func openTestAudit(cfg *config.Config) (*audit.Log, func(), error) {
	w, err := audit.OpenSink(cfg.Audit.Sink, cfg.Audit.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("audit: %w", err)
	}
	if w == nil {
		return nil, func() {}, nil
	}
	trail := audit.New(w, &audit.Options{Buffer: cfg.Audit.Buffer})
	return trail, func() { _ = trail.Close(); _ = w.Close() }, nil
}

// callRecords are the records of tools/call written whole to the file at path so far.
func callRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	whole := string(data[:strings.LastIndexByte(string(data), '\n')+1]) // a line being written is not yet a record
	var calls []map[string]any
	for _, rec := range auditLines(t, whole) {
		if rec["method"] == "tools/call" {
			calls = append(calls, rec)
		}
	}
	return calls
}

// argumentsOf is the arguments member of rec as text ("" without one).
func argumentsOf(rec map[string]any) string {
	if rec["arguments"] == nil {
		return ""
	}
	return fmt.Sprint(rec["arguments"])
}

// TestReloadSwapsTheAuditTrail: one session stays open while reloads move the audit trail to
// another file and turn arguments and redaction on (the next call's record is in the new
// file, redacted as it says), are refused for a trail that cannot open (the old one stays),
// turn the trail off (no record) and on again; calls running while the trail changes leave
// exactly one record each, in one of the files.
func TestReloadSwapsTheAuditTrail(t *testing.T) {
	dir := t.TempDir()
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("a", "alpha", "")
	fileAudit := func(name, extra string) string {
		return head + "audit:\n  sink: file\n  path: " + filepath.Join(dir, name) + "\n" + extra
	}
	first := parseConfig(t, fileAudit("a.log", ""))
	tg := startConfigured(t, first, &gateway.Options{OpenAudit: openTestAudit}, true)
	closed := false
	defer func() {
		if !closed {
			tg.close()
		}
	}()
	gw := tg.gw
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	call := func(args map[string]any) {
		t.Helper()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: args}); err != nil {
			t.Fatal(err)
		}
	}
	reload := func(yaml string) error {
		t.Helper()
		return gw.Reload(ctx, parseConfig(t, yaml))
	}
	waitRecord := func(name, text string) {
		t.Helper()
		testwait.Until(t, 10*time.Second, "the record of the call with "+text+" in "+name, func() bool {
			for _, rec := range callRecords(t, filepath.Join(dir, name)) {
				if text == "" || strings.Contains(argumentsOf(rec), text) {
					return true
				}
			}
			return false
		})
	}

	call(map[string]any{"text": "one"})
	waitRecord("a.log", "")

	second := fileAudit("b.log", "  arguments: true\n  redact: [note]\n")
	if err := reload(second); err != nil {
		t.Fatalf("reload to another file: %v", err)
	}
	call(map[string]any{"text": "two", "note": "secret-two"})
	waitRecord("b.log", "two")
	for _, rec := range callRecords(t, filepath.Join(dir, "b.log")) {
		if strings.Contains(argumentsOf(rec), "secret-two") {
			t.Errorf("audit.redact: [note] after the reload, the record holds the note: %v", rec)
		}
	}

	version := gw.ConfigStatus().Version
	err := reload(fileAudit(filepath.Join("missing", "c.log"), "  arguments: true\n"))
	var refused *gateway.ReloadError
	if !errors.As(err, &refused) {
		t.Fatalf("reload to a file that cannot open: %v, want a ReloadError", err)
	}
	if got := gw.ConfigStatus().Version; got != version {
		t.Errorf("version %q after the refused reload, want %q", got, version)
	}
	call(map[string]any{"text": "three", "note": "secret-three"})
	waitRecord("b.log", "three")

	if err := reload(head + "audit:\n  sink: off\n"); err != nil {
		t.Fatalf("reload turning the trail off: %v", err)
	}
	call(map[string]any{"text": "four"})
	if err := reload(fileAudit("c.log", "  arguments: true\n")); err != nil {
		t.Fatalf("reload turning the trail on: %v", err)
	}
	call(map[string]any{"text": "five"})
	waitRecord("c.log", "five")

	// Calls running while the trail moves between files: one record each.
	const callers, calls = 3, 8
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": fmt.Sprintf("run-%d-%d", c, i)}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for _, name := range []string{"d.log", "e.log", "f.log"} {
		if err := reload(fileAudit(name, "  arguments: true\n")); err != nil {
			t.Errorf("reload to %s during calls: %v", name, err)
		}
	}
	wg.Wait()
	tg.close() // the last trail closes, and the replaced ones have
	closed = true

	all := map[string][]string{}
	for _, name := range []string{"a.log", "b.log", "c.log", "d.log", "e.log", "f.log"} {
		recs := callRecords(t, filepath.Join(dir, name))
		for _, rec := range recs {
			all[argumentsOf(rec)] = append(all[argumentsOf(rec)], name)
		}
		if name == "a.log" && len(recs) != 1 {
			t.Errorf("a.log holds %d records of calls, want the first call's only", len(recs))
		}
	}
	for args, files := range all {
		if strings.Contains(args, "four") {
			t.Errorf("the call made while the trail was off has a record in %v", files)
		}
	}
	for c := range callers {
		for i := range calls {
			text := fmt.Sprintf("run-%d-%d", c, i)
			var in []string
			for args, files := range all {
				if args == "map[text:"+text+"]" {
					in = append(in, files...)
				}
			}
			if len(in) != 1 {
				t.Errorf("the call with %s has records in %v, want exactly one", text, in)
			}
		}
	}
}

// TestReloadOfAGivenAuditTrail: a gateway given its trail (Options.Audit) applies a change of
// arguments by reload, and refuses one of the sink, keeping its trail.
func TestReloadOfAGivenAuditTrail(t *testing.T) {
	var out lockedBuffer
	trail := audit.New(&out, nil)
	defer trail.Close()
	head := "listen: 127.0.0.1:0\nupstreams:" + upstreamYAML("a", "alpha", "")
	tg := startConfigured(t, parseConfig(t, head), &gateway.Options{Audit: trail}, true)
	defer tg.close()
	cs := connect(t, tg.url, nil)
	ctx := ctxT(t)
	err := tg.gw.Reload(ctx, parseConfig(t, head+"audit:\n  sink: stdout\n"))
	if !strings.Contains(fmt.Sprint(err), "restart it to change audit.sink") {
		t.Errorf("reload of the sink of a given trail: %v, want it refused", err)
	}
	if err := tg.gw.Reload(ctx, parseConfig(t, head+"audit:\n  arguments: true\n")); err != nil {
		t.Fatalf("reload of audit.arguments: %v", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "kept"}}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the call's record, with its arguments", func() bool {
		return strings.Contains(out.String(), `"kept"`)
	})
}

package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/testupstream"
)

// TestServeReloadsOnSignalAndFileChange: a served gateway reloads its file at SIGHUP (which
// no longer stops it) and when the file changes, with the same session open throughout; a
// file that does not validate is refused and the running configuration stays.
func TestServeReloadsOnSignalAndFileChange(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	addr := freePort(t)
	write := func(rule string) {
		t.Helper()
		text := fmt.Sprintf(`listen: %s
policy:
  default: allow
  rules:
%s
upstreams:
  - name: r
    command: %q
    env: {%s: alpha, %s: %s}
    inherit_env: [GOCOVERDIR, GORACE]
`, addr, rule, exe, testupstream.EnvFlavor, testupstream.EnvRun, testupstream.Marker)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	allowAll := "    - {name: nothing, effect: deny, match: {upstreams: [nobody]}}"
	denyWhoami := "    - {name: no-whoami, effect: deny, reason: whoami is off, match: {tools: [whoami]}}"
	write(allowAll)
	files := &configArgs{command: "serve", path: path}
	cfg, _, err := files.build()
	if err != nil {
		t.Fatal(err)
	}
	hups, tick := make(chan os.Signal, 1), make(chan time.Time)
	g := serveReloading(t, cfg, &reloader{signals: hups, read: rereader(files, ""), tick: tick, files: files.files()})
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"r__whoami","arguments":{}}}`
	var sid string
	waitFor(t, "the gateway to answer r__whoami", func() bool {
		if sid == "" {
			sid = g.initialize()
		}
		_, body := g.post(sid, call)
		return strings.Contains(body, `"text":"alpha"`)
	})

	write(denyWhoami)
	hups <- syscall.SIGHUP
	waitFor(t, "the rule SIGHUP loaded to deny r__whoami", func() bool {
		_, body := g.post(sid, call)
		return strings.Contains(body, "whoami is off")
	})

	if err := os.WriteFile(path, []byte("listen: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hups <- syscall.SIGHUP
	waitFor(t, "the refusal of a file that does not parse", func() bool {
		return strings.Contains(g.logs.String(), "configuration reload refused")
	})
	if _, body := g.post(sid, call); !strings.Contains(body, "whoami is off") {
		t.Errorf("after a refused reload the running rule should stay: %s", body)
	}

	write(allowAll)
	tick <- time.Now() // the watch looks: the file changed
	waitFor(t, "the watch to reload the changed file", func() bool {
		_, body := g.post(sid, call)
		return strings.Contains(body, `"text":"alpha"`)
	})
	if !strings.Contains(g.logs.String(), "trigger=\"file changed: "+path) {
		t.Errorf("the log does not say the file change triggered the reload:\n%s", g.logs.String())
	}
	g.signals <- syscall.SIGTERM
	g.stopped()
}

// TestReloadableLoggerFollowsItsLevel: the logger serve makes writes debug lines only once
// its level (set by a reload of log_level) says so.
func TestReloadableLoggerFollowsItsLevel(t *testing.T) {
	var out syncBuffer
	logger, level := reloadableLogger(&config.Config{LogLevel: "info"}, &out)
	logger.Debug("hidden")
	level.Set(slog.LevelDebug)
	logger.With("k", "v").Debug("shown")
	if got := out.String(); strings.Contains(got, "hidden") || !strings.Contains(got, "shown") {
		t.Errorf("log:\n%s\nwant the debug line written after the level changed only", got)
	}
}

// Package browser gives tests a real headless Chromium, driven with chromedp, to test the
// admin page as an operator's browser runs it: its scripts under its Content Security
// Policy, its fetches, its DOM.
//
//	ctx := browser.New(t) // skips (or, with CI set, fails) when no Chromium is installed
//	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil { … }
//	…
//	if errs := browser.Errors(ctx); len(errs) > 0 { t.Errorf("console errors: %q", errs) }
//
// The browser is Debian's chromium package (apt-get install chromium), found at
// /usr/bin/chromium, on PATH, or at the path in MANIFOLD_CHROMIUM.
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Timeout bounds a test's use of its browser: the context New returns ends after it, so that
// a wait for something that never shows fails the test instead of hanging it.
const Timeout = 2 * time.Minute

// Width and Height are the size of the browser's window: the viewport pages are laid out in,
// and the width of the screenshots.
const (
	Width  = 1280
	Height = 900
)

// closeTimeout bounds the graceful close of the browser at the end of a test; after it the
// browser is killed.
const closeTimeout = 10 * time.Second

// Find returns the path of the Chromium to run: MANIFOLD_CHROMIUM if set, else
// /usr/bin/chromium, else chromium, chromium-browser or google-chrome on PATH; or "" if there
// is none.
func Find() string {
	if p := os.Getenv("MANIFOLD_CHROMIUM"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts a headless Chromium for the test, with a fresh profile in t.TempDir(), and
// returns the chromedp context of a tab in it. The browser is closed, and every process it
// started is gone, when the test ends. The context ends after Timeout.
//
// With no Chromium installed, New skips the test with a loud message; if the environment
// variable CI is set, or MANIFOLD_BROWSER=require (the README's test command), it fails the
// test instead, so that CI never passes without running it.
func New(t testing.TB) context.Context {
	t.Helper()
	path := Find()
	if path == "" {
		const install = "install Debian's chromium package (apt-get install chromium), or set MANIFOLD_CHROMIUM to a Chromium binary"
		if os.Getenv("CI") != "" || os.Getenv("MANIFOLD_BROWSER") == "require" {
			t.Fatalf("NO CHROMIUM: the admin page cannot be tested: %s", install)
		}
		t.Skipf("SKIPPED: no Chromium found — the admin page is NOT tested; %s", install)
	}
	dir := t.TempDir()

	parent, cancelParent := context.WithTimeout(context.Background(), Timeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(parent,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(Width, Height),
		chromedp.UserDataDir(dir),
	)
	c := &console{}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(c.listen))
	ctx = context.WithValue(ctx, consoleKey{}, c)

	stop := func() {
		// Close gracefully, then kill what is left: the browser, then any child of it that
		// outlived it (they all carry the profile directory on their command line).
		cctx, ccancel := context.WithTimeout(ctx, closeTimeout)
		err := chromedp.Cancel(cctx)
		ccancel()
		cancel()
		cancelAlloc()
		cancelParent()
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("closing the browser: %v", err)
		}
		if n := killLeftovers(dir); n > 0 {
			t.Logf("killed %d browser processes left after the browser closed", n)
		}
	}
	// The first action starts the browser, and binds its life to ctx.
	if err := chromedp.Do(ctx); err != nil {
		stop()
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(stop)
	return ctx
}

// Screenshot saves a PNG of the whole page of ctx's tab (beyond the window's height) at path.
func Screenshot(ctx context.Context, path string) error {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	return nil
}

// Errors returns what the page of ctx's tab reported as errors so far, one line each: uncaught
// exceptions and unhandled rejections, console.error and console.assert calls, and the
// browser's own error entries (a script or style the Content Security Policy refused, for
// one). Failed network requests are left out: a page that handles an HTTP error (a 401, a
// 409) still gets the browser's "Failed to load resource" line for it. ctx must come from
// New.
//
// Errors first makes a round trip to the page, so that what the page reported before the call
// is in (the browser sends a tab's events and answers in order).
func Errors(ctx context.Context) []string {
	c, _ := ctx.Value(consoleKey{}).(*console)
	if c == nil {
		panic("browser.Errors: the context does not come from browser.New")
	}
	_ = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void]("0"))
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errors...)
}

type consoleKey struct{}

// console collects a tab's error reports.
type console struct {
	mu     sync.Mutex
	errors []string
}

// listen runs on the tab's event loop: it must return fast and run no command.
func (c *console) listen(ev any) {
	var line string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		if d == nil {
			return
		}
		line = "exception: " + d.Text
		if d.Exception != nil {
			desc, _, _ := strings.Cut(remoteText(d.Exception), "\n    at ")
			line += " " + desc
		}
		line += at(d.URL, d.LineNumber)
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		args := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			args = append(args, remoteText(a))
		}
		line = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
		if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
			line += at(st.CallFrames[0].URL, st.CallFrames[0].LineNumber)
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e == nil || e.Level != log.EntryLevelError || e.Source == log.EntrySourceNetwork {
			return
		}
		line = string(e.Source) + ": " + e.Text + at(e.URL, e.LineNumber)
	default:
		return
	}
	c.mu.Lock()
	c.errors = append(c.errors, line)
	c.mu.Unlock()
}

// remoteText is how the console shows a value: a string as it is, anything else by its
// description or its JSON.
func remoteText(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if len(o.Value) > 0 {
		var s string
		if o.Type == runtime.RemoteObjectTypeString && json.Unmarshal(o.Value, &s) == nil {
			return s
		}
		return string(o.Value)
	}
	if o.Description != "" {
		return o.Description
	}
	if o.UnserializableValue != "" {
		return string(o.UnserializableValue)
	}
	return string(o.Type)
}

// at names where a message comes from, if known; lines count from 0 in the protocol.
func at(url string, line int64) string {
	if url == "" {
		return ""
	}
	return fmt.Sprintf(" (%s:%d)", url, line+1)
}

// killLeftovers kills the processes whose command line names the profile directory dir (the
// browser's and its children's), until none is left or a few seconds passed, and returns how
// many it killed. It reads /proc, so it does nothing where there is none.
func killLeftovers(dir string) int {
	want := []byte("--user-data-dir=" + dir)
	killed := 0
	deadline := time.Now().Add(3 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return killed
		}
		found := 0
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err != nil {
				continue
			}
			for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
				if bytes.Equal(arg, want) {
					if p, err := os.FindProcess(pid); err == nil && p.Kill() == nil {
						found++
					}
					break
				}
			}
		}
		killed += found
		if found == 0 {
			quiet++
		} else {
			quiet = 0
		}
		// A child can fork just as its parent dies: look again, briefly.
		time.Sleep(10 * time.Millisecond)
	}
	return killed
}

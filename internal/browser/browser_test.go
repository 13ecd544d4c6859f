package browser_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/manifold-mcp/manifold/internal/browser"
)

const testPage = `<!doctype html>
<title>t</title>
<p id="hello">hello</p>
<button id="boom">boom</button>
<script src="/page.js"></script>
`

const testScript = `
console.log("a log line is no error");
console.error("something broke:", 42);
document.getElementById("boom").addEventListener("click", () => { throw new Error("kaboom"); });
`

// TestBrowserReportsErrors: a page is driven, its console errors and uncaught exceptions are
// collected (and its plain logs are not), and a screenshot is a PNG.
func TestBrowserReportsErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(testPage))
	})
	mux.HandleFunc("GET /page.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		w.Write([]byte(testScript))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := browser.New(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL),
		chromedp.WaitVisible(chromedp.ID("hello")),
		chromedp.Click(chromedp.ID("boom")),
	); err != nil {
		t.Fatal(err)
	}
	errs := browser.Errors(ctx)
	joined := strings.Join(errs, "\n")
	for _, want := range []string{"console.error: something broke: 42", "kaboom"} {
		if !strings.Contains(joined, want) {
			t.Errorf("errors = %q, want one with %q", errs, want)
		}
	}
	if strings.Contains(joined, "a log line") {
		t.Errorf("errors = %q: a console.log is no error", errs)
	}

	path := filepath.Join(t.TempDir(), "page.png")
	if err := browser.Screenshot(ctx, path); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("the screenshot is not a PNG: starts with %q", png[:min(8, len(png))])
	}
}

// TestInstallScriptSaysWhatToDo: the test command's browser step (scripts/browser), given a
// MANIFOLD_CHROMIUM that is no program, fails at once saying what to install or set, instead
// of ending in a shell's "No such file or directory"; given one that is, it uses it.
func TestInstallScriptSaysWhatToDo(t *testing.T) {
	script := filepath.Join("..", "..", "scripts", "browser")
	fake := filepath.Join(t.TempDir(), "chromium")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho Chromium 1.2.3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		chromium string
		wantOK   bool
		want     []string
	}{
		{"a path that does not exist", "/no/such/chromium", false, []string{"MANIFOLD_CHROMIUM=/no/such/chromium is not an executable file", "apt-get install chromium", "set\nMANIFOLD_CHROMIUM"}},
		{"a directory", t.TempDir(), false, []string{"is not an executable file"}},
		{"a program", fake, true, []string{"Chromium 1.2.3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("bash", script)
			cmd.Env = append(os.Environ(), "MANIFOLD_CHROMIUM="+tc.chromium)
			out, err := cmd.CombinedOutput()
			if ok := err == nil; ok != tc.wantOK {
				t.Fatalf("exit error %v, want success %v; output:\n%s", err, tc.wantOK, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "No such file or directory") {
				t.Errorf("a shell error reached the user:\n%s", out)
			}
		})
	}
}

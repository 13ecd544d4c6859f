package browser_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
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

package admin

import (
	_ "embed"
	"net/http"
	"strconv"
)

// The admin page: plain HTML, CSS and JavaScript, no build step, nothing loaded from
// elsewhere. The script builds the DOM from the API's answers with textContent and
// createElement only: every name, description, argument and error in them is untrusted.
var (
	//go:embed page/index.html
	pageHTML []byte
	//go:embed page/app.js
	pageJS []byte
	//go:embed page/style.css
	pageCSS []byte
)

// pageCSP lets the page load its own script and style and call its own API, and nothing else:
// no inline script or handler, no other origin, no framing.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// servePage registers the admin page's files on mux at their exact paths, and answers 404 to
// any other path outside /api/ (which the API registers).
func servePage(mux *http.ServeMux) {
	mux.Handle("GET /{$}", pageFile("text/html; charset=utf-8", pageHTML))
	mux.Handle("GET /app.js", pageFile("text/javascript; charset=utf-8", pageJS))
	mux.Handle("GET /style.css", pageFile("text/css; charset=utf-8", pageCSS))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		setPageHeaders(w.Header())
		http.NotFound(w, r)
	})
}

// pageFile serves one of the page's files.
func pageFile(contentType string, body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		setPageHeaders(h)
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
}

func setPageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

package connect

import (
	"bytes"
	"context"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/oauthclient"
)

const (
	// maxFormBytes bounds the body of the pages' forms.
	maxFormBytes = 16 << 10
	// consentDiscoveryWait is how long the consent page waits for the upstream's
	// authorization server to be found, to name it.
	consentDiscoveryWait = 5 * time.Second
)

// Handler returns the handler of the pages (the Path… constants). Every answer is marked not
// to be framed, cached or referred from, and loads nothing but its inline style.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathConnect+"{id}", s.serveConnect)
	mux.HandleFunc("POST "+PathConnect+"{id}", s.serveConsent)
	mux.HandleFunc("GET "+PathCallback, s.serveCallback)
	mux.HandleFunc("GET "+PathLoginCallback, s.signIn.serveCallback)
	mux.HandleFunc("POST "+PathLogout, s.signIn.serveLogout)
	mux.HandleFunc("GET "+PathClientMetadata, s.serveClientMetadata)
	mux.HandleFunc("GET "+PathGrants, s.serveGrants)
	mux.HandleFunc("POST "+PathGrants+"/{upstream}/revoke", s.serveRevoke)
	mux.HandleFunc("POST "+PathGrants+"/{upstream}/connect", s.serveConnectFromGrants)
	return pageHeaders(mux)
}

// pageHeaders sets the headers every answer carries.
func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		// No form-action: the consent form's answer redirects to the authorization server.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("Cache-Control", "no-store")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// page is what a page shows: a title and message, and the parts of the page kinds that have
// them.
type page struct {
	Title   string
	Message string
	// Consent: the form of a connect link.
	Consent *consentView
	// Mismatch: another user is signed in than the one who asked.
	Mismatch *mismatchView
	// Grants: the signed-in user's grants.
	Grants *grantsView
}

// consentView is the consent form of a connect link.
type consentView struct {
	Upstream   string
	AuthServer string
	Scopes     []string
	User       string
	Action     string
	CSRF       string
	Expires    time.Time
}

// mismatchView names the signed-in user, with a form to sign in as another. It never names
// the user the link was made for: whoever holds a link must not learn whose it is.
type mismatchView struct {
	SignedIn     string
	Next, CSRF   string
	LogoutAction string
}

// grantsView lists the grants, each with its revoke form, and the upstreams the user may
// connect still, each with its connect form.
type grantsView struct {
	User      string
	Rows      []grantRow
	Available []availableRow
	CSRF      string
}

// availableRow is an upstream the user has not connected, with the action that connects it.
type availableRow struct {
	Upstream, Action string
}

// grantRow is one grant as the grants page shows it: no token.
type grantRow struct {
	Upstream, Action string
	Scopes           []string
	Granted, Expiry  time.Time
	Unreadable       bool
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"join": strings.Join,
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "unknown"
		}
		return t.UTC().Format("2006-01-02 15:04 UTC")
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Title}}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em;color:#222}
dt{font-weight:600}button{font-size:1em;padding:.4em 1.2em;margin-right:.5em}table{border-collapse:collapse}
td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}</style></head>
<body><h1>{{.Title}}</h1>
{{with .Message}}<p>{{.}}</p>{{end}}
{{with .Consent}}<p>Connect your account at <strong>{{.Upstream}}</strong> so that your client can use it on your behalf.</p>
<dl><dt>Signed in as</dt><dd>{{.User}}</dd>
<dt>Upstream</dt><dd>{{.Upstream}}</dd>
{{with .AuthServer}}<dt>Authorization server</dt><dd>{{.}}</dd>{{end}}
<dt>Access asked for</dt><dd>{{if .Scopes}}{{join .Scopes " "}}{{else}}what the upstream asks for by default{{end}}</dd></dl>
<form method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<button type="submit" name="action" value="connect">Connect</button>
<button type="submit" name="action" value="cancel">Cancel</button></form>
<p>This link works once, until {{when .Expires}}.</p>{{end}}
{{with .Mismatch}}<p>You are signed in as <strong>{{.SignedIn}}</strong>, but this link was made for another user. Only that user can use it.</p>
<form method="post" action="{{.LogoutAction}}"><input type="hidden" name="csrf" value="{{.CSRF}}"><input type="hidden" name="next" value="{{.Next}}">
<button type="submit">Sign in as another user</button></form>{{end}}
{{with .Grants}}<p>Signed in as {{.User}}.</p>
{{if .Rows}}<table><tr><th>Upstream</th><th>Access</th><th>Connected</th><th>Token expires</th><th></th></tr>
{{range .Rows}}<tr><td>{{.Upstream}}</td><td>{{if .Unreadable}}unreadable: revoke it and connect again{{else}}{{join .Scopes " "}}{{end}}</td>
<td>{{when .Granted}}</td><td>{{when .Expiry}}</td>
<td><form method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{$.Grants.CSRF}}"><button type="submit">Revoke</button></form></td></tr>
{{end}}</table>{{else}}<p>You have connected no upstream.</p>{{end}}
{{if .Available}}<h2>Not connected yet</h2><table>
{{range .Available}}<tr><td>{{.Upstream}}</td>
<td><form method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{$.Grants.CSRF}}"><button type="submit" name="action" value="connect">Connect</button></form></td></tr>
{{end}}</table>{{end}}{{end}}
</body></html>
`))

// pageWriter writes the pages' answers. It holds no state of its own and is safe for
// concurrent use.
type pageWriter struct {
	// logger is told of the pages that do not render.
	logger *slog.Logger
}

// render writes p with status. It renders into a buffer first, so that a template failure
// does not leave half a page.
func (pw pageWriter) render(w http.ResponseWriter, status int, p page) {
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, p); err != nil {
		pw.logger.Error("page not rendered", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// forbidden answers a form whose CSRF token or signed-in user does not match.
func (pw pageWriter) forbidden(w http.ResponseWriter) {
	pw.render(w, http.StatusForbidden, page{Title: "Not allowed",
		Message: "This form does not belong to the signed-in user, or it is too old. Open the link from your client again."})
}

// expired answers a connect link that is unknown, expired or used.
func (pw pageWriter) expired(w http.ResponseWriter) {
	pw.render(w, http.StatusNotFound, page{Title: "Link expired",
		Message: "This connect link has expired or was already used. Ask your client again: it will give you a new link."})
}

// unavailable answers a step that failed on the gateway's side or an unreachable server.
func (pw pageWriter) unavailable(w http.ResponseWriter, status int) {
	pw.render(w, status, page{Title: "Try again later",
		Message: "The gateway could not complete this step right now. Try again in a minute, or ask your client for a new link."})
}

// parseForm reads a bounded form body; on failure it answers 400 and returns false.
func (pw pageWriter) parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		pw.render(w, http.StatusBadRequest, page{Title: "Bad request", Message: "The form could not be read."})
		return false
	}
	return true
}

// request reads the connect request of id (take: takes it). It answers the expired page or
// an error page and returns false when there is none.
func (s *Service) request(w http.ResponseWriter, r *http.Request, id string, take bool) (Request, bool) {
	var req Request
	err := s.records.get(r.Context(), requestKey(id), take, &req)
	if err == nil && !s.opts.Now().Before(req.Expires) {
		err = ErrNotFound
	}
	switch {
	case errors.Is(err, ErrNotFound):
		s.pages.expired(w)
		return req, false
	case err != nil:
		s.logger.Error("connect link not read", "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return req, false
	}
	return req, true
}

// serveConnect shows a connect link: to its principal, signed in, the consent form; to
// another user, who is signed in instead; to nobody signed in, the sign-in.
func (s *Service) serveConnect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	req, ok := s.request(w, r, id, false)
	if !ok {
		return
	}
	u, signedIn := s.signIn.currentUser(r)
	if !signedIn {
		s.signIn.start(w, r, PathConnect+id, "")
		return
	}
	if !u.is(req.Principal) {
		s.pages.render(w, http.StatusForbidden, page{Title: "Signed in as another user", Mismatch: &mismatchView{
			SignedIn: u.Name,
			Next:     PathConnect + id, CSRF: s.signIn.csrfToken(u, "logout"), LogoutAction: PathLogout,
		}})
		return
	}
	view := &consentView{Upstream: req.Upstream, User: u.Name, Scopes: req.Scopes, Action: PathConnect + id,
		CSRF: s.signIn.csrfToken(u, requestKey(id)), Expires: req.Expires}
	if up, ok := s.flows.upstream(req.Upstream); ok && view.Scopes == nil {
		view.Scopes = up.Scopes
	}
	// The authorization server is shown when it can be found quickly; the discovery goes on
	// for the form's answer otherwise.
	ctx, cancel := context.WithTimeout(r.Context(), consentDiscoveryWait)
	fl, err := s.flows.flow(ctx, req.Upstream)
	cancel()
	if err == nil {
		view.AuthServer = fl.Discovery.Server.Issuer
		if view.Scopes == nil {
			view.Scopes = fl.Discovery.Scopes
		}
	}
	s.pages.render(w, http.StatusOK, page{Title: "Connect " + req.Upstream, Consent: view})
}

// flowRecord is an authorization in flight at an upstream's server, under its state: all the
// callback needs, on whichever replica it lands.
type flowRecord struct {
	Pending   oauthclient.Pending   `json:"pending"`
	Request   Request               `json:"request"`
	Client    oauthclient.Client    `json:"client"`
	Discovery oauthclient.Discovery `json:"discovery"`
	Scopes    []string              `json:"scopes,omitempty"`
	// Resource is the upstream's URL the flow was discovered for; "" in a record made before
	// it was kept.
	Resource string `json:"resource,omitempty"`
}

// serveConsent answers the consent form: Connect starts the authorization at the upstream's
// server, Cancel ends the link. Either uses the link up.
func (s *Service) serveConsent(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.pages.parseForm(w, r) {
		return
	}
	u, signedIn := s.signIn.currentUser(r)
	if !signedIn || !s.signIn.checkCSRF(u, requestKey(id), r.PostForm.Get("csrf")) {
		s.pages.forbidden(w)
		return
	}
	req, ok := s.request(w, r, id, false)
	if !ok {
		return
	}
	if !u.is(req.Principal) {
		s.pages.forbidden(w)
		return
	}
	log := s.logger.With("upstream", req.Upstream, "principal", req.Principal.String())
	if r.PostForm.Get("action") != "connect" {
		if _, ok := s.request(w, r, id, true); !ok {
			return
		}
		log.Info("connect declined by the user")
		s.pages.render(w, http.StatusOK, page{Title: "Not connected",
			Message: req.Upstream + " was not connected. You can close this page and return to your client."})
		return
	}
	// The flow before the link is taken: an unreachable server leaves the link usable.
	fl, up, err := s.flows.flowOf(r.Context(), req.Upstream)
	switch {
	case errors.Is(err, ErrUnknownUpstream):
		s.pages.render(w, http.StatusNotFound, page{Title: "Upstream gone",
			Message: req.Upstream + " is no longer configured at the gateway. Nothing was connected."})
		return
	case err != nil:
		log.Error("connect not started", "error", err)
		s.pages.unavailable(w, http.StatusBadGateway)
		return
	}
	if req, ok = s.request(w, r, id, true); !ok {
		return
	}
	step := *fl
	if req.Scopes != nil {
		step.Scopes = slices.Clone(req.Scopes)
	}
	p, err := step.Start(ownerOf(req.Principal))
	if err != nil {
		log.Error("connect not started", "error", err)
		s.pages.unavailable(w, http.StatusInternalServerError)
		return
	}
	scopes := step.Scopes
	if scopes == nil {
		scopes = step.Discovery.Scopes
	}
	rec := flowRecord{Pending: *p, Request: req, Client: *step.Client, Discovery: *step.Discovery, Scopes: scopes,
		Resource: up.URL}
	if err := s.records.put(r.Context(), flowKey(p.State), rec, s.opts.RequestTTL); err != nil {
		log.Error("connect not started", "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	http.Redirect(w, r, p.URL, http.StatusSeeOther)
}

// serveCallback finishes an authorization at an upstream's server: the signed-in user must be
// the one who started it (checked before the code is redeemed), the record is taken (a replay
// finds nothing), the code redeemed, and the grant stored.
func (s *Service) serveCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u, signedIn := s.signIn.currentUser(r)
	if !signedIn {
		s.pages.render(w, http.StatusForbidden, page{Title: "Not signed in",
			Message: "Your sign-in at the gateway has ended, so this answer cannot be accepted. Ask your client again for a new link."})
		return
	}
	state := r.URL.Query().Get("state")
	var rec flowRecord
	err := s.records.get(ctx, flowKey(state), true, &rec)
	switch {
	case errors.Is(err, ErrNotFound) || state == "":
		s.pages.render(w, http.StatusBadRequest, page{Title: "Link used or expired",
			Message: "This answer was already used or has expired. Ask your client again for a new link."})
		return
	case err != nil:
		s.logger.Error("connect not finished", "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	req := rec.Request
	log := s.logger.With("upstream", req.Upstream, "principal", req.Principal.String())
	if !u.is(req.Principal) {
		log.Warn("connect refused: the answer came back to another user than the one who started it")
		s.pages.render(w, http.StatusForbidden, page{Title: "Signed in as another user",
			Message: "This authorization was started by another user. Nothing was connected. Ask your client again for a new link."})
		return
	}
	f, err := s.flows.fetcher(req.Upstream)
	up, _ := s.flows.upstream(req.Upstream)
	if err == nil && up.URL != rec.Resource {
		err = ErrResourceChanged
	}
	if err != nil {
		log.Warn("connect not finished", "error", err)
		s.pages.render(w, http.StatusNotFound, page{Title: "Upstream gone",
			Message: req.Upstream + " is no longer configured at the gateway as it was when you started. Nothing was connected. Ask your client again for a new link."})
		return
	}
	fl := oauthclient.Flow{Fetcher: f, Discovery: &rec.Discovery, Client: &rec.Client,
		RedirectURI: s.opts.PublicURL + PathCallback, Scopes: rec.Scopes, Now: s.opts.Now}
	tok, err := fl.Exchange(ctx, &rec.Pending, r.URL.Query())
	var oe *oauthclient.OAuthError
	switch {
	case errors.As(err, &oe):
		log.Info("connect refused at the authorization server", "error", err)
		s.pages.render(w, http.StatusForbidden, page{Title: "Not connected",
			Message: "The authorization server did not grant access (" + oauthCode(oe.Code) + "). Nothing was connected. Ask your client again if you want to retry."})
		return
	case err != nil:
		log.Error("connect not finished", "error", err)
		s.pages.render(w, http.StatusBadGateway, page{Title: "Not connected",
			Message: "The answer of the authorization server could not be used. Nothing was connected. Ask your client again for a new link."})
		return
	}
	g := grants.Grant{Principal: req.Principal, Upstream: req.Upstream, Token: grantToken(tok, rec.Scopes),
		Issuer: rec.Discovery.Server.Issuer, Resource: rec.Resource}
	if err := s.opts.Vault.Put(ctx, g); err != nil {
		log.Error("grant not stored", "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	log.Info("upstream connected", "grant", g)
	if s.opts.OnConnected != nil {
		s.opts.OnConnected(ctx, req)
	}
	s.pages.render(w, http.StatusOK, page{Title: "Connected " + req.Upstream,
		Message: "Your account at " + req.Upstream + " is connected. Return to your client: it can go on."})
}

// serveGrants lists the signed-in user's grants, each with a revoke form.
func (s *Service) serveGrants(w http.ResponseWriter, r *http.Request) {
	u, signedIn := s.signIn.currentUser(r)
	if !signedIn {
		s.signIn.start(w, r, PathGrants, "")
		return
	}
	infos, err := s.opts.Vault.List(r.Context(), u.principal())
	if err != nil {
		s.logger.Error("grants not listed", "principal", u.principal().String(), "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	view := &grantsView{User: u.Name, CSRF: s.signIn.csrfToken(u, "grants")}
	connected := map[string]bool{}
	for _, g := range infos {
		connected[g.Upstream] = true
		view.Rows = append(view.Rows, grantRow{Upstream: g.Upstream, Scopes: g.Scopes, Granted: g.Granted, Expiry: g.Expiry,
			Unreadable: g.Unreadable, Action: PathGrants + "/" + url.PathEscape(g.Upstream) + "/revoke"})
	}
	for _, name := range s.flows.names() {
		if !connected[name] {
			view.Available = append(view.Available, availableRow{Upstream: name, Action: PathGrants + "/" + url.PathEscape(name) + "/connect"})
		}
	}
	s.pages.render(w, http.StatusOK, page{Title: "Connected upstreams", Grants: view})
}

// grantsForm reads a form posted from the grants page: the signed-in user who posted it, or
// false once the request was answered (a bad form, no sign-in, or a CSRF token not the
// user's).
func (s *Service) grantsForm(w http.ResponseWriter, r *http.Request) (*user, bool) {
	if !s.pages.parseForm(w, r) {
		return nil, false
	}
	u, signedIn := s.signIn.currentUser(r)
	if !signedIn || !s.signIn.checkCSRF(u, "grants", r.PostForm.Get("csrf")) {
		s.pages.forbidden(w)
		return nil, false
	}
	return u, true
}

// serveRevoke revokes one of the signed-in user's grants, then shows the list again.
func (s *Service) serveRevoke(w http.ResponseWriter, r *http.Request) {
	u, ok := s.grantsForm(w, r)
	if !ok {
		return
	}
	upstream := r.PathValue("upstream")
	if err := s.Revoke(r.Context(), u.principal(), upstream); err != nil && !errors.Is(err, grants.ErrNotFound) {
		s.logger.Error("grant not revoked", "upstream", upstream, "principal", u.principal().String(), "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	http.Redirect(w, r, PathGrants, http.StatusSeeOther)
}

// serveConnectFromGrants starts connecting an upstream from the grants page, with no client
// asking: for an upstream whose tools nobody can list before some user connected it (no
// catalog_credentials), and for a user who wants to connect ahead of the first call. It
// makes a connect link for the signed-in user and goes on to it.
func (s *Service) serveConnectFromGrants(w http.ResponseWriter, r *http.Request) {
	u, ok := s.grantsForm(w, r)
	if !ok {
		return
	}
	upstream := r.PathValue("upstream")
	if _, ok := s.flows.upstream(upstream); !ok {
		s.pages.render(w, http.StatusNotFound, page{Title: "No such upstream",
			Message: "No upstream named " + upstream + " is connected by its users here."})
		return
	}
	_, id, err := s.Ask(r.Context(), Request{Principal: u.principal(), Upstream: upstream})
	if err != nil {
		s.logger.Error("connect link not made", "upstream", upstream, "principal", u.principal().String(), "error", err)
		s.pages.unavailable(w, http.StatusServiceUnavailable)
		return
	}
	http.Redirect(w, r, PathConnect+id, http.StatusSeeOther)
}

// serveClientMetadata serves the gateway's Client ID Metadata Document.
func (s *Service) serveClientMetadata(w http.ResponseWriter, r *http.Request) {
	doc, err := oauthclient.MetadataDocument(s.opts.PublicURL+PathClientMetadata, s.opts.ClientName,
		[]string{s.opts.PublicURL + PathCallback})
	if err != nil {
		// Only an https gateway has one; nothing to serve otherwise.
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

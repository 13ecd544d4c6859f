package connect

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// Sign-in at the gateway's own issuer (OpenID Connect Core 1.0 §3.1, the code flow, with PKCE,
// nonce and state), and the cookie that remembers who signed in.
const (
	// loginLife is how long a sign-in lasts.
	loginLife = 8 * time.Hour
	// loginFlowTTL is how long a user has to come back from the issuer (and the life of the
	// state cookie that keeps the sign-ins in flight).
	loginFlowTTL = 10 * time.Minute
	// loginCookieName holds the sealed sign-in; stateCookieName holds the sealed sign-ins in
	// flight of the browser that started them. Both get the __Host- prefix under https.
	loginCookieName = "manifold_login"
	stateCookieName = "manifold_login_state"
)

// signIn signs the pages' users in at the gateway's own issuer (Options.Login). It owns the
// browser's sealed cookies (the signed-in user; the sign-ins in flight) and the CSRF tokens
// of the pages' forms, bound to the sign-in. It writes nothing to the Store, and is safe for
// concurrent use. Lifecycle: made by New; the issuer is discovered on the first sign-in, on
// a goroutine of builds, which Service.Close stops (a sign-in that still needs the discovery
// then fails with ErrClosed).
type signIn struct {
	login     Login
	publicURL string
	// httpClient reaches the issuer.
	httpClient *http.Client
	// sealer seals the cookies and the CSRF tokens.
	sealer *seal.Sealer
	// secure is PublicURL being https: Secure, __Host- cookies.
	secure bool
	now    func() time.Time
	logger *slog.Logger
	pages  pageWriter
	// builds runs the issuer's discovery, under the Service's lifetime.
	builds *builds
	// discovered is the issuer's client, once discovered.
	discovered lazy[*loginProvider]
}

// loginProvider is what the sign-in needs from the discovered issuer.
type loginProvider struct {
	config   oauth2.Config
	verifier *oidc.IDTokenVerifier
}

// provider returns the issuer's client, discovering the issuer if need be.
func (si *signIn) provider(ctx context.Context) (*loginProvider, error) {
	return resolve(ctx, si.builds, &si.discovered, func(context.Context) (*loginProvider, error) {
		// The provider keeps the context it is made with for its later key fetches: the
		// Service's lifetime, not the bounded build's; si.httpClient bounds each request.
		p, err := oidc.NewProvider(oidc.ClientContext(si.builds.ctx, si.httpClient), si.login.Issuer)
		if err != nil {
			return nil, fmt.Errorf("discover the sign-in issuer %s: %w", si.login.Issuer, err)
		}
		return &loginProvider{
			config: oauth2.Config{
				ClientID:     si.login.ClientID,
				ClientSecret: si.login.ClientSecret,
				Endpoint:     p.Endpoint(),
				RedirectURL:  si.publicURL + PathLoginCallback,
				Scopes:       si.login.Scopes,
			},
			verifier: p.Verifier(&oidc.Config{ClientID: si.login.ClientID, Now: si.now}),
		}, nil
	})
}

// user is who signed in, as the login cookie keeps it.
type user struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
	// Name is how pages name the user.
	Name string `json:"name,omitempty"`
	// SID is random per sign-in: the CSRF tokens are bound to it.
	SID     string    `json:"sid"`
	Expires time.Time `json:"exp"`
}

// principal is the user as the gateway's principal.
func (u *user) principal() grants.Principal {
	return grants.Principal{Issuer: u.Issuer, Subject: u.Subject}
}

// is reports whether u is the principal p.
func (u *user) is(p grants.Principal) bool {
	return u.Issuer == p.Issuer && u.Subject == p.Subject
}

// loginFlow is a sign-in in flight. It is kept in the browser that started it, sealed in
// its state cookie, never in the Store: nothing is written anywhere for a visitor who has not
// signed in.
type loginFlow struct {
	// State is the random state parameter sent to the issuer, compared at the callback.
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`
	// Next is the local path to return to.
	Next string `json:"next"`
	// Expires is when the sign-in can no longer be finished.
	Expires time.Time `json:"exp"`
}

// maxLoginFlows is the most sign-ins in flight a browser's state cookie keeps (sign-ins
// started in several tabs at once); the oldest goes first.
const maxLoginFlows = 3

// flows returns the unexpired sign-ins in flight sealed in r's state cookie; none if it
// has no such cookie or it does not open.
func (si *signIn) flows(r *http.Request) []loginFlow {
	c, err := r.Cookie(si.cookieName(stateCookieName))
	if err != nil {
		return nil
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return nil
	}
	b, err := si.sealer.Open(sealed, []byte(stateCookieName))
	if err != nil {
		return nil
	}
	var flows []loginFlow
	if json.Unmarshal(b, &flows) != nil {
		return nil
	}
	now := si.now()
	return slices.DeleteFunc(flows, func(f loginFlow) bool { return f.State == "" || !now.Before(f.Expires) })
}

// setFlows seals flows (the last maxLoginFlows) in w's state cookie, or deletes the
// cookie when there are none.
func (si *signIn) setFlows(w http.ResponseWriter, flows []loginFlow) error {
	if len(flows) == 0 {
		si.setCookie(w, stateCookieName, "", -1)
		return nil
	}
	flows = flows[max(0, len(flows)-maxLoginFlows):]
	b, err := json.Marshal(flows)
	if err != nil {
		return fmt.Errorf("encode the sign-ins in flight: %w", err)
	}
	si.setCookie(w, stateCookieName, base64.RawURLEncoding.EncodeToString(si.sealer.Seal(b, []byte(stateCookieName))),
		int(loginFlowTTL/time.Second))
	return nil
}

// cookieName is base with the __Host- prefix when the gateway is reached over https.
func (si *signIn) cookieName(base string) string {
	if si.secure {
		return "__Host-" + base
	}
	return base
}

// setCookie sets (maxAge < 0: deletes) a cookie of the pages: HttpOnly, SameSite=Lax, Path=/,
// and Secure under https.
func (si *signIn) setCookie(w http.ResponseWriter, base, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: si.cookieName(base), Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: si.secure, SameSite: http.SameSiteLaxMode})
}

// currentUser returns the signed-in user of r, if its login cookie is valid and unexpired.
func (si *signIn) currentUser(r *http.Request) (*user, bool) {
	c, err := r.Cookie(si.cookieName(loginCookieName))
	if err != nil {
		return nil, false
	}
	sealed, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil {
		return nil, false
	}
	b, err := si.sealer.Open(sealed, []byte(loginCookieName))
	if err != nil {
		return nil, false
	}
	var u user
	if json.Unmarshal(b, &u) != nil || u.Issuer == "" || u.Subject == "" || u.SID == "" || !si.now().Before(u.Expires) {
		return nil, false
	}
	return &u, true
}

// csrfToken is a token for a form of u's toward purpose (the request id, "grants",
// "logout"): sealed, bound to u's sign-in and the purpose, valid while the sign-in is.
func (si *signIn) csrfToken(u *user, purpose string) string {
	exp, _ := u.Expires.MarshalText()
	return base64.RawURLEncoding.EncodeToString(si.sealer.Seal(exp, csrfAD(u, purpose)))
}

// checkCSRF reports whether token is one of csrfToken(u, purpose).
func (si *signIn) checkCSRF(u *user, purpose, token string) bool {
	sealed, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || token == "" {
		return false
	}
	b, err := si.sealer.Open(sealed, csrfAD(u, purpose))
	if err != nil {
		return false
	}
	var exp time.Time
	return exp.UnmarshalText(b) == nil && si.now().Before(exp)
}

// csrfAD is the associated data of u's CSRF tokens toward purpose.
func csrfAD(u *user, purpose string) []byte {
	return []byte("csrf\x00" + u.SID + "\x00" + purpose)
}

// localPath reports whether next is a path the sign-in may return to: a connect link or the
// grants page, never another site.
func localPath(next string) bool {
	if strings.ContainsAny(next, "\\?#") || strings.Contains(next, "//") {
		return false
	}
	id, isConnect := strings.CutPrefix(next, PathConnect)
	return next == PathGrants || (isConnect && id != "" && !strings.Contains(id, "/"))
}

// start sends the browser to the issuer to sign in, and back to next afterwards; prompt,
// if not "", is the prompt parameter (after a sign-out: "login").
func (si *signIn) start(w http.ResponseWriter, r *http.Request, next, prompt string) {
	if !localPath(next) {
		next = PathGrants
	}
	p, err := si.provider(r.Context())
	if err != nil {
		si.logger.Error("sign-in unavailable", "error", err)
		si.pages.render(w, http.StatusBadGateway, page{Title: "Sign-in unavailable",
			Message: "The gateway cannot reach its sign-in service right now. Try again in a minute."})
		return
	}
	// The sign-in in flight goes in the browser's cookie, beside those of other tabs: the
	// Store is written only once a user has signed in.
	f := loginFlow{State: randomString(), Nonce: randomString(), Verifier: oauth2.GenerateVerifier(), Next: next,
		Expires: si.now().Add(loginFlowTTL)}
	if err := si.setFlows(w, append(si.flows(r), f)); err != nil {
		si.logger.Error("sign-in not started", "error", err)
		si.pages.render(w, http.StatusInternalServerError, page{Title: "Sign-in unavailable",
			Message: "The gateway could not start the sign-in. Try again in a minute."})
		return
	}
	opts := []oauth2.AuthCodeOption{oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)}
	if prompt != "" {
		opts = append(opts, oauth2.SetAuthURLParam("prompt", prompt))
	}
	http.Redirect(w, r, p.config.AuthCodeURL(f.State, opts...), http.StatusFound)
}

// serveCallback finishes a sign-in: the state must be one of the sign-ins in flight
// sealed in this browser's state cookie (compared in constant time), which is used up here
// whatever the outcome; the code is redeemed with its PKCE verifier, and the ID token
// verified (issuer, audience, expiry, signature, nonce). The browser then gets its login
// cookie and goes back where it was.
func (si *signIn) serveCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	flows := si.flows(r)
	found := -1
	for i, f := range flows {
		if subtle.ConstantTimeCompare([]byte(f.State), []byte(q.Get("state"))) == 1 {
			found = i
		}
	}
	if found < 0 || q.Get("state") == "" {
		si.pages.render(w, http.StatusBadRequest, page{Title: "Sign-in expired",
			Message: "This sign-in was already used, has expired, or was started in another browser. Open the link from your client again, in this browser."})
		return
	}
	f := flows[found]
	// Single use: the sign-in leaves the cookie before anything else is done with it.
	if err := si.setFlows(w, slices.Delete(flows, found, found+1)); err != nil {
		si.logger.Error("sign-in not finished", "error", err)
		si.pages.render(w, http.StatusInternalServerError, page{Title: "Sign-in failed", Message: "Try again."})
		return
	}
	if code := q.Get("error"); code != "" {
		si.pages.render(w, http.StatusForbidden, page{Title: "Sign-in refused",
			Message: "The sign-in service did not sign you in (" + oauthCode(code) + "). Open the link from your client again."})
		return
	}
	u, err := si.redeem(ctx, q.Get("code"), f)
	if err != nil {
		si.logger.Warn("sign-in failed", "error", err)
		si.pages.render(w, http.StatusForbidden, page{Title: "Sign-in failed",
			Message: "The sign-in could not be verified. Open the link from your client again."})
		return
	}
	b, err := json.Marshal(u)
	if err != nil {
		si.logger.Error("sign-in not kept", "error", err)
		si.pages.render(w, http.StatusInternalServerError, page{Title: "Sign-in failed", Message: "Try again."})
		return
	}
	si.setCookie(w, loginCookieName, base64.RawURLEncoding.EncodeToString(si.sealer.Seal(b, []byte(loginCookieName))), int(loginLife/time.Second))
	next := f.Next
	if !localPath(next) {
		next = PathGrants
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// redeem exchanges the sign-in code and verifies its ID token, and returns the user.
func (si *signIn) redeem(ctx context.Context, code string, f loginFlow) (*user, error) {
	if code == "" {
		return nil, errors.New("the sign-in answer has no code")
	}
	p, err := si.provider(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := p.config.Exchange(context.WithValue(ctx, oauth2.HTTPClient, si.httpClient), code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return nil, fmt.Errorf("redeem the sign-in code at %s: %w", si.login.Issuer, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, fmt.Errorf("the token answer of %s has no id_token", si.login.Issuer)
	}
	idt, err := p.verifier.Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("verify the id_token of %s: %w", si.login.Issuer, err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(f.Nonce)) != 1 {
		return nil, errors.New("the id_token's nonce is not the sign-in's")
	}
	var claims struct {
		Email             string `json:"email"`
		PreferredUsername string `json:"preferred_username"`
		Name              string `json:"name"`
	}
	if err := idt.Claims(&claims); err != nil {
		return nil, fmt.Errorf("read the id_token's claims: %w", err)
	}
	subject := idt.Subject
	if c := si.login.SubjectClaim; c != "" && c != "sub" {
		var all map[string]any
		if err := idt.Claims(&all); err != nil {
			return nil, fmt.Errorf("read the id_token's claims: %w", err)
		}
		if subject = auth.ClaimString(all, c); subject == "" {
			return nil, fmt.Errorf("the id_token of %s has no string claim %q, which names users at the gateway (auth.oidc claims.subject)", si.login.Issuer, c)
		}
	}
	name := cmp.Or(claims.Email, claims.PreferredUsername, claims.Name, subject)
	return &user{Issuer: idt.Issuer, Subject: subject, Name: name, SID: randomString(), Expires: si.now().Add(loginLife)}, nil
}

// serveLogout signs the browser out and starts a sign-in again, with prompt=login so that the
// issuer asks who is there, returning to the form's next. A signed-in user's form must carry
// its CSRF token.
func (si *signIn) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !si.pages.parseForm(w, r) {
		return
	}
	if u, ok := si.currentUser(r); ok && !si.checkCSRF(u, "logout", r.PostForm.Get("csrf")) {
		si.pages.forbidden(w)
		return
	}
	si.setCookie(w, loginCookieName, "", -1)
	si.start(w, r, r.PostForm.Get("next"), "login")
}

// oauthCode returns code if it is an OAuth error code (RFC 6749 §4.1.2.1: printable ASCII
// without quote or backslash, kept short), else "error": a page shows it, nothing more.
func oauthCode(code string) string {
	if len(code) > 64 {
		return "error"
	}
	for _, c := range code {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return "error"
		}
	}
	return code
}

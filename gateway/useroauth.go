package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth/credential"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/connect"
	"github.com/manifold-mcp/manifold/internal/grants"
	"github.com/manifold-mcp/manifold/internal/oauthclient"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

// Per-user upstream authorization (config credentials.user_oauth). An upstream that trusts
// only its own authorization server is called, on each user's own connection (isolation:
// principal), with the token that user granted the gateway there. The grant is obtained
// through the client: a call without one is answered with the gateway's connect URL, as a
// URL-mode elicitation (-32042 to a 2025-11-25 session that declared URL elicitation, an
// input_required result to a 2026-07-28 client that did), or, to a client that cannot be
// asked, as a refusal whose message carries the URL. The connect page (internal/connect)
// signs the browser's user in through the gateway's own issuer, runs the authorization at
// the upstream's server, and stores the grant in the vault every replica reads. Then the
// session is told (notifications/elicitation/complete) and its retry runs with the token;
// a 2026-07-28 client's retry waits for the grant, up to connect_wait.
//
// No token travels anywhere but to its upstream on its user's connection: not to the
// catalog connection, not to another user's, not into logs or the audit trail.

// userAuth is the gateway's part in per-user upstream authorization: the connect service,
// and the retries waiting here for a grant to land.
type userAuth struct {
	svc    *connect.Service
	vault  *grants.Vault
	router *messageRouter
	// states seal the requestState of a connect asked of a 2026-07-28 client.
	states *requestStates
	// loginIssuer is the issuer users sign in at to connect (auth.login): only its users
	// can connect accounts.
	loginIssuer string
	// lend is told of each grant that lands here: an upstream whose catalog waits for a
	// user's listing borrows it from that user's connection.
	lend func(upstream string, who session.Principal)
	// unlend is told of each grant revoked here: a listing borrowed from that user's
	// connection is lent by the next user's.
	unlend func(upstream string, who session.Principal)
	// closers release what the gateway opened for it (a file vault, the service).
	closers []func() error

	mu sync.Mutex
	// settings are the user_oauth settings by upstream name. Guarded by mu.
	settings map[string]*config.UserOAuth
	// landed wakes, by grantKey, the retries waiting here for that grant; an entry goes with
	// its last waiter, or when the grant lands. Guarded by mu.
	landed map[string]*grantWaiters
	// verdicts hold, by grantKey, why the last request of a user's connection was not
	// sent with a token (the user must connect, or grant a wider scope), for the call that
	// failed by it. Guarded by mu.
	verdicts map[string]tokenVerdict
}

// grantWaiters are the retries waiting here for one grant: ch closes when it lands.
type grantWaiters struct {
	ch chan struct{}
	n  int
}

// verdictLifetime is how long a verdict is kept for the call it failed: the call reads it as
// soon as its request returns. Older ones are dropped once maxVerdicts are held.
const (
	verdictLifetime = time.Minute
	maxVerdicts     = 1024
)

// tokenVerdict is why a user's token did not go with a request to its upstream.
type tokenVerdict struct {
	at time.Time
	// scopes are the scopes the upstream asked for (insufficient_scope); nil when the user
	// has no usable grant at all.
	scopes []string
}

// grantKey names a principal's grant at an upstream, for the maps of userAuth.
func grantKey(p grants.Principal, upstream string) string {
	return p.Issuer + "\x00" + p.Subject + "\x00" + upstream
}

// grantPrincipal is who a grant belongs to, as the vault names it.
func grantPrincipal(p session.Principal) grants.Principal {
	return grants.Principal{Issuer: p.Issuer, Subject: p.Subject}
}

// usesUserOAuth reports whether any upstream of cfg is called with its users' own grants.
func usesUserOAuth(cfg *config.Config) bool {
	for i := range cfg.Upstreams {
		if cfg.Upstreams[i].Credentials.UserOAuth != nil {
			return true
		}
	}
	return false
}

// connectUpstreams is what the connect service is told of the upstreams of cfg.
func connectUpstreams(cfg *config.Config) []connect.Upstream {
	var out []connect.Upstream
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		uo := u.Credentials.UserOAuth
		if uo == nil {
			continue
		}
		out = append(out, connect.Upstream{
			Name: u.Name, URL: u.URL,
			ClientID: uo.ClientID, ClientSecret: uo.ClientSecret,
			// The metadata document's URL is the client id, which must be https.
			ClientMetadataDocument: uo.ClientMetadataDocument && strings.HasPrefix(cfg.BaseURL(), "https://"),
			DynamicRegistration:    uo.DynamicRegistration,
			Scopes:                 uo.Scopes, AllowPrivateNetwork: uo.AllowPrivateNetwork,
		})
	}
	return out
}

// userOAuthSettings are the user_oauth settings of cfg's upstreams, by name.
func userOAuthSettings(cfg *config.Config) map[string]*config.UserOAuth {
	out := map[string]*config.UserOAuth{}
	for i := range cfg.Upstreams {
		if uo := cfg.Upstreams[i].Credentials.UserOAuth; uo != nil {
			out[cfg.Upstreams[i].Name] = uo
		}
	}
	return out
}

// newUserAuth builds the gateway's part in per-user authorization; nil when no upstream of
// cfg uses it. The vault and the store of pending links come from the backends (Redis, for
// every replica); without them, the vault is a file in state_dir and the links stay in this
// process.
func newUserAuth(g *Gateway) (*userAuth, error) {
	cfg := g.cfg
	if !usesUserOAuth(cfg) {
		return nil, nil
	}
	if g.backends.Keys == nil {
		return nil, errors.New("credentials.user_oauth needs the gateway's keys (config keys), which seal the users' grants: add keys")
	}
	ua := &userAuth{router: g.router, states: g.states, settings: userOAuthSettings(cfg), landed: map[string]*grantWaiters{}, verdicts: map[string]tokenVerdict{}}
	ua.vault = g.backends.Grants
	if ua.vault == nil {
		if cfg.StateDir == "" {
			return nil, errors.New("credentials.user_oauth needs a place for the users' grants that outlives a restart: set state_dir, or use a Redis session store")
		}
		v, err := grants.NewFileVault(cfg.StateDir, g.backends.Keys, &grants.Options{Now: g.opts.Now})
		if err != nil {
			return nil, fmt.Errorf("open the grant vault in state_dir: %w", err)
		}
		ua.vault = v
		ua.closers = append(ua.closers, v.Close)
	}
	store := g.backends.Connects
	if store == nil {
		store = connect.NewMemoryStore(maxPendingConnects, g.opts.Now)
	}
	login := connect.Login{}
	if l := cfg.Auth.Login; l != nil {
		ua.loginIssuer = l.Issuer
		login = connect.Login{Issuer: l.Issuer, ClientID: l.ClientID, ClientSecret: l.ClientSecret, Scopes: l.Scopes}
		for _, is := range cfg.Auth.OIDC {
			if is.URL == l.Issuer {
				// The user signed in is the principal whose subject this claim names.
				login.SubjectClaim = is.SubjectClaim
			}
		}
	}
	svc, err := connect.New(connect.Options{
		PublicURL:   strings.TrimRight(cfg.BaseURL(), "/"),
		ClientName:  "Manifold",
		Login:       login,
		Keys:        g.backends.Keys,
		Store:       store,
		Vault:       ua.vault,
		Upstreams:   connectUpstreams(cfg),
		OnConnected: ua.connected,
		OnRevoked:   ua.revoked,
		Now:         g.opts.Now,
		Logger:      g.logger,
		HTTPClient:  g.opts.AuthHTTPClient,
	})
	if err != nil {
		ua.close()
		return nil, fmt.Errorf("per-user upstream authorization: %w", err)
	}
	ua.svc = svc
	ua.closers = append(ua.closers, svc.Close)
	ua.lend = func(name string, who session.Principal) {
		u := g.upstreamNamed(name)
		if u == nil || u.pool == nil || u.pool.borrowed == nil || !u.pool.borrowed.wantsLender() {
			return
		}
		g.goWorker(func() {
			ctx, cancel := context.WithTimeout(g.ctx, u.pool.spec.InitializeTimeout)
			defer cancel()
			if err := u.pool.openToList(ctx, who); err != nil {
				g.logger.Warn("a user who connected a user_oauth upstream could not list it", "upstream", name, "error", err.Error())
			}
		})
	}
	ua.unlend = func(name string, who session.Principal) {
		if u := g.upstreamNamed(name); u != nil && u.pool != nil && u.pool.borrowed != nil {
			u.pool.borrowed.release(who)
			u.pool.relend(who)
		}
	}
	return ua, nil
}

// maxPendingConnects bounds the connect links and authorizations a gateway without Redis
// keeps at once.
const maxPendingConnects = 10000

// close releases what newUserAuth opened, last first.
func (ua *userAuth) close() {
	if ua == nil {
		return
	}
	for i := len(ua.closers) - 1; i >= 0; i-- {
		_ = ua.closers[i]()
	}
	ua.closers = nil
}

// mount serves the connect pages, the callbacks, the client metadata document and the
// users' grants page on mux. They are browser pages: a signed cookie of the gateway's own
// sign-in authenticates them, never a bearer token.
func (ua *userAuth) mount(mux *http.ServeMux) {
	h := ua.svc.Handler()
	for _, path := range []string{connect.PathConnect, connect.PathCallback, connect.PathLoginCallback,
		connect.PathLogout, connect.PathClientMetadata, connect.PathGrants, connect.PathGrants + "/"} {
		mux.Handle(path, h)
	}
}

// reconfigure follows a reload: the upstreams that use grants, and their settings.
func (ua *userAuth) reconfigure(cfg *config.Config) {
	if ua == nil {
		return
	}
	ua.mu.Lock()
	ua.settings = userOAuthSettings(cfg)
	ua.mu.Unlock()
	ua.svc.SetUpstreams(connectUpstreams(cfg))
}

// setting returns the user_oauth settings of upstream name; nil when it has none.
func (ua *userAuth) setting(name string) *config.UserOAuth {
	ua.mu.Lock()
	defer ua.mu.Unlock()
	return ua.settings[name]
}

// connected is told by the connect service that a grant landed: the session that was asked
// (on whichever replica serves its stream) learns that its URL elicitation completed, and
// the retries waiting here for the grant go on.
func (ua *userAuth) connected(ctx context.Context, r connect.Request) {
	if r.SessionID != "" && r.ElicitationID != "" {
		params, _ := json.Marshal(map[string]string{"elicitationId": r.ElicitationID})
		if data, err := protocol.Encode(&protocol.Notification{Method: protocol.NotificationElicitationComplete, Params: params}); err == nil {
			_ = ua.router.deliver(r.SessionID, "", data)
		}
	}
	ua.wake(grantKey(r.Principal, r.Upstream))
	if ua.lend != nil {
		ua.lend(r.Upstream, session.Principal{Issuer: r.Principal.Issuer, Subject: r.Principal.Subject})
	}
}

// ListGrants lists the grants of every user, for the admin API: never a token.
func (ua *userAuth) ListGrants(ctx context.Context, cursor string, limit int) ([]grants.GrantInfo, string, error) {
	return ua.vault.ListAll(ctx, cursor, limit)
}

// Revoke revokes a user's grant at an upstream, for the admin API: at the authorization
// server where it supports revocation, then in the vault.
func (ua *userAuth) Revoke(ctx context.Context, p grants.Principal, upstream string) error {
	return ua.svc.Revoke(ctx, p, upstream)
}

// revoked is told by the connect service that a user's grant was revoked (on the grants
// page, or through the admin API).
func (ua *userAuth) revoked(_ context.Context, p grants.Principal, upstream string) {
	if ua.unlend != nil {
		ua.unlend(upstream, session.Principal{Issuer: p.Issuer, Subject: p.Subject})
	}
}

// anyGrantee returns a principal with a readable grant at upstream name, if any.
func (ua *userAuth) anyGrantee(ctx context.Context, name string) (session.Principal, bool, error) {
	const page = 100
	cursor := ""
	for {
		infos, next, err := ua.vault.ListAll(ctx, cursor, page)
		if err != nil {
			return session.Principal{}, false, fmt.Errorf("list the grants: %w", err)
		}
		for _, gi := range infos {
			if gi.Upstream == name && !gi.Unreadable && gi.Principal.Subject != "" {
				return session.Principal{Issuer: gi.Principal.Issuer, Subject: gi.Principal.Subject}, true, nil
			}
		}
		if next == "" {
			return session.Principal{}, false, nil
		}
		cursor = next
	}
}

// wake lets the retries waiting here for grant key go on.
func (ua *userAuth) wake(key string) {
	ua.mu.Lock()
	defer ua.mu.Unlock()
	delete(ua.verdicts, key)
	if w, ok := ua.landed[key]; ok {
		close(w.ch)
		delete(ua.landed, key)
	}
}

// waitFor registers a retry waiting for grant key: the channel closes when it lands here;
// done must be called when the retry stops waiting.
func (ua *userAuth) waitFor(key string) (landed <-chan struct{}, done func()) {
	ua.mu.Lock()
	defer ua.mu.Unlock()
	w, ok := ua.landed[key]
	if !ok {
		w = &grantWaiters{ch: make(chan struct{})}
		ua.landed[key] = w
	}
	w.n++
	return w.ch, func() {
		ua.mu.Lock()
		defer ua.mu.Unlock()
		if w.n--; w.n == 0 && ua.landed[key] == w {
			delete(ua.landed, key)
		}
	}
}

// grantPollInterval is how often a retry waiting for a grant looks in the vault: the grant
// may land on another replica, which wakes only its own waiters.
const grantPollInterval = time.Second

// errNoBrowserIdentity refuses a user_oauth upstream's call by a caller that cannot connect
// an account: an API key or an anonymous client.
func errNoBrowserIdentity(upstreamName string, who session.Principal) error {
	what := "an anonymous client"
	if who.Issuer == session.APIKeyIssuer {
		what = "an API key"
	}
	return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: upstreamName,
		Message: fmt.Sprintf("upstream %s is called with each user's own account there, which the user connects in a browser signed in at the gateway's identity provider; %s has no such identity: call it as a user signed in with the identity provider", upstreamName, what)}
}

// ready lets a call to a user_oauth upstream go on once its caller has a usable grant there.
// Otherwise the caller is asked to connect (ask), or, when its request is the retry of a
// 2026-07-28 client that was asked, waits for the grant up to connect_wait first.
func (ua *userAuth) ready(ctx context.Context, rq *request, res *resolved) error {
	name := res.upstream.ns.Name
	who := rq.Client.Principal
	if who.Anonymous() || who.Issuer == session.APIKeyIssuer {
		return errNoBrowserIdentity(name, who)
	}
	if who.Issuer != ua.loginIssuer {
		// The connect page signs users in at one issuer, and goes on only for the principal
		// that asked: a user of another could never complete it.
		return &pipeline.Refusal{Reason: pipeline.ReasonDenied, Upstream: name,
			Message: fmt.Sprintf("upstream %s is called with each user's own account there, which users connect after signing in at %s (auth.login); you are signed in at %s: call it as a user of %s", name, ua.loginIssuer, who.Issuer, ua.loginIssuer)}
	}
	p := grantPrincipal(who)
	_, err := ua.svc.Token(ctx, p, name)
	if err == nil {
		return nil
	}
	if !connect.NeedsConnect(err) {
		return ua.unreadable(name, err)
	}
	if rq.connecting {
		err := ua.await(ctx, p, name)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return err
		case !errors.Is(err, context.DeadlineExceeded):
			return ua.unreadable(name, err)
		}
		// connect_wait is over, the user has not connected: asked again.
	}
	return ua.ask(ctx, rq, res, nil)
}

// unreadable is the refusal of a call whose user's grant could not be read or renewed.
func (ua *userAuth) unreadable(name string, err error) error {
	return &pipeline.Refusal{Reason: pipeline.ReasonUpstreamUnavailable, Upstream: name, Cause: err,
		Message: fmt.Sprintf("upstream %s: your grant there could not be read or renewed just now: try again shortly", name)}
}

// await waits for p's grant at upstream name to land, up to the upstream's connect_wait.
func (ua *userAuth) await(ctx context.Context, p grants.Principal, name string) error {
	wait := time.Minute
	if s := ua.setting(name); s != nil && s.ConnectWait > 0 {
		wait = s.ConnectWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(grantPollInterval)
	defer tick.Stop()
	key := grantKey(p, name)
	for {
		landed, done := ua.waitFor(key)
		select {
		case <-ctx.Done():
			done()
			return ctx.Err()
		case <-landed:
		case <-tick.C:
		}
		done()
		if _, err := ua.svc.Token(ctx, p, name); err == nil {
			return nil
		} else if !connect.NeedsConnect(err) && ctx.Err() == nil {
			return err
		}
	}
}

// connectInputKey is the key of the one input request of a connect asked of a 2026-07-28
// client.
const connectInputKey = "connect"

// ask asks the caller of rq to connect its account at res's upstream (scopes: a wider set
// the upstream asked for; nil: the configured ones): the error, or the input_required answer
// (as *inputAsked), that its client gets.
func (ua *userAuth) ask(ctx context.Context, rq *request, res *resolved, scopes []string) error {
	name := res.upstream.ns.Name
	who := rq.Client.Principal
	if len(scopes) > 0 {
		// A wider scope is asked on top of what the user granted and what is configured:
		// the upstream's challenge may name only what is missing (RFC 6750 §3.1), and the
		// new grant replaces the old one.
		scopes = ua.widened(ctx, grantPrincipal(who), name, scopes)
	}
	r := connect.Request{Principal: grantPrincipal(who), Upstream: name, Scopes: scopes}
	message := fmt.Sprintf("Connect your account at %s to the gateway: open the link, sign in, and approve.", name)
	if len(scopes) > 0 {
		message = fmt.Sprintf("%s needs more access (%s): open the link, sign in, and approve.", name, strings.Join(scopes, " "))
	}
	modern := rq.declared != nil && rq.declared.ElicitationURL
	elicited := rq.declared == nil && rq.owner != nil && rq.owner.clientCaps().elicitURL
	if elicited {
		// A 2025-11-25 session learns, by this id, when the user has connected.
		r.SessionID, r.ElicitationID = rq.owner.sessionID, randomToken(16)
	}
	url, _, err := ua.svc.Ask(ctx, r)
	if err != nil {
		return &pipeline.Refusal{Reason: pipeline.ReasonUpstreamUnavailable, Upstream: name, Cause: err,
			Message: fmt.Sprintf("upstream %s needs you to connect your account, and the gateway could not make the link just now: try again shortly", name)}
	}
	switch {
	case modern:
		result, _ := json.Marshal(map[string]any{
			"resultType": protocol.ResultTypeInputRequired,
			"inputRequests": map[string]inputRequest{connectInputKey: {Method: protocol.MethodElicit,
				Params: urlElicitation(message, url, "")}},
			"requestState": ua.states.sealConnect(rq.Request, &res.target),
		})
		return &inputAsked{result: result}
	case elicited:
		data, _ := json.Marshal(map[string]any{"elicitations": []json.RawMessage{urlElicitation(message, url, r.ElicitationID)}})
		return &protocol.Error{Code: protocol.CodeURLElicitationRequired, Data: data,
			Message: fmt.Sprintf("URL elicitation required: connect your account at %s (open %s), then call again", name, url)}
	}
	return &pipeline.Refusal{Reason: pipeline.ReasonConnectRequired, Upstream: name,
		Message: fmt.Sprintf("upstream %s is called with your own account there, which you have not connected yet (or it needs more access). Open %s in a browser, sign in, approve, then call again.", name, url)}
}

// widened returns the scopes to ask for when upstream name asked p for more: those p
// granted, those configured, and those asked, each once.
func (ua *userAuth) widened(ctx context.Context, p grants.Principal, name string, asked []string) []string {
	var out []string
	if g, err := ua.vault.Get(ctx, p, name); err == nil {
		out = append(out, g.Token.Scopes...)
	}
	if s := ua.setting(name); s != nil {
		out = append(out, s.Scopes...)
	}
	out = append(out, asked...)
	slices.Sort(out)
	return slices.Compact(out)
}

// urlElicitation is the params of a URL-mode elicitation/create: with its elicitationId for
// a 2025-11-25 client, without one for a 2026-07-28 client (id "").
func urlElicitation(message, url, id string) json.RawMessage {
	m := map[string]string{"mode": "url", "message": message, "url": url}
	if id != "" {
		m["elicitationId"] = id
	}
	raw, _ := json.Marshal(m)
	return raw
}

// inputAsked is how the gateway answers a 2026-07-28 request with an input_required result
// of its own (a connect asked of the user): not an error, but the result its client gets
// instead of the call's (requestPipeline.serve).
type inputAsked struct{ result json.RawMessage }

func (*inputAsked) Error() string { return "the call waits for its client's input" }

// afterFailure turns a call that failed because its user's token did not go with it (no
// usable grant, or too narrow a one) into the ask to connect; other failures pass.
func (ua *userAuth) afterFailure(ctx context.Context, rq *request, res *resolved, began time.Time, err error) error {
	key := grantKey(grantPrincipal(rq.Client.Principal), res.upstream.ns.Name)
	ua.mu.Lock()
	v, ok := ua.verdicts[key]
	ua.mu.Unlock()
	if !ok || v.at.Before(began) {
		return err
	}
	return ua.ask(ctx, rq, res, v.scopes)
}

// judge notes why a user's request did not go with a token: for the call it fails.
func (ua *userAuth) judge(key string, scopes []string) {
	now := time.Now()
	ua.mu.Lock()
	defer ua.mu.Unlock()
	if len(ua.verdicts) >= maxVerdicts {
		for k, v := range ua.verdicts {
			if now.Sub(v.at) > verdictLifetime {
				delete(ua.verdicts, k)
			}
		}
		for k := range ua.verdicts {
			if len(ua.verdicts) < maxVerdicts {
				break
			}
			delete(ua.verdicts, k) // all recent: any may go, its call has read it or will ask anew
		}
	}
	ua.verdicts[key] = tokenVerdict{at: now, scopes: scopes}
}

// credentials are the credentials of user_oauth upstream name: each principal's
// connection carries the header files and its user's token; the shared (catalog) connection
// the header files and catalog_credentials, never a user's token.
// (clientCredentials makes the source of a client_credentials request).
func (ua *userAuth) credentials(name string, uo *config.UserOAuth, transport http.RoundTripper, files []credential.Source, clientCredentials func(*config.TokenRequest) credential.Source) upstreamAuth {
	out := upstreamAuth{userOAuth: true}
	var catalog []credential.Source
	if cc := uo.CatalogCredentials; cc != nil {
		// Without catalog_credentials the shared connection borrows a user's listing, and
		// the header files alone open nothing: they go with catalog_credentials only.
		catalog = files
		for _, h := range cc.HeaderFiles {
			catalog = append(catalog[:len(catalog):len(catalog)], credential.FileHeader(h.Name, h.Path, h.Prefix))
		}
		if t := cc.ClientCredentials; t != nil {
			catalog = append(catalog[:len(catalog):len(catalog)], clientCredentials(t))
		}
	}
	if len(catalog) > 0 {
		out.shared = credentialedClient(transport, catalog)
	}
	userBase := transport
	if len(files) > 0 {
		userBase = credential.Transport(transport, files...)
	}
	out.perPrincipal = func(p session.Principal) *http.Client {
		return &http.Client{
			Transport:     &userTokenTransport{base: userBase, ua: ua, principal: grantPrincipal(p), upstream: name},
			CheckRedirect: upstream.SameHostRedirects,
		}
	}
	return out
}

// userTokenTransport sends every request of one user's connection to a user_oauth upstream
// with that user's token, read from the vault (renewed there when due): so a grant revoked
// or replaced takes effect on the next request. An upstream that refuses the token (401) is
// asked once more with a renewed one; one that asks for a wider scope (403
// insufficient_scope), or a user with no usable grant, gets no request: the call fails with
// a 401 or 403 of the gateway's own making, and the user is asked to connect.
type userTokenTransport struct {
	base      http.RoundTripper
	ua        *userAuth
	principal grants.Principal
	upstream  string
}

func (t *userTokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key := grantKey(t.principal, t.upstream)
	tok, err := t.ua.svc.Token(ctx, t.principal, t.upstream)
	if err != nil {
		closeBody(req)
		if connect.NeedsConnect(err) {
			t.ua.judge(key, nil)
			return refusedHere(req, http.StatusUnauthorized, "the user has no usable grant at this upstream"), nil
		}
		return nil, fmt.Errorf("read the user's grant for upstream %s: %w", t.upstream, err)
	}
	resp, err := t.send(req, tok.AccessToken)
	if err != nil || resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	ch, _ := oauthclient.ParseChallenge(resp.Header)
	if resp.StatusCode == http.StatusForbidden {
		if ch.Error != "insufficient_scope" {
			return resp, nil
		}
		drain(resp)
		t.ua.judge(key, strings.Fields(ch.Scope))
		return refusedHere(req, http.StatusForbidden, "the upstream asked for a wider scope"), nil
	}
	// 401: the token was refused before its expiry (revoked, rotated elsewhere): renew it,
	// once for every request it failed, and try again once.
	if req.GetBody == nil && req.Body != nil && req.Body != http.NoBody {
		return resp, nil
	}
	drain(resp)
	tok, err = t.ua.svc.TokenRejected(ctx, t.principal, t.upstream, tok.AccessToken)
	if err != nil {
		if connect.NeedsConnect(err) {
			t.ua.judge(key, nil)
			return refusedHere(req, http.StatusUnauthorized, "the upstream refused the user's token, and it could not be renewed"), nil
		}
		return nil, fmt.Errorf("renew the user's token for upstream %s: %w", t.upstream, err)
	}
	again := req.Clone(ctx)
	if req.GetBody != nil {
		if again.Body, err = req.GetBody(); err != nil {
			return nil, fmt.Errorf("send the request to upstream %s again: %w", t.upstream, err)
		}
	}
	resp, err = t.send(again, tok.AccessToken)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		t.ua.judge(key, nil)
	}
	return resp, err
}

// send sends req with the token in its Authorization header, on a clone.
func (t *userTokenTransport) send(req *http.Request, token string) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.Header.Set("Authorization", "Bearer "+token)
	return t.base.RoundTrip(out)
}

// CloseIdleConnections closes base's idle connections, when it can.
func (t *userTokenTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// refusedHere is the response of a request the gateway did not send: a status of its own
// and a short text, which fail that request (and not the connection).
func refusedHere(req *http.Request, status int, why string) *http.Response {
	body := "manifold: " + why
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// closeBody closes a request's body, as a RoundTripper must even when it sends nothing.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// drain reads a little of a response's body and closes it, so its connection may be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// connectState marks the requestState of a connect asked of a 2026-07-28 client; the call's
// arguments and round are those of sealedState.
type connectState struct{}

// sealConnect returns the requestState of a connect asked of the client of req for a call to
// t: valid for requestStateTTL, for that call with the same arguments.
func (s *requestStates) sealConnect(req *pipeline.Request, t *pipeline.Target) string {
	return s.sealState(req, t.Exposed, sealedState{Upstream: t.Upstream, Connect: &connectState{},
		Round: randomToken(12), Arguments: argumentsDigest(req.Params)}, requestStateTTL)
}

// takeConnectAnswer reads the retry of a call whose client was asked to connect (st): the
// state and the answers are the gateway's, so the upstream gets neither, and the retry waits
// for the grant before it is asked again. A state sent with other arguments than those of
// the call it was asked for fails the retry with requestStateInvalid.
func (g *requestPipeline) takeConnectAnswer(ctx context.Context, rq *request, res *resolved, st *sealedState) error {
	if err := g.takeOwnRound(rq, res, st.Arguments); err != nil {
		return err
	}
	// The call's first round, which asked, was counted by the rate limits.
	rq.Continues = g.countedBefore(ctx, rq, st.Round, time.UnixMilli(st.Expires))
	// The user's answer to the URL elicitation: an accept says the user went to the link,
	// and the retry waits for the grant; a decline or cancel ends the call.
	responses, _, _ := protocol.Member(rq.Params, "inputResponses")
	answer, _, _ := protocol.Member(responses, connectInputKey)
	if action, _, _ := protocol.StringMember(answer, "action"); action == "decline" || action == "cancel" {
		return &pipeline.Refusal{Reason: pipeline.ReasonConnectRequired, Upstream: res.target.Upstream,
			Message: fmt.Sprintf("you did not connect your account at %s (%s), which its tools need: call again to be asked again", res.target.Upstream, action)}
	}
	rq.connecting = true
	return nil
}

// userAuthOf returns the per-user authorization that calls to u need; nil when u is not
// called with its users' grants.
func (g *requestPipeline) userAuthOf(u *upstreamEntry) *userAuth {
	if g.userAuth == nil || u.pool == nil || !u.pool.credentials.userOAuth {
		return nil
	}
	return g.userAuth
}

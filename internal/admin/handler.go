package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/manifold-mcp/manifold/internal/grants"

	"github.com/manifold-mcp/manifold/internal/loopback"
)

// Options are the admin handler's settings.
type Options struct {
	// OriginAllowed reports whether a browser origin other than the page's own may call the
	// API; nil admits the page's own only.
	OriginAllowed func(origin string) bool
	// LoopbackOnly refuses a Host header that does not name this machine's loopback
	// interface: the defence against DNS rebinding when the admin listener binds loopback.
	LoopbackOnly bool
	// Logger receives the handler's warnings. If nil, they are discarded.
	Logger *slog.Logger
	// Metrics, if not nil, is served at GET /metrics to an admin, as the API is: a
	// Prometheus scraper sends an admin API key as its bearer token. Nil: no /metrics.
	Metrics http.Handler
}

// maxBody bounds a request body: decisions are a few dozen bytes.
const maxBody = 4 << 10

// NewHandler returns the admin API (under /api/) and page (at /) over b, with every API
// request authorized by a.
func NewHandler(b Backend, a Authorizer, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{b: b, a: a, opts: opts}
	mux := http.NewServeMux()
	servePage(mux)
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, status := h.authorize(w, r); status == http.StatusOK {
				opts.Metrics.ServeHTTP(w, r)
			}
		}))
	}
	mux.Handle("GET /api/whoami", h.api(func(_ *http.Request, admin string) (any, error) {
		return map[string]string{"admin": admin}, nil
	}))
	mux.Handle("GET /api/upstreams", h.api(func(r *http.Request, _ string) (any, error) {
		return map[string]any{"upstreams": nonNil(b.Upstreams(r.Context()))}, nil
	}))
	mux.Handle("GET /api/catalog", h.api(func(r *http.Request, _ string) (any, error) {
		return map[string]any{"tools": nonNil(b.Catalog(r.Context()))}, nil
	}))
	mux.Handle("GET /api/sessions", h.api(func(r *http.Request, _ string) (any, error) {
		s, err := b.Sessions(r.Context())
		return map[string]any{"sessions": nonNil(s)}, err
	}))
	mux.Handle("GET /api/approvals", h.api(func(r *http.Request, _ string) (any, error) {
		s, err := b.Approvals(r.Context())
		return map[string]any{"approvals": nonNil(s)}, err
	}))
	mux.Handle("GET /api/pins", h.api(func(r *http.Request, _ string) (any, error) {
		s, err := b.Pins(r.Context())
		return map[string]any{"pins": nonNil(s)}, err
	}))
	mux.Handle("POST /api/approvals/{id}", action(h, "approval", `{"decision": "approve"}`, decided, func(r *http.Request, admin Operator, body decision) (string, any, error) {
		id := r.PathValue("id")
		if body.Decision != Approve && body.Decision != Deny {
			return id, nil, fmt.Errorf("%w: decision must be %q or %q", errBadRequest, Approve, Deny)
		}
		a, err := b.Decide(r.Context(), id, body.Decision, admin)
		return id, map[string]any{"approval": a}, err
	}))
	mux.Handle("POST /api/pins/{upstream}/{tool}", action(h, "pin", `{"decision": "accept", "hash": "..."}`, decided, func(r *http.Request, admin Operator, body decision) (string, any, error) {
		up, tool := r.PathValue("upstream"), r.PathValue("tool")
		target := up + "/" + tool
		if body.Decision != Accept && body.Decision != Reject {
			return target, nil, fmt.Errorf("%w: decision must be %q or %q", errBadRequest, Accept, Reject)
		}
		if body.Hash == "" {
			return target, nil, fmt.Errorf("%w: hash must name the change decided on (the change's hash in GET /api/pins)", errBadRequest)
		}
		p, err := b.Resolve(r.Context(), up, tool, body.Hash, body.Decision, admin.Name)
		return target, map[string]any{"pin": p}, err
	}))
	mux.Handle("GET /api/config", h.api(func(r *http.Request, _ string) (any, error) {
		return b.Config(r.Context())
	}))
	mux.Handle("POST /api/reload", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admin, status := h.authorize(w, r)
		if status != http.StatusOK {
			h.b.Audit(admin.Name, "reload", r.URL.Path, "refused", status)
			return
		}
		st, err := b.Reload(r.Context())
		if err != nil {
			// A refused configuration is the operator's to fix: the reasons, and the old
			// configuration still running.
			h.b.Audit(admin.Name, "reload", r.URL.Path, "refused", http.StatusConflict)
			writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "config": st})
			return
		}
		h.b.Audit(admin.Name, "reload", r.URL.Path, "ok", http.StatusOK)
		writeJSON(w, http.StatusOK, st)
	}))
	h.serveGrants(mux)
	mux.Handle("/api/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, `no such admin API endpoint: see "The admin API and page" in docs/policy.md`)
	}))
	return h.guard(mux)
}

type handler struct {
	b    Backend
	a    Authorizer
	opts Options
}

// decision is the body of a POST.
type decision struct {
	Decision string `json:"decision"`
	Hash     string `json:"hash,omitempty"`
}

var errBadRequest = errors.New("bad request")

// guard refuses what a browser on another origin, or a rebound host name, sends: the same
// checks as the MCP endpoint's.
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.opts.LoopbackOnly && !loopback.Host(r.Host) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: the admin listener binds loopback and answers only localhost names", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(r, origin) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("origin %q is not allowed: open the admin page from the admin listener itself, or add the origin to admin.allowed_origins", origin))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed admits the page's own origin (the request's host, over the scheme it came
// on) and the configured ones.
func (h *handler) originAllowed(r *http.Request, origin string) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if strings.EqualFold(origin, scheme+"://"+r.Host) {
		return true
	}
	return h.opts.OriginAllowed != nil && h.opts.OriginAllowed(origin)
}

// authorize answers a request without an admin credential, and returns the admin, or who
// was refused and the status they were answered with (403 for a valid credential without an
// admin role, 401 else).
func (h *handler) authorize(w http.ResponseWriter, r *http.Request) (Operator, int) {
	admin, err := h.a.Admin(r)
	switch {
	case err == nil:
		return admin, http.StatusOK
	case errors.Is(err, ErrForbidden):
		writeError(w, http.StatusForbidden, err.Error())
		return admin, http.StatusForbidden
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="manifold-admin"`)
		writeError(w, http.StatusUnauthorized, err.Error())
		return Operator{}, http.StatusUnauthorized
	}
}

// api serves a read.
func (h *handler) api(read func(r *http.Request, admin string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admin, status := h.authorize(w, r)
		if status != http.StatusOK {
			return
		}
		v, err := read(r, admin.Name)
		if err != nil {
			status := statusOf(err)
			h.opts.Logger.Warn("an admin API read failed", "path", r.URL.Path, "error", err.Error())
			writeError(w, status, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// action serves an admin action whose body is a T, JSON like example: authorized, decided by
// act, and audited as kind/verb(body) whichever way it ends.
func action[T any](h *handler, kind, example string, verb func(T) string, act func(r *http.Request, admin Operator, body T) (target string, v any, err error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admin, status := h.authorize(w, r)
		switch status {
		case http.StatusOK:
		case http.StatusForbidden:
			h.b.Audit(admin.Name, kind, r.URL.Path, "forbidden", status)
			return
		default:
			h.b.Audit("", kind, r.URL.Path, "unauthorized", status)
			return
		}
		var body T
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err == nil {
			err = json.Unmarshal(data, &body)
		}
		var target string
		var v any
		if err != nil {
			err = fmt.Errorf("%w: the body must be JSON like %s: %v", errBadRequest, example, err)
		} else {
			target, v, err = act(r, admin, body)
		}
		name := kind + "/" + verb(body)
		if err != nil {
			status := statusOf(err)
			h.b.Audit(admin.Name, name, target, "refused", status)
			writeError(w, status, err.Error())
			return
		}
		h.b.Audit(admin.Name, name, target, "ok", http.StatusOK)
		writeJSON(w, http.StatusOK, v)
	})
}

// decided is the verb of a decision's audit record: the decision.
func decided(d decision) string { return d.Decision }

// serveGrants serves the users' grants at upstreams: their list, and their revocation.
func (h *handler) serveGrants(mux *http.ServeMux) {
	mux.Handle("GET /api/grants", h.api(func(r *http.Request, _ string) (any, error) {
		g, next, err := h.b.Grants(r.Context(), r.URL.Query().Get("cursor"))
		return map[string]any{"grants": nonNil(g), "next": next}, err
	}))
	mux.Handle("POST /api/grants/revoke", action(h, "grant", `{"principal": {"iss": "https://login.example.com", "sub": "alice"}, "upstream": "github"}`,
		func(grantRevocation) string { return "revoke" }, h.revokeGrant))
}

// grantRevocation is the body of POST /api/grants/revoke: whose grant, at which upstream,
// as GET /api/grants lists them.
type grantRevocation struct {
	Principal grants.Principal `json:"principal"`
	Upstream  string           `json:"upstream"`
}

// revokeGrant revokes the grant the body names, as an audited admin action.
func (h *handler) revokeGrant(r *http.Request, _ Operator, body grantRevocation) (string, any, error) {
	target := body.Upstream + "/" + body.Principal.Subject
	if body.Principal.Issuer == "" || body.Principal.Subject == "" || body.Upstream == "" {
		return target, nil, fmt.Errorf("%w: principal.iss, principal.sub and upstream are all required (as GET /api/grants lists them)", errBadRequest)
	}
	if err := h.b.RevokeGrant(r.Context(), body.Principal, body.Upstream); err != nil {
		return target, nil, err
	}
	return target, map[string]any{"revoked": body}, nil
}

// statusOf maps a Backend's error to its HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

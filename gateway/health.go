package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/manifold-mcp/manifold/upstream"
)

// serveHealthz answers liveness probes: the process is up and serving HTTP.
func (g *streamableServer) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readiness is the body of /readyz.
type readiness struct {
	Status string `json:"status"`
	// SessionStore is reported for a store shared by replicas (Redis): without it the gateway
	// cannot serve a session, so an unreachable one makes the gateway unready.
	SessionStore *storeHealth              `json:"session_store,omitempty"`
	Upstreams    map[string]upstreamHealth `json:"upstreams"`
}

// storeHealth is what a probe learns of a shared session store: its kind and whether it
// answers. The error stays in the log: it may name internal addresses.
type storeHealth struct {
	Type  string `json:"type"`
	State string `json:"state"` // "ok" or "unreachable"
}

// storeReadyTimeout bounds the readiness probe's check of the session store.
const storeReadyTimeout = 2 * time.Second

// upstreamHealth is what a probe learns of one upstream: its state, since when, a short class
// of why it is down, and the exit status of a process that exited. The error itself, which may name internal addresses and paths,
// stays in the log and in `gateway catalog`.
type upstreamHealth struct {
	State    upstream.State `json:"state"`
	Since    time.Time      `json:"since"`
	Reason   string         `json:"reason,omitempty"`
	ExitCode *int           `json:"exit_code,omitempty"`
}

// serveReadyz answers readiness probes: the config is loaded and the listener is up, so the
// gateway serves. Each upstream's state is reported, but one that is down does not make the
// gateway unready — its other upstreams still serve. A draining gateway is unready, and so is
// one whose shared session store (Redis) does not answer.
func (g *streamableServer) serveReadyz(w http.ResponseWriter, r *http.Request) {
	body := readiness{Status: "ready", Upstreams: map[string]upstreamHealth{}}
	for name, st := range g.UpstreamStatuses() {
		body.Upstreams[name] = upstreamHealth{State: st.State, Since: st.Since, Reason: st.Reason, ExitCode: st.ExitCode}
	}
	status := http.StatusOK
	if ping := g.backends.Ping; ping != nil {
		body.SessionStore = &storeHealth{Type: g.cfg.SessionStore.Type, State: "ok"}
		ctx, cancel := context.WithTimeout(r.Context(), storeReadyTimeout)
		err := ping(ctx)
		cancel()
		if err == nil {
			g.storeHealth.answered(r.Context())
		} else {
			g.storeHealth.warned(r.Context(), "readiness: the session store does not answer", "store", g.cfg.SessionStore.Type, "error", err.Error())
			body.SessionStore.State = "unreachable"
			body.Status, status = "session_store_unreachable", http.StatusServiceUnavailable
		}
	}
	select {
	case <-g.draining:
		body.Status, status = "draining", http.StatusServiceUnavailable
	default:
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

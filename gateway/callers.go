package gateway

import (
	"net/http"
	"sync"

	"github.com/manifold-mcp/manifold/internal/session"
)

// callersInFlight counts the 2026-07-28 requests each caller has in flight on this replica:
// such requests have no session, so this stands in for a session's own count and the
// per-principal session cap (max_calls_per_principal). A caller is a principal's key, or an
// anonymous client's address. A second one counts each caller's open subscriptions/listen
// streams (max_listens_per_principal, listen.go). Safe for concurrent use.
type callersInFlight struct {
	limit int

	mu       sync.Mutex
	inFlight map[string]int // caller → requests in flight; no entry when none. Guarded by mu.
}

// callerOf is who makes r, for the caps on what one caller holds: its principal, or its
// client address when it is anonymous.
func callerOf(r *http.Request, who session.Principal) string {
	if who.Anonymous() {
		return "address\x00" + clientAddr(r)
	}
	return "principal\x00" + who.Key()
}

func newCallersInFlight(limit int) *callersInFlight {
	return &callersInFlight{limit: limit, inFlight: make(map[string]int)}
}

// admit counts a request of caller in, unless the caller has its limit in flight already;
// a request admitted must be released once.
func (c *callersInFlight) admit(caller string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight[caller] >= c.limit {
		return false
	}
	c.inFlight[caller]++
	return true
}

// release counts a request of caller out.
func (c *callersInFlight) release(caller string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inFlight[caller] <= 1 {
		delete(c.inFlight, caller)
		return
	}
	c.inFlight[caller]--
}

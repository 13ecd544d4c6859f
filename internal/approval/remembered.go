package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/internal/pipeline"
)

// Remembered holds the calls a person approved, for approval.remember: each bound to the
// principal, the upstream, the tool and the exact arguments (Key). In this process's memory,
// or, with Shared set, for every replica. It is safe for concurrent use; set its fields before
// the first use.
type Remembered struct {
	// TTL is how long an approval holds; zero or less: approvals are not remembered.
	TTL time.Duration
	// AnyArguments lets an approval hold for any arguments of the tool (configured
	// explicitly).
	AnyArguments bool
	// Now returns the current time. If nil, time.Now.
	Now func() time.Time
	// Shared, when set, keeps the approvals for every replica (RedisApprovals) instead of
	// this process's memory.
	Shared SharedApprovals
	// Logger receives the failures of Shared, which ask the person again. If nil, discarded.
	Logger *slog.Logger

	mu      sync.Mutex
	granted map[string]time.Time // Key → until. Guarded by mu.

	// retuned, once Retune ran, replaces TTL and AnyArguments.
	retuned atomic.Pointer[rememberSettings]
}

// rememberSettings are what Retune sets.
type rememberSettings struct {
	ttl          time.Duration
	anyArguments bool
}

// Retune replaces TTL and AnyArguments while the Remembered is in use (a configuration
// reload): calls from then on are remembered, and looked up, by the new settings. Approvals
// remembered before hold until their own end; under other AnyArguments their keys differ,
// and the person is asked again.
func (a *Remembered) Retune(ttl time.Duration, anyArguments bool) {
	a.retuned.Store(&rememberSettings{ttl: ttl, anyArguments: anyArguments})
}

// settings returns the settings in force.
func (a *Remembered) settings() rememberSettings {
	if r := a.retuned.Load(); r != nil {
		return *r
	}
	return rememberSettings{ttl: a.TTL, anyArguments: a.AnyArguments}
}

// SharedApprovals remembers approvals for all replicas (RedisApprovals).
type SharedApprovals interface {
	Grant(ctx context.Context, key string, ttl time.Duration) error
	Granted(ctx context.Context, key string) (bool, error)
}

var _ SharedApprovals = (*RedisApprovals)(nil)

// sharedTimeout bounds a look-up or a write of a shared approval; one that fails asks the
// person again (or forgets the approval), never lets a call through.
const sharedTimeout = 2 * time.Second

// Key binds an approval to who asked for what, with which arguments (hashed), or with any
// when so configured. Who is the caller's principal; an anonymous caller (auth off) is no one
// in particular, so its approval is bound to its session instead: one anonymous client's
// approval never lets another's call through. An anonymous caller without a session has no
// key (""): its approvals are not remembered.
func (a *Remembered) Key(who pipeline.ClientContext, t *pipeline.Target) string {
	caller := "principal\x00" + who.Principal.Key()
	if who.Principal.Anonymous() {
		if who.SessionID == "" {
			return ""
		}
		caller = "session\x00" + who.SessionID
	}
	h := sha256.New()
	for _, s := range []string{caller, t.Upstream, t.Original} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if !a.settings().anyArguments {
		h.Write(CanonicalJSON(t.Arguments))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CanonicalJSON returns raw with its objects' members sorted and no insignificant space, so
// that the same arguments hash alike however the client wrote them.
func CanonicalJSON(raw json.RawMessage) []byte {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if len(raw) == 0 || dec.Decode(&v) != nil {
		return raw
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return raw
	}
	return out
}

// Holds reports whether an approval of key still holds.
func (a *Remembered) Holds(ctx context.Context, key string) bool {
	if a.settings().ttl <= 0 || key == "" {
		return false
	}
	if a.Shared != nil {
		ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
		defer cancel()
		ok, err := a.Shared.Granted(ctx, key)
		if err != nil {
			orDiscard(a.Logger).Warn("looking up a remembered approval failed: the person is asked again", "error", err.Error())
		}
		return ok
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.granted[key]
	if ok && !clock(a.Now).Before(until) {
		delete(a.granted, key)
		return false
	}
	return ok
}

// Grant remembers an approval of key.
func (a *Remembered) Grant(ctx context.Context, key string) {
	ttl := a.settings().ttl
	if ttl <= 0 || key == "" {
		return
	}
	if a.Shared != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedTimeout)
		defer cancel()
		if err := a.Shared.Grant(ctx, key, ttl); err != nil {
			orDiscard(a.Logger).Warn("remembering an approval failed: the next such call asks again", "error", err.Error())
		}
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := clock(a.Now)
	for k, until := range a.granted {
		if !now.Before(until) {
			delete(a.granted, k)
		}
	}
	if a.granted == nil {
		a.granted = map[string]time.Time{}
	}
	a.granted[key] = now.Add(ttl)
}

// clock is now, or time.Now when now is nil.
func clock(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}

// orDiscard is logger, or one that discards when it is nil.
func orDiscard(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return logger
}

package gateway

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
)

// auditTrail is the audit trail in force and its settings, which a reload replaces whole: a
// record goes to exactly one trail, the one in force when it is written, and a trail a
// reload replaced is closed once it has written what it took. Safe for concurrent use; must
// not be copied.
type auditTrail struct {
	// open opens the trail of a configuration (Options.OpenAudit); nil when the gateway was
	// given its trail (Options.Audit), which then stays.
	open func(*config.Config) (*audit.Log, func(), error)

	// mu orders records before swaps: a record is handed to the trail in force while mu is
	// held for reading (Record never waits), a swap holds it for writing, so that no record
	// reaches a trail once the swap has taken it out to close.
	mu sync.RWMutex
	// cur is the trail in force. Invariant: never nil. Written under mu; read without it
	// for the settings, with it (for reading) to record.
	cur atomic.Pointer[trailInForce]
}

// trailInForce is one audit trail and the settings it was opened for. Immutable.
type trailInForce struct {
	// log is the trail; nil when it is off.
	log *audit.Log
	// close drains log and closes its output; nil for a trail the gateway does not own.
	close    func()
	settings config.Audit
}

// newAuditTrail is the trail of cfg: opts.Audit when given, else the one opts.OpenAudit opens
// (none without it).
func newAuditTrail(cfg *config.Config, opts *Options) (*auditTrail, error) {
	t := &auditTrail{}
	in := &trailInForce{log: opts.Audit, settings: cfg.Audit}
	if opts.Audit == nil && opts.OpenAudit != nil {
		t.open = opts.OpenAudit
		log, closeLog, err := t.open(cfg)
		if err != nil {
			return nil, err
		}
		in.log, in.close = log, closeLog
	}
	t.cur.Store(in)
	return t, nil
}

// on reports whether records are written.
func (t *auditTrail) on() bool { return t.cur.Load().log != nil }

// arguments reports whether records keep the arguments of calls (audit.arguments).
func (t *auditTrail) arguments() bool { return t.cur.Load().settings.Arguments }

// redaction is how the settings in force redact arguments (see redaction).
func (t *auditTrail) redaction() audit.Redaction { return redaction(&t.cur.Load().settings) }

// Record hands rec to the trail in force (nothing when it is off).
func (t *auditTrail) Record(rec audit.Record) { t.recordWith(rec, nil) }

// recordWith hands rec to the trail in force, with args redacted as its settings say when
// they keep arguments (args nil: none).
func (t *auditTrail) recordWith(rec audit.Record, args json.RawMessage) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	in := t.cur.Load()
	if in.log == nil {
		return
	}
	if args != nil && in.settings.Arguments {
		rec.Arguments = audit.RedactArguments(args, redaction(&in.settings))
	}
	in.log.Record(rec)
}

// reopens reports whether going to next needs another trail: its sink, path or buffer differ.
func (t *auditTrail) reopens(next *config.Config) bool {
	a, b := t.cur.Load().settings, next.Audit
	return a.Sink != b.Sink || a.Path != b.Path || a.Buffer != b.Buffer
}

// unreloadable is why next's audit settings cannot be applied; "" when they can.
func (t *auditTrail) unreloadable(next *config.Config) string {
	if t.open == nil && t.reopens(next) {
		return "audit: this gateway was given its audit trail, which it cannot open again: restart it to change audit.sink, path or buffer"
	}
	return ""
}

// prepare opens the trail of next's settings, not yet in force: the same trail when they
// need no other. Its error refuses the reload, the trail in force staying.
func (t *auditTrail) prepare(next *config.Config) (*trailInForce, error) {
	cur := t.cur.Load()
	if !t.reopens(next) {
		return &trailInForce{log: cur.log, close: cur.close, settings: next.Audit}, nil
	}
	log, closeLog, err := t.open(next)
	if err != nil {
		return nil, err // Options.OpenAudit's, which names audit
	}
	return &trailInForce{log: log, close: closeLog, settings: next.Audit}, nil
}

// discard closes a trail prepare opened for a reload that was refused.
func (t *auditTrail) discard(in *trailInForce) {
	if in != nil && in.log != t.cur.Load().log && in.close != nil {
		in.close()
	}
}

// swap puts in in force, and returns what closes the trail it replaced (drained of what it
// took), or nil when the trail stays.
func (t *auditTrail) swap(in *trailInForce) (closeOld func()) {
	t.mu.Lock()
	old := t.cur.Swap(in)
	t.mu.Unlock()
	if old.log == in.log || old.close == nil {
		return nil
	}
	return old.close
}

// close drains and closes the trail in force, if the gateway opened it; records from then on
// are dropped.
func (t *auditTrail) close() {
	t.mu.Lock()
	old := t.cur.Swap(&trailInForce{settings: t.cur.Load().settings})
	t.mu.Unlock()
	if old.close != nil {
		old.close()
	}
}

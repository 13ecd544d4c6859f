package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Holder holds tool calls for an operator's decision: each is recorded in Store, which the
// replicas share when it is Redis, so that the decision may land on any replica; the one
// deciding wakes the one holding the call (WakeElsewhere). Set its fields before the first
// use; it is safe for concurrent use after.
type Holder struct {
	// Store keeps the held calls.
	Store HeldCalls
	// Replica is this replica's name; "" without replicas.
	Replica string
	// AllowSelf lets an operator approve a call of their own (approval.allow_self_approval);
	// SetAllowSelf replaces it while the Holder is in use.
	AllowSelf bool
	// Now returns the current time (the gateway's clock). If nil, time.Now.
	Now func() time.Time
	// Logger receives what happens to held calls. If nil, discarded.
	Logger *slog.Logger
	// OnHold is told of each call held here, once recorded (the webhook); it must not block.
	// If nil, nothing.
	OnHold func(HeldCall)
	// WakeElsewhere tells replica, which holds the call id, that it was decided; it reports
	// whether that replica listens. If nil, the holder reads the decision at the deadline.
	WakeElsewhere func(ctx context.Context, replica, id string) (bool, error)

	mu sync.Mutex
	// waiting holds a channel per call held here, closed when the call is decided. Guarded
	// by mu.
	waiting map[string]chan struct{}
	// allowSelf, once SetAllowSelf ran, replaces AllowSelf: 1 no, 2 yes.
	allowSelf atomic.Int32
}

// ErrNotDecided: the held call's time ran out with no decision.
var ErrNotDecided = errors.New("no decision in time")

// ErrTakenOver: another replica took a held call over from this one.
var ErrTakenOver = errors.New("the held call was taken over by another replica")

// ErrSelfApproval: an operator tried to approve a call of their own, which separation of
// duties forbids unless AllowSelf.
var ErrSelfApproval = errors.New("an operator may not approve a call of their own")

// StoreTimeout bounds a store operation on a held call that must not be lost with its request
// (its release, the read of its decision).
const StoreTimeout = 5 * time.Second

// Await holds c until an operator decides it, its deadline, or ctx's end, and returns it as
// decided: ErrNotDecided at the deadline, ErrTakenOver when another replica took it over. A
// call taken over (takenOver) is held already: it is only waited for.
func (h *Holder) Await(ctx context.Context, c HeldCall, takenOver bool) (HeldCall, error) {
	decided := make(chan struct{})
	h.mu.Lock()
	if h.waiting == nil {
		h.waiting = map[string]chan struct{}{}
	}
	h.waiting[c.ID] = decided
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waiting, c.ID)
		h.mu.Unlock()
		// The record goes whatever happened; a decision after this finds no call.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StoreTimeout)
		defer cancel()
		_ = h.Store.Release(releaseCtx, c.ID)
	}()
	if !takenOver {
		if err := h.Store.Hold(ctx, c); err != nil {
			return c, fmt.Errorf("recording the held call: %w", err)
		}
		orDiscard(h.Logger).Info("a tool call is held for an operator's approval: decide it on the admin API", "approval", c.ID,
			"upstream", c.Upstream, "tool", c.Original, "principal", c.Principal, "session", c.Session, "rule", c.Rule, "deadline", c.Deadline.Format(time.RFC3339))
		if h.OnHold != nil {
			h.OnHold(c)
		}
	} else if now, err := h.Store.Get(ctx, c.ID); err == nil && now.Decision != "" {
		h.Wake(c.ID) // decided while no replica held it
	}
	timer := time.NewTimer(c.Deadline.Sub(clock(h.Now)))
	defer timer.Stop()
	select {
	case <-decided:
	case <-timer.C:
	case <-ctx.Done():
		return c, ctx.Err()
	}
	// A decision that raced the deadline still counts: the record says. A read that fails
	// is tried again, so that a decision an operator was told was taken is not lost to one.
	getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StoreTimeout)
	defer cancel()
	var got HeldCall
	var err error
	for try := 0; try < 3; try++ {
		if got, err = h.Store.Get(getCtx, c.ID); err == nil || errors.Is(err, ErrNotFound) || getCtx.Err() != nil {
			break
		}
	}
	switch {
	case err != nil:
		return c, fmt.Errorf("reading the held call's decision: %w", err)
	case got.Replica != c.Replica:
		// Another replica took the call over, taking this one for stopped (it lost Redis
		// for a lease): that one runs it, this one must not.
		return got, ErrTakenOver
	case got.Decision == "":
		return got, ErrNotDecided
	}
	return got, nil
}

// Wake tells the waiter of a call held here that it was decided.
func (h *Holder) Wake(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch, ok := h.waiting[id]; ok {
		close(ch)
		delete(h.waiting, id)
	}
}

// Decide records an operator's decision on a held call and wakes the replica holding it. The
// operator is known by principal (their principal's key; "" for an admin key of no one in
// particular) and name. An operator may not approve a call of their own (ErrSelfApproval:
// separation of duties), unless AllowSelf; denying one is always allowed, it only stops the
// call. The store's ErrNotFound, ErrDecided and ErrExpired come back as they are.
func (h *Holder) Decide(ctx context.Context, id, decision, principal, name string) (HeldCall, error) {
	if decision == Approve && !h.allowsSelf() && principal != "" {
		// Who made a call never changes: reading it before the decision races nothing.
		c, err := h.Store.Get(ctx, id)
		if err == nil && c.CallerID == principal {
			return c, ErrSelfApproval
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return c, err
		}
	}
	c, err := h.Store.Decide(ctx, id, decision, name, clock(h.Now))
	if err != nil {
		return c, err
	}
	if c.Replica == "" || c.Replica == h.Replica {
		h.Wake(id)
		return c, nil
	}
	if h.WakeElsewhere == nil {
		return c, nil
	}
	if sent, err := h.WakeElsewhere(ctx, c.Replica, id); err != nil || !sent {
		orDiscard(h.Logger).Warn("the replica holding a decided call could not be told; it reads the decision at the call's deadline", "approval", id, "replica", c.Replica)
	}
	return c, nil
}

// Pending returns the calls waiting for a decision, on every replica.
func (h *Holder) Pending(ctx context.Context) ([]HeldCall, error) {
	return h.Store.Pending(ctx, clock(h.Now))
}

// SetAllowSelf replaces AllowSelf while the Holder is in use (a configuration reload): the
// decisions from then on follow it.
func (h *Holder) SetAllowSelf(allow bool) {
	v := int32(1)
	if allow {
		v = 2
	}
	h.allowSelf.Store(v)
}

// allowsSelf reports whether an operator may approve a call of their own now.
func (h *Holder) allowsSelf() bool {
	switch h.allowSelf.Load() {
	case 1:
		return false
	case 2:
		return true
	}
	return h.AllowSelf
}

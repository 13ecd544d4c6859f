// Package approval keeps what the gateway's approval step decides with: the tool calls held
// for an operator's decision, and the approvals people granted, remembered for a while.
//
// A call the policy says needs an operator's approval is held, as a HeldCall in a HeldCalls
// store, until an operator approves or denies it (on the admin API, maybe on another replica
// than the one holding it) or until its deadline. Two stores implement HeldCalls, with the
// same behaviour: MemoryHeldCalls, in this process, for a single gateway, and RedisHeldCalls,
// shared by replicas. The store only keeps the records; the gateway does the waiting and wakes
// the replica that holds a call. RedisApprovals remembers approvals across replicas.
//
//	store := approval.NewMemoryHeldCalls() // or: approval.NewRedisHeldCalls(client, "manifold", sealer)
//	c := approval.HeldCall{ID: approval.NewID(), Tool: "delete_repo", Held: now, Deadline: now.Add(5 * time.Minute) /* … */}
//	err := store.Hold(ctx, c)
//	// the admin API, on any replica:
//	c, err = store.Decide(ctx, c.ID, approval.Approve, "alice@example.com", time.Now()) // ErrDecided, ErrExpired, ErrNotFound
//	// the replica holding it, woken up, or at the deadline:
//	c, err = store.Get(ctx, c.ID)
//	err = store.Release(ctx, c.ID)
package approval

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// HeldCall is a held tool call. It is plain data, the same in every store: a Redis store keeps its
// JSON form. Calls returned by a HeldCalls are copies: changing one changes nothing in the store.
type HeldCall struct {
	// ID names the held call: 16 random bytes, base64url (NewID). It is unguessable, so that
	// knowing it is a sign of having been shown the call.
	ID string `json:"id"`
	// Replica is the gateway replica that holds the call, "" for a single gateway.
	Replica string `json:"replica,omitempty"`
	// Session is the fingerprint of the calling client's session, never the session's id,
	// which is a credential.
	Session string `json:"session"`
	// Principal names who made the call, as the audit log names them.
	Principal string `json:"principal"`
	// CallerID identifies who made the call (the gateway's principal key: issuer and
	// subject), for separation of duties: an operator of the same identity may not approve
	// it. "" for an anonymous caller, or a call held by a gateway too old to record it.
	CallerID string `json:"callerId,omitempty"`
	// Upstream is the name of the upstream the call goes to.
	Upstream string `json:"upstream"`
	// Tool is the tool's name as the gateway exposes it; Original is the upstream's own name.
	Tool     string `json:"tool"`
	Original string `json:"original"`
	// Arguments are the call's arguments, and Annotations the tool's annotations, raw. A store
	// keeps them compacted (json.Compact): they must be valid JSON when not empty.
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// Rule names the policy rule that asked for approval.
	Rule string `json:"rule"`
	// Held is when the call was held, and Deadline when it stops waiting for a decision. A
	// store keeps the call until some time (Grace) after Deadline, if not released before.
	Held     time.Time `json:"held"`
	Deadline time.Time `json:"deadline"`
	// Decision is "" while the call is pending, then Approve or Deny.
	Decision string `json:"decision,omitempty"`
	// Approver names who decided, and Decided is when; zero while the call is pending.
	Approver string    `json:"approver,omitempty"`
	Decided  time.Time `json:"decided,omitzero"`

	// What a replica taking the call over from one that stopped needs to run it and answer
	// its client on the stream the client resumes: the session's id (a credential: never
	// shown), the stream and the client's request id, and the request as the client sent it.
	// Empty when the call's client has no resumable stream.
	SessionID string `json:"sid,omitempty"`
	// Caller is the calling principal in full (the gateway's JSON of it), for the policy
	// the call passes again where it is taken over.
	Caller   json.RawMessage `json:"caller,omitempty"`
	StreamID string          `json:"stream,omitempty"`
	ClientID json.RawMessage `json:"clientId,omitempty"`
	Method   string          `json:"method,omitempty"`
	Params   json.RawMessage `json:"params,omitempty"`
}

// The decisions on a held call.
const (
	// Approve lets the call run.
	Approve = "approve"
	// Deny refuses it.
	Deny = "deny"
)

// Grace is how long after its deadline a store keeps a call that was not released, so that
// the replica holding it can still read how it ended.
const Grace = time.Minute

// ErrNotFound is returned for a held call that is unknown: never held, released, or gone some
// time (Grace) after its deadline.
var ErrNotFound = errors.New("held call not found")

// ErrDecided is returned by Decide for a call decided already: the first decision wins. Decide
// returns the call as decided with it.
var ErrDecided = errors.New("held call already decided")

// ErrExpired is returned by Decide for a pending call whose deadline is not after the time of
// the decision: it timed out, and the decision comes too late. Decide returns the call with it.
var ErrExpired = errors.New("held call timed out")

// ErrInvalidDecision is returned (wrapped) by Decide for a decision that is neither Approve
// nor Deny.
var ErrInvalidDecision = errors.New("invalid decision")

// ErrFull is returned (wrapped) by MemoryHeldCalls.Hold when the store holds its maximum of calls
// (MaxMemoryHeld). A refused call takes no room.
var ErrFull = errors.New("too many held calls")

// NewID returns a new held call id: 16 bytes from crypto/rand, base64url without padding.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HeldCalls keeps held calls. Implementations are safe for concurrent use, and for use by several
// replicas at once when they share the store.
type HeldCalls interface {
	// Hold stores c, which must be pending (no Decision, Approver or Decided), with an ID not
	// held already and a Deadline. The store keeps it until Release, or until some time
	// (Grace) after c.Deadline: never forever.
	Hold(ctx context.Context, c HeldCall) error
	// Get returns the call as it stands, or ErrNotFound.
	Get(ctx context.Context, id string) (HeldCall, error)
	// Decide records decision (Approve or Deny, else an error that is ErrInvalidDecision) by
	// approver at time at, if the call is pending and its deadline is after at, and returns
	// the call as decided. The first decision wins, even among replicas deciding at once: a
	// later one fails with ErrDecided, a decision on a call pending past its deadline with
	// ErrExpired; both return the call as it stands. An unknown call is ErrNotFound.
	Decide(ctx context.Context, id, decision, approver string, at time.Time) (HeldCall, error)
	// Pending returns the calls not decided whose deadline is after now, oldest (Held) first.
	Pending(ctx context.Context, now time.Time) ([]HeldCall, error)
	// Release forgets the call: the gateway is done with it. An unknown id is not an error.
	Release(ctx context.Context, id string) error
	// HeldBy returns the calls, pending or decided, not released nor gone, that replica holds,
	// oldest (Held) first: for a replica that takes over from one that stopped.
	HeldBy(ctx context.Context, replica string) ([]HeldCall, error)
	// All returns every call, pending or decided, not released nor gone, oldest (Held) first.
	All(ctx context.Context) ([]HeldCall, error)
	// Move makes replica the holder of a call, pending or decided, and returns it as moved:
	// the replica taking over from one that stopped. An unknown call is ErrNotFound.
	Move(ctx context.Context, id, replica string) (HeldCall, error)
}

// checkHold reports why c cannot be held, if it cannot.
func checkHold(c *HeldCall) error {
	switch {
	case c.ID == "":
		return errors.New("the call has no ID")
	case c.Deadline.IsZero():
		return errors.New("the call has no deadline")
	case c.Decision != "" || c.Approver != "" || !c.Decided.IsZero():
		return errors.New("the call is decided already")
	}
	return nil
}

// checkDecision reports whether decision is one a call can get.
func checkDecision(decision string) error {
	if decision != Approve && decision != Deny {
		return fmt.Errorf("%w %q: want %q or %q", ErrInvalidDecision, decision, Approve, Deny)
	}
	return nil
}

// decide applies a decision to c, if it can have one at time at: it fails with ErrDecided or
// ErrExpired otherwise, and leaves c as it was.
func decide(c *HeldCall, decision, approver string, at time.Time) error {
	switch {
	case c.Decision != "":
		return ErrDecided
	case !c.Deadline.After(at):
		return ErrExpired
	}
	c.Decision, c.Approver, c.Decided = decision, approver, at.Round(0)
	return nil
}

// compactRaw returns a compacted copy of m, which shares nothing with it, or an error if m is
// not valid JSON. An empty m stays nil.
func compactRaw(m json.RawMessage) (json.RawMessage, error) {
	if len(m) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// clone returns a copy of c that shares nothing with it.
func (c *HeldCall) clone() HeldCall {
	d := *c
	d.Arguments, d.Annotations = bytes.Clone(c.Arguments), bytes.Clone(c.Annotations)
	d.ClientID, d.Params, d.Caller = bytes.Clone(c.ClientID), bytes.Clone(c.Params), bytes.Clone(c.Caller)
	return d
}

// gone reports whether a store no longer keeps c at time now: some time (Grace) after its
// deadline.
func gone(c *HeldCall, now time.Time) bool { return !c.Deadline.Add(Grace).After(now) }

// oldestFirst orders calls by Held, then ID, for a listing that does not change between two
// reads.
func oldestFirst(a, b HeldCall) int {
	return cmp.Or(a.Held.Compare(b.Held), strings.Compare(a.ID, b.ID))
}

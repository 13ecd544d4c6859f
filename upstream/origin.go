package upstream

import (
	"context"
	"time"
)

// Arrival says how a transport delivered a message from the upstream.
type Arrival int

// The arrivals of a message.
const (
	// Unattributed: nothing on the wire ties the message to a call (stdio, legacy SSE).
	Unattributed Arrival = iota
	// OnCall: the message came on the response stream of one of the gateway's calls
	// (Streamable HTTP); it belongs to that call.
	OnCall
	// OnStandalone: the message came on the standalone stream (Streamable HTTP's GET), which
	// belongs to no call.
	OnStandalone
)

// arrival is where a transport read one message.
type arrival struct {
	kind Arrival
	// call is the upstream id of the request whose response stream carried the message, for
	// OnCall.
	call int64
}

// Origin tells whom a message from the upstream may be for. It is decided when the message is
// read, so that a call ending meanwhile cannot change the answer (design decision 4).
type Origin struct {
	// Arrival is how the message came.
	Arrival Arrival
	// Caller is what WithCaller attached to the call the message belongs to: for OnCall, the
	// call whose stream carried it (nil when that call had already ended); for Unattributed,
	// a call in flight when exactly one party had calls in flight and no other party's call
	// ended within the attribution window (nil otherwise).
	Caller any
	// InFlight is how many parties had calls in flight on the connection when an Unattributed
	// message was read.
	InFlight int
	// Parties is InFlight plus the other parties whose last call on the connection ended
	// within the attribution window: more than one means the owner is ambiguous.
	Parties int
}

type callerKey struct{}

// caller is what WithCaller attaches to a call.
type caller struct {
	// value comes back as Origin.Caller.
	value any
	// party is whom the call is made for (a client session); calls of one party never make
	// each other's messages ambiguous.
	party any
}

// WithCaller returns a context that makes Call remember caller, made on behalf of party (a
// comparable value, such as a client session's id). A message the upstream sends about the
// call reaches OnRequest or OnNotification with Origin.Caller set to caller: exactly when the
// transport ties it to the call (Streamable HTTP), and over stdio or legacy SSE only while
// party is the only one with calls in flight and no other party's call ended within the
// attribution window (Spec.AttributionWindow).
func WithCaller(ctx context.Context, callerValue, party any) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{value: callerValue, party: party})
}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// originLocked decides the Origin of a message that arrived as a says. cn.mu must be held.
func (cn *connection) originLocked(a arrival) Origin {
	switch a.kind {
	case OnCall:
		return Origin{Arrival: OnCall, Caller: cn.pending[a.call].caller.value}
	case OnStandalone:
		return Origin{Arrival: OnStandalone}
	}
	o := Origin{Arrival: Unattributed}
	var sole caller
	var inFlight map[any]bool // only built when a second party shows up
	for _, p := range cn.pending {
		if p.caller.party == nil {
			continue // the gateway's own requests (list fetches, log levels) have no party
		}
		switch {
		case o.InFlight == 0:
			sole, o.InFlight = p.caller, 1
		case inFlight == nil && p.caller.party == sole.party:
		default:
			if inFlight == nil {
				inFlight = map[any]bool{sole.party: true}
			}
			inFlight[p.caller.party] = true
			o.InFlight = len(inFlight)
		}
	}
	o.Parties = o.InFlight
	if cn.client.spec.AttributionWindow > 0 {
		cn.pruneEndedLocked(cn.client.opts.Now())
		// Every party left ended within the window; those also in flight count once.
		o.Parties += len(cn.lastEnded)
		switch {
		case o.InFlight == 1:
			if _, ok := cn.lastEnded[sole.party]; ok {
				o.Parties--
			}
		case inFlight != nil:
			for party := range inFlight {
				if _, ok := cn.lastEnded[party]; ok {
					o.Parties--
				}
			}
		}
	}
	if o.InFlight == 1 && o.Parties == 1 {
		o.Caller = sole.value
	}
	return o
}

// endedLocked notes that a call of party has ended, for the attribution window. cn.mu must be
// held. It costs the same however many parties ended within the window: a 2026-07-28 request
// is a party of its own, so under load there are as many as calls in the window.
func (cn *connection) endedLocked(c caller) {
	if c.party == nil || cn.client.spec.AttributionWindow <= 0 || !cn.unattributed {
		return
	}
	now := cn.client.opts.Now()
	cn.pruneEndedLocked(now)
	cn.lastEnded[c.party] = now
	cn.ends = append(cn.ends, partyEnd{party: c.party, at: now})
}

// partyEnd is one call's end, as endedLocked noted it.
type partyEnd struct {
	party any
	at    time.Time
}

// pruneEndedLocked forgets the ends before the attribution window, oldest first, until the
// oldest left is within it: each end is dropped once, so pruning costs nothing per call
// beyond the ends it drops. An end whose party ended again later leaves that party
// remembered. cn.mu must be held.
func (cn *connection) pruneEndedLocked(now time.Time) {
	cutoff := now.Add(-cn.client.spec.AttributionWindow)
	for len(cn.ends) > 0 && cn.ends[0].at.Before(cutoff) {
		e := cn.ends[0]
		if at, ok := cn.lastEnded[e.party]; ok && !at.After(e.at) {
			delete(cn.lastEnded, e.party)
		}
		cn.ends[0] = partyEnd{} // the party is not kept alive by the slice's array
		cn.ends = cn.ends[1:]
	}
	if len(cn.ends) == 0 {
		cn.ends = nil // let a large array go once the load has passed
	}
}

package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// TestOriginIsDecidedWhenRead: whom an unattributed message is for depends on the calls in
// flight and the calls that ended within the attribution window at the moment it is read; a
// message on a call's stream belongs to that call, one on the standalone stream to none.
func TestOriginIsDecidedWhenRead(t *testing.T) {
	type call struct {
		id    int64
		party string
	}
	type ended struct {
		party string
		ago   time.Duration
	}
	for _, tc := range []struct {
		name     string
		window   time.Duration
		inFlight []call
		ended    []ended
		from     arrival
		want     Origin
	}{
		{name: "no call in flight", window: 2 * time.Second, want: Origin{}},
		{name: "one party, two calls", window: 2 * time.Second, inFlight: []call{{1, "A"}, {2, "A"}},
			want: Origin{Caller: "A", InFlight: 1, Parties: 1}},
		{name: "two parties in flight", window: 2 * time.Second, inFlight: []call{{1, "A"}, {2, "B"}, {3, "A"}},
			want: Origin{InFlight: 2, Parties: 2}},
		{name: "another party's call just ended", window: 2 * time.Second, inFlight: []call{{1, "A"}}, ended: []ended{{"B", time.Second}},
			want: Origin{InFlight: 1, Parties: 2}},
		{name: "another party's call ended before the window", window: 2 * time.Second, inFlight: []call{{1, "A"}}, ended: []ended{{"B", 3 * time.Second}},
			want: Origin{Caller: "A", InFlight: 1, Parties: 1}},
		{name: "the same party's call just ended", window: 2 * time.Second, inFlight: []call{{1, "A"}}, ended: []ended{{"A", time.Second}},
			want: Origin{Caller: "A", InFlight: 1, Parties: 1}},
		{name: "window off", window: 0, inFlight: []call{{1, "A"}}, ended: []ended{{"B", time.Millisecond}},
			want: Origin{Caller: "A", InFlight: 1, Parties: 1}},
		{name: "only an ended call", window: 2 * time.Second, ended: []ended{{"B", time.Second}},
			want: Origin{Parties: 1}},
		{name: "the gateway's own requests have no party", window: 2 * time.Second, inFlight: []call{{1, ""}, {2, "A"}},
			want: Origin{Caller: "A", InFlight: 1, Parties: 1}},
		{name: "on a call's stream", window: 2 * time.Second, inFlight: []call{{1, "A"}, {2, "B"}}, from: arrival{kind: OnCall, call: 2},
			want: Origin{Arrival: OnCall, Caller: "B"}},
		{name: "on the stream of a call that ended", window: 2 * time.Second, inFlight: []call{{1, "A"}}, from: arrival{kind: OnCall, call: 7},
			want: Origin{Arrival: OnCall}},
		{name: "on the standalone stream", window: 2 * time.Second, inFlight: []call{{1, "A"}}, from: arrival{kind: OnStandalone},
			want: Origin{Arrival: OnStandalone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			c := New(Spec{Name: "u", Command: "unused", AttributionWindow: tc.window}, &Options{Now: func() time.Time { return now }})
			cn := &connection{client: c, pending: map[int64]pendingCall{}, lastEnded: map[any]time.Time{}, unattributed: true}
			for _, e := range tc.ended {
				now = time.Unix(1000, 0).Add(-e.ago)
				cn.endedLocked(caller{value: e.party, party: e.party})
			}
			now = time.Unix(1000, 0)
			for _, ca := range tc.inFlight {
				p := pendingCall{ch: make(chan *protocol.Response, 1)}
				if ca.party != "" {
					p.caller = caller{value: ca.party, party: ca.party}
				}
				cn.pending[ca.id] = p
			}
			if got := cn.origin(tc.from); got != tc.want {
				t.Errorf("origin = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEndedCallsAreRemembered: a call that is answered, given up or lost with its connection
// counts for the attribution window, and the table of ended calls stays bounded.
func TestEndedCallsAreRemembered(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(Spec{Name: "u", Command: "unused", AttributionWindow: 2 * time.Second}, &Options{Now: func() time.Time { return now }})
	cn := &connection{client: c, pending: map[int64]pendingCall{}, lastEnded: map[any]time.Time{}, unattributed: true,
		done: make(chan struct{})}
	cn.ctx, cn.cancel = context.WithCancel(context.Background())
	add := func(id int64, party string) {
		cn.pending[id] = pendingCall{ch: make(chan *protocol.Response, 1), caller: caller{value: party, party: party}}
	}
	add(1, "A")
	add(2, "B")
	add(3, "C")
	add(4, "D")
	cn.deliver(&protocol.Response{ID: protocol.IntID(1), Result: []byte(`{}`)}) // answered
	cn.forget(2)                                                                // cancelled or timed out
	if got := cn.origin(arrival{}); got.Parties != 4 || got.InFlight != 2 {
		t.Errorf("after two calls ended: %+v, want 2 in flight and 4 parties", got)
	}
	cn.fail(errors.New("connection lost")) // the connection lost: C and D end too
	if got := cn.origin(arrival{}); got.Parties != 4 || got.InFlight != 0 {
		t.Errorf("after the connection failed: %+v, want 4 parties, none in flight", got)
	}
	now = now.Add(3 * time.Second)
	if got := cn.origin(arrival{}); got.Parties != 0 || len(cn.lastEnded) != 0 {
		t.Errorf("after the window: %+v with %d remembered, want none", got, len(cn.lastEnded))
	}
	for i := range 640 {
		now = now.Add(time.Second)
		cn.endedLocked(caller{value: i, party: i})
	}
	if len(cn.lastEnded) > 3 || len(cn.ends) > 3 {
		t.Errorf("%d ended parties remembered (%d ends), want at most the window's 3", len(cn.lastEnded), len(cn.ends))
	}
}

// TestManyPartiesInTheWindow: with a party per call (2026-07-28 requests), thousands of
// parties end within the window; they all count, one that ends again counts once, and they
// are all forgotten once the window has passed.
func TestManyPartiesInTheWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(Spec{Name: "u", Command: "unused", AttributionWindow: 2 * time.Second}, &Options{Now: func() time.Time { return now }})
	cn := &connection{client: c, pending: map[int64]pendingCall{}, lastEnded: map[any]time.Time{}, unattributed: true}
	const parties = 5000
	for i := range parties {
		now = now.Add(100 * time.Microsecond)
		cn.endedLocked(caller{value: i, party: i})
	}
	now = now.Add(time.Millisecond)
	cn.endedLocked(caller{value: 0, party: 0}) // party 0 again, after everyone
	cn.pending[1] = pendingCall{ch: make(chan *protocol.Response, 1), caller: caller{value: 7, party: 7}}
	if got, want := cn.origin(arrival{}), (Origin{InFlight: 1, Parties: parties}); got != want {
		t.Errorf("origin with %d parties ended = %+v, want %+v", parties, got, want)
	}
	// Just short of the window after party 0's second end, only that end is within it: the
	// others came at least 1 ms earlier.
	now = now.Add(2*time.Second - 500*time.Microsecond)
	delete(cn.pending, 1)
	if got, want := cn.origin(arrival{}), (Origin{Parties: 1}); got != want || len(cn.ends) != 1 {
		t.Errorf("origin past most ends = %+v (%d ends kept), want %+v and 1 end", got, len(cn.ends), want)
	}
	now = now.Add(3 * time.Second)
	if got := cn.origin(arrival{}); got.Parties != 0 || len(cn.lastEnded) != 0 || cn.ends != nil {
		t.Errorf("after the window: %+v with %d remembered, %d ends, want none", got, len(cn.lastEnded), len(cn.ends))
	}
}

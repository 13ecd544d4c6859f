package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// reqLog is a RequestLog in a map, as a shared log (Redis) would be seen by several replicas:
// an event whose sequence number is not above the last held is refused, as Redis refuses an
// entry id it holds; Start records the requests of the stream's first start only. Replay
// returns at most page events (More) when page is set. As Redis does, the start of a
// session's standalone stream ends the one it replaces, which Claim refuses from then on.
type reqLog struct {
	mu      sync.Mutex
	streams map[string]*reqLogStream
	// current names each session's standalone stream, by session.
	current map[string]string
	// starts are the Start calls, in order.
	starts []startCall
	page   int
	// claims are the successful Claim calls ("stream from→to"), touches the Touch calls.
	claims, touches []string
}

type reqLogStream struct {
	events     []Event
	complete   bool
	requests   []protocol.ID
	standalone bool
	// producer is the hub that took the stream over (Claim); "" for none.
	producer string
}

type startCall struct {
	Session, Stream string
	Requests        []string
}

func newReqLog() *reqLog {
	return &reqLog{streams: map[string]*reqLogStream{}, current: map[string]string{}}
}

var _ RequestLog = (*reqLog)(nil)

func (l *reqLog) streamLocked(sessionID, streamID string) *reqLogStream {
	key := sessionID + "/" + streamID
	st := l.streams[key]
	if st == nil {
		st = &reqLogStream{}
		l.streams[key] = st
	}
	return st
}

func (l *reqLog) Start(sessionID, streamID string, requests []protocol.ID, standalone bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts = append(l.starts, startCall{sessionID, streamID, idStrings(requests)})
	_, started := l.streams[sessionID+"/"+streamID]
	st := l.streamLocked(sessionID, streamID)
	if !started {
		st.requests = slices.Clone(requests)
		st.standalone = standalone
	}
	if standalone {
		if prev := l.current[sessionID]; prev != "" && prev != streamID && l.streams[sessionID+"/"+prev] != nil {
			l.streams[sessionID+"/"+prev].complete = true
		}
		l.current[sessionID] = streamID
	}
}

func (l *reqLog) Append(sessionID, streamID string, events []Event, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.streamLocked(sessionID, streamID)
	for _, e := range events {
		if n := len(st.events); n > 0 && e.Seq <= st.events[n-1].Seq {
			continue // refused, as Redis refuses an id not above the last
		}
		st.events = append(st.events, Event{Seq: e.Seq, Data: slices.Clone(e.Data)})
	}
	st.complete = st.complete || complete
}

func (l *reqLog) Replay(_ context.Context, sessionID, streamID string, after uint64) (*Replayed, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.streams[sessionID+"/"+streamID]
	if st == nil {
		return nil, nil
	}
	r := &Replayed{Complete: st.complete, Requests: slices.Clone(st.requests), Standalone: st.standalone, Producer: st.producer}
	for _, e := range st.events {
		if e.Seq > after {
			r.Events = append(r.Events, e)
		}
	}
	if l.page > 0 && len(r.Events) > l.page {
		r.Events, r.More, r.Complete = r.Events[:l.page], true, false
	}
	return r, nil
}

var _ TakeoverLog = (*reqLog)(nil)

// Claim records to as the stream's producer if from is (or none took the stream over yet),
// as Redis does in one script.
func (l *reqLog) Claim(_ context.Context, sessionID, streamID, from, to string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.streamLocked(sessionID, streamID)
	if st.standalone && l.current[sessionID] != streamID {
		return "", ErrStreamDone
	}
	if st.producer == "" || st.producer == from || st.producer == to {
		st.producer = to
		l.claims = append(l.claims, streamID+" "+from+"→"+to)
	}
	return st.producer, nil
}

// Touch counts the touches of a stream.
func (l *reqLog) Touch(sessionID, streamID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.touches = append(l.touches, sessionID+"/"+streamID)
}

// contents describes what the log holds of a stream: its events and whether it ended.
func (l *reqLog) contents(sessionID, streamID string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.streams[sessionID+"/"+streamID]
	if st == nil {
		return nil
	}
	var out []string
	for _, e := range st.events {
		out = append(out, fmt.Sprintf("%d %s", e.Seq, describe(e.Data)))
	}
	if st.complete {
		out = append(out, "end")
	}
	return out
}

func (l *reqLog) startCalls() []startCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.starts)
}

func idStrings(ids []protocol.ID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, id.String())
	}
	return out
}

// The messages of the tests' streams.
func result(id int64) []byte {
	data, err := protocol.Encode(&protocol.Response{ID: protocol.IntID(id), Result: json.RawMessage(`{}`)})
	if err != nil {
		panic(err)
	}
	return data
}

func notice(n int) []byte {
	data, err := protocol.Encode(&protocol.Notification{Method: "notifications/progress", Params: json.RawMessage(fmt.Sprintf(`{"progress":%d}`, n))})
	if err != nil {
		panic(err)
	}
	return data
}

// describe names a message: "notice", "result <id>", "error <id> <code>".
func describe(data []byte) string {
	msg, err := protocol.Decode(data)
	if err != nil {
		return string(data)
	}
	switch m := msg.(type) {
	case *protocol.Response:
		if m.Error != nil {
			if !errors.Is(m.Error, ErrProducerStopped) {
				return fmt.Sprintf("error %s %d (not ErrProducerStopped)", m.ID, m.Error.Code)
			}
			return fmt.Sprintf("error %s %d", m.ID, m.Error.Code)
		}
		return "result " + m.ID.String()
	case *protocol.Notification:
		return "notice"
	}
	return string(data)
}

// ev is event seq carrying data.
func ev(seq uint64, data []byte) Event { return Event{Seq: seq, Data: data} }

// seed writes what a producer logged of a stream: its start with requests, events, its end.
func (l *reqLog) seed(sessionID, streamID string, requests []int64, events []Event, complete bool) {
	var ids []protocol.ID
	for _, r := range requests {
		ids = append(ids, protocol.IntID(r))
	}
	l.Start(sessionID, streamID, ids, false)
	l.Append(sessionID, streamID, events, complete)
}

// producers answers Options.Producing from a set of running producers, and counts its calls.
type producers struct {
	mu      sync.Mutex
	running map[string]bool
	asked   []string
}

func (p *producers) producing(_ context.Context, _, producer, streamID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, streamID)
	return p.running[producer]
}

func (p *producers) calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.asked)
}

// read returns what a cursor has now, described, and the stream's state, as a connection
// that wrote it all would.
func read(c *Cursor) ([]string, State) {
	events, state, _ := c.Next()
	var out []string
	for _, e := range events {
		out = append(out, describe(e.Data))
	}
	if len(events) > 0 {
		c.Wrote(events[len(events)-1].Seq)
	}
	return out, state
}

// woken reports whether the cursor was signalled since the last call, and takes the signal.
func woken(c *Cursor) bool {
	select {
	case <-c.Wake():
		return true
	default:
		return false
	}
}

// The stream the tests follow: produced by the hub tagged "prod", in session "s".
const (
	producer = "prod"
	followed = "prod_1"
)

// followedStream seeds the log with a stream answering requests 1 and 2, of which 1 is
// answered (events 1 notice, 2 result 1), resumes it after event after (1 unless given) on a
// hub whose Producing says prod runs, and returns the hub, the cursor (what it had read, its
// first wake taken) and the log.
func followedStream(t *testing.T, after ...uint64) (*Local, *Cursor, *reqLog) {
	t.Helper()
	log := newReqLog()
	log.seed("s", followed, []int64{1, 2}, []Event{ev(1, notice(1)), ev(2, result(1))}, false)
	p := &producers{running: map[string]bool{producer: true}}
	h := newTestHub(t, &Options{Tag: "here", Log: log, Producing: p.producing})
	from := uint64(1)
	if len(after) > 0 {
		from = after[0]
	}
	st, c, err := openSession(t, h, "s").Resume(context.Background(), fmt.Sprintf("%s.%d", followed, from))
	if err != nil {
		t.Fatal(err)
	}
	if st.ID() != followed {
		t.Fatalf("resumed %q, want %q", st.ID(), followed)
	}
	if _, state := read(c); state != Live {
		t.Fatalf("resuming a stream whose producer runs: state %v, want live", state)
	}
	woken(c)
	return h, c, log
}

// extension is one call of Extend.
type extension struct {
	events   []Event
	complete bool
	// want is what Extend reports.
	want bool
}

// TestExtendAFollowedStream: a stream resumed from the log while its producer runs stays
// open; Extend adds what the producer goes on producing, in order, skipping what is held,
// ends it with complete, and drops it at a gap (its client then resumes from the log).
func TestExtendAFollowedStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extends []extension
		want    []string
		state   State
	}{
		{
			name:    "in order, then the end",
			extends: []extension{{[]Event{ev(3, notice(2))}, false, true}, {[]Event{ev(4, result(2))}, true, true}},
			want:    []string{"notice", "result 2"},
			state:   Complete,
		},
		{
			name:    "in order, still open",
			extends: []extension{{[]Event{ev(3, notice(2)), ev(4, notice(3))}, false, true}},
			want:    []string{"notice", "notice"},
			state:   Live,
		},
		{
			name: "events held are skipped",
			extends: []extension{
				{[]Event{ev(1, notice(1)), ev(2, result(1))}, false, true},
				{[]Event{ev(2, result(1)), ev(3, notice(2))}, false, true},
				{[]Event{ev(3, notice(2)), ev(4, result(2))}, true, true},
			},
			want:  []string{"notice", "result 2"},
			state: Complete,
		},
		{
			name:    "a gap drops the stream",
			extends: []extension{{[]Event{ev(4, result(2))}, true, true}},
			state:   Dropped,
		},
		{
			name:    "a gap after events in order drops it too",
			extends: []extension{{[]Event{ev(3, notice(2)), ev(5, notice(3))}, false, true}},
			state:   Dropped,
		},
		{
			name:    "the end alone",
			extends: []extension{{nil, true, true}},
			state:   Complete,
		},
		{
			name: "nothing once complete",
			extends: []extension{
				{[]Event{ev(3, result(2))}, true, true},
				{[]Event{ev(4, notice(9))}, false, false},
			},
			want:  []string{"result 2"},
			state: Complete,
		},
		{
			name: "nothing once dropped",
			extends: []extension{
				{[]Event{ev(9, result(2))}, true, true},
				{[]Event{ev(3, notice(2))}, false, false},
			},
			state: Dropped,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, _ := followedStream(t)
			for i, x := range tc.extends {
				if got := h.Extend("s", followed, x.events, x.complete); got != x.want {
					t.Errorf("Extend #%d = %v, want %v", i+1, got, x.want)
				}
			}
			if !woken(c) {
				t.Errorf("Extend did not wake the stream's connection")
			}
			got, state := read(c)
			if diff := cmp.Diff(tc.want, got); diff != "" || state != tc.state {
				t.Errorf("after Extend the connection reads (-want +got):\n%s\nstate %v, want %v", diff, state, tc.state)
			}
		})
	}
}

// TestExtendWhatIsNotFollowed: Extend reports false, and changes nothing, for a session or
// stream not held here, or a stream produced here.
func TestExtendWhatIsNotFollowed(t *testing.T) {
	h, c, _ := followedStream(t)
	own := openSession(t, h, "s").NewStream(1)
	for _, tc := range []struct {
		name              string
		session, streamID string
	}{
		{"another session", "other", followed},
		{"an unknown stream", "s", "prod_2"},
		{"a stream produced here", "s", own.ID()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if h.Extend(tc.session, tc.streamID, []Event{ev(1, result(1))}, true) {
				t.Errorf("Extend(%s, %s) = true, want false", tc.session, tc.streamID)
			}
		})
	}
	if got, state := read(c); len(got) != 0 || state != Live {
		t.Errorf("the followed stream changed: %v, %v", got, state)
	}
}

// TestOrphanedAnswersOnlyUnansweredRequests: when a followed stream's producer stops, each
// request the stream did not answer gets ErrProducerStopped, the stream ends, and the log
// gains the same (so that a replica resuming it later reads the same); streams of other
// producers stay open, and a second Orphaned adds nothing. What the log holds that did not
// come live (another hub ended the stream there) comes first, and is what the stream ends with.
func TestOrphanedAnswersOnlyUnansweredRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		// extend is what the producer added before it stopped.
		extend []Event
		// logged is what the log holds after the copy's last event that did not come live;
		// loggedEnd, that the stream's end follows it there.
		logged    []Event
		loggedEnd bool
		// after is where the client resumed (1 if zero).
		after uint64
		// producer is the one that stopped.
		producer string
		want     []string
		state    State
		wantLog  []string
	}{
		{
			name:     "one answered, one not",
			producer: producer,
			want:     []string{"error 2 -32010"},
			state:    Complete,
			wantLog:  []string{"1 notice", "2 result 1", "3 error 2 -32010", "end"},
		},
		{
			name:     "the second answered by Extend",
			extend:   []Event{ev(3, result(2))},
			producer: producer,
			want:     []string{"result 2"},
			state:    Complete,
			wantLog:  []string{"1 notice", "2 result 1", "3 result 2", "end"},
		},
		{
			name:     "after more events",
			extend:   []Event{ev(3, notice(2))},
			producer: producer,
			want:     []string{"notice", "error 2 -32010"},
			state:    Complete,
			wantLog:  []string{"1 notice", "2 result 1", "3 notice", "4 error 2 -32010", "end"},
		},
		{
			// The client read the answer to 1 before it resumed: it must not get a second.
			name:     "a request answered before the resume point",
			after:    2,
			producer: producer,
			want:     []string{"error 2 -32010"},
			state:    Complete,
			wantLog:  []string{"1 notice", "2 result 1", "3 error 2 -32010", "end"},
		},
		{
			name:     "the second answered in the log, not live",
			logged:   []Event{ev(3, result(2))},
			producer: producer,
			want:     []string{"result 2"},
			state:    Complete,
			wantLog:  []string{"1 notice", "2 result 1", "3 result 2", "end"},
		},
		{
			// Another hub ended it there (Abandon): its answer, not ErrProducerStopped.
			name:      "ended in the log, not live",
			logged:    []Event{ev(3, result(2))},
			loggedEnd: true,
			producer:  producer,
			want:      []string{"result 2"},
			state:     Complete,
			wantLog:   []string{"1 notice", "2 result 1", "3 result 2", "end"},
		},
		{
			name:     "another producer stopped",
			producer: "other",
			state:    Live,
			wantLog:  []string{"1 notice", "2 result 1"},
		},
		{
			name:     "a producer whose tag ends like it",
			producer: "rod",
			state:    Live,
			wantLog:  []string{"1 notice", "2 result 1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c, log := followedStream(t, max(tc.after, 1))
			if tc.extend != nil {
				// As the producer would have: logged, then published.
				log.Append("s", followed, tc.extend, false)
				h.Extend("s", followed, tc.extend, false)
			}
			if tc.logged != nil {
				log.Append("s", followed, tc.logged, tc.loggedEnd)
			}
			h.Orphaned(context.Background(), tc.producer, nil)
			h.Orphaned(context.Background(), tc.producer, nil) // a second time: nothing more
			got, state := read(c)
			if diff := cmp.Diff(tc.want, got); diff != "" || state != tc.state {
				t.Errorf("after Orphaned(%s) the connection reads (-want +got):\n%s\nstate %v, want %v", tc.producer, diff, state, tc.state)
			}
			if diff := cmp.Diff(tc.wantLog, log.contents("s", followed)); diff != "" {
				t.Errorf("the log holds (-want +got):\n%s", diff)
			}
			if tc.state != Complete {
				return
			}
			// Another replica resuming the stream now reads what this one answered.
			p := &producers{running: map[string]bool{producer: true}}
			other := newTestHub(t, &Options{Tag: "third", Log: log, Producing: p.producing})
			_, c2, err := openSession(t, other, "s").Resume(context.Background(), fmt.Sprintf("%s.%d", followed, max(tc.after, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if got2, state2 := read(c2); !slices.Equal(got2, tc.want) || state2 != Complete {
				t.Errorf("another replica resuming after it: %v, %v; want %v, complete", got2, state2, tc.want)
			}
			if asked := p.calls(); len(asked) != 0 {
				t.Errorf("a complete stream asked Producing about %v", asked)
			}
		})
	}
}

// TestResumeFromTheLog: what Resume of a stream not held here gives, by what the log holds
// and whether its producer runs: a complete log or a page ends the stream without asking; a
// running producer keeps it open; a stopped one (or no Producing) ends it with an error
// answer for each request not answered, which the log gains.
func TestResumeFromTheLog(t *testing.T) {
	answered := []Event{ev(1, notice(1)), ev(2, result(1)), ev(3, notice(2))}
	for _, tc := range []struct {
		name     string
		requests []int64
		events   []Event
		complete bool
		page     int
		// running is the set of running producers; nil: no Producing.
		running map[string]bool
		after   uint64

		want      []string
		state     State
		wantAsked []string
		wantLog   []string
	}{
		{
			name: "producer gone", requests: []int64{1, 2}, events: answered, running: map[string]bool{},
			after: 1, want: []string{"result 1", "notice", "error 2 -32010"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "4 error 2 -32010", "end"},
		},
		{
			name: "no Producing", requests: []int64{1, 2}, events: answered,
			after: 1, want: []string{"result 1", "notice", "error 2 -32010"}, state: Complete,
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "4 error 2 -32010", "end"},
		},
		{
			name: "producer gone, every request answered", requests: []int64{1}, events: answered, running: map[string]bool{},
			after: 1, want: []string{"result 1", "notice"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "end"},
		},
		{
			name: "producer gone, nothing logged but the start", requests: []int64{1, 2}, running: map[string]bool{},
			after: 0, want: []string{"error 1 -32010", "error 2 -32010"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 error 1 -32010", "2 error 2 -32010", "end"},
		},
		{
			name: "producer gone, no requests logged", events: answered[:1], running: map[string]bool{},
			after: 0, want: []string{"notice"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "end"},
		},
		{
			name: "producer running", requests: []int64{1, 2}, events: answered, running: map[string]bool{producer: true},
			after: 1, want: []string{"result 1", "notice"}, state: Live, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "2 result 1", "3 notice"},
		},
		{
			name: "another producer running", requests: []int64{1, 2}, events: answered, running: map[string]bool{"other": true},
			after: 1, want: []string{"result 1", "notice", "error 2 -32010"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "4 error 2 -32010", "end"},
		},
		{
			// The client read the answer to 1 before it resumed: it must not get a second.
			name: "producer gone, resumed after an answer", requests: []int64{1, 2}, events: answered, running: map[string]bool{},
			after: 2, want: []string{"notice", "error 2 -32010"}, state: Complete, wantAsked: []string{followed},
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "4 error 2 -32010", "end"},
		},
		{
			name: "complete in the log", requests: []int64{1, 2}, events: append(slices.Clone(answered), ev(4, result(2))), complete: true, running: map[string]bool{},
			after: 2, want: []string{"notice", "result 2"}, state: Complete,
			wantLog: []string{"1 notice", "2 result 1", "3 notice", "4 result 2", "end"},
		},
		{
			name: "a page", requests: []int64{1, 2}, events: answered, page: 1, running: map[string]bool{},
			after: 1, want: []string{"result 1"}, state: Complete,
			wantLog: []string{"1 notice", "2 result 1", "3 notice"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := newReqLog()
			log.seed("s", followed, tc.requests, tc.events, tc.complete)
			log.page = tc.page
			p := &producers{running: tc.running}
			opts := &Options{Tag: "here", Log: log}
			if tc.running != nil {
				opts.Producing = p.producing
			}
			s := openSession(t, newTestHub(t, opts), "s")
			_, c, err := s.Resume(context.Background(), fmt.Sprintf("%s.%d", followed, tc.after))
			if err != nil {
				t.Fatal(err)
			}
			got, state := read(c)
			if diff := cmp.Diff(tc.want, got); diff != "" || state != tc.state {
				t.Errorf("resumed after %d (-want +got):\n%s\nstate %v, want %v", tc.after, diff, state, tc.state)
			}
			if diff := cmp.Diff(tc.wantAsked, p.calls()); diff != "" {
				t.Errorf("Producing was asked about (-want +got):\n%s", diff)
			}
			log.page = 0
			if diff := cmp.Diff(tc.wantLog, log.contents("s", followed)); diff != "" {
				t.Errorf("the log holds (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResumeMissesNothingPublishedWhileItReadsTheLog: events the producer logs and publishes
// after Resume read the log but before the stream it makes is held (so Extend does not find
// it) still reach the client: here the stream's last answer and its end.
func TestResumeMissesNothingPublishedWhileItReadsTheLog(t *testing.T) {
	log := newReqLog()
	log.seed("s", followed, []int64{1}, []Event{ev(1, notice(1))}, false)
	var h *Local
	var extended bool
	producing := func(context.Context, string, string, string) bool {
		// The producer answers meanwhile: logged, and published to this replica, which
		// follows the session already.
		log.Append("s", followed, []Event{ev(2, result(1))}, true)
		extended = h.Extend("s", followed, []Event{ev(2, result(1))}, true)
		return true
	}
	h = newTestHub(t, &Options{Tag: "here", Log: log, Producing: producing})
	_, c, err := openSession(t, h, "s").Resume(context.Background(), followed+".0")
	if err != nil {
		t.Fatal(err)
	}
	got, state := read(c)
	if !slices.Equal(got, []string{"notice", "result 1"}) || state != Complete {
		t.Errorf("the resumed stream reads %v, state %v (Extend meanwhile reported %v); want [notice result 1], complete: its end was logged and published while Resume read the log, and nothing more will come", got, state, extended)
	}
}

// TestStartRecordsTheExpectedRequests: a stream's first log is Start, with the ids given to
// Expect, once the client holds an event id of it; nothing before, and no second Start.
func TestStartRecordsTheExpectedRequests(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expect [][]protocol.ID
		// putFirst puts an event before the client holds an id.
		putFirst bool
		want     []string
	}{
		{"one request", [][]protocol.ID{{protocol.IntID(7)}}, false, []string{"7"}},
		{"a batch, over two calls", [][]protocol.ID{{protocol.IntID(1), protocol.StringID("x")}, {protocol.IntID(-3)}}, false, []string{"1", `"x"`, "-3"}},
		{"no Expect", nil, false, nil},
		{"an event before the priming one", [][]protocol.ID{{protocol.StringID("a")}}, true, []string{`"a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := newReqLog()
			s := openSession(t, newTestHub(t, &Options{Tag: producer, Log: log}), "s")
			st := s.NewStream(len(tc.want) + 1)
			for _, ids := range tc.expect {
				st.Expect(ids...)
			}
			c, err := st.Attach(0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.putFirst {
				_ = st.Put(notice(1), false)
			}
			if got := log.startCalls(); len(got) != 0 {
				t.Fatalf("Start before the client held an event id: %+v", got)
			}
			c.MarkResumable()
			_ = st.Put(notice(2), false)
			_ = st.Put(result(1), true)
			want := []startCall{{"s", st.ID(), tc.want}}
			if diff := cmp.Diff(want, log.startCalls()); diff != "" {
				t.Errorf("Start calls (-want +got):\n%s", diff)
			}
			r, err := log.Replay(context.Background(), "s", st.ID(), 0)
			if err != nil || r == nil {
				t.Fatalf("Replay = %+v, %v", r, err)
			}
			if diff := cmp.Diff(tc.want, idStrings(r.Requests)); diff != "" {
				t.Errorf("the log's requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProducer: a stream's id names the hub that produced it, before its last underscore.
func TestProducer(t *testing.T) {
	for _, tc := range []struct{ streamID, want string }{
		{"abc_1z", "abc"},
		{"abc", ""},
		{"", ""},
		{"_1", ""},
		{"a_b_c_12", "a_b_c"},
		{"x-Y_9_1", "x-Y_9"},
		{"abc_", "abc"},
	} {
		if got := Producer(tc.streamID); got != tc.want {
			t.Errorf("Producer(%q) = %q, want %q", tc.streamID, got, tc.want)
		}
	}
	// The ids a hub makes name it, whatever its tag.
	for _, tag := range []string{"prod", "a_b", "x-_y"} {
		st := openSession(t, newTestHub(t, &Options{Tag: tag}), "s").NewStream(1)
		if got := Producer(st.ID()); got != tag {
			t.Errorf("Producer(%q) = %q, want the hub's tag %q", st.ID(), got, tag)
		}
	}
}

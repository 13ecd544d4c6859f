package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrEventsLost is returned by RedisEventLog.Replay when events that followed the one asked
// about are no longer held (trimmed, expired, or never written because the queue was full).
var ErrEventsLost = errors.New("events after this id are no longer held")

// replayPage is the most events one Replay returns: about what a stream holds in memory; a
// client that resumes again gets the next ones.
const replayPage = 256

// LoggedEvent is one event of a stream's log: its sequence number in the stream and the
// message.
type LoggedEvent struct {
	Seq  uint64 `json:"q"`
	Data []byte `json:"d"`
}

// Logged is what an event log holds of a stream after an event.
type Logged struct {
	// Events follow the event asked about, in order, without a gap (at most a page).
	Events []LoggedEvent
	// Complete says that the stream's end follows Events; More, that more events follow.
	Complete, More bool
	// Requests is what Start recorded: the ids of the requests the stream answers, a JSON
	// array; nil when none was.
	Requests json.RawMessage
	// Standalone says that StartStandalone began the stream. Both outlive the trimming of
	// the stream's first events.
	Standalone bool
	// Producer is the replica that took the stream over (Claim); empty when none did.
	Producer string
}

// EventLogOptions configures a RedisEventLog.
type EventLogOptions struct {
	// Retention is how long a stream's events stay after its last append (its key's TTL). If
	// zero, a minute.
	Retention time.Duration
	// MaxEvents caps the events kept per stream (approximately: Redis trims in whole nodes).
	// If zero, 1000.
	MaxEvents int64
	// Queue is how many appends may wait to be written; one that finds it full is dropped
	// and counted, so that a slow Redis never holds up a stream. If zero, 4096.
	Queue int
	// Budget bounds the bytes of events the logs of all the replicas sharing the store hold
	// together (see RedisEventLog.enforceBudget). If zero, none.
	Budget int64
	// Sealer seals the messages the log publishes on the bus (appended events, a stream
	// taken over), as BusOptions.Sealer, which must open them. Nil: in the clear.
	Sealer Sealer
}

// RedisEventLog keeps the events of sessions' SSE streams in Redis Streams, one per stream,
// under the session's hashed key (…:{hash}:ev:<stream>), so that a client can resume a stream
// with Last-Event-ID wherever the log is read. Appends are queued and written by one
// goroutine in pipelines, off the request's path; Replay reads directly. Entry ids are the
// events' sequence numbers (seq+1, so that the priming event 0 never needs one), so an event
// appended twice is refused by Redis rather than stored twice; a stream's end is an entry
// marked "end".
//
// Beside each stream, with the same time to live: what its start said (a hash, …:evm:<stream>:
// whether it is its session's standalone stream, the requests it answers), which trimming
// must not take away with the stream's first entries, and the replica that took it over
// (…:evp:<stream>). Beside the session's streams, which one is its standalone stream now
// (…:evs), renewed with each of them: a new one's start ends the one before.
type RedisEventLog struct {
	store *redisConn
	opts  EventLogOptions

	queue   chan logAppend
	dropped atomic.Int64
	failed  atomic.Int64

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	// budgetSwept is when the writer last swept the budget's books of the logs that expired
	// (store clock, Unix ms). Only the writer's goroutine uses it.
	budgetSwept int64
}

// logAppend is one queued append.
type logAppend struct {
	key      string
	producer string // its producer key
	meta     string // its start's key
	current  string // the key naming the session's standalone stream
	digest   string
	stream   string
	events   []LoggedEvent
	complete bool
	// start marks the stream's first append (Start), with the ids of its requests, or with
	// standalone set (StartStandalone).
	start      bool
	requests   json.RawMessage
	standalone bool
	// written, when not nil, is told (once, buffered) whether the append was written:
	// AppendWait waits for it.
	written chan error
}

// NewEventLog returns an event log on the store's Redis; Close stops its writer.
func (s *RedisStore) NewEventLog(opts *EventLogOptions) *RedisEventLog {
	var o EventLogOptions
	if opts != nil {
		o = *opts
	}
	if o.Retention <= 0 {
		o.Retention = time.Minute
	}
	if o.MaxEvents <= 0 {
		o.MaxEvents = 1000
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	l := &RedisEventLog{store: s.redisConn, opts: o, queue: make(chan logAppend, o.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go l.write()
	return l
}

// key is the Redis key of a stream's log.
func (l *RedisEventLog) key(sessionID, streamID string) string {
	return l.store.opts.KeyPrefix + ":{" + sessionHash(sessionID) + "}:ev:" + streamID
}

// producerKey is the Redis key naming the replica that took a stream over (Claim); it lives
// as long as the stream's log.
func (l *RedisEventLog) producerKey(sessionID, streamID string) string {
	return l.store.opts.KeyPrefix + ":{" + sessionHash(sessionID) + "}:evp:" + streamID
}

// metaKey is the Redis key of what a stream's start said (a hash: "sa" for the session's
// standalone stream, "rq" the requests it answers); it lives as long as the stream's log,
// whose first entries trimming removes.
func (l *RedisEventLog) metaKey(sessionID, streamID string) string {
	return l.store.opts.KeyPrefix + ":{" + sessionHash(sessionID) + "}:evm:" + streamID
}

// currentKey is the Redis key naming a session's standalone stream now (session hash
// digest); renewed with each of the session's streams, it outlives their logs.
func (l *RedisEventLog) currentKey(digest string) string {
	return l.store.opts.KeyPrefix + ":{" + digest + "}:evs"
}

// Append queues a stream's events, in order, and its end when complete. It never blocks: past
// the queue's size the append is dropped and counted (the stream then resumes only where it
// is held).
func (l *RedisEventLog) Append(sessionID, streamID string, events []LoggedEvent, complete bool) {
	l.queueOp(l.newAppend(sessionID, streamID, events, complete))
}

// newAppend is the append of a stream's events, and its end when complete; one with neither
// starts the stream.
func (l *RedisEventLog) newAppend(sessionID, streamID string, events []LoggedEvent, complete bool) logAppend {
	return logAppend{key: l.key(sessionID, streamID), digest: sessionHash(sessionID), stream: streamID, events: events, complete: complete,
		start: len(events) == 0 && !complete}
}

// errLogClosed is AppendWait's error once Close stopped the writer.
var errLogClosed = errors.New("event log: closed")

// AppendWait is Append, but waits for a place in the queue rather than drop the append, then
// until the append is written to Redis, and reports whether it was (an event refused because
// the log holds its id already, written first, counts as written). It returns ctx's error when
// ctx ends first; the append may still be written then.
func (l *RedisEventLog) AppendWait(ctx context.Context, sessionID, streamID string, events []LoggedEvent, complete bool) error {
	op := l.newAppend(sessionID, streamID, events, complete)
	op.written = make(chan error, 1)
	l.completeOp(&op)
	select {
	case l.queue <- op:
	case <-l.stop:
		return errLogClosed
	case <-ctx.Done():
		return fmt.Errorf("event log: queue an append: %w", ctx.Err())
	}
	select {
	case err := <-op.written:
		return err
	case <-l.done:
		// The writer wrote what was queued before it stopped, this append's answer with it.
		select {
		case err := <-op.written:
			return err
		default:
			return errLogClosed
		}
	case <-ctx.Done():
		return fmt.Errorf("event log: wait for an append: %w", ctx.Err())
	}
}

// Start queues the marker that a stream exists (its client holds an event id of it), with the
// ids of the requests it answers (a JSON array), so that a replica resuming it after its
// producer stopped knows which answers never came.
func (l *RedisEventLog) Start(sessionID, streamID string, requests json.RawMessage) {
	l.queueOp(logAppend{key: l.key(sessionID, streamID), digest: sessionHash(sessionID), stream: streamID, start: true, requests: requests})
}

// StartStandalone queues the marker that a session's standalone stream exists: it lives as
// long as its session, and a replica takes it over when its producer stops (Claim).
func (l *RedisEventLog) StartStandalone(sessionID, streamID string) {
	l.queueOp(logAppend{key: l.key(sessionID, streamID), digest: sessionHash(sessionID), stream: streamID, start: true, standalone: true})
}

// Touch queues a renewal of a stream's retention: a stream that goes on while nothing is
// appended to it (the standalone stream of a quiet session) stays resumable.
func (l *RedisEventLog) Touch(sessionID, streamID string) {
	l.queueOp(logAppend{key: l.key(sessionID, streamID), digest: sessionHash(sessionID), stream: streamID})
}

// scriptClaimStream makes ARGV[2] the producer of a stream (KEYS[1], its producer key) if ARGV[1]
// is, or if no replica took the stream over yet, and announces it on the session's channel
// (ARGV[4], message ARGV[5]); the key lives ARGV[3] ms. It returns the producer after the
// claim, or nil for a session's standalone stream (its start's key KEYS[2] says so) that
// another replaced (KEYS[3] names another, not ARGV[6]).
var scriptClaimStream = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and cur ~= ARGV[2] then return cur end
if redis.call('HEXISTS', KEYS[2], 'sa') == 1 then
  local now = redis.call('GET', KEYS[3])
  if now and now ~= ARGV[6] then return false end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if cur ~= ARGV[2] then redis.call('PUBLISH', ARGV[4], ARGV[5]) end
return ARGV[2]
`)

// ErrStreamReplaced is returned by Claim for a session's standalone stream that another
// replaced (its client opened a new one): it does not go on.
var ErrStreamReplaced = errors.New("the session has another standalone stream now")

// Claim makes replica to the producer of a stream whose producer, replica from, stopped
// (the one that began it when none took it over yet), unless another replica claimed it
// first, and tells the replicas following the session (BusStreamTaken). It returns the
// stream's producer after the claim; ErrStreamReplaced for a session's standalone stream that
// another replaced, which nobody claims.
func (l *RedisEventLog) Claim(ctx context.Context, sessionID, streamID, from, to string) (string, error) {
	digest := sessionHash(sessionID)
	msg, err := json.Marshal(&BusMessage{Kind: BusStreamTaken, From: to, Session: digest, Stream: streamID, Replica: to})
	if err != nil {
		return "", err
	}
	ctx, cancel := l.store.bound(ctx)
	defer cancel()
	channel := l.store.sessionChannel(digest)
	owner, err := scriptClaimStream.Run(ctx, l.store.client, []string{l.producerKey(sessionID, streamID), l.metaKey(sessionID, streamID), l.currentKey(digest)},
		from, to, l.opts.Retention.Milliseconds(), channel, SealFor(l.opts.Sealer, channel, msg), streamID).Text()
	if errors.Is(err, redis.Nil) {
		return "", ErrStreamReplaced
	}
	if err != nil {
		return "", fmt.Errorf("event log: claim a stream: %w", err)
	}
	return owner, nil
}

func (l *RedisEventLog) queueOp(op logAppend) {
	l.completeOp(&op)
	select {
	case l.queue <- op:
	default:
		if l.dropped.Add(1) == 1 {
			l.store.logger.Warn("the event log's queue is full: appends are dropped; those streams resume only on the replica that holds them", "queue", l.opts.Queue)
		}
	}
}

// completeOp sets the keys an append touches beside its stream's log.
func (l *RedisEventLog) completeOp(op *logAppend) {
	op.producer = l.store.opts.KeyPrefix + ":{" + op.digest + "}:evp:" + op.stream
	op.meta = l.store.opts.KeyPrefix + ":{" + op.digest + "}:evm:" + op.stream
	op.current = l.currentKey(op.digest)
}

// write takes queued appends and writes them in pipelines until Close.
func (l *RedisEventLog) write() {
	defer close(l.done)
	const batch = 256
	for {
		var ops []logAppend
		select {
		case op := <-l.queue:
			ops = append(ops, op)
		case <-l.stop:
			// Write what is queued, then stop.
			for {
				select {
				case op := <-l.queue:
					ops = append(ops, op)
					continue
				default:
				}
				break
			}
			if len(ops) > 0 {
				l.flush(ops)
			}
			return
		}
	more:
		for len(ops) < batch {
			select {
			case op := <-l.queue:
				ops = append(ops, op)
			default:
				break more
			}
		}
		l.flush(ops)
	}
}

// scriptStart writes what a stream's start says beside it (KEYS[1], a hash: "rq" ARGV[4]
// when not empty, "sa" when ARGV[5] is "1") with its time to live, ARGV[1] ms, in one step: a
// hash left without one would never go. The start of a session's standalone stream (ARGV[5]
// "1") names it, ARGV[2], the session's current one (KEYS[2], for ARGV[1] ms) and, in the
// same step, logs the end of the one it replaces, whose log is ARGV[3] followed by that one's
// name, while that log is held (one that expired is not written again): no failure, nor the
// replica's death, can come between the two and leave the old stream to be claimed in place
// of the new one. The old stream's log is a key of the same session, under the same hash tag,
// so in the same slot as the declared keys.
var scriptStart = redis.NewScript(`
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'rq', ARGV[4]) end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'sa', '1')
  local prev = redis.call('GET', KEYS[2])
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[1])
  if prev and prev ~= ARGV[2] then
    local key = ARGV[3] .. prev
    if redis.call('EXISTS', key) == 1 then
      redis.call('XADD', key, '*', 'end', '1')
    end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
`)

// startScript is a run of scriptStart queued in a pipeline, by its SHA: sent again, whole,
// if Redis did not know the script (it restarted, or never ran it).
type startScript struct {
	cmd  *redis.Cmd
	keys []string
	args []any
}

// flush writes appends in one pipeline. An entry Redis refuses because its id is not above
// the stream's last (written before) is not an error.
func (l *RedisEventLog) flush(ops []logAppend) {
	ctx, cancel := l.store.bound(context.Background())
	defer cancel()
	retention := l.opts.Retention.Milliseconds()
	pipe := l.store.client.Pipeline()
	var starts []startScript
	budget := l.newBudgetBooks()
	for _, op := range ops {
		if op.start {
			if st := l.queueStart(ctx, pipe, op, retention); st != nil {
				starts = append(starts, *st)
			}
		}
		for _, e := range op.events {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: op.key, MaxLen: l.opts.MaxEvents, Approx: true,
				ID: strconv.FormatUint(e.Seq+1, 10) + "-0", Values: []any{"d", e.Data}})
		}
		if op.complete {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: op.key, MaxLen: l.opts.MaxEvents, Approx: true, ID: "*", Values: []any{"end", "1"}})
		}
		pipe.PExpire(ctx, op.key, l.opts.Retention)
		pipe.PExpire(ctx, op.producer, l.opts.Retention)
		pipe.PExpire(ctx, op.meta, l.opts.Retention)
		pipe.PExpire(ctx, op.current, l.opts.Retention)
		if l.opts.Budget > 0 {
			budget.count(ctx, pipe, op)
		}
		if len(op.events) > 0 || op.complete {
			// In the same round trip, live to a replica where the stream's client resumed
			// it (RedisBus.Follow); Redis drops it when none listens.
			if msg, err := eventsMessage(op.digest, op.stream, op.events, op.complete, nil); err == nil {
				channel := l.store.sessionChannel(op.digest)
				pipe.Publish(ctx, channel, SealFor(l.opts.Sealer, channel, msg))
			}
		}
	}
	cmds, err := pipe.Exec(ctx)
	failed := err != nil && l.failedIn(cmds)
	if !failed {
		err = nil
	}
	tellWritten(ops, err)
	if failed {
		return
	}
	// A script Redis did not know yet goes whole, once: Redis keeps it from then on.
	for _, s := range starts {
		if isNoScript(s.cmd.Err()) {
			if err := scriptStart.Run(ctx, l.store.client, s.keys, s.args...).Err(); err != nil {
				l.failedIn([]redis.Cmder{redis.NewCmdResult(nil, err)})
			}
		}
	}
	if l.opts.Budget > 0 {
		l.enforceBudget(ctx, budget.over(l.opts.Budget))
	}
}

// queueStart queues, on pipe, the marker that starts op's stream and what it says beside the
// stream; it returns the script that records that, when there is one to run.
func (l *RedisEventLog) queueStart(ctx context.Context, pipe redis.Pipeliner, op logAppend, retention int64) *startScript {
	// The stream exists (its client holds the priming event's id): a marker before every
	// event's id, refused as a duplicate if one came first. What it says is kept beside the
	// stream too, where trimming does not reach (replicas of earlier versions read it from the
	// marker).
	values := []any{"start", "1"}
	if op.requests != nil {
		values = append(values, "rq", string(op.requests))
	}
	if op.standalone {
		values = append(values, "sa", "1")
	}
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: op.key, MaxLen: l.opts.MaxEvents, Approx: true, ID: "0-1", Values: values})
	if op.requests == nil && !op.standalone {
		return nil
	}
	standalone := ""
	if op.standalone {
		standalone = "1"
	}
	s := startScript{keys: []string{op.meta, op.current},
		args: []any{retention, op.stream, l.store.opts.KeyPrefix + ":{" + op.digest + "}:ev:", string(op.requests), standalone}}
	s.cmd = scriptStart.EvalSha(ctx, pipe, s.keys, s.args...)
	return &s
}

// tellWritten tells the appends that wait for their write (written) how it went: err, or
// nil when it was written.
func tellWritten(ops []logAppend, err error) {
	for _, op := range ops {
		if op.written == nil {
			continue
		}
		if err != nil {
			op.written <- fmt.Errorf("event log: write: %w", err)
		} else {
			op.written <- nil
		}
	}
}

// isNoScript reports whether Redis refused a script's SHA: it does not know the script.
func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// failedIn counts and logs the first failure among a pipeline's commands, if any; an entry
// refused because its id is not above the stream's last (written before) is not one.
func (l *RedisEventLog) failedIn(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		e := c.Err()
		if e == nil || errors.Is(e, redis.Nil) || isNoScript(e) || strings.Contains(e.Error(), "equal or smaller than the target stream top item") {
			continue
		}
		if l.failed.Add(1) == 1 || l.failed.Load()%1000 == 0 {
			l.store.logger.Warn("writing to the event log failed; those streams resume only on the replica that holds them", "failures", l.failed.Load(), "error", e.Error())
		}
		return true
	}
	return false
}

// Replay returns a stream's events after sequence number after, in order and without a gap
// (at most a page of them), and whether its end follows them; found is false when the log
// holds nothing of the stream (another session's, expired, never logged). ErrEventsLost when
// events after after are no longer all held.
func (l *RedisEventLog) Replay(ctx context.Context, sessionID, streamID string, after uint64) (*Logged, error) {
	logged := &Logged{}
	events, complete, found, err := l.replay(ctx, sessionID, streamID, after, logged)
	if err != nil || !found {
		return nil, err
	}
	logged.Events, logged.Complete = events, complete
	logged.More = !complete && len(events) == replayPage
	return logged, nil
}

func (l *RedisEventLog) replay(ctx context.Context, sessionID, streamID string, after uint64, head *Logged) (events []LoggedEvent, complete, found bool, err error) {
	if after >= math.MaxUint64-1 {
		return nil, false, false, nil
	}
	ctx, cancel := l.store.bound(ctx)
	defer cancel()
	key := l.key(sessionID, streamID)
	pipe := l.store.client.Pipeline()
	first := pipe.XRangeN(ctx, key, "-", "+", 1)
	rest := pipe.XRangeN(ctx, key, strconv.FormatUint(after+2, 10)+"-0", "+", replayPage+1)
	producer := pipe.Get(ctx, l.producerKey(sessionID, streamID))
	meta := pipe.HGetAll(ctx, l.metaKey(sessionID, streamID))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, false, fmt.Errorf("event log: replay: %w", err)
	}
	if len(first.Val()) == 0 {
		return nil, false, false, nil
	}
	// What the start said: beside the stream, or, as replicas of earlier versions write it,
	// in the start marker (while trimming has not removed it).
	start := first.Val()[0].Values
	rq, ok := meta.Val()["rq"]
	if !ok {
		rq, _ = start["rq"].(string)
	}
	if rq != "" && json.Valid([]byte(rq)) {
		head.Requests = json.RawMessage(rq)
	}
	_, head.Standalone = meta.Val()["sa"]
	if !head.Standalone {
		_, head.Standalone = start["sa"]
	}
	head.Producer = producer.Val()
	for _, e := range rest.Val() {
		if _, ok := e.Values["end"]; ok {
			complete = true
			break
		}
		seq, ok := entrySeq(e)
		if !ok {
			continue
		}
		if seq != after+1+uint64(len(events)) {
			return nil, false, true, ErrEventsLost
		}
		if len(events) == replayPage {
			break // a page: the client resumes again for the next
		}
		events = append(events, LoggedEvent{Seq: seq, Data: []byte(e.Values["d"].(string))})
	}
	// The first event logged after the one asked about must be the next one: an earlier
	// part trimmed away, or a log that began later (an expired key written again), is a gap.
	if seq, ok := entrySeq(first.Val()[0]); ok && seq > after+1 {
		return nil, false, true, ErrEventsLost
	}
	return events, complete, true, nil
}

// entrySeq returns the sequence number of an event entry, ok false for a marker.
func entrySeq(e redis.XMessage) (uint64, bool) {
	if _, ok := e.Values["d"].(string); !ok {
		return 0, false
	}
	ms, _, _ := strings.Cut(e.ID, "-")
	n, err := strconv.ParseUint(ms, 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n - 1, true
}

// Dropped returns how many appends were dropped because the queue was full.
func (l *RedisEventLog) Dropped() int64 { return l.dropped.Load() }

// Close writes what is queued and stops the writer. It may be called more than once.
func (l *RedisEventLog) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	return nil
}

// The books of the event logs' byte budget (EventLogOptions.Budget), shared by the replicas
// under one hash tag, so that one script reads and writes them all: the bytes appended to each
// stream's log (a hash by log key) and their sum, when each log expires (a sorted set, renewed
// with the log's time to live), and when each finished stream ended (a sorted set: the order
// of eviction). Events that trimming (MaxEvents) takes from a long stream still count until its
// log goes: the books err towards evicting early, never late.
const (
	budgetBytes   = ":{evbudget}:bytes"
	budgetSizes   = ":{evbudget}:sizes"
	budgetExpiry  = ":{evbudget}:expiry"
	budgetEnded   = ":{evbudget}:ended"
	budgetLogPart = "}:ev:"
)

// budgetBooks is what one flush adds to the budget's books.
type budgetBooks struct {
	l     *RedisEventLog
	now   int64 // store clock, Unix ms
	total *redis.IntCmd
}

func (l *RedisEventLog) newBudgetBooks() *budgetBooks {
	return &budgetBooks{l: l, now: l.store.opts.Now().UnixMilli()}
}

func (l *RedisEventLog) budgetKey(suffix string) string { return l.store.opts.KeyPrefix + suffix }

// count queues, in the flush's pipeline, what op adds to the books: its events' bytes, its
// log's new expiry, its stream's end.
func (b *budgetBooks) count(ctx context.Context, pipe redis.Pipeliner, op logAppend) {
	l := b.l
	n := 0
	for _, e := range op.events {
		n += len(e.Data)
	}
	expiry := redis.Z{Score: float64(b.now + l.opts.Retention.Milliseconds()), Member: op.key}
	if n > 0 {
		pipe.HIncrBy(ctx, l.budgetKey(budgetSizes), op.key, int64(n))
		b.total = pipe.IncrBy(ctx, l.budgetKey(budgetBytes), int64(n))
		pipe.ZAdd(ctx, l.budgetKey(budgetExpiry), expiry)
	} else {
		// A renewal of a log the books know (one with events); the others hold nothing.
		pipe.ZAddXX(ctx, l.budgetKey(budgetExpiry), expiry)
	}
	if op.complete {
		pipe.ZAddNX(ctx, l.budgetKey(budgetEnded), redis.Z{Score: float64(b.now), Member: op.key})
	}
}

// over reports whether the flush left the logs over budget, as far as its last count says.
func (b *budgetBooks) over(budget int64) bool {
	return b.total != nil && b.total.Err() == nil && b.total.Val() > budget
}

// scriptBudget keeps the budget's books (KEYS: the sum, the sizes, the expiries, the ends):
// it forgets the logs that expired by ARGV[1] (Unix ms), then, while the sum is over ARGV[2],
// takes the finished stream that ended first off the books and returns its log's key, for the
// caller to delete. A stream not finished is never taken.
var scriptBudget = redis.NewScript(`
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
for _, k in ipairs(gone) do
  local n = tonumber(redis.call('HGET', KEYS[2], k) or '0')
  redis.call('DECRBY', KEYS[1], n)
  redis.call('HDEL', KEYS[2], k)
  redis.call('ZREM', KEYS[3], k)
  redis.call('ZREM', KEYS[4], k)
end
local evicted = {}
local total = tonumber(redis.call('GET', KEYS[1]) or '0')
while total > tonumber(ARGV[2]) do
  local first = redis.call('ZRANGE', KEYS[4], 0, 0)
  if #first == 0 then break end
  local k = first[1]
  local n = tonumber(redis.call('HGET', KEYS[2], k) or '0')
  total = redis.call('DECRBY', KEYS[1], n)
  redis.call('HDEL', KEYS[2], k)
  redis.call('ZREM', KEYS[3], k)
  redis.call('ZREM', KEYS[4], k)
  evicted[#evicted + 1] = k
end
return evicted
`)

// enforceBudget keeps the event logs within EventLogOptions.Budget: when the logs are over
// it (over), or once per retention period to forget the logs that expired, the logs of
// finished streams are deleted, the stream that ended first first, until they are within it
// or none is left. The logs of open streams are never deleted for it: each is bounded by
// MaxEvents and expires with its retention. A client that resumes a deleted stream is
// answered as for one that expired. Called by the writer only.
func (l *RedisEventLog) enforceBudget(ctx context.Context, over bool) {
	now := l.store.opts.Now().UnixMilli()
	if !over && now-l.budgetSwept < l.opts.Retention.Milliseconds() {
		return
	}
	l.budgetSwept = now
	keys := []string{l.budgetKey(budgetBytes), l.budgetKey(budgetSizes), l.budgetKey(budgetExpiry), l.budgetKey(budgetEnded)}
	evicted, err := scriptBudget.Run(ctx, l.store.client, keys, now, l.opts.Budget).StringSlice()
	if err != nil {
		l.failedIn([]redis.Cmder{redis.NewCmdResult(nil, fmt.Errorf("event log budget: %w", err))})
		return
	}
	if len(evicted) == 0 {
		return
	}
	pipe := l.store.client.Pipeline()
	for _, key := range evicted {
		pipe.Del(ctx, key)
		if i := strings.LastIndex(key, budgetLogPart); i >= 0 {
			// What its start said, and who took it over, go with it.
			head, stream := key[:i+1], key[i+len(budgetLogPart):]
			pipe.Del(ctx, head+":evm:"+stream, head+":evp:"+stream)
		}
	}
	if cmds, err := pipe.Exec(ctx); err != nil {
		l.failedIn(cmds)
	}
}

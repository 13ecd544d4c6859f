package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisHeldCalls is a HeldCalls in Redis, shared by the replicas of a gateway. It is safe for
// concurrent use. Its keys, under the prefix given to NewRedisHeldCalls:
//
//   - <prefix>:hold:<id>, a call's JSON (HeldCall), which expires some time (Grace) after the
//     call's deadline, Redis's clock. Its session's id, a credential, is kept sealed (see
//     callWire), never as it is;
//   - <prefix>:holds, the index: a sorted set of the ids by deadline (Unix ms), for Pending
//     and HeldBy. Its members whose calls are gone are trimmed when it is written or read,
//     and it expires with its last member.
//
// Each command or script touches one key only, so the store works on a Redis cluster too.
type RedisHeldCalls struct {
	client   redis.UniversalClient
	prefix   string
	indexKey string
	sealer   Sealer
}

// Sealer seals what a record keeps of a call's session, its id (seal.Sealer, with the hold
// purpose): Seal encrypts and authenticates plaintext bound to ad, Open gives it back with
// the same ad, or fails. Every replica sharing the store needs one of the same keys.
type Sealer interface {
	Seal(plaintext, ad []byte) []byte
	Open(sealed, ad []byte) ([]byte, error)
}

// callWire is the stored form of a HeldCall: its JSON, with SessionID sealed (bound to the
// call's ID) in member "ssid" instead of in "sid", so that whoever reads Redis does not get
// a live session's id. A record of a release before sealing has "sid": it is read as it is.
// A release before sealing reads this form too, without the session's id (a call it takes
// over is dropped as if its session had ended), and writes it back without "ssid" when it
// decides or moves the call.
type callWire struct {
	HeldCall
	SealedSession []byte `json:"ssid,omitempty"`
}

// encode returns the stored form of c. unopened is what decode could not open of the
// session's id, for a call whose id it left out: written back as it was, so that a replica
// with the key it was sealed with can still take the call over.
func (s *RedisHeldCalls) encode(c HeldCall, unopened []byte) ([]byte, error) {
	w := callWire{HeldCall: c}
	switch {
	case c.SessionID != "":
		w.SealedSession = s.sealer.Seal([]byte(c.SessionID), []byte(c.ID))
		w.SessionID = ""
	case len(unopened) > 0:
		w.SealedSession = unopened
	}
	return json.Marshal(w)
}

// decode reads a stored call. A session id that does not open (sealed with a key not in this
// replica's list) is left out: the call cannot be taken over here, as if its session had
// ended; an update writes it back as it was (decodeKeeping), for the replicas that have it.
func (s *RedisHeldCalls) decode(val string) (HeldCall, error) {
	c, _, err := s.decodeKeeping(val)
	return c, err
}

// decodeKeeping is decode that also returns the sealed session id it could not open, if so.
func (s *RedisHeldCalls) decodeKeeping(val string) (c HeldCall, unopened []byte, err error) {
	var w callWire
	if err := json.Unmarshal([]byte(val), &w); err != nil {
		return HeldCall{}, nil, err
	}
	if len(w.SealedSession) > 0 {
		id, err := s.sealer.Open(w.SealedSession, []byte(w.ID))
		w.SessionID = ""
		if err != nil {
			return w.HeldCall, w.SealedSession, nil
		}
		w.SessionID = string(id)
	}
	return w.HeldCall, nil, nil
}

var _ HeldCalls = (*RedisHeldCalls)(nil)

// maxDecideTries bounds the compare-and-set rounds of a Decide. One is enough but when another
// replica decides the call at once, which decides it for good: the second round finds it
// decided.
const maxDecideTries = 5

// NewRedisHeldCalls returns a RedisHeldCalls that keeps its keys in client under keyPrefix (see
// RedisHeldCalls), sealing what it keeps of a call's session with sealer. If keyPrefix is "", it
// defaults to "manifold". The store does not own client: its caller closes it, after the
// store's last use.
func NewRedisHeldCalls(client redis.UniversalClient, keyPrefix string, sealer Sealer) *RedisHeldCalls {
	if client == nil || sealer == nil {
		panic("approval: NewRedisHeldCalls: nil client or sealer")
	}
	if keyPrefix == "" {
		keyPrefix = "manifold"
	}
	return &RedisHeldCalls{client: client, prefix: keyPrefix, indexKey: keyPrefix + ":holds", sealer: sealer}
}

// callKey is the key of the call id.
func (s *RedisHeldCalls) callKey(id string) string { return s.prefix + ":hold:" + id }

// luaNow sets now to Redis's clock, in Unix ms: the clock the keys expire by.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// scriptIndexAdd adds id ARGV[1] with deadline ARGV[2] (Unix ms) to the index KEYS[1], unless
// it is there already (then the Hold is refused: the ID is taken), trims the members past
// their deadline by more than ARGV[3] ms (Grace), and has the index expire that long after
// its last deadline.
var scriptIndexAdd = redis.NewScript(luaNow + `
local grace = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - grace)
redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + grace)
return 1
`)

// scriptIndexList trims the members of the index KEYS[1] past their deadline by more than
// ARGV[1] ms (Grace), and returns those left whose deadline is ARGV[2] (Unix ms, or '-inf')
// or later.
var scriptIndexList = redis.NewScript(luaNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))
return redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], '+inf')
`)

// scriptSwap replaces the value of KEYS[1] with ARGV[2], keeping its expiry, if it is ARGV[1]:
// a compare-and-set. It returns {1} when it did, {0, value} with the value it found else, and
// nil when the key is gone.
var scriptSwap = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return false end
if cur ~= ARGV[1] then return {0, cur} end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return {1}
`)

// Hold implements HeldCalls. The call's key expires Grace after its deadline; a deadline that far
// in the past holds nothing.
func (s *RedisHeldCalls) Hold(ctx context.Context, c HeldCall) error {
	if err := checkHold(&c); err != nil {
		return fmt.Errorf("held calls: hold: %w", err)
	}
	val, err := s.encode(c, nil)
	if err != nil {
		return fmt.Errorf("held calls: hold: encode: %w", err)
	}
	// The index first: a member whose call did not make it is skipped by the listings. (In a
	// pipeline a script is sent whole: EvalSha could not fall back when Redis lacks it.)
	pipe := s.client.Pipeline()
	added := scriptIndexAdd.Eval(ctx, pipe, []string{s.indexKey}, c.ID, c.Deadline.UnixMilli(), Grace.Milliseconds())
	set := pipe.Do(ctx, "set", s.callKey(c.ID), val, "pxat", c.Deadline.Add(Grace).UnixMilli(), "nx")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("held calls: hold: %w", err)
	}
	if err := added.Err(); err != nil {
		return fmt.Errorf("held calls: hold: index: %w", err)
	}
	if err := set.Err(); errors.Is(err, redis.Nil) {
		return errors.New("held calls: hold: a call with that ID is held already")
	} else if err != nil {
		return fmt.Errorf("held calls: hold: %w", err)
	}
	return nil
}

// Get implements HeldCalls.
func (s *RedisHeldCalls) Get(ctx context.Context, id string) (HeldCall, error) {
	val, err := s.client.Get(ctx, s.callKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return HeldCall{}, ErrNotFound
	}
	if err != nil {
		return HeldCall{}, fmt.Errorf("held calls: get: %w", err)
	}
	c, err := s.decode(val)
	if err != nil {
		return HeldCall{}, fmt.Errorf("held calls: get: decode: %w", err)
	}
	return c, nil
}

// Decide implements HeldCalls. It reads the call, decides it in this process, and stores it back
// only if it has not changed since (scriptSwap), so that of replicas deciding at once exactly
// one wins; the call keeps its expiry.
func (s *RedisHeldCalls) Decide(ctx context.Context, id, decision, approver string, at time.Time) (HeldCall, error) {
	if err := checkDecision(decision); err != nil {
		return HeldCall{}, fmt.Errorf("held calls: decide: %w", err)
	}
	return s.update(ctx, "decide", id, func(c *HeldCall) error { return decide(c, decision, approver, at) })
}

// Move implements HeldCalls, as Decide does.
func (s *RedisHeldCalls) Move(ctx context.Context, id, replica string) (HeldCall, error) {
	return s.update(ctx, "move", id, func(c *HeldCall) error { c.Replica = replica; return nil })
}

// update applies change to the call id and stores it back only if it has not changed since it
// was read (scriptSwap), trying again on the call as another replica left it; the call keeps
// its expiry. A change that fails returns the call as it stands with the error.
func (s *RedisHeldCalls) update(ctx context.Context, op, id string, change func(*HeldCall) error) (HeldCall, error) {
	key := s.callKey(id)
	val, err := s.client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return HeldCall{}, ErrNotFound
	}
	if err != nil {
		return HeldCall{}, fmt.Errorf("held calls: %s: %w", op, err)
	}
	for range maxDecideTries {
		c, unopened, err := s.decodeKeeping(val)
		if err != nil {
			return HeldCall{}, fmt.Errorf("held calls: %s: decode: %w", op, err)
		}
		next := c
		if err := change(&next); err != nil {
			return c, err
		}
		nextVal, err := s.encode(next, unopened)
		if err != nil {
			return HeldCall{}, fmt.Errorf("held calls: %s: encode: %w", op, err)
		}
		res, err := scriptSwap.Run(ctx, s.client, []string{key}, val, nextVal).Slice()
		switch {
		case errors.Is(err, redis.Nil):
			return HeldCall{}, ErrNotFound // released, or expired, since read
		case err != nil:
			return HeldCall{}, fmt.Errorf("held calls: %s: %w", op, err)
		case len(res) == 1:
			return next, nil
		case len(res) == 2:
			// Another replica's change came first: the next round reads the call it left.
			var ok bool
			if val, ok = res[1].(string); !ok {
				return HeldCall{}, fmt.Errorf("held calls: %s: unexpected answer of type %T", op, res[1])
			}
		default:
			return HeldCall{}, fmt.Errorf("held calls: %s: unexpected answer of %d values", op, len(res))
		}
	}
	return HeldCall{}, fmt.Errorf("held calls: %s: the call kept changing (%d tries)", op, maxDecideTries)
}

// Pending implements HeldCalls. It takes two round trips: one for the ids in the index, one for
// their calls.
func (s *RedisHeldCalls) Pending(ctx context.Context, now time.Time) ([]HeldCall, error) {
	// The index's scores are deadlines in whole ms: the calls of the ms of now are read, then
	// sorted out by their exact deadline.
	calls, err := s.list(ctx, fmt.Sprint(now.UnixMilli()))
	if err != nil {
		return nil, fmt.Errorf("held calls: pending: %w", err)
	}
	return slices.DeleteFunc(calls, func(c HeldCall) bool { return c.Decision != "" || !c.Deadline.After(now) }), nil
}

// Release implements HeldCalls.
func (s *RedisHeldCalls) Release(ctx context.Context, id string) error {
	pipe := s.client.Pipeline()
	pipe.Del(ctx, s.callKey(id))
	pipe.ZRem(ctx, s.indexKey, id)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("held calls: release: %w", err)
	}
	return nil
}

// HeldBy implements HeldCalls. It reads every call held, by any replica: a takeover is rare, and
// the index does not say which replica holds a call.
func (s *RedisHeldCalls) HeldBy(ctx context.Context, replica string) ([]HeldCall, error) {
	calls, err := s.list(ctx, "-inf")
	if err != nil {
		return nil, fmt.Errorf("held calls: held by: %w", err)
	}
	return slices.DeleteFunc(calls, func(c HeldCall) bool { return c.Replica != replica }), nil
}

// All implements HeldCalls.
func (s *RedisHeldCalls) All(ctx context.Context) ([]HeldCall, error) {
	calls, err := s.list(ctx, "-inf")
	if err != nil {
		return nil, fmt.Errorf("held calls: all: %w", err)
	}
	return calls, nil
}

// list trims the index and returns the calls of its members whose deadline is from (Unix ms,
// or "-inf") or later, oldest first, skipping those gone. It reads the calls with a pipeline
// of GETs, not an MGET, which a cluster client sends to each node in one round trip whatever
// the nodes' version.
func (s *RedisHeldCalls) list(ctx context.Context, from string) ([]HeldCall, error) {
	ids, err := scriptIndexList.Run(ctx, s.client, []string{s.indexKey}, Grace.Milliseconds(), from).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.client.Pipeline()
	gets := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		gets[i] = pipe.Get(ctx, s.callKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	calls := make([]HeldCall, 0, len(ids))
	for _, get := range gets {
		val, err := get.Result()
		if errors.Is(err, redis.Nil) {
			continue // released or expired since the index was read
		}
		if err != nil {
			return nil, err
		}
		c, err := s.decode(val)
		if err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		calls = append(calls, c)
	}
	slices.SortFunc(calls, oldestFirst)
	return calls, nil
}

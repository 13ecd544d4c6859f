package pin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultKeyPrefix is the key prefix of a RedisStore given none.
const defaultKeyPrefix = "manifold"

// maxConflicts bounds how often an operation of a RedisStore starts again because another
// replica changed the same pin between its read and its write. Each conflict means that
// another replica's write went through, so that a few suffice; the bound only stops a
// livelock from spinning.
const maxConflicts = 50

// RedisStore is a Store in Redis, shared by the gateway's replicas. It is safe for
// concurrent use.
//
// It keeps one hash, <prefix>:pins, whose fields are "<upstream>\x00<tool>" and values a
// Pin's JSON. Observe, Accept and Reject read the pin, compute the new one here, and write
// it with a script that does so only if the stored value is still the one read; otherwise
// they start again from the new value. Reads cost one round trip, a change two.
type RedisStore struct {
	client redis.UniversalClient
	// key is the hash of the pins.
	key string
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a RedisStore on client, whose keys begin with keyPrefix (if empty,
// "manifold"). The store does not close client.
func NewRedisStore(client redis.UniversalClient, keyPrefix string) *RedisStore {
	if client == nil {
		panic("pin: NewRedisStore with a nil client")
	}
	if keyPrefix == "" {
		keyPrefix = defaultKeyPrefix
	}
	return &RedisStore{client: client, key: keyPrefix + ":pins"}
}

// scriptSwap sets field ARGV[1] of the hash KEYS[1] to ARGV[3] (or deletes it, when ARGV[3]
// is "") if it holds ARGV[2] ("" for absent: a stored pin is never empty) and returns 1,
// else returns 0.
var scriptSwap = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur == false then cur = '' end
if cur ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
`)

// field returns the field of the pin of upstream and tool.
func field(upstream, tool string) string { return upstream + "\x00" + tool }

// Observe implements Store.Observe.
func (s *RedisStore) Observe(ctx context.Context, upstream, tool string, def json.RawMessage, sc Scheme, now time.Time) (Pin, bool, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, false, err
	}
	var changed bool
	p, err := s.update(ctx, "observe", upstream, tool, func(cur *Pin) (Pin, bool, error) {
		next, ch, err := observe(cur, upstream, tool, def, sc, now)
		changed = ch
		return next, ch, err
	})
	return p, changed, err
}

// List implements Store.List.
func (s *RedisStore) List(ctx context.Context) ([]Pin, error) {
	all, err := s.client.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("pins: list: %w", err)
	}
	out := make([]Pin, 0, len(all))
	for f, v := range all {
		p, err := decodePin(v)
		if err != nil {
			return nil, fmt.Errorf("pins: list: field %q of %s: %w", f, s.key, err)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, comparePins)
	return out, nil
}

// Sweep implements Store.Sweep. It reads every pin (one round trip), then writes each one
// that changes, or deletes it, only if it is still as read (one round trip each); a pin
// another replica changed meanwhile is read again and swept as it is then.
func (s *RedisStore) Sweep(ctx context.Context, upstream string, listed []string, now time.Time, after time.Duration) ([]Pin, error) {
	if err := checkNames(upstream, ""); err != nil {
		return nil, err
	}
	isListed := make(map[string]bool, len(listed))
	for _, tool := range listed {
		isListed[tool] = true
	}
	all, err := s.client.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("pins: sweep %q: %w", upstream, err)
	}
	var removed []Pin
	for f, stored := range all {
		up, tool, ok := strings.Cut(f, "\x00")
		if !ok || up != upstream {
			continue
		}
		p, gone, err := s.sweepOne(ctx, f, stored, isListed[tool], now, after)
		if err != nil {
			return removed, fmt.Errorf("pins: sweep %q of %q: %w", tool, upstream, err)
		}
		if gone {
			removed = append(removed, p)
		}
	}
	slices.SortFunc(removed, comparePins)
	return removed, nil
}

// sweepOne sweeps the pin of field f, stored as stored when read, and returns it, and
// whether it was removed.
func (s *RedisStore) sweepOne(ctx context.Context, f, stored string, listed bool, now time.Time, after time.Duration) (Pin, bool, error) {
	for range maxConflicts {
		p, err := decodePin(stored)
		if err != nil {
			return Pin{}, false, fmt.Errorf("the stored pin (field %q of %s): %w", f, s.key, err)
		}
		next, changed, remove := sweep(p, listed, now, after)
		if !changed && !remove {
			return next, false, nil
		}
		v := ""
		if !remove {
			b, err := encodePin(next)
			if err != nil {
				return Pin{}, false, err
			}
			v = string(b)
		}
		ok, err := scriptSwap.Run(ctx, s.client, []string{s.key}, f, stored, v).Int()
		if err != nil {
			return Pin{}, false, err
		}
		if ok == 1 {
			return next, remove, nil
		}
		stored, err = s.client.HGet(ctx, s.key, f).Result()
		if errors.Is(err, redis.Nil) {
			return Pin{}, false, nil // removed by another replica meanwhile
		}
		if err != nil {
			return Pin{}, false, err
		}
	}
	return Pin{}, false, fmt.Errorf("the pin changed under each of %d tries", maxConflicts)
}

// Accept implements Store.Accept.
func (s *RedisStore) Accept(ctx context.Context, upstream, tool, h, by string, now time.Time) (Pin, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, err
	}
	return s.update(ctx, "accept", upstream, tool, func(cur *Pin) (Pin, bool, error) {
		next, err := accept(cur, upstream, tool, h, by, now)
		return next, err == nil, err
	})
}

// Reject implements Store.Reject.
func (s *RedisStore) Reject(ctx context.Context, upstream, tool, h, by string, now time.Time) (Pin, error) {
	if err := checkNames(upstream, tool); err != nil {
		return Pin{}, err
	}
	return s.update(ctx, "reject", upstream, tool, func(cur *Pin) (Pin, bool, error) {
		return reject(cur, upstream, tool, h, by, now)
	})
}

// update reads the pin of upstream and tool, applies change to it (nil: no pin), and, when
// change reports a change, writes the result if the pin is still as read, else starts
// again. It returns the pin as change left it. op names the operation in errors.
func (s *RedisStore) update(ctx context.Context, op, upstream, tool string, change func(*Pin) (Pin, bool, error)) (Pin, error) {
	f := field(upstream, tool)
	for range maxConflicts {
		stored, err := s.client.HGet(ctx, s.key, f).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return Pin{}, fmt.Errorf("pins: %s %q of %q: %w", op, tool, upstream, err)
		}
		var cur *Pin
		if err == nil {
			p, err := decodePin(stored)
			if err != nil {
				return Pin{}, fmt.Errorf("pins: %s %q of %q: the stored pin (field %q of %s): %w", op, tool, upstream, f, s.key, err)
			}
			cur = &p
		}
		next, changed, err := change(cur)
		if err != nil || !changed {
			return next, err
		}
		v, err := encodePin(next)
		if err != nil {
			return Pin{}, fmt.Errorf("pins: %s %q of %q: %w", op, tool, upstream, err)
		}
		ok, err := scriptSwap.Run(ctx, s.client, []string{s.key}, f, stored, v).Int()
		if err != nil {
			return Pin{}, fmt.Errorf("pins: %s %q of %q: %w", op, tool, upstream, err)
		}
		if ok == 1 {
			return next, nil
		}
	}
	return Pin{}, fmt.Errorf("pins: %s %q of %q: the pin changed under each of %d tries", op, tool, upstream, maxConflicts)
}

// decodePin reads a stored pin.
func decodePin(v string) (Pin, error) {
	var p Pin
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return Pin{}, fmt.Errorf("unreadable: %w", err)
	}
	if p.Hash == "" {
		return Pin{}, errors.New("unreadable: no hash")
	}
	return p, nil
}

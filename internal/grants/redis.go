package grants

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/seal"
)

// NewRedisVault returns a Vault in Redis, on client, shared by every replica on the same
// server and keyPrefix (if empty, "manifold"): the session store's client and prefix. keys
// seal the grants (seal.PurposeGrants). It does not connect, and does not close client.
// The package doc lists its keys.
func NewRedisVault(client redis.UniversalClient, keyPrefix string, keys *seal.Keys, opts *Options) *Vault {
	if client == nil {
		panic("grants: NewRedisVault with a nil client")
	}
	if keyPrefix == "" {
		keyPrefix = "manifold"
	}
	return newVault(&redisStore{client: client, prefix: keyPrefix + ":grants", c: newCodec(keys)}, opts)
}

// redisStore is a store in Redis.
type redisStore struct {
	client redis.UniversalClient
	// prefix begins every key: <keyPrefix>:grants.
	prefix string
	c      codec
}

// principalField is the field of a principal's hash that holds the principal, sealed: no
// upstream has an empty name.
const principalField = ""

func (s *redisStore) hashKey(h string) string { return s.prefix + ":{" + h + "}" }
func (s *redisStore) indexKey() string        { return s.prefix + ":index" }
func (s *redisStore) lockKey(p Principal, upstream string) string {
	return s.hashKey(p.Hash()) + ":refresh:" + upstream
}

func (s *redisStore) get(ctx context.Context, p Principal, upstream string) (Grant, string, error) {
	v, err := s.client.HGet(ctx, s.hashKey(p.Hash()), upstream).Result()
	if errors.Is(err, redis.Nil) {
		return Grant{}, "", ErrNotFound
	}
	if err != nil {
		return Grant{}, "", err
	}
	g, err := s.c.open(p, upstream, []byte(v))
	return g, v, err
}

func (s *redisStore) put(ctx context.Context, g Grant) error {
	sealed, err := s.c.seal(g)
	if err != nil {
		return err
	}
	h := g.Principal.Hash()
	// The grant first, then the index: a Delete that empties the hash meanwhile sees the
	// grant when it checks again after taking the principal out of the index (scriptDelete).
	if err := s.client.HSet(ctx, s.hashKey(h), principalField, s.c.sealPrincipal(g.Principal), g.Upstream, sealed).Err(); err != nil {
		return err
	}
	return s.client.ZAdd(ctx, s.indexKey(), redis.Z{Member: h}).Err()
}

// scriptSwap sets field ARGV[1] of hash KEYS[1] to ARGV[3] (deletes it when ARGV[3] is "")
// if it holds ARGV[2], and returns the number of grants left; else returns -1. A hash left
// with no grant (its principal field alone) is deleted.
var scriptSwap = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur ~= ARGV[2] then return -1 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
local n = redis.call('HLEN', KEYS[1]) - 1
if n <= 0 then redis.call('DEL', KEYS[1]) end
return n
`)

// scriptDelete deletes field ARGV[1] of hash KEYS[1] and returns the number of grants left,
// or -1 if it had no such field. A hash left with no grant is deleted.
var scriptDelete = redis.NewScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
local n = redis.call('HLEN', KEYS[1]) - 1
if n <= 0 then redis.call('DEL', KEYS[1]) end
return n
`)

func (s *redisStore) swap(ctx context.Context, p Principal, upstream, rev string, next *Grant) (bool, error) {
	v := ""
	if next != nil {
		sealed, err := s.c.seal(*next)
		if err != nil {
			return false, err
		}
		v = string(sealed)
	}
	n, err := scriptSwap.Run(ctx, s.client, []string{s.hashKey(p.Hash())}, upstream, rev, v).Int()
	if err != nil {
		return false, err
	}
	if n == 0 {
		return true, s.unindex(ctx, p.Hash())
	}
	return n > 0, nil
}

func (s *redisStore) del(ctx context.Context, p Principal, upstream string) error {
	n, err := scriptDelete.Run(ctx, s.client, []string{s.hashKey(p.Hash())}, upstream).Int()
	switch {
	case err != nil:
		return err
	case n < 0:
		return ErrNotFound
	case n == 0:
		return s.unindex(ctx, p.Hash())
	}
	return nil
}

// unindex takes the principal of hash h out of the index, and puts it back if a grant of
// its was put meanwhile (put writes the grant before the index).
func (s *redisStore) unindex(ctx context.Context, h string) error {
	if err := s.client.ZRem(ctx, s.indexKey(), h).Err(); err != nil {
		return err
	}
	n, err := s.client.Exists(ctx, s.hashKey(h)).Result()
	if err != nil || n == 0 {
		return err
	}
	return s.client.ZAdd(ctx, s.indexKey(), redis.Z{Member: h}).Err()
}

func (s *redisStore) list(ctx context.Context, p Principal) ([]GrantInfo, error) {
	all, err := s.client.HGetAll(ctx, s.hashKey(p.Hash())).Result()
	if err != nil {
		return nil, err
	}
	return s.infos(p, all), nil
}

// infos opens the grants of p, all the fields of its hash.
func (s *redisStore) infos(p Principal, all map[string]string) []GrantInfo {
	out := make([]GrantInfo, 0, len(all))
	for up, v := range all {
		if up != principalField {
			out = append(out, s.c.infoOf(p, up, []byte(v)))
		}
	}
	sortInfos(out)
	return out
}

func (s *redisStore) listAll(ctx context.Context, after string, limit int) ([]GrantInfo, string, error) {
	if err := checkCursor(after); err != nil {
		return nil, "", err
	}
	min := "-"
	if after != "" {
		min = "(" + after
	}
	hashes, err := s.client.ZRangeByLex(ctx, s.indexKey(), &redis.ZRangeBy{Min: min, Max: "+", Count: int64(limit)}).Result()
	if err != nil {
		return nil, "", err
	}
	cmds := make([]*redis.MapStringStringCmd, len(hashes))
	// Each HGETALL reads one slot: a cluster client splits the pipeline by node.
	if _, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, h := range hashes {
			cmds[i] = pipe.HGetAll(ctx, s.hashKey(h))
		}
		return nil
	}); err != nil {
		return nil, "", err
	}
	var out []GrantInfo
	for i, h := range hashes {
		all := cmds[i].Val()
		if len(all) == 0 {
			continue // deleted since the index was read
		}
		p, err := s.c.openPrincipal(h, []byte(all[principalField]))
		if err != nil {
			for up := range all {
				if up != principalField {
					out = append(out, GrantInfo{Upstream: up, Unreadable: true})
				}
			}
			continue
		}
		out = append(out, s.infos(p, all)...)
	}
	next := ""
	if len(hashes) == limit {
		next = hashes[len(hashes)-1]
	}
	return out, next, nil
}

// checkCursor refuses a ListAll cursor that is not one a page returned.
func checkCursor(c string) error {
	if c == "" {
		return nil
	}
	if b, err := hex.DecodeString(c); err != nil || len(b) != 16 {
		return fmt.Errorf("cursor %q is not one a page returned: start again with none", c)
	}
	return nil
}

// scriptUnlock deletes KEYS[1] if it holds ARGV[1]: a lock is freed only by its holder.
var scriptUnlock = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// unlockTimeout bounds freeing a refresh lock, which outlives the refresh's context.
const unlockTimeout = 5 * time.Second

func (s *redisStore) tryLock(ctx context.Context, p Principal, upstream string, ttl time.Duration) (func(), bool, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token, key := hex.EncodeToString(b[:]), s.lockKey(p, upstream)
	ok, err := s.client.SetNX(ctx, key, token, ttl).Result()
	if err != nil || !ok {
		return nil, false, err
	}
	return func() {
		// A lock not freed (Redis gone) expires by its ttl.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		_ = scriptUnlock.Run(ctx, s.client, []string{key}, token).Err()
	}, true, nil
}

func (s *redisStore) locked(ctx context.Context, p Principal, upstream string) (bool, error) {
	n, err := s.client.Exists(ctx, s.lockKey(p, upstream)).Result()
	return n > 0, err
}

func (s *redisStore) close() error { return nil }

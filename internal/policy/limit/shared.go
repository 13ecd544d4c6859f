package limit

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Shared is the Redis where the shared limits of every replica keep their state, under one
// key prefix. It is safe for concurrent use; it uses its client, never closes it: the
// client's owner closes it after the last Limiter's last use.
type Shared struct {
	gcra   *redis_rate.Limiter
	prefix string
}

// NewShared returns the shared limits' state in client, under keys that begin with
// keyPrefix and ":rl:" (if keyPrefix is empty, "manifold").
func NewShared(client redis.UniversalClient, keyPrefix string) *Shared {
	if keyPrefix == "" {
		keyPrefix = defaultKeyPrefix
	}
	return &Shared{gcra: redis_rate.NewLimiter(unprefixed{client}), prefix: keyPrefix}
}

// allowShared checks req against the shared rules in Redis, one after the other.
func (l *Limiter) allowShared(ctx context.Context, req Request) Verdict {
	for i := range l.rules {
		r := &l.rules[i]
		if !r.shared || !r.applies(&req) {
			continue
		}
		res, err := l.gcra.Allow(ctx, r.sharedKey(&req), r.gcra)
		if err != nil {
			// The other shared rules would wait for the same Redis: the first failure decides.
			if ctx.Err() == nil {
				l.redisFailed(err)
			}
			if l.failClosed {
				return Verdict{Limit: r.name, RetryAfter: failedRetryAfter}
			}
			return Verdict{Allowed: true}
		}
		if res.Allowed < 1 {
			return Verdict{Limit: r.name, RetryAfter: retryAfter(res.RetryAfter.Seconds())}
		}
	}
	return Verdict{Allowed: true}
}

// redisFailed counts a failure to reach Redis and logs a warning when none was logged for
// warnEvery.
func (l *Limiter) redisFailed(err error) {
	l.failures.Add(1)
	now := l.now().UnixNano()
	last := l.warnedAt.Load()
	if last != 0 && now-last < int64(warnEvery) {
		return
	}
	if !l.warnedAt.CompareAndSwap(last, now) {
		return // another request logs it
	}
	decision := "allowed (shared_limit_failure: open)"
	if l.failClosed {
		decision = "refused (shared_limit_failure: closed)"
	}
	l.logger.Warn("shared rate limits: Redis cannot be reached; requests are "+decision,
		"error", err, "failures", l.failures.Swap(0), "interval", warnEvery)
}

// sharedKey is the Redis key of r's state for req: keyBase and the hex SHA-256 of the
// request's values for r's key class, each preceded by its length so that no two lists of
// values hash alike. The names of principals, upstreams and tools stay out of key names.
func (r *rule) sharedKey(req *Request) string {
	var onStack [256]byte
	b := onStack[:0]
	p := req.Principal
	switch r.class {
	case byPrincipal:
		b = appendValues(b, p.Issuer, p.Subject)
	case byPrincipalUpstream:
		b = appendValues(b, p.Issuer, p.Subject, req.Upstream)
	case byPrincipalTool:
		b = appendValues(b, p.Issuer, p.Subject, req.Upstream, req.Tool)
	case byUpstream:
		b = appendValues(b, req.Upstream)
	}
	sum := sha256.Sum256(b)
	var key strings.Builder
	key.Grow(len(r.keyBase) + hex.EncodedLen(len(sum)))
	key.WriteString(r.keyBase)
	var digest [2 * sha256.Size]byte
	hex.Encode(digest[:], sum[:])
	key.Write(digest[:])
	return key.String()
}

// appendValues appends each value to b, preceded by its length.
func appendValues(b []byte, values ...string) []byte {
	for _, v := range values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// redisRatePrefix is what redis_rate puts before every key it is given.
const redisRatePrefix = "rate:"

// unprefixed is the client as redis_rate sees it: it takes redis_rate's own prefix off the
// keys again, so that every key of a Limiter begins with its KeyPrefix (where an operator's
// ACLs and a test's cleanup look for them). redis_rate builds a new keys slice per call, so
// trimming it in place is safe.
type unprefixed struct{ redis.UniversalClient }

func (c unprefixed) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.Eval(ctx, script, trimKeys(keys), args...)
}

func (c unprefixed) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalSha(ctx, sha1, trimKeys(keys), args...)
}

func (c unprefixed) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalRO(ctx, script, trimKeys(keys), args...)
}

func (c unprefixed) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.UniversalClient.EvalShaRO(ctx, sha1, trimKeys(keys), args...)
}

func (c unprefixed) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return c.UniversalClient.Del(ctx, trimKeys(keys)...)
}

func trimKeys(keys []string) []string {
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, redisRatePrefix)
	}
	return keys
}

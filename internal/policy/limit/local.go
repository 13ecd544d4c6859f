package limit

import (
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// bucketKey names a local limiter: the index of its rule and the request's values for the
// rule's key class; the values of other classes are "". The anonymous principal is the empty
// issuer and subject, which no other principal has.
type bucketKey struct {
	rule            int
	issuer, subject string
	upstream, tool  string
}

// bucket is a local limiter and when it was last used.
type bucket struct {
	lim     *rate.Limiter
	lastUse time.Time // guarded by Limiter.mu
}

// maxLocalOnStack is how many local limits one request may hit before allowLocal's list of
// them leaves the stack.
const maxLocalOnStack = 16

// allowLocal checks req against the local rules and takes a token from each that applies if
// all allow.
func (l *Limiter) allowLocal(req Request) Verdict {
	now := l.now()
	var onStack [maxLocalOnStack]*rate.Limiter
	take := onStack[:0]

	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.sweptAt) >= l.idleAfter {
		l.sweepLocked(now)
	}
	for i := range l.rules {
		r := &l.rules[i]
		if r.shared || !r.applies(&req) {
			continue
		}
		b := l.bucketLocked(i, r, &req, now)
		// Tokens are taken below, once every rule has allowed: nothing else takes from these
		// limiters meanwhile, as mu is held.
		if tokens := b.lim.TokensAt(now); tokens < 1 {
			return Verdict{Limit: r.name, RetryAfter: r.wait(tokens)}
		}
		take = append(take, b.lim)
	}
	for _, lim := range take {
		lim.AllowN(now, 1)
	}
	return Verdict{Allowed: true}
}

// bucketLocked returns the limiter of rule i for req, made (full) if there is none, marked
// used at now.
func (l *Limiter) bucketLocked(i int, r *rule, req *Request, now time.Time) *bucket {
	k := bucketKey{rule: i}
	switch r.class {
	case byPrincipal:
		k.issuer, k.subject = req.Principal.Issuer, req.Principal.Subject
	case byPrincipalUpstream:
		k.issuer, k.subject, k.upstream = req.Principal.Issuer, req.Principal.Subject, req.Upstream
	case byPrincipalTool:
		k.issuer, k.subject, k.upstream, k.tool = req.Principal.Issuer, req.Principal.Subject, req.Upstream, req.Tool
	case byUpstream:
		k.upstream = req.Upstream
	}
	b := l.buckets[k]
	if b == nil {
		// The key outlives the request: copy its strings, which may be slices of a larger
		// buffer (a request body) that the map would otherwise keep alive.
		k.issuer, k.subject = strings.Clone(k.issuer), strings.Clone(k.subject)
		k.upstream, k.tool = strings.Clone(k.upstream), strings.Clone(k.tool)
		b = &bucket{lim: rate.NewLimiter(r.localLimit(), r.burst)}
		l.buckets[k] = b
	}
	b.lastUse = now
	return b
}

// sweepLocked frees the limiters unused for idleAfter whose buckets are full again: made anew
// on their next use, they start as they would have been.
func (l *Limiter) sweepLocked(now time.Time) {
	for k, b := range l.buckets {
		if now.Sub(b.lastUse) >= l.idleAfter && b.lim.TokensAt(now) >= float64(b.lim.Burst()) {
			delete(l.buckets, k)
		}
	}
	l.sweptAt = now
}

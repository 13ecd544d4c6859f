package connect

import (
	"context"
	"sync"
	"time"
)

// Bounds of the lazily built parts (the upstreams' flows, the sign-in's provider).
const (
	// buildTimeout bounds one discovery (and registration).
	buildTimeout = 30 * time.Second
	// retryAfter is how long a failed discovery is remembered before the next caller tries
	// again, so that an unreachable server is not asked at every page view.
	retryAfter = 30 * time.Second
)

// builds owns the goroutines that build the lazy parts of a Service (the discoveries of the
// issuer and of the upstreams' authorization servers) and the lifetime they run under.
// Lifecycle: made by New, closed by Service.Close, after which no build starts.
type builds struct {
	// ctx is the Service's lifetime: the builds run under it, and the sign-in's provider
	// keeps it for its key fetches. Lifecycle: cancelled by close.
	ctx    context.Context
	cancel context.CancelFunc
	// now is the Service's clock, which times the retries after a failed build.
	now func() time.Time
	// wg counts the build goroutines; Add only under mu while !closed.
	wg sync.WaitGroup

	// mu guards closed.
	mu     sync.Mutex
	closed bool
}

// newBuilds returns the owner of the builds of a Service whose clock is now.
func newBuilds(now func() time.Time) *builds {
	ctx, cancel := context.WithCancel(context.Background())
	return &builds{ctx: ctx, cancel: cancel, now: now}
}

// add counts one more build goroutine, which must call b.wg.Done when it ends; false once b
// is closed, when no goroutine may start.
func (b *builds) add() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

// close stops the builds in flight and waits for their goroutines. It may be called more
// than once.
func (b *builds) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
}

// lazy is a value built on first use, once whatever the number of callers at once, and built
// again after a failure once retryAfter has passed.
type lazy[T any] struct {
	// mu guards the fields below.
	mu sync.Mutex
	// done is closed when the build in flight ends; nil before the first build.
	done chan struct{}
	val  T
	err  error
	// at is when the last build ended.
	at time.Time
}

// peek returns the value if a build has succeeded, without building.
func (l *lazy[T]) peek() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var zero T
	if l.done == nil {
		return zero, false
	}
	select {
	case <-l.done:
		return l.val, l.err == nil
	default:
		return zero, false
	}
}

// resolve returns l's value, building it with build on a goroutine of b's (under b's lifetime,
// bounded by buildTimeout) if need be. A caller waits as long as its ctx allows; the build
// goes on for the others. Once b is closed, a value not yet built is ErrClosed.
func resolve[T any](ctx context.Context, b *builds, l *lazy[T], build func(context.Context) (T, error)) (T, error) {
	var zero T
	l.mu.Lock()
	done := l.done
	if done != nil {
		select {
		case <-done:
			if l.err == nil || b.now().Sub(l.at) < retryAfter {
				v, err := l.val, l.err
				l.mu.Unlock()
				return v, err
			}
			done = nil // failed long enough ago: build again
		default:
		}
	}
	if done == nil {
		if !b.add() {
			l.mu.Unlock()
			return zero, ErrClosed
		}
		done = make(chan struct{})
		l.done = done
		go buildLazy(b, l, done, build)
	}
	l.mu.Unlock()
	select {
	case <-done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.val, l.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// buildLazy runs one build of l and closes done when it is kept.
func buildLazy[T any](b *builds, l *lazy[T], done chan struct{}, build func(context.Context) (T, error)) {
	defer b.wg.Done()
	ctx, cancel := context.WithTimeout(b.ctx, buildTimeout)
	v, err := build(ctx)
	cancel()
	l.mu.Lock()
	l.val, l.err, l.at = v, err, b.now()
	l.mu.Unlock()
	close(done)
}

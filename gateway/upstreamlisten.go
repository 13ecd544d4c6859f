package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/upstream"
)

// A 2026-07-28 upstream has no resources/subscribe: a listen stream's resource of such an
// upstream is subscribed with an upstream subscriptions/listen of its own, one per connection
// and URI on this replica, shared by the listen streams here that asked for the URI and ended
// when the last of them closes (mcp-2026-notes §2.8, §3.4). Its updates come back on that
// listen, and reach the listen streams as a 2025-11-25 upstream's do (deliverUpdated). A
// listen's filter cannot change, so one per URI keeps each URI's lifetime its own.

// Upstream listens are opened again after a drop, with this backoff: from the first to the
// last, and back to the first after one that held this long (as the catalog's listen).
const (
	upstreamListenRetryFirst = time.Second
	upstreamListenRetryMax   = 30 * time.Second
	upstreamListenHeld       = time.Minute
)

// errListenNotHonoured ends an upstream listen that the upstream acknowledged without the
// resource it was opened for.
var errListenNotHonoured = errors.New("the upstream acknowledged the listen without the resource")

// resourceListener is an upstream client that can hold a subscriptions/listen open.
type resourceListener interface {
	Listen(ctx context.Context, params json.RawMessage, acknowledged func(notifications json.RawMessage)) error
}

var _ resourceListener = (*upstream.Client)(nil)

// upstreamListen is the upstream subscriptions/listen of one key.
type upstreamListen struct {
	// cancel ends the listen (its last holder left, or it failed before its ack).
	cancel context.CancelFunc
	// acked is closed once the upstream acknowledged the listen with its resource.
	acked    chan struct{}
	ackOnce  sync.Once
	notAcked chan struct{} // closed when the listen ended before its ack; err says why
	err      error         // set before notAcked is closed

	// holders are the listen streams that hold the key. Guarded by subscriptions.mu.
	holders map[*listenStream]bool
}

// listenModern makes stream a holder of key's upstream listen, opening it when there is none,
// and returns once the upstream acknowledged it with the resource, or failed to.
func (s *subscriptions) listenModern(ctx context.Context, key subKey, stream *listenStream) error {
	listener, ok := key.conn.client.(resourceListener)
	if !ok {
		return upstream.ErrUnavailable
	}
	s.mu.Lock()
	l := s.modern[key]
	if l == nil {
		runCtx, cancel := context.WithCancel(s.router.ctx)
		l = &upstreamListen{cancel: cancel, acked: make(chan struct{}), notAcked: make(chan struct{}), holders: map[*listenStream]bool{}}
		if !s.goWorker(func() { s.runUpstreamListen(runCtx, key, l, listener) }) {
			s.mu.Unlock()
			cancel()
			return upstream.ErrUnavailable // the gateway is closing
		}
		s.modern[key] = l
	}
	l.holders[stream] = true
	s.mu.Unlock()
	select {
	case <-l.acked:
		return nil
	case <-l.notAcked:
		s.unlistenModern(key, stream)
		return l.err
	case <-ctx.Done():
		s.unlistenModern(key, stream)
		return ctx.Err()
	}
}

// unlistenModern drops stream's hold on key's upstream listen, and ends the listen when it
// was the last holder. It reports whether stream held one.
func (s *subscriptions) unlistenModern(key subKey, stream *listenStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.modern[key]
	if l == nil || !l.holders[stream] {
		return false
	}
	delete(l.holders, stream)
	if len(l.holders) == 0 {
		delete(s.modern, key)
		l.cancel()
	}
	return true
}

// runUpstreamListen holds key's upstream listen until ctx ends: opened again, after a
// backoff, whenever it drops once acknowledged (the upstream restarted, or ended it). One
// that ends before its acknowledgement fails its holders and ends.
func (s *subscriptions) runUpstreamListen(ctx context.Context, key subKey, l *upstreamListen, listener resourceListener) {
	params, _ := json.Marshal(map[string]any{"notifications": map[string]any{resourceSubscriptionsMember: []string{key.uri}}})
	retry := upstreamListenRetryFirst
	for {
		began := time.Now()
		attempt, refused := context.WithCancelCause(ctx)
		err := listener.Listen(attempt, params, func(notifications json.RawMessage) {
			if honoursResource(notifications, key.uri) {
				l.ackOnce.Do(func() { close(l.acked) })
				return
			}
			refused(errListenNotHonoured) // a listen without the resource is of no use
		})
		if cause := context.Cause(attempt); ctx.Err() == nil && errors.Is(cause, errListenNotHonoured) {
			err = cause
		}
		refused(nil)
		select {
		case <-l.acked:
		default:
			if err == nil {
				err = errListenNotHonoured // ended at once, as a server that honours nothing does
			}
			s.failUpstreamListen(key, l, err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) >= upstreamListenHeld {
			retry = upstreamListenRetryFirst
		}
		s.router.logger.Warn("an upstream's subscriptions/listen for a resource ended; opening it again",
			"upstream", key.conn.upstream.ns.Name, "error", errString(err), "retry_in", retry.String())
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(retry*2, upstreamListenRetryMax)
	}
}

// failUpstreamListen ends a listen that the upstream did not acknowledge with its resource:
// its holders are told why, and the next to ask opens a new one.
func (s *subscriptions) failUpstreamListen(key subKey, l *upstreamListen, err error) {
	s.mu.Lock()
	if s.modern[key] == l {
		delete(s.modern, key)
	}
	s.mu.Unlock()
	l.cancel()
	l.err = err
	close(l.notAcked)
}

// honoursResource reports whether an upstream's acknowledgement of a listen lists uri among
// its resourceSubscriptions.
func honoursResource(notifications json.RawMessage, uri string) bool {
	var n struct {
		ResourceSubscriptions []string `json:"resourceSubscriptions"`
	}
	return json.Unmarshal(notifications, &n) == nil && slices.Contains(n.ResourceSubscriptions, uri)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

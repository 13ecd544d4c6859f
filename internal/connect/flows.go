package connect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/oauthclient"
)

// Bounds of the lazily built parts (the upstreams' flows, the sign-in's provider).
const (
	// buildTimeout bounds one discovery (and registration).
	buildTimeout = 30 * time.Second
	// retryAfter is how long a failed discovery is remembered before the next caller tries
	// again, so that an unreachable server is not asked at every page view.
	retryAfter = 30 * time.Second
	// clientTTL is how long a dynamically registered client is shared through the Store.
	clientTTL = 90 * 24 * time.Hour
)

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

// resolve returns l's value, building it with build on a goroutine of s's (under s's lifetime,
// bounded by buildTimeout) if need be. A caller waits as long as its ctx allows; the build
// goes on for the others.
func resolve[T any](ctx context.Context, s *Service, l *lazy[T], build func(context.Context) (T, error)) (T, error) {
	var zero T
	l.mu.Lock()
	done := l.done
	if done != nil {
		select {
		case <-done:
			if l.err == nil || s.opts.Now().Sub(l.at) < retryAfter {
				v, err := l.val, l.err
				l.mu.Unlock()
				return v, err
			}
			done = nil // failed long enough ago: build again
		default:
		}
	}
	if done == nil {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			l.mu.Unlock()
			return zero, ErrClosed
		}
		s.wg.Add(1)
		s.mu.Unlock()
		done = make(chan struct{})
		l.done = done
		go buildLazy(s, l, done, build)
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
func buildLazy[T any](s *Service, l *lazy[T], done chan struct{}, build func(context.Context) (T, error)) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, buildTimeout)
	v, err := build(ctx)
	cancel()
	l.mu.Lock()
	l.val, l.err, l.at = v, err, s.opts.Now()
	l.mu.Unlock()
	close(done)
}

// flowEntry is the authorization flow of one upstream, discovered when first needed.
type flowEntry struct {
	up      Upstream
	fetcher *oauthclient.Fetcher
	flow    lazy[*oauthclient.Flow]
}

// entry returns the flow entry of the upstream name, made if need be.
func (s *Service) entry(name string) (*flowEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	up, ok := s.upstreams[name]
	if !ok {
		return nil, fmt.Errorf("upstream %q: %w", name, ErrUnknownUpstream)
	}
	e := s.flows[name]
	if e == nil {
		e = &flowEntry{up: up, fetcher: oauthclient.NewFetcher(&oauthclient.FetcherOptions{AllowPrivate: up.AllowPrivateNetwork})}
		s.flows[name] = e
	}
	return e, nil
}

// flow returns the authorization flow of the upstream name: discovered, with a client
// identity. Do not modify it: copy it to change its scopes.
func (s *Service) flow(ctx context.Context, name string) (*oauthclient.Flow, error) {
	fl, _, err := s.flowOf(ctx, name)
	return fl, err
}

// flowOf is flow, with the upstream as configured when the flow was discovered.
func (s *Service) flowOf(ctx context.Context, name string) (*oauthclient.Flow, Upstream, error) {
	e, err := s.entry(name)
	if err != nil {
		return nil, Upstream{}, err
	}
	fl, err := resolve(ctx, s, &e.flow, func(ctx context.Context) (*oauthclient.Flow, error) {
		return s.buildFlow(ctx, e)
	})
	return fl, e.up, err
}

// knownFlow returns the upstream's flow if it has been discovered, without discovering it.
func (s *Service) knownFlow(name string) (*oauthclient.Flow, bool) {
	e, err := s.entry(name)
	if err != nil {
		return nil, false
	}
	return e.flow.peek()
}

// fetcher returns the Fetcher of the upstream name.
func (s *Service) fetcher(name string) (*oauthclient.Fetcher, error) {
	e, err := s.entry(name)
	if err != nil {
		return nil, err
	}
	return e.fetcher, nil
}

// buildFlow discovers the upstream's authorization server and obtains a client identity.
func (s *Service) buildFlow(ctx context.Context, e *flowEntry) (*oauthclient.Flow, error) {
	d, err := e.fetcher.Discover(ctx, e.up.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("discover the authorization server of upstream %q: %w", e.up.Name, err)
	}
	c, err := s.register(ctx, e, d)
	if err != nil {
		return nil, fmt.Errorf("client identity at the authorization server of upstream %q: %w", e.up.Name, err)
	}
	return &oauthclient.Flow{
		Fetcher:     e.fetcher,
		Discovery:   d,
		Client:      c,
		RedirectURI: s.opts.PublicURL + PathCallback,
		Scopes:      slices.Clone(e.up.Scopes),
		Now:         s.opts.Now,
	}, nil
}

// register obtains the gateway's client identity at d's server. A dynamic registration is
// shared through the Store, so that every replica uses the same client (a refresh token is
// bound to the client it was issued to): a replica uses the one stored, or registers and
// stores its own, then reads back the one that stayed when several registered at once.
func (s *Service) register(ctx context.Context, e *flowEntry, d *oauthclient.Discovery) (*oauthclient.Client, error) {
	up := e.up
	cfg := oauthclient.ClientConfig{
		ClientID:              up.ClientID,
		ClientSecret:          up.ClientSecret,
		NoDynamicRegistration: !up.DynamicRegistration,
		ClientName:            s.opts.ClientName,
		RedirectURI:           s.opts.PublicURL + PathCallback,
	}
	if up.ClientMetadataDocument {
		cfg.MetadataDocumentURL = s.opts.PublicURL + PathClientMetadata
	}
	dynamic := up.ClientID == "" && !(up.ClientMetadataDocument && d.Server.ClientIDMetadataDocumentSupported) &&
		up.DynamicRegistration && d.Server.RegistrationEndpoint != ""
	if !dynamic {
		return e.fetcher.Register(ctx, &d.Server, cfg)
	}
	key := clientKey(up.Name, d.Server.Issuer)
	var shared oauthclient.Client
	switch err := s.getRecord(ctx, key, false, &shared); {
	case err == nil:
		return &shared, nil
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	c, err := e.fetcher.Register(ctx, &d.Server, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.putRecord(ctx, key, c, clientTTL); err != nil {
		return nil, err
	}
	if err := s.getRecord(ctx, key, false, &shared); err != nil {
		return nil, err
	}
	return &shared, nil
}

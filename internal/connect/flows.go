package connect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/oauthclient"
)

// clientTTL is how long a dynamically registered client is shared through the Store.
const clientTTL = 90 * 24 * time.Hour

// flowCache holds the upstreams users may connect and, for each, the authorization flow at
// its server: discovered when first needed (on a goroutine of builds), with the gateway's
// client identity there, shared with the other replicas through records when it is
// registered dynamically. It is safe for concurrent use. Lifecycle: made by New with the
// configured upstreams; set replaces them (a reload) and drops the flows of those removed or
// changed; close drops every flow, after which no flow is made.
type flowCache struct {
	// builds runs the discoveries; records shares the dynamic registrations.
	builds  *builds
	records *records
	// publicURL, clientName and now are the Service's (Options).
	publicURL  string
	clientName string
	now        func() time.Time

	// mu guards closed, upstreams and flows.
	mu     sync.Mutex
	closed bool
	// upstreams by name.
	upstreams map[string]Upstream
	// flows by upstream name. Invariant: each entry's up is upstreams[name].
	flows map[string]*flowEntry
}

// flowEntry is the authorization flow of one upstream, discovered when first needed.
type flowEntry struct {
	up      Upstream
	fetcher *oauthclient.Fetcher
	flow    lazy[*oauthclient.Flow]
}

// set replaces the upstreams with m (upstreamMap's), dropping the flows of those removed or
// changed and closing their idle connections.
func (fc *flowCache) set(m map[string]Upstream) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for name, e := range fc.flows {
		if up, ok := m[name]; !ok || !sameUpstream(up, e.up) {
			e.fetcher.CloseIdleConnections()
			delete(fc.flows, name)
		}
	}
	fc.upstreams = m
}

// sameUpstream reports whether a and b are configured alike.
func sameUpstream(a, b Upstream) bool {
	return a.Name == b.Name && a.URL == b.URL && a.ClientID == b.ClientID && a.ClientSecret == b.ClientSecret &&
		a.ClientMetadataDocument == b.ClientMetadataDocument && a.DynamicRegistration == b.DynamicRegistration &&
		a.AllowPrivateNetwork == b.AllowPrivateNetwork && slices.Equal(a.Scopes, b.Scopes)
}

// close drops every flow; no flow is made afterwards. It returns the dropped flows' fetchers,
// whose idle connections the caller closes once the builds in flight have stopped, and false
// (with none) when fc was closed already.
func (fc *flowCache) close() ([]*oauthclient.Fetcher, bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed {
		return nil, false
	}
	fc.closed = true
	var dropped []*oauthclient.Fetcher
	for _, e := range fc.flows {
		dropped = append(dropped, e.fetcher)
	}
	fc.flows = map[string]*flowEntry{}
	return dropped, true
}

// names returns the names of the upstreams users may connect, sorted.
func (fc *flowCache) names() []string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return slices.Sorted(maps.Keys(fc.upstreams))
}

// upstream returns the configured upstream of name.
func (fc *flowCache) upstream(name string) (Upstream, bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	up, ok := fc.upstreams[name]
	return up, ok
}

// entry returns the flow entry of the upstream name, made if need be.
func (fc *flowCache) entry(name string) (*flowEntry, error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed {
		return nil, ErrClosed
	}
	up, ok := fc.upstreams[name]
	if !ok {
		return nil, fmt.Errorf("upstream %q: %w", name, ErrUnknownUpstream)
	}
	e := fc.flows[name]
	if e == nil {
		e = &flowEntry{up: up, fetcher: oauthclient.NewFetcher(&oauthclient.FetcherOptions{AllowPrivate: up.AllowPrivateNetwork})}
		fc.flows[name] = e
	}
	return e, nil
}

// flow returns the authorization flow of the upstream name: discovered, with a client
// identity. Do not modify it: copy it to change its scopes.
func (fc *flowCache) flow(ctx context.Context, name string) (*oauthclient.Flow, error) {
	fl, _, err := fc.flowOf(ctx, name)
	return fl, err
}

// flowOf is flow, with the upstream as configured when the flow was discovered.
func (fc *flowCache) flowOf(ctx context.Context, name string) (*oauthclient.Flow, Upstream, error) {
	e, err := fc.entry(name)
	if err != nil {
		return nil, Upstream{}, err
	}
	fl, err := resolve(ctx, fc.builds, &e.flow, func(ctx context.Context) (*oauthclient.Flow, error) {
		return fc.build(ctx, e)
	})
	return fl, e.up, err
}

// knownFlow returns the upstream's flow if it has been discovered, without discovering it.
func (fc *flowCache) knownFlow(name string) (*oauthclient.Flow, bool) {
	e, err := fc.entry(name)
	if err != nil {
		return nil, false
	}
	return e.flow.peek()
}

// fetcher returns the Fetcher of the upstream name.
func (fc *flowCache) fetcher(name string) (*oauthclient.Fetcher, error) {
	e, err := fc.entry(name)
	if err != nil {
		return nil, err
	}
	return e.fetcher, nil
}

// build discovers the upstream's authorization server and obtains a client identity.
func (fc *flowCache) build(ctx context.Context, e *flowEntry) (*oauthclient.Flow, error) {
	d, err := e.fetcher.Discover(ctx, e.up.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("discover the authorization server of upstream %q: %w", e.up.Name, err)
	}
	c, err := fc.register(ctx, e, d)
	if err != nil {
		return nil, fmt.Errorf("client identity at the authorization server of upstream %q: %w", e.up.Name, err)
	}
	return &oauthclient.Flow{
		Fetcher:     e.fetcher,
		Discovery:   d,
		Client:      c,
		RedirectURI: fc.publicURL + PathCallback,
		Scopes:      slices.Clone(e.up.Scopes),
		Now:         fc.now,
	}, nil
}

// register obtains the gateway's client identity at d's server. A dynamic registration is
// shared through the Store, so that every replica uses the same client (a refresh token is
// bound to the client it was issued to): a replica uses the one stored, or registers and
// stores its own, then reads back the one that stayed when several registered at once.
func (fc *flowCache) register(ctx context.Context, e *flowEntry, d *oauthclient.Discovery) (*oauthclient.Client, error) {
	up := e.up
	cfg := oauthclient.ClientConfig{
		ClientID:              up.ClientID,
		ClientSecret:          up.ClientSecret,
		NoDynamicRegistration: !up.DynamicRegistration,
		ClientName:            fc.clientName,
		RedirectURI:           fc.publicURL + PathCallback,
	}
	if up.ClientMetadataDocument {
		cfg.MetadataDocumentURL = fc.publicURL + PathClientMetadata
	}
	dynamic := up.ClientID == "" && !(up.ClientMetadataDocument && d.Server.ClientIDMetadataDocumentSupported) &&
		up.DynamicRegistration && d.Server.RegistrationEndpoint != ""
	if !dynamic {
		return e.fetcher.Register(ctx, &d.Server, cfg)
	}
	key := clientKey(up.Name, d.Server.Issuer)
	var shared oauthclient.Client
	switch err := fc.records.get(ctx, key, false, &shared); {
	case err == nil:
		return &shared, nil
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	c, err := e.fetcher.Register(ctx, &d.Server, cfg)
	if err != nil {
		return nil, err
	}
	if err := fc.records.put(ctx, key, c, clientTTL); err != nil {
		return nil, err
	}
	if err := fc.records.get(ctx, key, false, &shared); err != nil {
		return nil, err
	}
	return &shared, nil
}

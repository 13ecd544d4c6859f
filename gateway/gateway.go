// Package gateway is Manifold's server face and what sits behind it:
//
//   - the Streamable HTTP endpoint (streamable.go) and its SSE writer (sse.go), which turn each
//     client request into a pipeline.Request value;
//   - the request pipeline (pipeline.go, a requestPipeline): resolve the target in the
//     merged catalog of package catalog, pass the chain's before steps (its links, in order,
//     in chain.go), forward, pass its after steps on the result, map failures with
//     pipeline.Map, write one audit record;
//   - the routing of what upstreams send to the session it belongs to (routing.go), and what
//     the protocol scopes to a session over shared connections: log levels (logs.go),
//     subscriptions, tasks;
//   - the connections to the upstreams, shared or a session's own (upstreams.go,
//     isolation.go), and what they send (upstreammessages.go);
//   - the merged catalog and its rebuilds (catalogs.go);
//   - reloads of the configuration while it serves (reload.go).
//
// What changes apart from the face lives beside it: the state backends in internal/backend,
// given in Options.Backends; the layer between replicas sharing them in internal/replica (the gateway gives it a Host: replicahost.go, forwarded.go), held
// calls and remembered approvals in internal/approval, the admin API's backend in
// internal/admin/backend (adminhandler.go feeds it).
//
// What is live of a session (streams, requests in flight) is in the hub; what a session is, in
// the session store.
//
//	gw, err := gateway.New(cfg, &gateway.Options{Logger: logger})
//	gw.Start()                         // connects the upstreams in the background
//	srv := gw.Server()                 // the gateway's HTTP server settings and handler
//	...
//	gw.Close()                         // ends sessions and streams, stops the upstreams
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/loglimit"
	"github.com/manifold-mcp/manifold/internal/metrics"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replica"
	"github.com/manifold-mcp/manifold/internal/replicabus"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/tracing"
	"github.com/manifold-mcp/manifold/upstream"
)

// Options are the Gateway's optional settings.
type Options struct {
	// Logger receives the gateway's logs. If nil, logs are discarded.
	Logger *slog.Logger
	// Version is reported as serverInfo.version. If empty, "dev".
	Version string
	// Backends are where the gateway keeps its state: sessions, the events of streams, the
	// bus to other replicas, held calls, approvals, pins, shared rate limits. The gateway
	// runs as one of several replicas when Backends.Bus is set. The caller closes them after
	// Close. If nil, the gateway opens those cfg.SessionStore names (in memory by default),
	// and closes them itself.
	Backends *backend.Set
	// Now returns the current time. If nil, time.Now.
	Now func() time.Time
	// ExpiryInterval is how often idle sessions are looked for, and sessions in use without
	// requests (streams listened to, requests in flight) are marked so. If zero, a quarter of
	// the idle timeout or of session_evict_idle, at most a minute.
	ExpiryInterval time.Duration
	// Checks are links of the policy chain every request passes after it is resolved and
	// before it is forwarded, in order, after the policy's and plugins' links and before
	// approval (chain.go). A Check that also implements pipeline.Inspector sees each result
	// on the way back too. Empty: everything is allowed.
	Checks []pipeline.Check
	// Audit receives one record per completed request; the caller closes it after Close. If
	// nil, the trail OpenAudit opens, or none.
	Audit *audit.Log
	// OpenAudit opens the audit trail that cfg's audit settings name (trail nil when they
	// turn it off), for New when Audit is nil, and for each reload that changes audit.sink,
	// path or buffer (reload.go); closeTrail writes what the trail holds and closes its
	// output. The gateway calls closeTrail once, when a reload has replaced the trail or at
	// Close. If nil (or Audit is set), the trail stays the one given, and a reload that
	// changes those keys is refused.
	OpenAudit func(cfg *config.Config) (trail *audit.Log, closeTrail func(), err error)
	// UpstreamOptions are the base options of every upstream client; the gateway sets the
	// logger and callbacks. If nil, the upstream package's defaults.
	UpstreamOptions *upstream.Options
	// AuthHTTPClient fetches the OIDC issuers' discovery documents and keys, and upstream
	// tokens. If nil, a client with a timeout of its own.
	AuthHTTPClient *http.Client
	// Tracer makes the spans of client requests and passes their trace context to upstreams
	// (tracing.go). The caller shuts it down after Close. If nil, tracing is off.
	Tracer *tracing.Tracer
	// Metrics records what the gateway does, for Prometheus. If nil, the gateway makes its
	// own (NewMetrics) when the config turns metrics on; else they are off, and recording
	// costs nothing.
	Metrics *metrics.Set
	// ReadConfig reads the configuration files again, checked as `gateway validate` checks
	// them, for a reload asked through the admin API or by another replica (reload.go). If
	// nil, such reloads are refused; Reload still applies a configuration given.
	ReadConfig func() (*config.Config, error)
	// LogLevel is the level of Logger's handler, which a reload sets to log_level. If nil, a
	// reload that changes log_level is refused.
	LogLevel *slog.LevelVar
	// Executable is the program an upstream with command "@self" (config.SelfCommand) runs:
	// the gateway's own, which serves its demo server. If empty, the running program
	// (os.Executable).
	Executable string
}

// Gateway serves MCP clients in front of the configured upstreams. It is safe for concurrent
// use. Its methods may be called in any order; Close ends everything it started.
type Gateway struct {
	cfg    *config.Config
	opts   Options
	logger *slog.Logger
	store  session.Store
	// backends are the state backends, store among them.
	backends *backend.Set
	// states seal and open the requestState of the input-required results relayed to
	// 2026-07-28 clients (mrtr.go).
	states *requestStates
	// closeStore releases the backends the gateway opened itself (nothing for those given).
	closeStore func() error
	// store answers and fails: its failures on requests' paths are logged without a flood.
	storeHealth storeFailures

	// catalogState is the merged catalog of the upstreams and its rebuilds.
	catalogState

	// proxies are the trusted proxies, whose X-Forwarded-For names the client; addrs counts
	// what each client address holds open (max_connections_per_address).
	proxies proxies
	addrs   *addrLimiter

	// tracer is Options.Tracer; nil when tracing is off.
	tracer *tracing.Tracer
	// auth authenticates clients; nil when authentication is off.
	auth *authn
	// gate is the policy: rules and rate limits; nil when there is none.
	gate *gate
	// plugins are the policy plugins in force, and the policy chain built on them
	// (pluginset.go).
	plugins *pluginSet
	// audit is the audit trail in force and its settings (audittrail.go).
	audit *auditTrail
	// pinning guards the pinned upstreams' tool definitions; nil when none is pinned.
	pinning *pinning
	// held keeps the calls waiting for an operator's approval; nil without the admin API.
	held *heldCalls
	// userAuth calls upstreams with their users' own grants (useroauth.go); nil when no
	// upstream is configured with credentials.user_oauth.
	userAuth *userAuth
	// metrics records what the gateway does (metrics.go); its set is nil when they are off.
	metrics gatewayMetrics

	// events is the event log of the streams, shared by replicas (nil without one).
	events hub.EventLog

	// hub holds what is live of the sessions here: their streams and event logs, requests in
	// flight, requests sent to clients.
	hub liveHub
	// replicas carries what is live between replicas sharing state (a backend set with a
	// bus); nil otherwise.
	replicas crossReplica

	// streamable is the HTTP face (Handler); requests is the pipeline every request of any
	// face passes.
	streamable *streamableServer
	requests   *requestPipeline

	// upstreamMessages routes what upstreams send to the sessions it belongs to.
	upstreamMessages

	// reloads is the running configuration and its reloads (reload.go).
	reloads reloadState

	// draining is closed by Drain: standalone streams end and new ones are refused.
	draining  chan struct{}
	drainOnce sync.Once

	// Lifecycle: ctx ends at Close; the workers are the upstream and expiry goroutines, and
	// those started for requests' follow-ups.
	ctx    context.Context
	cancel context.CancelFunc
	workerGroup
	startOnce sync.Once
	closeOnce sync.Once
}

// New builds a Gateway for cfg, which must have passed config validation and is not modified.
// Nothing is started until Start.
func New(cfg *config.Config, opts *Options) (*Gateway, error) {
	g := &Gateway{
		cfg:          cfg,
		opts:         withDefaults(cfg, opts),
		catalogState: catalogState{firstStart: make(chan struct{}), rebuilt: make(chan struct{}), firstListWait: cfg.FirstListWait},
		draining:     make(chan struct{}),
		proxies:      proxies(cfg.TrustedProxyPrefixes()),
		addrs:        newAddrLimiter(cfg.MaxConnectionsPerAddress),
	}
	// Clients and upstreams can cause warnings at any rate (refused calls, dropped streams):
	// at most one per message a second reaches the log, with a count of the rest.
	g.streamable = &streamableServer{Gateway: g}
	g.streamable.stateless = &statelessFace{streamableServer: g.streamable, callers: newCallersInFlight(cfg.MaxCallsPerPrincipal),
		listens: newListenStreams(cfg.MaxListensPerPrincipal), parked: newParkedCalls(cfg.MaxCalls)}
	g.streamable.serverInfoJSON, _ = json.Marshal(g.streamable.serverInfo()) // an Implementation always encodes
	g.requests = &requestPipeline{Gateway: g}
	g.tracer = g.opts.Tracer
	g.metrics.set = g.opts.Metrics
	g.logger = slog.New(loglimit.NewHandler(g.opts.Logger.Handler(), time.Second, g.opts.Now))
	g.storeHealth = storeFailures{loglimit.NewOutage(g.logger, "the session store", storeOutageInterval, g.opts.Now)}
	var err error
	if g.backends, g.closeStore, err = backendsOf(cfg, &g.opts, g.logger); err != nil {
		return nil, err
	}
	g.store, g.events = g.backends.Sessions, g.backends.Events
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.streamable.stateless.callsCtx, g.streamable.stateless.endCalls = context.WithCancel(g.ctx)
	if g.states, err = newRequestStates(g.backends.Keys, g.opts.Now); err != nil {
		g.abandon()
		return nil, err
	}
	if g.auth, err = newAuthn(cfg, &g.opts); err != nil {
		g.abandon()
		return nil, err
	}
	if g.audit, err = newAuditTrail(cfg, &g.opts); err != nil {
		g.abandon()
		return nil, err
	}
	if g.gate, err = newGate(cfg, g.backends.Limits, g.opts.Now, g.logger); err != nil {
		g.abandon()
		return nil, err
	}
	if g.backends.Approvals != nil && g.gate != nil {
		// Replicas share what a person approved, as they share the calls held for one.
		g.gate.approvals.Shared = g.backends.Approvals
	}
	host, err := startPlugins(g.ctx, cfg, g.logger)
	if err != nil {
		g.abandon()
		return nil, err
	}
	g.plugins = &pluginSet{cur: &pluginsInForce{host: host, plugins: cfg.Plugins, checks: g.buildChain(host)},
		chain: g.buildChain, logger: g.logger, goWorker: g.goWorker, ctx: g.ctx, drainTimeout: cfg.DrainTimeout}
	g.hub = hub.New(g.ctx, liveOptions(g))
	g.router = &messageRouter{hub: g.hub, store: g.store, logger: g.logger, now: g.opts.Now, ctx: g.ctx, rootsResult: rootsResult(cfg.Roots), replicas: g.replicas, metrics: g.metrics.set}
	if g.userAuth, err = newUserAuth(g); err != nil {
		g.abandon()
		return nil, err
	}
	profiles, err := addUpstreams(g)
	if err != nil {
		g.abandon()
		return nil, err
	}
	g.logs = &sessionLogs{router: g.router, upstreams: g.upstreamList, serves: func(profile string, ns *catalog.Namespace) bool {
		return g.catalogOf(profile).Serves(ns)
	}}
	g.subs = &subscriptions{router: g.router, goWorker: g.goWorker, entries: map[subKey]*subEntry{}, modern: map[subKey]*upstreamListen{}}
	g.tasks = &taskTable{router: g.router, upstreams: g.upstreamList, forward: g.requests.forward}
	sources := make([]catalog.Source, len(g.upstreamList()))
	for i, ue := range g.upstreamList() {
		sources[i] = ue
	}
	g.builder = catalog.NewBuilder(sources, cfg.Separator, g.logger)
	g.builder.SetProfiles(profiles)
	if g.pinning, err = newPinning(cfg, g.backends.Pins, g.opts.Now, g.logger); err != nil {
		g.abandon()
		return nil, err
	}
	if g.pinning != nil {
		g.builder.SetWithhold(g.pinning.withheld)
		g.observe = func() { g.pinning.observe(g.ctx, g.upstreamList()) }
	}
	g.log, g.changed = g.logger, func(prev, next *catalog.Snapshot) { tellListsChanged(g, prev, next) }
	if cfg.Admin.Enabled() {
		g.held = newHeldCalls(g)
	}
	if g.gate != nil {
		g.gate.approvals.ask, g.gate.approvals.held, g.gate.approvals.replicated = g.router.askOn, g.held, g.replicas != nil
		g.gate.approvals.states, g.gate.approvals.nonces = g.states, &approval.Nonces{Now: g.opts.Now}
		if spender, ok := g.backends.Approvals.(approval.NonceSpender); ok {
			// The replicas spend an approval's nonce in the store they share.
			g.gate.approvals.nonces.Shared = spender
		}
	}
	g.snapshot.Store(g.builder.Build())
	if g.metrics.set != nil {
		g.watchMetrics()
	}
	g.reloads.init(g, cfg)
	return g, nil
}

// backendsOf returns the backends the gateway keeps its state in: those given in opts, or
// those cfg names, opened here (close releases them, and nothing for those given). A set
// without what the gateway needs is refused now, not met later as a nil store.
func backendsOf(cfg *config.Config, opts *Options, logger *slog.Logger) (set *backend.Set, close func() error, err error) {
	set, close = opts.Backends, func() error { return nil }
	if set == nil {
		if set, err = backend.OpenInstrumented(cfg, opts.Now, logger, backend.Instruments{Trace: opts.Tracer.RedisHook(), Observe: RedisObserver(opts.Metrics)}); err != nil {
			return nil, nil, err
		}
		close = set.Close
	}
	switch {
	case set.Sessions == nil || set.Holds == nil:
		err = errors.New("gateway: Options.Backends has no sessions or held-calls store: build them with backend.Open or backend.NewMemory")
	case set.Bus != nil && (set.Digests == nil || set.Connections == nil || set.Keys == nil):
		err = errors.New("gateway: Options.Backends has a bus to other replicas but no digest reader, connection recorder or keys, which replicas need: build the set with backend.Open or backend.NewRedis")
	}
	if err != nil {
		_ = close()
		return nil, nil, err
	}
	return set, close, nil
}

// withDefaults returns opts (none: nil) with the defaults of what is not set.
func withDefaults(cfg *config.Config, opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(cfg, o.Logger)
	}
	if o.ExpiryInterval <= 0 {
		o.ExpiryInterval = min(cfg.SessionIdleTimeout/4, time.Minute)
		if cfg.SessionEvictIdle > 0 {
			o.ExpiryInterval = min(o.ExpiryInterval, cfg.SessionEvictIdle/4)
		}
		if o.ExpiryInterval <= 0 {
			o.ExpiryInterval = time.Minute
		}
	}
	return o
}

// liveOptions are the hub's options; with sessions shared by replicas (a backend set with a
// bus) they set up g.replicas, which carries what is live of them between replicas.
func liveOptions(g *Gateway) *hub.Options {
	cfg := g.cfg
	hubOpts := &hub.Options{Now: g.opts.Now, Retention: cfg.StreamRetention, Budget: cfg.StreamBudgetBytes, Log: g.events}
	if g.backends.Bus != nil {
		// Replicas share the sessions: what is live of them travels on the bus.
		hubOpts.Tag = replica.NewName()
		lease := cfg.SessionStore.ReplicaLease
		if lease <= 0 {
			lease = config.DefaultReplicaLease
		}
		opts := &replica.Options{Digests: g.backends.Digests, Connections: g.backends.Connections,
			Lease: lease, Logger: g.logger, Context: g.ctx, Go: g.goWorker}
		r := replica.New(replicaHost{g}, opts, func(receive func(*session.BusMessage), gone func(string, bool)) replica.Bus {
			return g.backends.Bus(&replicabus.BusOptions{Replica: hubOpts.Tag, Lease: lease, Receive: receive, Gone: gone})
		})
		hubOpts.Producing = r.Producing
		g.replicas = r
		// A message for a standalone stream another replica produces is kept until that
		// replica is known to run or to have stopped (its lease, and a renewal to notice).
		hubOpts.Hold = 2 * lease
	}
	return hubOpts
}

// addUpstreams makes the client of each enabled upstream, in config order, with its
// namespace in the catalog and, when isolated, its pool of connections; it returns the
// catalog's profiles.
func addUpstreams(g *Gateway) ([]*catalog.Profile, error) {
	enabled := g.cfg.EnabledUpstreams()
	specs := make([]catalog.Namespace, len(enabled))
	for i, u := range enabled {
		spec, err := namespaceSpecOf(&u)
		if err != nil {
			return nil, err
		}
		specs[i] = spec
	}
	profiles, err := profilesOf(g.cfg.Profiles)
	if err != nil {
		return nil, err
	}
	namespaces := catalog.Namespaces(specs, g.logger)
	list := make([]*upstreamEntry, 0, len(enabled))
	for i, u := range enabled {
		ue, err := makeUpstream(g, &u, namespaces[i])
		if err != nil {
			return nil, err
		}
		g.conns.Store(ue.shared.client, ue.shared)
		list = append(list, ue)
	}
	g.ups.Store(&upstreamSet{all: list, live: list})
	return profiles, nil
}

// namespaceSpecOf is what the catalog is told of upstream u; Index and Scheme are set by
// catalog.Namespaces.
func namespaceSpecOf(u *config.Upstream) (catalog.Namespace, error) {
	shaping, err := shapingOf(u)
	if err != nil {
		return catalog.Namespace{}, err
	}
	return catalog.Namespace{Name: u.Name, Prefix: u.Prefix, IncludeInstructions: u.IncludeInstructions, Shaping: shaping}, nil
}

// makeUpstream makes the entry of upstream u in namespace ns: its client, not yet run, and
// when isolated its pool of connections. The caller records its shared connection in
// g.conns.
func makeUpstream(g *Gateway, u *config.Upstream, ns *catalog.Namespace) (*upstreamEntry, error) {
	command, err := commandOf(u, g.opts.Executable)
	if err != nil {
		return nil, err
	}
	base := upstreamOptions(g)
	creds := g.upstreamCredentials(u, base.HTTPClient)
	if creds.shared != nil {
		base.HTTPClient = creds.shared
	}
	client := upstream.New(upstream.Spec{
		Name:              u.Name,
		Transport:         u.Transport,
		Protocol:          u.Protocol,
		Command:           command,
		Args:              u.Args,
		Env:               u.Env,
		InheritEnv:        u.InheritEnv,
		InheritAllEnv:     u.InheritAllEnv,
		Dir:               u.Dir,
		URL:               u.URL,
		Headers:           u.Headers,
		RequestTimeout:    u.RequestTimeout,
		InitializeTimeout: u.InitializeTimeout,
		MaxMessageBytes:   int(u.MaxResponseBytes),
		AttributionWindow: u.AttributionWindow,

		// A command that may fetch its server first has longer the first time.
		FirstInitializeTimeout: u.FirstInitializeTimeout,
	}, &base)
	var shared upstreamClient = client
	var borrowed *borrowedCatalog
	if creds.userOAuth && creds.shared == nil {
		// Nothing lists without a user's token: the catalog borrows a user's listing, and
		// client, never run, only gave the spec its defaults.
		borrowed = &borrowedCatalog{name: u.Name, logger: g.logger, changed: func() {
			g.rebuild()
			g.firstStartSettled()
		}}
		shared = borrowed
	}
	ue := newUpstreamEntry(ns, shared, u.BroadcastLogs)
	ue.inputBridge = u.InputBridge
	ue.requestTimeout = u.RequestTimeout
	ue.transport, ue.isolation = u.Transport, u.Isolation
	if u.Isolation == config.IsolationSession || u.Isolation == config.IsolationPrincipal {
		spec := client.Spec()
		ue.pool = &connPool{g: g, upstream: ue, spec: spec, opts: base, idle: u.IsolationIdleTimeout, max: u.MaxConnections,
			perPrincipal: u.Isolation == config.IsolationPrincipal, credentials: creds, borrowed: borrowed,
			conns: map[string]*pooledConn{}, keys: map[string]string{}}
	}
	if borrowed != nil {
		borrowed.find = func(ctx context.Context) (session.Principal, bool, error) { return g.userAuth.anyGrantee(ctx, u.Name) }
		borrowed.open = ue.pool.openToList
	}
	return ue, nil
}

// upstreamOptions are the base options of an upstream's client: the gateway's callbacks for
// what it reports, over Options.UpstreamOptions.
func upstreamOptions(g *Gateway) upstream.Options {
	var base upstream.Options
	if g.opts.UpstreamOptions != nil {
		base = *g.opts.UpstreamOptions
	}
	// Each upstream client limits its own warnings: the gateway's limiter, per message
	// across all upstreams, would let one upstream's warning hide another's.
	base.Logger = g.opts.Logger
	base.ClientInfo = protocol.Implementation{Name: "manifold", Version: g.opts.Version}
	base.CallHeaders = traceHeaders(g.opts.Tracer)
	base.OnChange = func(c *upstream.Client) {
		g.upstreamChanged(c)
		g.rebuild()
		g.firstStartSettled()
		if c.State() == upstream.StateReady {
			g.noteAllReady()
			g.resyncLogLevels()
			if ready := g.connOf(c); ready != nil {
				g.subs.renew(ready)
			}
		}
	}
	if g.replicas != nil {
		base.OnListChanged = func(c *upstream.Client) { g.replicas.ListChanged(c.Name()) }
	}
	base.OnRequest = g.onUpstreamRequest
	base.OnNotification = g.onUpstreamNotification
	// One first start for the upstream, which its isolated connections share: theirs are
	// later starts of the same command.
	base.FirstStart = &upstream.FirstStart{}
	return base
}

// abandon undoes what New started before it failed: the plugins, the audit trail, the store.
func (g *Gateway) abandon() {
	g.cancel()
	g.plugins.close()
	if g.audit != nil {
		g.audit.close()
	}
	g.userAuth.close()
	_ = g.closeStore()
}

// liveHub is what the gateway needs of the hub, the live side of sessions (design.md, "Request
// pipeline and state"): sessions opened and ended here, and messages delivered to a session's
// stream by id. *hub.Local is the in-process one; a replicated hub will carry the same calls
// between replicas.
type liveHub interface {
	Open(sessionID, group string) (*hub.Session, error)
	Lookup(sessionID string) *hub.Session
	End(sessionID string) bool
	Sessions() []*hub.Session
	Deliver(sessionID, streamID string, data []byte) error
	Sweep(cutoff time.Time)
	Drain()
	EndRequests(cause error)
	Close()
	RequestsDone() <-chan struct{}
	// Tag names this process in the ids it makes.
	Tag() string
	// Extend, Orphaned, Keep, Produced and TakeOver follow the streams other replicas
	// produce, and take them over when they stop (see hub.Local).
	Extend(sessionID, streamID string, events []hub.Event, complete bool) bool
	Orphaned(ctx context.Context, producer string, adopted func(streamID string) bool)
	Keep(sessionID string, data []byte) bool
	Produced(sessionID, streamID, producer string)
	TakeOver(ctx context.Context, producer string, each time.Duration) []string
	// Abandon ends a stream another replica stopped producing, in the log (see
	// hub.Session.Abandon), whether or not its session is live here.
	Abandon(ctx context.Context, sessionID, streamID string, held *protocol.Response) error
}

var _ liveHub = (*hub.Local)(nil)

// Start connects the upstreams (in the background: a slow or failing upstream does not hold
// up the others or the gateway) and starts expiring idle sessions. Later calls do nothing.
func (g *Gateway) Start() {
	g.startOnce.Do(func() {
		g.startedAt.Store(time.Now())
		for _, u := range g.upstreamList() {
			g.runUpstream(u)
		}
		g.workers.Add(1)
		go g.expireSessions()
		if g.replicas != nil {
			g.workers.Add(1)
			go func() {
				defer g.workers.Done()
				g.replicas.Run(g.ctx)
			}()
			// The others learn what this replica runs, and say what they run.
			g.replicas.AnnounceConfig(replicaHost{g}.RunningConfig(), true)
		}
		if w := g.backends.Ended; w != nil {
			g.workers.Add(1)
			go func() {
				defer g.workers.Done()
				// In memory a session ends so only when it is evicted; in Redis, also when it is
				// deleted through another replica.
				why := "session evicted to make room for a new one"
				if g.replicas != nil {
					why = "session ended on another replica, or was evicted to make room for a new one"
				}
				w.WatchEnded(g.ctx, func(id string) {
					if g.hub.Lookup(id) != nil {
						g.logger.Info(why, "session", fingerprint(id))
						g.endLocal(id)
						return
					}
					// Subscriptions taken over from a stopped replica name it by digest.
					g.subs.drop(id)
				})
			}()
		}
	})
}

// Drain begins the gateway's shutdown while it still listens: /readyz answers 503, new sessions
// and new requests are refused with 503, standalone streams end and new ones are refused, and
// the requests in flight go on; Idle tells when they have ended, EndRequests ends the rest. It
// may be called more than once.
func (g *Gateway) Drain() {
	g.drainOnce.Do(func() {
		g.hub.Drain()
		close(g.draining)
	})
}

// Idle is closed once no client request is in flight. Call it after Drain.
func (g *Gateway) Idle() <-chan struct{} { return g.hub.RequestsDone() }

// EndRequests answers every request still in flight with an error saying the gateway shut down
// (CodeInterrupted for one sent upstream, which may have run in part; CodeShuttingDown for one
// that was not), and ends its upstream call; the HTTP handlers write those answers. Call
// it after Drain, when the drain time is over.
func (g *Gateway) EndRequests() { g.hub.EndRequests(hub.ErrShuttingDown) }

// Close ends every session's streams and calls, stops the upstreams (their processes are
// ended) and waits for all the gateway's goroutines. It may be called more than once.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() {
		// A reload under way finishes first; none begins after.
		g.reloads.mu.Lock()
		g.reloads.closed = true
		g.reloads.mu.Unlock()
		g.Drain()
		g.mu.Lock()
		g.closing = true
		g.mu.Unlock()
		g.hub.Close()
		g.streamable.stateless.endCalls()
		// Every session has ended (these now, the others before): no request begins any more.
		// The requests end while their upstreams are still connected, so that each upstream
		// hears of the cancel of its calls (a 2026-07-28 call waiting for input answers the
		// upstream's request with an error first); one stuck writing to an upstream that
		// stopped reading is freed when the upstreams close, below, after a short wait.
		requestsDone := g.hub.RequestsDone()
		callsDone := g.streamable.stateless.calls.close()
		wait := time.NewTimer(closeRequestsWait)
		for _, done := range []<-chan struct{}{requestsDone, callsDone} {
			select {
			case <-done:
			case <-wait.C:
			}
		}
		wait.Stop()
		g.cancel()
		// Every upstream ever made, those a reload retired included (Close may be called more
		// than once on each).
		for _, u := range g.ups.Load().all {
			if u.pool != nil {
				u.pool.closeAll()
			}
			u.shared.client.Close()
		}
		g.workers.Wait()
		g.plugins.close()
		if g.auth != nil {
			g.auth.verifier.Close() // key fetches in flight end
		}
		<-requestsDone
		g.audit.close() // after the last request's record
		g.userAuth.close()
		if err := g.closeStore(); err != nil {
			g.logger.Warn("closing the session store failed", "error", err.Error())
		}
	})
	return nil
}

// closeRequestsWait is how long Close lets requests end while their upstreams are still
// connected.
const closeRequestsWait = 2 * time.Second

// expireSessions ends sessions idle for longer than the idle timeout, so that a client that
// never sends DELETE does not hold a slot forever. A session with an open standalone stream is
// in use and does not expire.
func (g *Gateway) expireSessions() {
	defer g.workers.Done()
	t := time.NewTicker(g.opts.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-t.C:
		}
		// A session whose client listens on its stream, or waits for an answer, is in use and
		// does not expire. One that waits for an answer is not idle either; one that only
		// listens is, and may be evicted for a new session when the gateway is full.
		for _, s := range g.hub.Sessions() {
			switch {
			case s.Busy():
				g.streamable.touch(g.ctx, s.ID())
			case s.Listening():
				if err := g.store.Keep(g.ctx, s.ID()); err != nil {
					g.logger.Warn("marking a session in use failed", "session", fingerprint(s.ID()), "error", err.Error())
				}
			}
		}
		cutoff := g.opts.Now().Add(-g.cfg.SessionIdleTimeout)
		ids, err := g.store.Expire(g.ctx, cutoff)
		if err != nil {
			g.logger.Warn("expiring idle sessions failed", "error", err.Error())
			continue
		}
		for _, id := range ids {
			g.logger.Info("session expired after being idle", "session", fingerprint(id), "idle_timeout", g.cfg.SessionIdleTimeout.String())
			g.endLocal(id)
		}
		for _, u := range g.upstreamList() {
			if u.pool != nil {
				u.pool.sweep(g.opts.Now())
			}
		}
		if g.gate != nil && g.gate.current().limiter != nil {
			g.gate.current().limiter.Sweep()
		}
		g.sweepPins()
		g.hub.Sweep(g.opts.Now().Add(-time.Minute))
		if g.replicas != nil {
			g.replicas.SweepTakenOver(g.ctx)
			g.replicas.SweepFollowed()
			if g.held != nil {
				g.held.sweepFollowed(g.ctx)
			}
		}
	}
}

// endLocal ends this process's part of a session: its streams close, its calls are
// cancelled, its own upstream connections and subscriptions go.
func (g *Gateway) endLocal(id string) {
	g.hub.End(id)
	if g.logs.listeners.drop(id) {
		g.resyncLogLevels() // the upstreams log at the level the sessions left ask for
	}
	if g.replicas != nil {
		g.replicas.Ended(id)
	}
	for _, u := range g.upstreamList() {
		if u.pool != nil {
			u.pool.closeSession(id)
		}
	}
	g.subs.drop(id)
	g.gate.forgetView(id)
}

// resyncLogLevels sets the log levels of upstreams in the background, after one (re)connected.
func (g *Gateway) resyncLogLevels() {
	g.goWorker(func() {
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		defer cancel()
		g.logs.syncLevels(ctx)
	})
}

// UpstreamStatuses returns each enabled upstream's status, by name, as the merged catalog
// clients see reflects it: an upstream reported ready has its items listed.
func (g *Gateway) UpstreamStatuses() map[string]upstream.Status {
	return g.snapshot.Load().Statuses()
}

// IsolatedConnections reports how many per-session connections the named upstream has open
// (0 for a shared upstream).
func (g *Gateway) IsolatedConnections(upstreamName string) int {
	if u := g.upstreamNamed(upstreamName); u != nil && u.pool != nil {
		return u.pool.open()
	}
	return 0
}

// rootsResult is the roots/list result for the configured root URIs.
func rootsResult(uris []string) json.RawMessage {
	roots := make([]map[string]string, 0, len(uris))
	for _, u := range uris {
		roots = append(roots, map[string]string{"uri": u})
	}
	out, _ := json.Marshal(map[string]any{"roots": roots})
	return out
}

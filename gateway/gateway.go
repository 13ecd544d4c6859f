// Package gateway is Manifold's server face and what sits behind it:
//
//   - the Streamable HTTP endpoint (streamable.go) and its SSE writer (sse.go), which turn each
//     client request into a pipeline.Request value;
//   - the request pipeline (pipeline.go): resolve the target in the merged catalog of package
//     catalog, run the policy chain (Options.Checks), forward, map failures with
//     pipeline.Map, write one audit record;
//   - the routing of what upstreams send to the session it belongs to (routing.go), and what
//     the protocol scopes to a session over shared connections: log levels (logs.go),
//     subscriptions, tasks;
//   - the connections to the upstreams, shared or a session's own (upstreams.go,
//     isolation.go).
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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/manifold-mcp/manifold/auth"
	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/loglimit"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/policy/plugin"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/replicabus"
	"github.com/manifold-mcp/manifold/internal/session"
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
	// Checks are the policy chain every request passes after it is resolved and before it is
	// forwarded, in order (design decision 7). Empty: everything is allowed.
	Checks []pipeline.Check
	// Audit receives one record per completed request. If nil, no audit trail.
	Audit *audit.Log
	// UpstreamOptions are the base options of every upstream client; the gateway sets the
	// logger and callbacks. If nil, the upstream package's defaults.
	UpstreamOptions *upstream.Options
	// AuthHTTPClient fetches the OIDC issuers' discovery documents and keys, and upstream
	// tokens. If nil, a client with a timeout of its own.
	AuthHTTPClient *http.Client
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
	// closeStore releases the backends the gateway opened itself (nothing for those given).
	closeStore func() error
	// storeOutage logs the store's failures on requests' paths: while it is down, every
	// request fails, and the log gets a few lines, not one per request.
	storeOutage *loglimit.Outage

	// upstreams are the enabled upstreams in config order: upstreams[ns.Index] serves the
	// catalog's namespace ns.
	upstreams []*upstreamEntry
	builder   *catalog.Builder
	// snapshot is the merged catalog clients see; replaced whole on every change.
	snapshot atomic.Pointer[catalog.Snapshot]
	// rebuildMu serializes catalog rebuilds and the list_changed broadcasts they cause.
	rebuildMu sync.Mutex
	// rebuilt is closed and replaced once each rebuild's snapshot is in place, to wake the
	// calls waiting for an upstream's catalog to be merged (awaitMerge). Guarded by
	// rebuiltMu.
	rebuiltMu sync.Mutex
	rebuilt   chan struct{}
	// Set by tests only, before Start: beforeRebuild runs as a rebuild begins, and
	// beforeMergeWait as a call begins to wait for its upstream's catalog to be merged.
	beforeRebuild, beforeMergeWait func()
	// Set by tests only, before Start: beforeFirstListWait runs as a list request begins to
	// wait for the upstreams' first attempts to start (awaitFirstStart).
	beforeFirstListWait func()

	// proxies are the trusted proxies, whose X-Forwarded-For names the client; addrs counts
	// what each client address holds open (max_connections_per_address).
	proxies proxies
	addrs   *addrLimiter

	// checks is the policy chain.
	checks pipeline.Chain
	// auth authenticates clients; nil when authentication is off.
	auth *authn
	// gate is the policy: rules and rate limits; nil when there is none.
	gate *gate
	// plugins are the policy plugins; nil when there are none.
	plugins *plugin.Host
	// pinning guards the pinned upstreams' tool definitions; nil when none is pinned.
	pinning *pinning
	// held keeps the calls waiting for an operator's approval; nil without the admin API.
	held *heldCalls

	// events is the event log of the streams, shared by replicas (nil without one).
	events hub.EventLog

	// hub holds what is live of the sessions here: their streams and event logs, requests in
	// flight, requests sent to clients.
	hub liveHub
	// replicas carries what is live between replicas sharing a Redis store; nil otherwise.
	replicas *replicas

	mu sync.Mutex
	// closing is set by Close: no worker starts any more. Guarded by mu.
	closing bool

	requestSeq atomic.Uint64
	// callsInFlight counts the client requests being served, for max_calls.
	callsInFlight atomic.Int64

	// conns finds the connection of an upstream client, shared or a session's own.
	conns sync.Map // upstreamClient → *conn

	// router routes what upstreams send to the sessions it belongs to; logs, subs and tasks
	// keep what the protocol scopes to a session over shared connections (design decision 5).
	router *messageRouter
	logs   *sessionLogs
	subs   *subscriptions
	tasks  *taskTable

	// startedAt is when Start was called (a time.Time); allReady is set once every upstream
	// has been ready at once, which is logged.
	startedAt atomic.Value
	allReady  atomic.Bool
	// firstStart is closed once no upstream is still making its first attempt to start (see
	// awaitFirstStart).
	firstStart     chan struct{}
	firstStartOnce sync.Once
	// draining is closed by Drain: standalone streams end and new ones are refused.
	draining  chan struct{}
	drainOnce sync.Once

	// Lifecycle: ctx ends at Close; workers are the upstream and expiry goroutines.
	ctx       context.Context
	cancel    context.CancelFunc
	workers   sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once
}

// New builds a Gateway for cfg, which must have passed config validation and is not modified.
// Nothing is started until Start.
func New(cfg *config.Config, opts *Options) (*Gateway, error) {
	g := &Gateway{
		cfg:        cfg,
		draining:   make(chan struct{}),
		firstStart: make(chan struct{}),
		proxies:    proxies(cfg.TrustedProxyPrefixes()),
		addrs:      newAddrLimiter(cfg.MaxConnectionsPerAddress),
		rebuilt:    make(chan struct{}),
	}
	if opts != nil {
		g.opts = *opts
	}
	if g.opts.Logger == nil {
		g.opts.Logger = slog.New(slog.DiscardHandler)
	}
	if g.opts.Version == "" {
		g.opts.Version = "dev"
	}
	if g.opts.Now == nil {
		g.opts.Now = time.Now
	}
	// Clients and upstreams can cause warnings at any rate (refused calls, dropped streams):
	// at most one per message a second reaches the log, with a count of the rest.
	g.logger = slog.New(loglimit.NewHandler(g.opts.Logger.Handler(), time.Second, g.opts.Now))
	g.storeOutage = loglimit.NewOutage(g.logger, "the session store", storeOutageInterval, g.opts.Now)
	g.backends, g.closeStore = g.opts.Backends, func() error { return nil }
	if g.backends == nil {
		var err error
		if g.backends, err = backend.Open(cfg, g.opts.Now, g.logger); err != nil {
			return nil, err
		}
		g.closeStore = g.backends.Close
	}
	if g.backends.Sessions == nil || g.backends.Holds == nil {
		return nil, errors.New("gateway: Options.Backends has no sessions or held-calls store: build them with backend.Open or backend.NewMemory")
	}
	g.store = g.backends.Sessions
	events := g.backends.Events
	if g.opts.ExpiryInterval <= 0 {
		g.opts.ExpiryInterval = min(cfg.SessionIdleTimeout/4, time.Minute)
		if cfg.SessionEvictIdle > 0 {
			g.opts.ExpiryInterval = min(g.opts.ExpiryInterval, cfg.SessionEvictIdle/4)
		}
		if g.opts.ExpiryInterval <= 0 {
			g.opts.ExpiryInterval = time.Minute
		}
	}
	var err error
	if g.auth, err = newAuthn(cfg, &g.opts); err != nil {
		_ = g.closeStore()
		return nil, err
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.checks = pipeline.Chain(g.opts.Checks)
	if g.gate, err = newGate(cfg, g.backends.Limits, g.opts.Now, g.logger); err != nil {
		g.cancel()
		_ = g.closeStore()
		return nil, err
	}
	if g.backends.Approvals != nil && g.gate != nil {
		// Replicas share what a person approved, as they share the calls held for one.
		g.gate.approvals.shared = g.backends.Approvals
	}
	if g.plugins, err = startPlugins(g.ctx, cfg, g.logger); err != nil {
		g.cancel()
		_ = g.closeStore()
		return nil, err
	}
	// The chain in the order of design decision 7: who the caller is, what the policy
	// says of the target and how often, the plugins, the checks given, then approval.
	var chain pipeline.Chain
	if g.auth != nil {
		chain = append(chain, auth.RequirePrincipal())
	}
	if g.gate != nil {
		chain = append(chain, pipeline.CheckFunc(g.policyCheck))
	}
	if g.plugins != nil {
		chain = append(chain, pipeline.CheckFunc(g.pluginCheck))
	}
	g.checks = append(chain, g.checks...)
	if g.gate != nil {
		g.checks = append(g.checks, pipeline.CheckFunc(g.approvalCheck))
	}
	g.events = events
	hubOpts := &hub.Options{Now: g.opts.Now, Retention: cfg.StreamRetention, Log: events}
	if g.backends.Bus != nil {
		// Replicas share the sessions: what is live of them travels on the bus.
		hubOpts.Tag = newReplicaName()
		lease := cfg.SessionStore.ReplicaLease
		if lease <= 0 {
			lease = config.DefaultReplicaLease
		}
		g.replicas = newReplicas(g, nil)
		g.replicas.lease = lease
		g.replicas.bus = g.backends.Bus(&replicabus.BusOptions{Replica: hubOpts.Tag, Lease: lease, Receive: g.replicas.receive, Gone: g.replicas.gone})
		hubOpts.Producing = g.replicas.producing
		// A message for a standalone stream another replica produces is kept until that
		// replica is known to run or to have stopped (its lease, and a renewal to notice).
		hubOpts.Hold = 2 * lease
	}
	g.hub = hub.New(g.ctx, hubOpts)
	g.router = &messageRouter{hub: g.hub, store: g.store, logger: g.logger, now: g.opts.Now, ctx: g.ctx, rootsResult: rootsResult(cfg.Roots), replicas: g.replicas}

	enabled := cfg.EnabledUpstreams()
	specs := make([]catalog.Namespace, len(enabled))
	for i, u := range enabled {
		shaping, err := shapingOf(&u)
		if err != nil {
			g.abandon()
			return nil, err
		}
		specs[i] = catalog.Namespace{Name: u.Name, Prefix: u.Prefix, IncludeInstructions: u.IncludeInstructions, Shaping: shaping}
	}
	profiles, err := profilesOf(cfg.Profiles)
	if err != nil {
		g.abandon()
		return nil, err
	}
	namespaces := catalog.Namespaces(specs, g.logger)
	for i, u := range enabled {
		command, err := g.commandOf(&u)
		if err != nil {
			g.abandon()
			return nil, err
		}
		var base upstream.Options
		if g.opts.UpstreamOptions != nil {
			base = *g.opts.UpstreamOptions
		}
		// Each upstream client limits its own warnings: the gateway's limiter, per message
		// across all upstreams, would let one upstream's warning hide another's.
		base.Logger = g.opts.Logger
		base.ClientInfo = protocol.Implementation{Name: "manifold", Version: g.opts.Version}
		base.OnChange = func(c *upstream.Client) {
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
			base.OnListChanged = func(c *upstream.Client) { g.replicas.listChanged(c.Name()) }
		}
		base.OnRequest = g.onUpstreamRequest
		base.OnNotification = g.onUpstreamNotification
		// One first start for the upstream, which its isolated connections share: theirs are
		// later starts of the same command.
		base.FirstStart = &upstream.FirstStart{}
		creds := g.upstreamCredentials(&u, base.HTTPClient)
		if creds.shared != nil {
			base.HTTPClient = creds.shared
		}
		client := upstream.New(upstream.Spec{
			Name:              u.Name,
			Transport:         u.Transport,
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
		ue := newUpstreamEntry(namespaces[i], client, u.BroadcastLogs)
		if u.Isolation == config.IsolationSession || u.Isolation == config.IsolationPrincipal {
			spec := client.Spec()
			ue.pool = &connPool{g: g, upstream: ue, spec: spec, opts: base, idle: u.IsolationIdleTimeout, max: u.MaxConnections,
				perPrincipal: u.Isolation == config.IsolationPrincipal, credentials: creds,
				conns: map[string]*pooledConn{}, keys: map[string]string{}}
		}
		g.conns.Store(upstreamClient(client), ue.shared)
		g.upstreams = append(g.upstreams, ue)
	}
	g.logs = &sessionLogs{router: g.router, upstreams: g.upstreams, serves: func(profile string, ns *catalog.Namespace) bool {
		return g.catalogOf(profile).Serves(ns)
	}}
	g.subs = &subscriptions{router: g.router, goWorker: g.goWorker, entries: map[subKey]*subEntry{}}
	g.tasks = &taskTable{router: g.router, upstreams: g.upstreams, forward: g.forward}
	sources := make([]catalog.Source, len(g.upstreams))
	for i, ue := range g.upstreams {
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
	}
	if cfg.Admin.Enabled() {
		g.held = newHeldCalls(g)
	}
	g.snapshot.Store(g.builder.Build())
	return g, nil
}

// abandon undoes what New started before it failed: the plugins, the store.
func (g *Gateway) abandon() {
	g.cancel()
	if g.plugins != nil {
		_ = g.plugins.Close()
	}
	_ = g.closeStore()
}

// onUpstreamRequest hands a request from an upstream to the router.
func (g *Gateway) onUpstreamRequest(ctx context.Context, client *upstream.Client, req *protocol.Request, origin upstream.Origin) (json.RawMessage, error) {
	c := g.connOf(client)
	if c == nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "unknown upstream")
	}
	return g.router.onRequest(ctx, c, req, origin)
}

// onUpstreamNotification hands a notification from an upstream to what it concerns: a call's
// progress, a cancel or an elicitation's completion to the router, a log message, a task's
// status and a resource update to their per-session semantics.
func (g *Gateway) onUpstreamNotification(client *upstream.Client, n *protocol.Notification, origin upstream.Origin) {
	c := g.connOf(client)
	if c == nil {
		return
	}
	switch n.Method {
	case protocol.NotificationProgress:
		g.router.onProgress(c, n)
	case protocol.NotificationCancelled:
		g.router.onCancelled(c, n)
	case protocol.NotificationElicitationComplete:
		g.router.onElicitationComplete(c, n, origin)
	case protocol.NotificationMessage:
		g.logs.deliver(c, n, origin)
	case notificationStatus:
		g.tasks.deliverStatus(c, n)
	case protocol.NotificationResourceUpdated:
		g.subs.deliverUpdated(c, n)
	}
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
	Orphaned(producer string, adopted func(streamID string) bool)
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
		for _, u := range g.upstreams {
			g.workers.Add(1)
			go func() {
				defer g.workers.Done()
				u.shared.client.Run(g.ctx)
			}()
		}
		g.workers.Add(1)
		go g.expireSessions()
		if g.replicas != nil {
			g.workers.Add(1)
			go func() {
				defer g.workers.Done()
				g.replicas.run(g.ctx)
			}()
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
		g.Drain()
		g.mu.Lock()
		g.closing = true
		g.mu.Unlock()
		g.hub.Close()
		// Every session has ended (these now, the others before): no request begins any more.
		// The requests end while their upstreams are still connected, so that each upstream
		// hears of the cancel of its calls; one stuck writing to an upstream that stopped
		// reading is freed when the upstreams close, below, after a short wait.
		requestsDone := g.hub.RequestsDone()
		select {
		case <-requestsDone:
		case <-time.After(closeRequestsWait):
		}
		g.cancel()
		for _, u := range g.upstreams {
			if u.pool != nil {
				u.pool.closeAll()
			}
			u.shared.client.Close()
		}
		g.workers.Wait()
		if g.plugins != nil {
			if err := g.plugins.Close(); err != nil {
				g.logger.Warn("stopping the policy plugins failed", "error", err.Error())
			}
		}
		if g.auth != nil {
			g.auth.verifier.Close() // key fetches in flight end
		}
		<-requestsDone
		if err := g.closeStore(); err != nil {
			g.logger.Warn("closing the session store failed", "error", err.Error())
		}
	})
	return nil
}

// closeRequestsWait is how long Close lets requests end while their upstreams are still
// connected.
const closeRequestsWait = 2 * time.Second

// awaitFirstStart holds a list request, at most first_list_wait, while an upstream is still
// making its first attempt to start: a client that connects right after the gateway started
// sees its items in its first list, even if it ignores list_changed.
//
// It waits for firstStart, which closes only after the catalog was merged with the last of
// those first attempts (OnChange), never on the upstreams' states alone: an upstream is ready
// a moment before its items are in the catalog.
func (g *Gateway) awaitFirstStart(ctx context.Context) {
	select {
	case <-g.firstStart:
		return
	default:
	}
	if len(g.upstreams) == 0 || g.cfg.FirstListWait <= 0 {
		return
	}
	if g.beforeFirstListWait != nil {
		g.beforeFirstListWait()
	}
	t := time.NewTimer(g.cfg.FirstListWait)
	defer t.Stop()
	select {
	case <-g.firstStart:
	case <-t.C:
	case <-ctx.Done():
	}
}

// firstStartSettled reports whether every upstream has made its first attempt to start (it is
// ready, or down); the first time it is, firstStart closes.
func (g *Gateway) firstStartSettled() bool {
	select {
	case <-g.firstStart:
		return true
	default:
	}
	for _, u := range g.upstreams {
		if u.shared.client.State() == upstream.StateStarting {
			return false
		}
	}
	g.firstStartOnce.Do(func() { close(g.firstStart) })
	return true
}

// noteAllReady logs, once, when every upstream has become ready since Start.
func (g *Gateway) noteAllReady() {
	for _, u := range g.upstreams {
		if u.shared.client.State() != upstream.StateReady {
			return
		}
	}
	if g.allReady.CompareAndSwap(false, true) {
		took := ""
		if at, ok := g.startedAt.Load().(time.Time); ok {
			took = time.Since(at).Round(time.Millisecond).String()
		}
		g.logger.Info("all upstreams ready", "upstreams", len(g.upstreams), "took", took)
	}
}

// rebuild merges the catalog anew and tells every client whose lists changed: the clients of
// /mcp when the whole catalog's did, those of a profile when the profile's did.
func (g *Gateway) rebuild() {
	if g.beforeRebuild != nil {
		g.beforeRebuild()
	}
	g.rebuildMu.Lock()
	defer g.rebuildMu.Unlock()
	if g.pinning != nil {
		g.pinning.observe(g.ctx, g.upstreams)
	}
	next := g.builder.Build()
	prev := g.snapshot.Swap(next)
	g.rebuiltMu.Lock()
	close(g.rebuilt) // the calls waiting for a merge look again
	g.rebuilt = make(chan struct{})
	g.rebuiltMu.Unlock()
	changed := map[string][]string{}
	if c := listsChanged(prev, next); len(c) > 0 {
		changed[""] = c
	}
	for _, p := range g.cfg.Profiles {
		if c := listsChanged(prev.Profile(p.Name), next.Profile(p.Name)); len(c) > 0 {
			changed[p.Name] = c
		}
	}
	if len(changed) == 0 {
		return
	}
	ids := map[string][]string{} // profile → its sessions live here
	// A session whose view the policy cuts hears only of changes to what it sees.
	byMethod := map[string][]string{} // method → sessions told of it by their own view
	memo := map[string][]string{}
	for _, s := range g.hub.Sessions() {
		if _, ok := changed[s.Group()]; !ok {
			continue
		}
		if own, ok := g.gate.changedFor(s.ID(), profileOf(prev, s.Group()), profileOf(next, s.Group()), memo); ok {
			for _, method := range own {
				byMethod[method] = append(byMethod[method], s.ID())
			}
			continue
		}
		ids[s.Group()] = append(ids[s.Group()], s.ID())
	}
	for profile, methods := range changed {
		if len(ids[profile]) == 0 {
			continue // no sessions: notifySessions would take that for all of them
		}
		for _, method := range methods {
			g.router.notifySessions(&protocol.Notification{Method: method}, ids[profile]...)
		}
	}
	for method, sessions := range byMethod {
		g.router.notifySessions(&protocol.Notification{Method: method}, sessions...)
	}
}

// listsChanged returns the list_changed notifications that tell a client of prev that its
// lists are now next's.
func listsChanged(prev, next *catalog.Snapshot) []string {
	var changed []string
	if prev.Version(upstream.Tools) != next.Version(upstream.Tools) {
		changed = append(changed, protocol.NotificationToolsChanged)
	}
	if prev.Version(upstream.Resources) != next.Version(upstream.Resources) ||
		prev.Version(upstream.ResourceTemplates) != next.Version(upstream.ResourceTemplates) {
		changed = append(changed, protocol.NotificationResourcesChanged)
	}
	if prev.Version(upstream.Prompts) != next.Version(upstream.Prompts) {
		changed = append(changed, protocol.NotificationPromptsChanged)
	}
	return changed
}

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
				g.touch(g.ctx, s.ID())
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
		for _, u := range g.upstreams {
			if u.pool != nil {
				u.pool.sweep(g.opts.Now())
			}
		}
		if g.gate != nil && g.gate.limiter != nil {
			g.gate.limiter.Sweep()
		}
		g.sweepPins()
		g.hub.Sweep(g.opts.Now().Add(-time.Minute))
		if g.replicas != nil {
			g.replicas.sweepTakenOver(g.ctx)
			g.replicas.sweepFollowed()
			if g.held != nil {
				g.held.sweepFollowed(g.ctx)
			}
		}
	}
}

// nextRequestID returns an id for one HTTP request, for logs.
func (g *Gateway) nextRequestID() string {
	return "r" + strconv.FormatUint(g.requestSeq.Add(1), 36)
}

// endLocal ends this process's part of a session: its streams close, its calls are
// cancelled, its own upstream connections and subscriptions go.
func (g *Gateway) endLocal(id string) {
	g.hub.End(id)
	if g.replicas != nil {
		g.replicas.ended(id)
	}
	for _, u := range g.upstreams {
		if u.pool != nil {
			u.pool.closeSession(id)
		}
	}
	g.subs.drop(id)
	g.gate.forgetView(id)
}

// goWorker runs f on a goroutine the gateway owns: Close waits for it. Once Close has begun it
// refuses (false), so that no goroutine joins the group while Close waits for it.
func (g *Gateway) goWorker(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return false
	}
	g.workers.Add(1)
	go func() {
		defer g.workers.Done()
		f()
	}()
	return true
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
	for _, u := range g.upstreams {
		if u.ns.Name == upstreamName && u.pool != nil {
			return u.pool.open()
		}
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

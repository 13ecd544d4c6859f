// Package upstream holds Manifold's client connections to upstream MCP servers: one Client per
// configured server, which starts it (a child process over stdio), initializes it, fetches and
// caches its lists, refetches them on list_changed, remaps request ids on the shared
// connection, hands the server's own requests to a callback, and restarts it with backoff
// when it dies.
//
// An upstream that speaks 2026-07-28 (Spec.Protocol) is discovered instead of initialized:
// no session, each request carrying its version and its caller's capabilities
// (WithClientCapabilities) in _meta and, over HTTP, the standard headers; its lists are
// refreshed when their ttlMs runs out and on the changes heard through subscriptions/listen.
//
//	c := upstream.New(upstream.Spec{Name: "files", Command: "mcp-files"}, &upstream.Options{OnChange: rebuild})
//	go c.Run(ctx)                       // owned by the caller; Close stops it
//	result, err := c.Call(ctx, "tools/call", params)
//	tools := c.Catalog().List(upstream.Tools)
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/internal/loglimit"
	"github.com/manifold-mcp/manifold/internal/modern"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// ErrUnavailable is returned by Call when the upstream is not connected.
var ErrUnavailable = errors.New("upstream unavailable")

// ErrInterrupted is returned (wrapped) by Call for a request that went out to the upstream
// and got no answer because the connection ended first: the process exited, the HTTP
// connection broke, or the upstream forgot the session while the request ran. It may have
// run in part there, so it is never sent again, and whoever asked should check before asking
// again.
var ErrInterrupted = errors.New("the connection to the upstream ended before it answered; the request may have run in part")

// ErrSessionMethod is returned (wrapped) by Call, without sending anything, for a method of
// the session-based protocol (initialize, ping, logging/setLevel, resources/subscribe and
// unsubscribe) to an upstream that speaks 2026-07-28, which would answer -32601: there the
// log level travels in each request's _meta and resource updates through
// subscriptions/listen.
var ErrSessionMethod = errors.New("the method belongs to the session-based protocol, which this upstream does not speak (it speaks 2026-07-28)")

// sessionMethods are the methods of ErrSessionMethod.
var sessionMethods = map[string]bool{
	protocol.MethodInitialize:  true,
	protocol.MethodPing:        true,
	protocol.MethodSetLogLevel: true,
	protocol.MethodSubscribe:   true,
	protocol.MethodUnsubscribe: true,
}

// ErrTimeout is returned by Call when the upstream did not answer within the request timeout.
var ErrTimeout = errors.New("upstream request timed out")

// ErrHeaderMismatch is returned (wrapped) for a tools/call that a 2026-07-28 upstream over
// HTTP refused with -32020 (header mismatch) twice: once as the gateway's catalog had the
// tool, and once more after the upstream's tool list was fetched again and the Mcp-Param-*
// headers recomputed from it. The upstream's headers then disagree with its own tool schema;
// sending the call again will not help.
var ErrHeaderMismatch = errors.New("the upstream refused the call's Mcp-* headers (-32020) even after its tool list was fetched again: its headers disagree with its own tool schema")

// ErrResponseTooLarge is returned (wrapped) for a call whose answer exceeded the upstream's
// max_response_bytes: the gateway dropped it.
var ErrResponseTooLarge = errors.New("the upstream's answer exceeds the gateway's max_response_bytes")

// tooLarge stands in a response for an answer dropped as too large; Call turns it into
// ErrResponseTooLarge. Compared by pointer: no upstream can send it.
var tooLarge = &protocol.Error{Code: protocol.CodeInternalError, Message: ErrResponseTooLarge.Error()}

// streamLost stands in a response for the answer of a request whose response stream ended
// before it and could not be resumed; Call turns it into ErrInterrupted. Compared by pointer.
var streamLost = &protocol.Error{Code: protocol.CodeInternalError, Message: "the upstream ended its response stream before answering"}

// errUnanswered marks the failure of a request that was written out in full before its
// connection failed: the upstream may have received it, and run it.
var errUnanswered = errors.New("sent, then the connection failed before an answer")

// State is where an upstream's connection stands.
type State string

// The states of an upstream.
const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateDown     State = "down"
	StateClosed   State = "closed"
)

// Spec says how to reach one upstream server.
type Spec struct {
	// Name identifies the upstream in logs and errors.
	Name string
	// Transport is TransportStdio, TransportStreamableHTTP, TransportSSE or TransportAuto.
	// If empty, stdio when Command is set, else Streamable HTTP.
	Transport string
	// Protocol is the era spoken with the upstream: ProtocolLegacy (initialize and a
	// session), ProtocolModern (server/discover, then stateless requests that carry their
	// version and the calling client's capabilities in _meta; an upstream that does not
	// answer discover as a 2026-07-28 server fails to connect) or ProtocolAuto (discover
	// first, falling back to initialize; mcp-2026-notes §1.15). The legacy SSE transport
	// always initializes. If empty, ProtocolLegacy.
	Protocol string
	// Command, Args, Env and Dir start a stdio server: the child's environment is a small
	// base set of the gateway's (see InheritEnv) plus Env, and an empty Dir means the
	// gateway's working directory.
	Command string
	Args    []string
	Env     map[string]string
	Dir     string
	// InheritEnv names the variables of the gateway's environment a stdio child inherits
	// besides a small base set (PATH, HOME, USER, LOGNAME, LANG, LC_*, TZ, TMPDIR and the
	// proxy variables); an entry ending in "*" matches a prefix. The child gets only these
	// of the gateway's own environment, plus Env, which wins. If nil, only the base set.
	// Security: anything inherited is readable by the child.
	InheritEnv []string
	// InheritAllEnv gives a stdio child the gateway's whole environment, secrets included,
	// instead of the base set and InheritEnv.
	InheritAllEnv bool
	// URL is the endpoint of an HTTP server; Headers are sent with every request to it.
	URL     string
	Headers map[string]string
	// RequestTimeout bounds each request to the upstream. If zero, 60 seconds.
	RequestTimeout time.Duration
	// InitializeTimeout bounds connecting: spawning or dialling, initialize and the first list
	// fetch. If zero, 30 seconds.
	InitializeTimeout time.Duration
	// FirstInitializeTimeout bounds the first start instead of InitializeTimeout, when set: a
	// command that fetches its server on first use (npx, uvx, docker) needs longer once. The
	// first start is the upstream's when its Clients share Options.FirstStart. If zero,
	// InitializeTimeout.
	FirstInitializeTimeout time.Duration
	// MaxMessageBytes caps one message read from the upstream (a stdio line, a JSON body, an
	// SSE event); a larger answer fails its request. If zero, 16 MiB.
	MaxMessageBytes int
	// AttributionWindow is how long, over a transport that does not tie a server request to
	// a call (stdio, legacy SSE), a party whose call ended still counts as a possible owner of
	// what the upstream sends (see Origin.Parties). Zero turns the window off.
	AttributionWindow time.Duration
}

// The transports of Spec.Transport.
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportSSE            = "sse"
	// TransportAuto tries Streamable HTTP and falls back to legacy SSE when the server
	// rejects the POST with 400, 404 or 405 (mcp-notes §5.2).
	TransportAuto = "auto"
)

// Options are a Client's optional settings and callbacks. Callbacks run on the Client's own
// goroutines and must not block for long.
type Options struct {
	// Logger receives the upstream's state changes and stderr. If nil, logs are discarded.
	Logger *slog.Logger
	// ClientInfo is sent as clientInfo at initialize. If empty, {name: "manifold"}.
	ClientInfo protocol.Implementation
	// Capabilities are the client capabilities declared at initialize. If nil, sampling,
	// elicitation (form and url) and roots with listChanged: what the gateway routes.
	Capabilities json.RawMessage
	// OnChange is called after the upstream's state or any of its lists changed.
	OnChange func(*Client)
	// OnRequest answers a request the upstream sends to its client (sampling, elicitation,
	// roots). It runs on its own goroutine; ctx ends when the connection does. If nil, such
	// requests get a method-not-found error.
	// origin says whom the request may be for, decided when it was read (see Origin).
	OnRequest func(ctx context.Context, c *Client, req *protocol.Request, origin Origin) (json.RawMessage, error)
	// OnListChanged, when set, is told of each list_changed the upstream sends, besides the
	// refetch it causes: replicas of a gateway tell each other, since an upstream they share
	// may announce a change to one connection only. It must not block.
	OnListChanged func(c *Client)
	// OnNotification receives the upstream's notifications other than list_changed, with their
	// Origin; notifications/progress, which names its request by token, carries only its
	// Arrival.
	OnNotification func(c *Client, n *protocol.Notification, origin Origin)
	// HTTPClient makes the requests of HTTP upstreams. If nil, a client of its own that keeps
	// up to 256 idle connections to the upstream, has no overall timeout (streams are
	// long-lived) and follows redirects within the upstream's host only (SameHostRedirects).
	HTTPClient *http.Client
	// CallHeaders, when set, adds headers to the HTTP request that carries a message to an
	// HTTP upstream, from the context of the call or notice that sends it (the gateway's
	// trace context). It must not block, nor set the headers the transport sets itself.
	CallHeaders func(ctx context.Context, h http.Header)
	// RestartDelay is the first wait before reconnecting a failed upstream; it doubles up to
	// MaxRestartDelay, with jitter. If zero, 1 second and 30 seconds.
	RestartDelay, MaxRestartDelay time.Duration
	// StopGrace is how long a stdio child gets to exit after its stdin closes, and again after
	// SIGTERM, before SIGKILL. If zero, 2 seconds.
	StopGrace time.Duration
	// Now returns the current time, for the attribution window. If nil, time.Now.
	Now func() time.Time
	// FirstStart, when set, is shared by every Client of one upstream (its shared connection
	// and the connections of its isolated sessions or principals): Spec.FirstInitializeTimeout
	// then bounds the upstream's first start, not each Client's. If nil, each Client's own
	// first start has it.
	FirstStart *FirstStart
}

// FirstStart tracks the first start of an upstream across the Clients that start it
// (Options.FirstStart). A start that begins before any start of the upstream has ended
// (ready, or failed) is a first start and has Spec.FirstInitializeTimeout: a command that
// fetches its server on first use may be fetching it for all of them. Later starts have
// InitializeTimeout. The zero value is ready to use; it is safe for concurrent use and must
// not be copied.
type FirstStart struct {
	mu sync.Mutex
	// began: a start has begun; ended: one has ended (not one cut short by Close). Guarded
	// by mu.
	began, ended bool
}

// begin reports whether a start that begins now is a first start, and whether it is the
// very first (the one that says so in the log).
func (f *FirstStart) begin() (first, announce bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	announce = !f.began && !f.ended
	f.began = true
	return !f.ended, announce
}

// end records that a start ended, ready or failed: the starts that begin later are not
// first starts.
func (f *FirstStart) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = true
}

// Over reports whether a start of the upstream has ended, so that no start beginning now
// is a first start.
func (f *FirstStart) Over() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ended
}

// defaultCapabilities are the client capabilities the gateway can route to its clients.
var defaultCapabilities = json.RawMessage(`{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}`)

// Client is the gateway's connection to one upstream server. It is safe for concurrent use.
type Client struct {
	spec   Spec
	opts   Options
	logger *slog.Logger

	// live is the current connection, nil while the upstream is not ready.
	live atomic.Pointer[connection]
	// reinit is the connection whose session the upstream forgot, while Run re-initializes
	// (nil otherwise): the upstream still counts as ready, with the catalog and initialize
	// result it had, and calls wait for the new connection. Set with live.
	reinit atomic.Pointer[connection]
	// liveChanged is closed and replaced whenever live and reinit are set, to wake waitLive.
	liveMu      sync.Mutex
	liveChanged chan struct{}
	catalog     atomic.Pointer[Catalog]
	// status is the upstream's state and why, replaced whole on every state change: State and
	// Status read the same value, so a state is never seen without its reason.
	status atomic.Pointer[Status]

	// Lifecycle: Run starts once; Close cancels runCtx and waits for done.
	runOnce   sync.Once
	runCtx    context.Context
	cancelRun context.CancelFunc
	done      chan struct{}
}

// New returns a Client for spec; call Run to connect. A nil opts uses the defaults.
func New(spec Spec, opts *Options) *Client {
	c := &Client{spec: spec, done: make(chan struct{}), liveChanged: make(chan struct{})}
	if opts != nil {
		c.opts = *opts
	}
	if c.spec.RequestTimeout <= 0 {
		c.spec.RequestTimeout = 60 * time.Second
	}
	if c.opts.ClientInfo.Name == "" {
		c.opts.ClientInfo = protocol.Implementation{Name: "manifold", Version: "dev"}
	}
	if c.opts.Capabilities == nil {
		c.opts.Capabilities = defaultCapabilities
	}
	if c.spec.InitializeTimeout <= 0 {
		c.spec.InitializeTimeout = 30 * time.Second
	}
	if c.spec.MaxMessageBytes <= 0 {
		c.spec.MaxMessageBytes = 16 << 20
	}
	if c.spec.Protocol == "" {
		c.spec.Protocol = ProtocolLegacy
	}
	if c.spec.Transport == "" {
		c.spec.Transport = TransportStdio
		if c.spec.Command == "" {
			c.spec.Transport = TransportStreamableHTTP
		}
	}
	if c.opts.HTTPClient == nil {
		c.opts.HTTPClient = &http.Client{Transport: NewHTTPTransport(), CheckRedirect: SameHostRedirects}
	}
	if c.opts.RestartDelay <= 0 {
		c.opts.RestartDelay = time.Second
	}
	if c.opts.MaxRestartDelay <= 0 {
		c.opts.MaxRestartDelay = 30 * time.Second
	}
	if c.opts.Now == nil {
		c.opts.Now = time.Now
	}
	if c.opts.FirstStart == nil {
		c.opts.FirstStart = &FirstStart{}
	}
	logger := c.opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Warnings are about what the upstream sends, which it may send at any rate: at most one
	// record per message a second reaches the log.
	c.logger = slog.New(loglimit.NewHandler(logger.Handler(), time.Second, c.opts.Now)).With("upstream", spec.Name)
	c.status.Store(&Status{State: StateStarting, Since: time.Now()})
	c.runCtx, c.cancelRun = context.WithCancel(context.Background())
	return c
}

// beforeReinitWait, when set (by tests only), runs when a call starts waiting for the
// re-initialization of a session the upstream forgot.
var beforeReinitWait func()

// Name returns the upstream's name.
func (c *Client) Name() string { return c.spec.Name }

// State returns the upstream's current state.
func (c *Client) State() State { return c.status.Load().State }

// Status is an upstream's state as operators see it (the gateway's /readyz).
type Status struct {
	State State `json:"state"`
	// Since is when the upstream entered the state.
	Since time.Time `json:"since"`
	// Error is why the upstream is down, when it is: for the log and the operator, as it may
	// name internal addresses and paths.
	Error string `json:"error,omitempty"`
	// Reason is a short class of why the upstream is down (Reason* constants): what a probe
	// or a client may be shown.
	Reason string `json:"reason,omitempty"`
	// ExitCode is the exit status of a stdio upstream's process that exited (-1: killed by a
	// signal); nil otherwise.
	ExitCode *int `json:"exit_code,omitempty"`
}

// Classes of Status.Reason.
const (
	// ReasonCommandNotFound: a stdio upstream's command could not be started.
	ReasonCommandNotFound = "command_not_found"
	// ReasonUnreachable: a network upstream refused or could not be reached.
	ReasonUnreachable = "unreachable"
	// ReasonTimeout: the upstream did not answer in time.
	ReasonTimeout = "timeout"
	// ReasonStartFailed: the upstream could not be started or initialized, for another reason.
	ReasonStartFailed = "start_failed"
	// ReasonConnectionLost: a connection that was ready ended.
	ReasonConnectionLost = "connection_lost"
	// ReasonExited: a stdio upstream's process exited (Status.ExitCode says how).
	ReasonExited = "exited"
)

// exitedError is the failure of a connection whose process exited: its status and last
// stderr lines, with what the connection saw.
type exitedError struct {
	code      int
	lastLines []string
	err       error
}

func (e *exitedError) Error() string {
	msg := fmt.Sprintf("the process exited with status %d", e.code)
	if e.code == -1 {
		msg = "the process was killed by a signal"
	}
	if len(e.lastLines) > 0 {
		msg += "; its last stderr lines: " + strings.Join(e.lastLines, " | ")
	}
	if e.err != nil {
		msg += " (" + e.err.Error() + ")"
	}
	return msg
}

func (e *exitedError) Unwrap() error { return e.err }

// exitAttrs are the log attributes of how a process ended, when err says it did.
func exitAttrs(err error) []any {
	var exited *exitedError
	if errors.As(err, &exited) {
		return []any{"exit_code", exited.code}
	}
	return nil
}

// startTimeoutError is the failure of a start whose time ran out: the upstream did not
// answer method within limit, and the gateway stopped it (a child process) or gave up.
type startTimeoutError struct {
	method string
	limit  time.Duration
	// stopped: it was a child process, which was stopped for it; lastLines are its last
	// stderr lines.
	stopped   bool
	lastLines []string
}

func (e *startTimeoutError) Error() string {
	msg := fmt.Sprintf("did not answer %s within %s", e.method, e.limit)
	if e.method != protocol.MethodInitialize {
		msg += " of starting"
	}
	if e.stopped {
		msg += "; stopped it"
	} else {
		msg += "; gave up"
	}
	if len(e.lastLines) > 0 {
		msg += "; its last stderr lines: " + strings.Join(e.lastLines, " | ")
	}
	return msg + " (if it needs longer to start, raise initialize_timeout)"
}

func (e *startTimeoutError) Unwrap() error { return ErrTimeout }

// startFailure is why a start that failed while method ran failed: when its time ran out,
// that comes first, and how the child exited (it was stopped for it) says nothing; else err,
// with how a child that exited ended.
func startFailure(raw conn, startCtx context.Context, method string, limit time.Duration, err error) error {
	if !errors.Is(err, ErrTimeout) || !errors.Is(startCtx.Err(), context.DeadlineExceeded) {
		return withExit(raw, err)
	}
	e := &startTimeoutError{method: method, limit: limit}
	if r, ok := raw.(exitReporter); ok {
		e.stopped = true
		_, e.lastLines, _ = r.exitReport()
	}
	return e
}

// withExit wraps err with how a closed connection's process ended, when it did.
func withExit(raw conn, err error) error {
	if r, ok := raw.(exitReporter); ok {
		if code, lines, exited := r.exitReport(); exited {
			return &exitedError{code: code, lastLines: lines, err: err}
		}
	}
	return err
}

// reasonOf classes a failure to start or initialize an upstream.
func reasonOf(err error) string {
	var opErr *net.OpError
	var exited *exitedError
	switch {
	case errors.As(err, &exited):
		return ReasonExited
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return ReasonCommandNotFound
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &opErr):
		return ReasonUnreachable
	}
	return ReasonStartFailed
}

// Status returns the upstream's current state, since when, and why it is down.
func (c *Client) Status() Status { return *c.status.Load() }

// Catalog returns the upstream's lists as last fetched, or nil while it is not ready. While
// the gateway re-initializes a session the upstream forgot, they stay what they were.
func (c *Client) Catalog() *Catalog {
	if c.live.Load() == nil && c.reinit.Load() == nil {
		return nil
	}
	return c.catalog.Load()
}

// Server returns what the upstream answered to initialize, or nil while it is not ready.
// While the gateway re-initializes a session the upstream forgot, it is the last answer.
// For a 2026-07-28 upstream, it is read from its answer to server/discover: ProtocolVersion
// is the stateless version spoken with it, ServerInfo what its result's _meta named.
func (c *Client) Server() *protocol.InitializeResult {
	if cn := c.live.Load(); cn != nil {
		return cn.server
	}
	if cn := c.reinit.Load(); cn != nil {
		return cn.server
	}
	return nil
}

// Run connects to the upstream and keeps it connected, restarting it with capped exponential
// backoff when it fails, until ctx ends or Close is called. Call it once, on a goroutine the
// caller owns; it returns when the upstream has been stopped.
func (c *Client) Run(ctx context.Context) {
	started := false
	c.runOnce.Do(func() { started = true })
	if !started {
		return
	}
	defer close(c.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.runCtx, cancel)
	defer stop()

	delay := c.opts.RestartDelay
	failures := 0 // attempts that failed since the upstream was last ready
	for ctx.Err() == nil {
		began := time.Now()
		limit := c.spec.InitializeTimeout
		// The upstream's first start, of all its Clients': another Client (an isolated
		// session's) starting meanwhile may wait for the same fetch, one starting later not.
		if first, announce := c.opts.FirstStart.begin(); first && c.spec.FirstInitializeTimeout > 0 {
			limit = c.spec.FirstInitializeTimeout
			if announce {
				c.logger.Info("first start: it may fetch its server first, so it has longer to answer this time; initialize_timeout sets it",
					"command", filepath.Base(c.spec.Command), "initialize_timeout", limit.String())
			}
		}
		cn, err := c.connect(ctx, limit)
		if ctx.Err() == nil {
			c.opts.FirstStart.end()
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			was := c.State()
			c.setState(StateDown, "upstream failed to start", append(exitAttrs(err), "error", err.Error(), "reason", reasonOf(err), "retry_in", delay.String())...)
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Not a problem of this upstream, and not one to log once and then at debug.
				c.logger.Error("the gateway is out of file descriptors, so the upstream cannot start; raise the limit (ulimit -n) or lower max_sessions", "error", err.Error())
			}
			if c.reinit.Load() != nil {
				// The re-initialization failed: the calls waiting for it fail now.
				c.setLive(nil, nil)
			}
			if was != StateDown {
				c.changed()
			}
		} else {
			delay = c.opts.RestartDelay
			c.setLive(cn, nil)
			cat := c.Catalog()
			attrs := []any{"transport", cn.transport, "tools", len(cat.List(Tools)),
				"resources", len(cat.List(Resources)) + len(cat.List(ResourceTemplates)), "prompts", len(cat.List(Prompts)),
				"took", time.Since(began).Round(time.Millisecond).String(),
				"protocol_version", cn.server.ProtocolVersion, "era", cn.era(), "server", cn.server.ServerInfo.Name}
			if failures > 0 {
				// The failures were logged once, when the upstream went down; here is how many.
				attrs = append(attrs, "after_failed_attempts", failures)
				failures = 0
			}
			c.setState(StateReady, "upstream ready", attrs...)
			c.changed()
			select {
			case <-cn.done:
			case <-ctx.Done():
			}
			// When the upstream forgot the session, it is re-initialized at once, not after a
			// backoff, and meanwhile counts as ready: calls wait for it, the lists stay.
			expired := ctx.Err() == nil && errors.Is(cn.failure(), ErrSessionExpired)
			if expired {
				c.setLive(nil, cn)
			} else {
				c.setLive(nil, nil)
			}
			cn.close()
			if ctx.Err() != nil {
				break
			}
			if expired {
				c.logger.Info("upstream session expired; re-initializing")
				continue
			}
			lost, reason := cn.failure(), ReasonConnectionLost
			if exited := withExit(cn.conn, lost); exited != lost {
				lost, reason = exited, ReasonExited
			}
			c.setState(StateDown, "upstream connection lost", append(exitAttrs(lost), "error", errString(lost), "reason", reason, "retry_in", delay.String())...)
			c.changed()
		}
		// Full jitter over the upper half keeps restarts of many upstreams apart.
		wait := delay/2 + rand.N(delay/2+1)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		delay = min(delay*2, c.opts.MaxRestartDelay)
	}
	c.setLive(nil, nil) // a re-initialization cut short: its waiters fail
	c.setState(StateClosed, "upstream stopped")
	c.changed()
}

// Close stops the upstream: the child process group is ended and Run returns. It may be called
// more than once and before or without Run.
func (c *Client) Close() error {
	c.cancelRun()
	started := true
	c.runOnce.Do(func() { started = false })
	if started {
		<-c.done
	}
	return nil
}

func (c *Client) setState(s State, msg string, attrs ...any) {
	// Only Run sets states, so nothing changes the status between this load and the store.
	old := c.status.Load()
	prev := old.State
	st := &Status{State: s, Since: time.Now()}
	if prev == s {
		st.Since = old.Since
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		switch attrs[i] {
		case "error":
			st.Error, _ = attrs[i+1].(string)
		case "reason":
			st.Reason, _ = attrs[i+1].(string)
		case "exit_code":
			if code, ok := attrs[i+1].(int); ok {
				st.ExitCode = &code
			}
		}
	}
	c.status.Store(st)
	if prev == s && s == StateDown {
		// Log a state once; a down upstream retrying is logged at debug level.
		c.logger.Debug(msg, attrs...)
		return
	}
	if s == StateDown {
		c.logger.Warn(msg, attrs...)
	} else {
		c.logger.Info(msg, attrs...)
	}
}

func (c *Client) changed() {
	if c.opts.OnChange != nil {
		c.opts.OnChange(c)
	}
}

// Call sends a request to the upstream and returns its raw result. A JSON-RPC error from the
// upstream is returned as a *protocol.Error. Call fails with ErrUnavailable when the upstream
// is not connected and with ErrTimeout after the request timeout; when ctx ends first, the
// upstream is told with notifications/cancelled.
//
// A request that an HTTP upstream refused because it forgot the session (404) never ran
// there, so Call waits for the re-initialized connection and sends it once more; a request
// made while that re-initialization runs waits for it too, at most the initialize timeout.
// Requests already sent when the connection ended may have run: they fail with
// ErrInterrupted, and are never sent again.
//
// A tools/call that a 2026-07-28 upstream over HTTP refused with -32020 never ran either:
// the tool list is fetched again and the call sent once more with headers computed from it
// (see callWithFreshTools); refused again, it fails with ErrHeaderMismatch.
func (c *Client) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	cn := c.live.Load()
	if cn == nil && c.reinit.Load() != nil {
		if beforeReinitWait != nil {
			beforeReinitWait()
		}
		waitCtx, cancel := context.WithTimeout(ctx, c.spec.InitializeTimeout)
		cn = c.waitLive(waitCtx, nil)
		cancel()
	}
	if cn == nil {
		return nil, fmt.Errorf("%s %s: %w", c.spec.Name, method, ErrUnavailable)
	}
	if cn.modernVersion != "" && sessionMethods[method] {
		return nil, fmt.Errorf("%s %s: %w", c.spec.Name, method, ErrSessionMethod)
	}
	result, err := cn.call(ctx, method, params, c.spec.RequestTimeout)
	if errors.Is(err, errRefusedUnsent) {
		waitCtx, cancel := context.WithTimeout(ctx, c.spec.InitializeTimeout)
		next := c.waitLive(waitCtx, cn)
		cancel()
		if next == nil {
			return nil, err
		}
		cn = next
		result, err = cn.call(ctx, method, params, c.spec.RequestTimeout)
	}
	if method == protocol.MethodCallTool && cn.refusedHeaders(err) {
		return cn.callWithFreshTools(ctx, params, err)
	}
	return result, err
}

// Notify sends a notification to the upstream. It fails with ErrUnavailable when the upstream
// is not connected.
func (c *Client) Notify(ctx context.Context, method string, params json.RawMessage) error {
	cn := c.live.Load()
	if cn == nil {
		return fmt.Errorf("%s %s: %w", c.spec.Name, method, ErrUnavailable)
	}
	if err := cn.conn.Write(ctx, &protocol.Notification{Method: method, Params: params}); err != nil {
		return fmt.Errorf("%s %s: %w", c.spec.Name, method, err)
	}
	return nil
}

// setLive sets the live connection, and the one being re-initialized (see Client.reinit).
func (c *Client) setLive(cn, reinit *connection) {
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	c.live.Store(cn)
	c.reinit.Store(reinit)
	close(c.liveChanged)
	c.liveChanged = make(chan struct{})
}

// waitLive waits until a connection other than old is live, and returns it; it returns nil
// when ctx ends first, or when the upstream is neither connected nor re-initializing.
func (c *Client) waitLive(ctx context.Context, old *connection) *connection {
	for {
		c.liveMu.Lock()
		cn, reinit, changed := c.live.Load(), c.reinit.Load(), c.liveChanged
		c.liveMu.Unlock()
		switch {
		case cn != nil && cn != old:
			return cn
		case cn == nil && reinit == nil:
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

// connect reaches the upstream, initializes it and fetches its lists, within limit.
func (c *Client) connect(ctx context.Context, limit time.Duration) (*connection, error) {
	startCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cn, err := c.dialAndInitialize(startCtx, c.spec.Transport, limit)
	var reqErr *requestError
	if c.spec.Transport == TransportAuto && errors.As(err, &reqErr) &&
		(reqErr.Status == http.StatusBadRequest || reqErr.Status == http.StatusNotFound || reqErr.Status == http.StatusMethodNotAllowed) {
		// The server rejects Streamable HTTP: try the legacy HTTP+SSE transport at the same URL.
		c.logger.Info("upstream rejected a Streamable HTTP initialize; trying legacy SSE", "status", reqErr.Status)
		cn, err = c.dialAndInitialize(startCtx, TransportSSE, limit)
	}
	if err != nil {
		return nil, err
	}
	catalog := &Catalog{}
	for _, k := range Kinds {
		if !cn.serves(k) {
			continue
		}
		items, err := cn.fetch(startCtx, k)
		if err != nil {
			cn.close()
			return nil, startFailure(cn.conn, startCtx, kindInfos[k].method, limit, err)
		}
		catalog = catalog.withList(k, items)
	}
	c.catalog.Store(catalog)
	cn.workers.Add(1)
	go cn.refreshLoop()
	if cn.modernVersion != "" {
		cn.workers.Add(1)
		go cn.refreshOnExpiry()
		if kinds, params := listenKinds(cn.server.Capabilities); len(kinds) > 0 {
			cn.workers.Add(1)
			go cn.listenForChanges(kinds, params)
		}
	}
	return cn, nil
}

// dialAndInitialize opens a connection over one transport and performs the handshake, which
// limit bounds.
func (c *Client) dialAndInitialize(ctx context.Context, transport string, limit time.Duration) (*connection, error) {
	raw, err := c.dial(ctx, transport)
	if err != nil {
		return nil, err
	}
	cn, method, err := c.handshake(ctx, newConnection(c, raw), transport, limit)
	if err != nil {
		cn.close()
		return nil, startFailure(cn.conn, ctx, method, limit, err)
	}
	cn.transport = transport
	if transport == TransportAuto {
		cn.transport = TransportStreamableHTTP // auto got this far over Streamable HTTP
	}
	return cn, nil
}

func (c *Client) dial(ctx context.Context, transport string) (conn, error) {
	httpOpts := httpOptions{URL: c.spec.URL, Headers: c.spec.Headers, MaxMessageBytes: c.spec.MaxMessageBytes, Client: c.opts.HTTPClient, CallHeaders: c.opts.CallHeaders}
	switch transport {
	case TransportStdio:
		return startStdio(c.spec.Name, stdioOptions{
			Command:         c.spec.Command,
			Args:            c.spec.Args,
			Env:             c.spec.Env,
			InheritEnv:      c.spec.InheritEnv,
			InheritAllEnv:   c.spec.InheritAllEnv,
			Dir:             c.spec.Dir,
			MaxMessageBytes: c.spec.MaxMessageBytes,
			Grace:           c.opts.StopGrace,
			Quiet:           c.State() == StateDown,
		}, c.logger)
	case TransportStreamableHTTP, TransportAuto:
		return newStreamableConn(c.spec.Name, httpOpts, c.logger), nil
	case TransportSSE:
		return dialLegacySSE(ctx, c.spec.Name, httpOpts, c.logger)
	}
	return nil, fmt.Errorf("unknown transport %q", transport)
}

// connection is one live connection to the upstream: the request ids it has issued and the
// requests waiting for answers.
type connection struct {
	client *Client
	conn   conn
	server *protocol.InitializeResult // set by the handshake, then read-only
	// modernVersion is the stateless version spoken with a 2026-07-28 upstream, "" with one
	// that was initialized. Set by the handshake before anything else uses the connection,
	// then read-only.
	modernVersion string
	// transport is the transport in use (auto resolves to one of the others).
	transport string
	// unattributed is set for transports that do not tie a server request to a call (stdio,
	// legacy SSE): ended calls are then remembered for the attribution window.
	unattributed bool

	nextID atomic.Int64

	mu sync.Mutex
	// pending holds the calls waiting for a response, by upstream request id. Guarded by mu.
	pending map[int64]pendingCall
	// err is why the connection ended; set once, with done closed. Guarded by mu.
	err error
	// lastEnded holds when each party's last call ended within the attribution window; ends
	// lists the ends noted, oldest first, so that those past the window are dropped from the
	// front (pruneEndedLocked). Invariant: every party of lastEnded has an end in ends at its
	// time. Guarded by mu.
	lastEnded map[any]time.Time
	ends      []partyEnd

	// done is closed when the connection has ended (read failure or close).
	done chan struct{}
	// ctx ends with the connection; reverse requests run under it.
	ctx    context.Context
	cancel context.CancelFunc
	// dirty carries kinds whose lists must be refetched to refreshLoop; capacity 1 plus the
	// dirtyKinds mask make one refresh serve every list_changed that came before it.
	dirty      chan struct{}
	dirtyKinds atomic.Uint32

	// freshMu guards the timed refreshes of a 2026-07-28 upstream's lists: when each kind is
	// due (zero: not planned) and its last ttlMs.
	freshMu sync.Mutex
	dueAt   [NumKinds]time.Time
	ttl     [NumKinds]time.Duration
	// freshChanged wakes refreshOnExpiry when a refresh was planned anew; capacity 1.
	freshChanged chan struct{}
	// toolsRefresh is the refetch of the tool list that tools/calls refused for their
	// headers wait on (refreshToolsShared); nil when none runs. Guarded by mu.
	toolsRefresh *sharedRefresh

	// workers counts readLoop, refreshLoop, reverse-request goroutines and, for a 2026-07-28
	// upstream, refreshOnExpiry, listenForChanges and the shared tool-list refetch; close
	// waits for them.
	workers   sync.WaitGroup
	closeOnce sync.Once
}

func newConnection(c *Client, raw conn) *connection {
	cn := &connection{
		client:    c,
		conn:      raw,
		pending:   make(map[int64]pendingCall),
		lastEnded: make(map[any]time.Time),
		done:      make(chan struct{}),
		dirty:     make(chan struct{}, 1),

		freshChanged: make(chan struct{}, 1),
	}
	switch raw.(type) {
	case *stdioConn, *legacySSEConn:
		cn.unattributed = true
	}
	cn.ctx, cn.cancel = context.WithCancel(c.runCtx)
	cn.workers.Add(1)
	go cn.readLoop()
	return cn
}

// fail ends the connection with err; the first reason wins.
func (cn *connection) fail(err error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.err != nil {
		return
	}
	cn.err = err
	for id, p := range cn.pending {
		delete(cn.pending, id)
		cn.endedLocked(p.caller)
		close(p.ch)
	}
	close(cn.done)
	cn.cancel()
}

// close ends the connection and the process behind it and waits for its goroutines.
func (cn *connection) close() {
	cn.closeOnce.Do(func() {
		cn.fail(errors.New("connection closed"))
		cn.conn.Close()
		cn.workers.Wait()
	})
}

func (cn *connection) callFunc(timeout time.Duration) func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
		return cn.call(ctx, method, params, timeout)
	}
}

// pendingCall is a request waiting for its response.
type pendingCall struct {
	ch chan *protocol.Response
	// caller is what the caller attached with WithCaller, for the messages about this call.
	caller caller
	// acknowledged, for a subscriptions/listen made by Listen, is called with the upstream's
	// acknowledgement of it, then set to nil.
	acknowledged func(notifications json.RawMessage)
}

// errRefusedUnsent marks a request that the upstream refused because it forgot the session:
// it never ran, so it may be sent again on the next connection.
var errRefusedUnsent = fmt.Errorf("refused before it ran: %w", ErrSessionExpired)

// call sends a request and waits for its answer, at most timeout; a timeout of 0 means none:
// the call lasts until ctx ends (a subscriptions/listen). To a 2026-07-28 upstream the
// request carries the _meta of withModernMeta, with the client capabilities of ctx.
func (cn *connection) call(ctx context.Context, method string, params json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	return cn.callAcknowledged(ctx, method, params, timeout, nil)
}

// callAcknowledged is call, for a subscriptions/listen whose acknowledgement goes to
// acknowledged (nil for any other call).
func (cn *connection) callAcknowledged(ctx context.Context, method string, params json.RawMessage, timeout time.Duration, acknowledged func(json.RawMessage)) (json.RawMessage, error) {
	name := cn.client.spec.Name
	if cn.modernVersion != "" {
		var err error
		if params, err = withModernMeta(params, cn.modernVersion, clientCapabilitiesOf(ctx), cn.client.opts.ClientInfo); err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, method, err)
		}
	}
	id := cn.nextID.Add(1)
	p := pendingCall{ch: make(chan *protocol.Response, 1), caller: callerOf(ctx), acknowledged: acknowledged}
	cn.mu.Lock()
	if cn.err != nil {
		cn.mu.Unlock()
		return nil, fmt.Errorf("%s %s: %w", name, method, ErrUnavailable)
	}
	cn.pending[id] = p
	cn.mu.Unlock()

	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	req := &protocol.Request{ID: protocol.IntID(id), Method: method, Params: params}
	var answer *protocol.Response
	var err error
	if ac, ok := cn.conn.(answeringConn); ok {
		answer, err = ac.WriteRequest(ctx, req)
	} else {
		err = cn.conn.Write(ctx, req)
	}
	if err != nil {
		cn.forget(id)
		var reqErr *requestError
		switch {
		case errors.As(err, &reqErr):
			// This request failed; the connection serves on.
			return nil, fmt.Errorf("%s %s: %w", name, method, err)
		case errors.Is(err, ErrSessionExpired):
			cn.fail(err)
			return nil, fmt.Errorf("%s %s: %w: %w", name, method, ErrUnavailable, errRefusedUnsent)
		}
		if ctx.Err() != nil {
			return nil, cn.ended(ctx, id, method, timeout)
		}
		cn.fail(fmt.Errorf("write %s: %w", method, err))
		if errors.Is(err, errUnanswered) {
			return nil, fmt.Errorf("%s %s: %w (%w)", name, method, ErrInterrupted, err)
		}
		return nil, fmt.Errorf("%s %s: %w: %w", name, method, ErrUnavailable, err)
	}
	if answer != nil {
		// The answer came with the request (a JSON answer to a POST): it is this call's,
		// whether or not the connection failed meanwhile.
		cn.forget(id)
		return answerOf(answer, name, method, cn.client.spec.MaxMessageBytes)
	}
	select {
	case resp, ok := <-p.ch:
		if !ok {
			// The request was sent and may have run: it is not sent again, even when the
			// connection ended because the upstream forgot the session.
			cause := "connection lost"
			if err := cn.failure(); errors.Is(err, ErrSessionExpired) {
				cause = "the upstream forgot the session while the request ran"
			}
			return nil, fmt.Errorf("%s %s: %w (%s)", name, method, ErrInterrupted, cause)
		}
		return answerOf(resp, name, method, cn.client.spec.MaxMessageBytes)
	case <-ctx.Done():
		// An answer read before the end of ctx was seen wins: the upstream did the work.
		select {
		case resp, ok := <-p.ch:
			if ok {
				cn.forget(id)
				return answerOf(resp, name, method, cn.client.spec.MaxMessageBytes)
			}
		default:
		}
		return nil, cn.ended(ctx, id, method, timeout)
	}
}

// answerOf is a call's outcome from its response.
func answerOf(resp *protocol.Response, name, method string, maxBytes int) (json.RawMessage, error) {
	switch resp.Error {
	case tooLarge:
		return nil, fmt.Errorf("%s %s: %w (%d)", name, method, ErrResponseTooLarge, maxBytes)
	case streamLost:
		return nil, fmt.Errorf("%s %s: %w (its response stream ended, and could not be resumed)", name, method, ErrInterrupted)
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	return resp.Result, nil
}

// ended gives up on request id because ctx ended, tells the upstream, and says why. A
// 2026-07-28 upstream over HTTP learns it from the closing of the request's response stream,
// which the end of ctx closed; any other is sent notifications/cancelled (mcp-2026-notes
// §1.10).
func (cn *connection) ended(ctx context.Context, id int64, method string, timeout time.Duration) error {
	cn.forget(id)
	if _, overHTTP := cn.conn.(modernConn); cn.modernVersion == "" || !overHTTP {
		cn.notifyCancelled(id, ctx.Err())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s %s after %s: %w", cn.client.spec.Name, method, timeout, ErrTimeout)
	}
	return fmt.Errorf("%s %s: %w", cn.client.spec.Name, method, ctx.Err())
}

func (cn *connection) failure() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

func (cn *connection) forget(id int64) {
	cn.mu.Lock()
	if p, ok := cn.pending[id]; ok {
		delete(cn.pending, id)
		cn.endedLocked(p.caller)
	}
	cn.mu.Unlock()
}

// notifyCancelled tells the upstream that the gateway no longer waits for request id; it is
// best effort and bounded (mcp-notes §8.2).
func (cn *connection) notifyCancelled(id int64, why error) {
	params, _ := json.Marshal(map[string]any{"requestId": id, "reason": why.Error()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = cn.conn.Write(ctx, &protocol.Notification{Method: protocol.NotificationCancelled, Params: params})
}

func (cn *connection) notify(ctx context.Context, method string) error {
	return cn.conn.Write(ctx, &protocol.Notification{Method: method})
}

// initialize performs the MCP handshake (mcp-notes §1.1–1.2), within timeout.
func (cn *connection) initialize(ctx context.Context, timeout time.Duration) error {
	params, err := json.Marshal(struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		Capabilities    json.RawMessage         `json:"capabilities"`
		ClientInfo      protocol.Implementation `json:"clientInfo"`
	}{protocol.LatestVersion, cn.client.opts.Capabilities, cn.client.opts.ClientInfo})
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	raw, err := cn.call(ctx, protocol.MethodInitialize, params, timeout)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	var res protocol.InitializeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("initialize: malformed result: %w", err)
	}
	if !protocol.IsSupportedVersion(res.ProtocolVersion) {
		return fmt.Errorf("initialize: the upstream answered protocol version %q, which Manifold does not speak (it speaks %v)", res.ProtocolVersion, protocol.SupportedVersions)
	}
	cn.server = &res
	ic, _ := cn.conn.(initializedConn)
	if ic != nil {
		ic.negotiated(res.ProtocolVersion)
	}
	if err := cn.notify(ctx, protocol.NotificationInitialized); err != nil {
		return fmt.Errorf("initialized: %w", err)
	}
	if ic != nil {
		ic.initialized()
	}
	return nil
}

// era names the protocol era of the connection, for logs.
func (cn *connection) era() string {
	if cn.modernVersion != "" {
		return "modern"
	}
	return "legacy"
}

// fetch reads the list of kind k. For a 2026-07-28 upstream it plans the list's timed
// refresh from its ttlMs and, over HTTP, where each tools/call mirrors annotated arguments
// in headers, it leaves out the tools whose x-mcp-header annotations are invalid, as
// SEP-2243 asks of a client: no valid call to them could be made.
func (cn *connection) fetch(ctx context.Context, k Kind) ([]Item, error) {
	items, ttl, err := fetchList(ctx, k, cn.callFunc(cn.client.spec.RequestTimeout))
	if err != nil || cn.modernVersion == "" {
		return items, err
	}
	if _, overHTTP := cn.conn.(modernConn); overHTTP && k == Tools {
		items = cn.dropInvalidAnnotations(items)
	}
	cn.scheduleRefresh(k, ttl)
	return items, nil
}

// dropInvalidAnnotations returns tools without those whose x-mcp-header annotations are
// invalid, each left out with a warning.
func (cn *connection) dropInvalidAnnotations(tools []Item) []Item {
	kept := make([]Item, 0, len(tools))
	for _, it := range tools {
		if _, err := modern.HeaderParams(inputSchemaOf(it.Raw)); err != nil {
			cn.client.logger.Warn("the upstream lists a tool whose x-mcp-header annotations are invalid; it is left out", "tool", it.Key, "error", err.Error())
			continue
		}
		kept = append(kept, it)
	}
	return kept
}

// serves reports whether the upstream declared the capability behind kind k.
func (cn *connection) serves(k Kind) bool {
	caps := cn.server.Capabilities
	switch k {
	case Tools:
		return caps.Tools != nil
	case Resources, ResourceTemplates:
		return caps.Resources != nil
	case Prompts:
		return caps.Prompts != nil
	}
	return false
}

// readLoop reads the upstream's messages until the connection ends.
func (cn *connection) readLoop() {
	defer cn.workers.Done()
	logger := cn.client.logger
	for {
		msg, from, err := cn.conn.Read()
		var skipped *skippedError
		if errors.As(err, &skipped) {
			if !errors.Is(err, errMessageTooLarge) {
				logger.Warn("upstream wrote something that is not a JSON-RPC message; it was skipped", "error", err.Error())
				continue
			}
			logger.Warn("upstream sent a message over the size limit; it was dropped", "limit_bytes", cn.client.spec.MaxMessageBytes)
			if skipped.related != 0 {
				// The answer to a call was dropped: that call fails now, not at its timeout.
				cn.deliver(&protocol.Response{ID: protocol.IntID(skipped.related), Error: tooLarge})
			}
			continue
		}
		if err != nil {
			cn.fail(fmt.Errorf("read: %w", err))
			return
		}
		switch m := msg.(type) {
		case *protocol.Response:
			cn.deliver(m)
		case *protocol.Notification:
			cn.handleNotification(m, from)
		case *protocol.Request:
			cn.handleRequest(m, cn.origin(from))
		}
	}
}

// origin decides whom a message that arrived as from may be for, now, as it is read.
func (cn *connection) origin(from arrival) Origin {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.originLocked(from)
}

func (cn *connection) deliver(resp *protocol.Response) {
	id, ok := resp.ID.Int()
	if !ok {
		cn.client.logger.Warn("upstream answered an id the gateway never sent", "id", resp.ID.String())
		return
	}
	cn.mu.Lock()
	p, ok := cn.pending[id]
	if ok {
		delete(cn.pending, id)
		cn.endedLocked(p.caller)
	}
	cn.mu.Unlock()
	if ok {
		p.ch <- resp
	}
}

func (cn *connection) handleNotification(n *protocol.Notification, from arrival) {
	var k Kind
	switch n.Method {
	case protocol.NotificationToolsChanged:
		k = Tools
	case protocol.NotificationPromptsChanged:
		k = Prompts
	case protocol.NotificationResourcesChanged:
		cn.markDirty(ResourceTemplates)
		k = Resources
	case notificationSubscriptionsAcknowledged:
		// The opening of the gateway's own subscriptions/listen: nothing for its clients.
		if !cn.acknowledge(n.Params) {
			cn.client.logger.Debug("the upstream acknowledged the gateway's subscriptions/listen")
		}
		return
	default:
		if cb := cn.client.opts.OnNotification; cb != nil {
			cn.notifySafely(cb, n, cn.origin(from))
		}
		return
	}
	cn.markDirty(k)
	if cb := cn.client.opts.OnListChanged; cb != nil {
		cb(cn.client)
	}
}

// Refresh refetches every list of the current connection, as if the upstream had announced
// that each changed; OnChange follows if one did. It does nothing while the upstream is not
// ready.
func (c *Client) Refresh() {
	cn := c.live.Load()
	if cn == nil {
		return
	}
	for _, k := range Kinds {
		cn.markDirty(k)
	}
}

func (cn *connection) markDirty(k Kind) {
	for {
		old := cn.dirtyKinds.Load()
		if cn.dirtyKinds.CompareAndSwap(old, old|1<<k) {
			break
		}
	}
	select {
	case cn.dirty <- struct{}{}:
	default:
	}
}

// refreshLoop refetches the lists that list_changed marked, one refresh at a time.
func (cn *connection) refreshLoop() {
	defer cn.workers.Done()
	for {
		select {
		case <-cn.done:
			return
		case <-cn.dirty:
		}
		kinds := cn.dirtyKinds.Swap(0)
		changed := false
		for _, k := range Kinds {
			if kinds&(1<<k) == 0 || !cn.serves(k) {
				continue
			}
			items, err := cn.fetch(cn.ctx, k)
			if err != nil {
				if cn.ctx.Err() == nil {
					cn.client.logger.Warn("refetching a changed list failed; the previous list stays", "kind", k.String(), "error", err.Error())
				}
				continue
			}
			for {
				old := cn.client.catalog.Load()
				if cn.client.catalog.CompareAndSwap(old, old.withList(k, items)) {
					break
				}
			}
			changed = true
		}
		if changed {
			cn.client.changed()
		}
	}
}

// handleRequest answers a request the upstream sent to the gateway as its client.
func (cn *connection) handleRequest(req *protocol.Request, origin Origin) {
	if req.Method == protocol.MethodPing {
		cn.respond(&protocol.Response{ID: req.ID, Result: json.RawMessage(`{}`)})
		return
	}
	cb := cn.client.opts.OnRequest
	if cb == nil {
		cn.respond(&protocol.Response{ID: req.ID, Error: protocol.Errorf(protocol.CodeMethodNotFound,
			"%s is not routed to clients by this gateway yet", req.Method)})
		return
	}
	cn.workers.Add(1)
	go func() {
		defer cn.workers.Done()
		result, err := cn.answerSafely(cb, req, origin)
		resp := &protocol.Response{ID: req.ID, Result: result}
		if err != nil {
			var rpcErr *protocol.Error
			if !errors.As(err, &rpcErr) {
				rpcErr = protocol.Errorf(protocol.CodeInternalError, "%v", err)
			}
			resp = &protocol.Response{ID: req.ID, Error: rpcErr}
		}
		cn.respond(resp)
	}()
}

// notifySafely runs the OnNotification callback; a panic in it is logged, and the read loop
// goes on.
func (cn *connection) notifySafely(cb func(*Client, *protocol.Notification, Origin), n *protocol.Notification, origin Origin) {
	defer func() {
		if p := recover(); p != nil {
			cn.client.logger.Error("panic handling an upstream's notification", "method", n.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	cb(cn.client, n, origin)
}

// answerSafely runs the OnRequest callback; a panic in it becomes an internal error for the
// upstream and a log record, never a crash of the gateway.
func (cn *connection) answerSafely(cb func(context.Context, *Client, *protocol.Request, Origin) (json.RawMessage, error), req *protocol.Request, origin Origin) (result json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			cn.client.logger.Error("panic answering an upstream's request", "method", req.Method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, protocol.Errorf(protocol.CodeInternalError, "internal error in the gateway")
		}
	}()
	return cb(cn.ctx, cn.client, req, origin)
}

func (cn *connection) respond(resp *protocol.Response) {
	ctx, cancel := context.WithTimeout(cn.ctx, 10*time.Second)
	defer cancel()
	err := cn.conn.Write(ctx, resp)
	var reqErr *requestError
	switch {
	case errors.As(err, &reqErr):
		cn.client.logger.Warn("the upstream refused the gateway's answer to its request", "id", resp.ID.String(), "error", err.Error())
	case err != nil:
		cn.fail(err)
	}
}

// Spec returns the upstream's spec, with its defaults applied.
func (c *Client) Spec() Spec { return c.spec }

// NewHTTPTransport returns the HTTP transport an upstream client makes for itself when
// Options.HTTPClient is nil; a caller that wraps it (to add credentials) starts from it.
func NewHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Many client sessions share an upstream: keep enough idle connections for concurrent
	// calls, or each one past the default two pays for a new connection.
	t.MaxIdleConnsPerHost = 256
	t.MaxIdleConns = 1024
	return t
}

// SameHostRedirects is the redirect policy of upstream HTTP clients: a redirect is followed
// only to the same scheme and host, so that headers meant for the upstream (its configured
// headers, the gateway's credentials) never travel elsewhere; the redirect itself is then
// the answer. Go drops Authorization on a redirect to another host, but not a custom header
// such as X-Api-Key.
func SameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Scheme != via[0].URL.Scheme || req.URL.Host != via[0].URL.Host {
		return http.ErrUseLastResponse
	}
	return nil
}

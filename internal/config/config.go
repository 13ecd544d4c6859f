// Package config owns Manifold's configuration file: its YAML keys, their
// defaults and their validation.
//
// Loading runs in three steps: decode the YAML strictly, apply defaults,
// then validate everything. Every problem found on the way is collected, so one
// run reports them all, each naming file, line and field:
//
//	cfg, err := config.Load(path, os.LookupEnv)
//	var cerr *config.Error
//	if errors.As(err, &cerr) {
//		for _, p := range cerr.Problems {
//			fmt.Fprintln(os.Stderr, p) // gw.yaml:12: upstreams[1].command: required: ...
//		}
//	}
//
// The structs here are plain data, kept apart from the runtime objects the
// gateway builds from them. The package does no logging and reads no
// environment variables itself.
//
// # Variables
//
// Scalar values (never keys, never the raw file text, so a value cannot
// inject YAML) may refer to variables, looked up with the function passed to
// Load or Parse:
//
//   - ${NAME} is the value of NAME; it is a problem if NAME is not set.
//   - ${NAME:-default} is the value of NAME, or default if NAME is unset or
//     empty. The default is literal text up to the first "}".
//   - $$ is a literal "$". A "$" not followed by "{" or "$" stays as it is.
//
// Expansion happens before a value is read as a number, duration or boolean,
// so `max_sessions: ${MAX_SESSIONS:-1000}` works. For the same reason a value
// is read by its text alone: quoting ("500") does not change how it is read.
//
// # Strictness
//
// Unknown keys, duplicate keys, values of the wrong shape, YAML merge keys
// (<<) and keys with no value are problems. A few fields accept no value as an
// empty list or mapping (upstreams, overrides, profiles, args, env,
// inherit_env, headers, and include, exclude and overrides under tools,
// prompts, resources and resource_templates); fields where absence and
// emptiness mean different things (prefix, allowed_origins, the pattern lists
// of a profile's selector) do not. An include with no value keeps every item,
// as if absent; `include: []` keeps none.
//
// # Imported server lists
//
// Users often have their MCP servers listed already, for Claude Desktop,
// Cursor or VS Code. Import reads such a list as upstreams, and Build joins a
// config file and any number of lists into one Config, validated together,
// reporting the problems of every file at once:
//
//	cfg, err := config.Build(configPath, importPaths, os.LookupEnv)
//
// # Overrides
//
// A server list is the host's format and cannot carry the gateway's keys, so
// the config file's top-level `overrides` list sets them, by upstream name, for
// an upstream of any file:
//
//	overrides:
//	  - name: filesystem      # a server of an imported list, or an upstream above
//	    isolation: session
//	    tools: {exclude: ["write_*"]}
//
// An entry may set every key of an upstream entry except name, command, url
// and transport, which say what server the upstream is. A key it sets replaces
// the upstream's value whole (a list or mapping too, tools and prompts
// included); the others keep the upstream's values and defaults. A relative
// dir is relative to the config file's directory, as in an upstream entry. A
// problem of a value an override sets is reported at the override
// (gw.yaml:31: overrides[0].isolation: ...). Each upstream has at most one
// override, and each override names an existing upstream, enabled or not. After
// Load or Build the upstreams carry the result: Config keeps no list of
// overrides.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Defaults for fields the file leaves out.
const (
	defaultListen             = "127.0.0.1:8080"
	defaultSeparator          = "__"
	defaultLogLevel           = "info"
	defaultMaxBodyBytes       = 4 << 20 // 4 MiB
	defaultMaxSessions        = 1000
	defaultSessionIdleTimeout = 30 * time.Minute
	defaultPageSize           = 100
	defaultRequestTimeout     = 60 * time.Second
	defaultIsolation          = IsolationShared
	defaultIsolationIdle      = 5 * time.Minute
	defaultMaxConnections     = 100
	defaultInitializeTimeout  = 30 * time.Second
	// defaultFirstFetchTimeout is the first start's bound of a command that may fetch its
	// server first (Upstream.FirstInitializeTimeout).
	defaultFirstFetchTimeout      = 2 * time.Minute
	defaultMaxResponseBytes       = 16 << 20 // 16 MiB
	defaultMaxBatchEntries        = 64
	defaultMaxCallsPerSession     = 64
	defaultMaxCallsPerPrincipal   = 256
	defaultMaxListensPerPrincipal = 16
	defaultMaxCalls               = 4096
	defaultBodyReadTimeout        = 30 * time.Second
	defaultStreamAfter            = time.Second
	defaultStreamRetention        = time.Minute
	defaultHTTPIdleTimeout        = 2 * time.Minute
	minMaxConnsPerAddress         = 256 // the least default of max_connections_per_address
	defaultSessionEvictIdle       = 5 * time.Minute
	defaultDrainTimeout           = 10 * time.Second
	defaultFirstListWait          = 5 * time.Second
	defaultAttributionWindow      = 2 * time.Second
	defaultAuditSink              = AuditSinkOff
	defaultAuditBuffer            = 4096
)

// Defaults of the stream budgets.
const (
	// defaultStreamBudgetBytes bounds what a replica keeps of its streams in process: eight
	// streams at their own cap (8 MiB), or thousands of ordinary answers, a modest share of a
	// process's memory.
	defaultStreamBudgetBytes = 64 << 20 // 64 MiB
	// defaultEventLogBudgetBytes bounds the event logs in Redis, which all replicas share:
	// what four replicas keep in process, on a server that is usually sized for more.
	defaultEventLogBudgetBytes = 256 << 20 // 256 MiB
)

// Transports of an upstream (Upstream.Transport).
const (
	TransportStdio          = "stdio"
	TransportStreamableHTTP = "streamable-http"
	TransportSSE            = "sse"
	TransportAuto           = "auto"
)

// Protocol eras of an upstream (Upstream.Protocol).
const (
	ProtocolAuto   = "auto"
	ProtocolLegacy = "2025-11-25"
	ProtocolModern = "2026-07-28"
)

// What the gateway does when an upstream of 2025-11-25 asks a 2026-07-28 client for input in
// the middle of a call (Upstream.InputBridge).
const (
	InputBridgePark   = "park"
	InputBridgeRefuse = "refuse"
)

// Outputs of the audit trail (Audit.Sink).
const (
	AuditSinkOff    = "off"
	AuditSinkStdout = "stdout"
	AuditSinkFile   = "file"
)

// defaultAllowedOrigins returns a new slice holding the loopback origins
// accepted when the file has no allowed_origins key.
func defaultAllowedOrigins() []string {
	return []string{
		"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*",
		"https://localhost:*", "https://127.0.0.1:*", "https://[::1]:*",
	}
}

// Config is the gateway's configuration as read from one file, with defaults
// applied and validated. It is plain data: the gateway builds its runtime
// objects from it and must not modify it afterwards. It is safe for
// concurrent reads.
type Config struct {
	// File is the path the config was loaded from (the file argument of
	// Parse), for messages. When Build had no config file, it is the first
	// imported server list.
	File string

	// Listen is the TCP address of the HTTP face, as host:port with a numeric
	// port (key `listen`). An empty host (":8080") means all interfaces.
	// Defaults to "127.0.0.1:8080".
	Listen string

	// Separator joins an upstream's prefix to the names of its tools and
	// prompts, as in "github__create_issue" (key `separator`): 1 to 4
	// characters from A-Z a-z 0-9 _ . -. Defaults to "__".
	Separator string

	// LogLevel is one of debug, info, warn or error (key `log_level`).
	// Defaults to "info".
	LogLevel string

	// LogFormat is how the gateway writes its log lines (key `log_format`): text
	// (key=value pairs) or json (one JSON object a line), with the same fields.
	// Defaults to "text".
	LogFormat string

	// Tracing configures OpenTelemetry traces (key `tracing`); without an
	// endpoint, tracing is off.
	Tracing Tracing

	// AllowedOrigins lists the browser origins whose requests the HTTP face
	// accepts (key `allowed_origins`). Each entry is scheme://host,
	// scheme://host:port or scheme://host:*, with scheme http or https; ":*"
	// means any port, including none. Match with OriginAllowed.
	//
	// The check applies only to requests that carry an Origin header;
	// requests without one are not browser cross-origin requests and are not
	// refused by it. If the key is absent, defaults to the loopback origins
	// http and https on localhost, 127.0.0.1 and [::1], any port. An explicit
	// empty list (`allowed_origins: []`) accepts only requests without an
	// Origin header.
	//
	// Security: an origin listed here lets any web page served from it drive
	// the gateway through a user's browser. List only origins you control.
	AllowedOrigins []string

	// MaxBodyBytes is the largest request body accepted, in bytes (key
	// `max_body_bytes`); greater than 0. Defaults to 4194304 (4 MiB).
	MaxBodyBytes int64

	// BodyReadTimeout is how long the gateway waits for a POST body to arrive
	// in full (key `body_read_timeout`, a duration); a body dribbled in more
	// slowly is cut off. It never applies to SSE streams the gateway sends.
	// Greater than 0. Defaults to 30 seconds.
	BodyReadTimeout time.Duration

	// ModernProtocol serves MCP 2026-07-28 on /mcp and on every profile
	// endpoint, beside the 2025-11-25 sessions (key `modern_protocol`): a
	// request that carries a 2026-07-28 signal (the MCP-Protocol-Version
	// header or a protocol version in its params._meta) is served on its own,
	// with no session, and server/discover answers the merged view. When
	// false, such a request is answered as by a server of 2025-11-25 and
	// earlier (HTTP 400, error -32022 listing those versions), so that
	// dual-era clients start a session with initialize. A 2025-11-25
	// upstream's sampling, elicitation or roots request parks a 2026-07-28
	// call on the replica that took it (see input_bridge), where a retry
	// reaching any replica continues it. Set it to false on every replica
	// while any replica runs a build without it.
	// Defaults to false.
	ModernProtocol bool

	// StreamAfter is how long a request of a 2025-11-25 session may run
	// before its answer becomes a resumable SSE stream (key `stream_after`, a
	// duration): a priming event gives the client an event id to resume with
	// if its connection drops. A request that emits a message switches at
	// once; one that ends sooner is answered with plain JSON. 0 switches only
	// on a message. Defaults to 1 second.
	StreamAfter time.Duration

	// StreamRetention is how long a finished SSE stream's events are kept
	// for a client whose connection dropped to resume it (key
	// `stream_retention`, a duration); greater than 0. Defaults to 1 minute.
	StreamRetention time.Duration

	// StreamBudgetBytes bounds the bytes of events a replica keeps of its
	// streams in process (key `stream_budget_bytes`); greater than 0. Past
	// it, the streams kept only for resumption (finished, their connection
	// gone) are forgotten before their retention ends, the one whose
	// retention ends first first; open streams never are. Defaults to
	// 67108864 (64 MiB).
	StreamBudgetBytes int64

	// EventLogBudgetBytes bounds the bytes of events the event logs of all
	// replicas keep in Redis (key `event_log_budget_bytes`, with
	// session_store type redis); greater than 0. Past it, the logs of
	// finished streams go first, oldest first; those of open streams never
	// do. Defaults to 268435456 (256 MiB).
	EventLogBudgetBytes int64

	// FirstListWait is how long a list request (tools/list, resources/list,
	// resources/templates/list, prompts/list) waits, right after the gateway
	// started, for upstreams still making their first attempt to start (key
	// `first_list_wait`, a duration), so that a client that connects at once
	// sees them in its first list even if it ignores list_changed; a tools/call or
	// prompts/get naming what the catalog does not hold yet waits the same way. 0 or more;
	// defaults to 5 seconds.
	FirstListWait time.Duration

	// DrainTimeout is how long `gateway serve`, once asked to stop (SIGINT or
	// SIGTERM), lets the requests in flight finish while it refuses new ones
	// and /readyz answers 503 (key `drain_timeout`, a duration); a request
	// still running then gets a JSON-RPC error. A second signal ends the
	// drain at once. 0 or more; defaults to 10 seconds.
	DrainTimeout time.Duration

	// HTTPIdleTimeout closes an idle keep-alive HTTP connection after this
	// long (key `http_idle_timeout`, a duration); greater than 0. Defaults to
	// 2 minutes.
	HTTPIdleTimeout time.Duration

	// MaxConnectionsPerAddress is the most connections one client address may
	// hold open to the HTTP listener at once (key
	// `max_connections_per_address`); greater than 0. A connection past it is
	// closed as soon as it is accepted. Behind a trusted proxy (TrustedProxies)
	// a client's connections are the proxy's, and what is counted instead is
	// its requests in progress, each of which holds one of them; past the cap
	// such a request gets HTTP 429. Defaults to max_sessions, and to at least 256.
	MaxConnectionsPerAddress int

	// TrustedProxies are the reverse proxies and load balancers in front of
	// the gateway whose X-Forwarded-For header is believed (key
	// `trusted_proxies`, a list of CIDRs such as 10.0.0.0/8, or single
	// addresses). The client address of a request from one of them is the
	// rightmost address of X-Forwarded-For that is not itself a trusted
	// proxy; of any other request, its TCP peer's, whatever its headers say.
	// The client address keys the per-address caps (connections, anonymous
	// sessions) and is what logs name. Nil: no proxy is trusted.
	//
	// Security: a client that can reach the gateway from a listed address
	// chooses its own client address. List only your proxies.
	TrustedProxies []string

	// MaxSessions is the most client sessions held at once (key
	// `max_sessions`); greater than 0. Defaults to 1000.
	MaxSessions int

	// SessionIdleTimeout is how long a client session may stay unused before
	// it expires (key `session_idle_timeout`, a duration such as "30m");
	// greater than 0. Defaults to 30 minutes.
	SessionIdleTimeout time.Duration

	// SessionEvictIdle lets a new session in when the gateway holds
	// MaxSessions (key `session_evict_idle`, a duration): initialize then
	// evicts the session whose client has sent no request for longest, if
	// it has sent none for at least this long (an open stream is not a
	// request), instead of refusing with 503. Greater than 0. Defaults to 5
	// minutes.
	SessionEvictIdle time.Duration

	// MaxBatchEntries is the most entries a JSON-RPC batch may hold (key
	// `max_batch_entries`); greater than 0. Batches exist in protocol
	// 2025-03-26 only. Defaults to 64.
	MaxBatchEntries int

	// MaxCallsPerSession is the most client requests one session may have in
	// flight at once (key `max_calls_per_session`); greater than 0. Defaults
	// to 64.
	MaxCallsPerSession int

	// MaxCallsPerPrincipal is the most 2026-07-28 requests one principal may have
	// in flight at once on this replica (key `max_calls_per_principal`); greater
	// than 0. Such requests have no session, so this stands in for
	// max_calls_per_session and the per-principal session cap: one caller cannot
	// take all of max_calls. Anonymous callers (authentication off) are counted
	// by client address. Defaults to 256.
	MaxCallsPerPrincipal int

	// MaxListensPerPrincipal is the most subscriptions/listen streams one
	// principal may hold open at once on this replica (key
	// `max_listens_per_principal`); greater than 0. A listen stays open until
	// its client closes it, so it does not count toward max_calls_per_principal
	// or max_calls, which it would otherwise starve. Anonymous callers
	// (authentication off) are counted by client address. Defaults to 16.
	MaxListensPerPrincipal int

	// MaxCalls is the most client requests in flight at once in the whole
	// gateway, all sessions together (key `max_calls`); greater than 0.
	// Defaults to 4096.
	MaxCalls int

	// PageSize is the number of items per page of the merged lists the
	// gateway serves (key `page_size`), from 1 to 1000. Defaults to 100.
	PageSize int

	// Upstreams are the upstream MCP servers, in file order (key
	// `upstreams`), followed by those of imported server lists (see Build),
	// with the top-level overrides applied (key `overrides`; see the package
	// doc).
	// Names and effective prefixes are unique across all of them, enabled or
	// not. The list may be empty: the gateway then starts with no upstreams.
	Upstreams []Upstream

	// Roots are the root URIs the gateway itself answers to roots/list from a shared
	// upstream outside any client's call (key `roots`), e.g. file:///srv/data. Such a
	// request cannot be attributed to one client, so no client's roots are used. Nil (the
	// default) answers no roots.
	Roots []string

	// Audit configures the audit trail, one record per completed client request (key
	// `audit`). If the key is absent, the trail is off.
	Audit Audit

	// SessionStore says where sessions live (key `session_store`): in memory, the default,
	// or in Redis, shared by replicas.
	SessionStore SessionStore

	// Keys are the gateway's own keys (key `keys`, a list of {id, secret}): the first seals
	// what replicas send each other on Redis, what a held call's record keeps of its
	// session, the requestState of the multi-round-trip results relayed to 2026-07-28
	// clients, and the users' grants at upstreams with user_oauth; every key opens. Required
	// with a Redis session store or user_oauth, the same list on every replica. Nil when
	// absent: the gateway then seals requestStates with a random key made at start, so that
	// they open only on the replica that issued them, and not after a restart.
	Keys []Key

	// PublicURL is the gateway's URL as clients reach it (key `public_url`), like
	// https://mcp.example.com behind a reverse proxy: the base of every URL the gateway
	// advertises (resource metadata, the token audience). Empty: http://LISTEN.
	PublicURL string

	// Auth says how clients authenticate (key `auth`); absent, they do not.
	Auth Auth

	// Policy decides who may see and call what, and how often (key `policy`); absent,
	// everything is allowed.
	Policy Policy

	// Admin configures the admin API and page (key `admin`); absent, there is none.
	Admin Admin

	// Metrics configures the Prometheus metrics (key `metrics`); absent, there are none.
	Metrics Metrics

	// Plugins are the policy plugins, in the order they are asked (key `plugins`).
	Plugins []Plugin

	// StateDir is where the gateway keeps what must outlive a restart without Redis (key
	// `state_dir`; relative to the config file's directory): the pinned tool definitions, and
	// the users' grants at upstreams with user_oauth.
	// Empty: pins last as long as the process, unless the session store is Redis, which
	// keeps them.
	StateDir string

	// Pins configures the pinning of tool definitions (key `pins`): the _meta keys pinned,
	// and how long the pin of a tool no longer listed is kept.
	Pins Pins

	// Profiles are the gateway's virtual endpoints (key `profiles`, a list): each is served
	// at /mcp/<name> and exposes a subset of the catalog served at /mcp. Nil when absent.
	Profiles []Profile
}

// Profile is a virtual endpoint: /mcp/<Name>, with its own sessions and list_changed,
// exposing the items of the catalog that one of its selectors selects.
type Profile struct {
	// Name is the endpoint's path segment (key `name`): served at /mcp/<Name>. Required,
	// unique, 1 to 64 characters from A-Z a-z 0-9 _ -.
	Name string

	// Include lists the selectors (key `include`, a non-empty list): an item is in the
	// profile when any of them selects it.
	Include []Selector

	// File and Line say where the profile was written, for messages at run time.
	File string
	Line int
}

// Selector selects items of the catalog for a Profile, by upstream and by glob (see package
// glob) over the names and URIs clients see at /mcp: after prefixes and renames, as
// `gateway catalog` prints them.
type Selector struct {
	// Upstream restricts the selector to the upstream of that name (key `upstream`), which
	// must exist; "" selects from every upstream.
	Upstream string

	// Tools, Prompts, Resources and ResourceTemplates are globs over exposed tool names,
	// prompt names, resource URIs and resource template URIs (keys `tools`, `prompts`,
	// `resources`, `resource_templates`). A nil list selects nothing of its kind. A selector
	// whose entry sets none of the four selects everything of its upstream(s): Load,
	// Parse and Build set each to ["*"]. An entry with no key at all is a problem.
	Tools, Prompts, Resources, ResourceTemplates []string
}

// Filter keeps or drops an upstream's items by glob (see package glob) over the upstream's
// own names or URIs: an item is kept when Include is nil or one of its patterns matches it,
// and no pattern of Exclude does. A dropped item does not exist through the gateway.
type Filter struct {
	// Include lists the patterns of the items to keep (key `include`); nil keeps every
	// item, an empty list none.
	Include []string

	// Exclude lists the patterns of the items to drop (key `exclude`); it wins over Include.
	Exclude []string
}

// Shaping is how one upstream's tools, or its prompts, look to clients: which are listed,
// and under what name, title, description and annotations.
type Shaping struct {
	// Filter keeps or drops items by their upstream's own names (keys `include`, `exclude`).
	Filter

	// Overrides changes single items, by their upstream's own name (key `overrides`, a
	// mapping of name to settings). Nil when absent.
	Overrides map[string]ItemOverride
}

// ItemOverride changes how one tool or prompt looks to clients. An empty field keeps what the
// upstream says.
type ItemOverride struct {
	// Name is the item's new name (key `name`), which clients see behind the upstream's
	// prefix and separator and call it by; the upstream still receives its own name. 1 to 64
	// characters from A-Z a-z 0-9 _ . -, and with the prefix and separator at most 64.
	Name string

	// Title replaces the item's title (key `title`).
	Title string

	// Description replaces the item's description (key `description`).
	Description string

	// Annotations set a tool's annotation hints (key `annotations`, a mapping of
	// readOnlyHint, destructiveHint, idempotentHint and openWorldHint to true or false);
	// the tool's other annotations stay. Tools only. A presentation choice for hosts that
	// honour hints, not a security control: the upstream's tool does what it does. Nil when
	// absent.
	Annotations map[string]bool

	// Line is the line of the override's key, for messages at run time. It is a line of
	// the config file (Config.File), where every item override is written: in the
	// upstream's entry or in a top-level override (see the package doc), also for an
	// upstream of an imported server list.
	Line int
}

// AnnotationHints are the annotation hints an ItemOverride may set, in the order messages
// list them. It must not be modified.
var AnnotationHints = []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}

// Audit configures the audit trail: one JSON line per completed client request, saying who
// asked for what and how it ended.
type Audit struct {
	// Sink is where the records go (key `sink`): AuditSinkOff (nowhere), AuditSinkStdout
	// (the gateway's standard output) or AuditSinkFile (appended to Path). Defaults to
	// "off".
	Sink string

	// Path is the file records are appended to (key `path`), created with mode 0600 if
	// absent; a relative path is relative to the gateway's working directory. Required when
	// Sink is "file", and allowed only then.
	Path string

	// Arguments keeps the arguments of tools/call and prompts/get in their records (key
	// `arguments`), with the members Redact names replaced. Off by default: arguments may
	// carry what users typed.
	Arguments bool

	// Redact names argument members whose values never reach a record (key `redact`, names
	// matched at any depth, case-insensitively), like [ssn, address]: in addition to the
	// common names of secrets (password, token, apiKey, client_secret, ...; see
	// audit.SecretName and audit.RedactArguments), which are redacted unless
	// SkipRedactDefaults.
	Redact []string

	// SkipRedactDefaults keeps the values of members named like secrets in the records, unless
	// Redact names them (key `redact_defaults: false`). Off by default: a record never holds
	// a password, token or key a client passed as an argument. Safe only where the records are
	// as protected as the secrets themselves; the gateway logs a warning at start when it is
	// set with Arguments.
	SkipRedactDefaults bool

	// Buffer is how many records may wait to be written (key `buffer`), from 1 to 1048576.
	// A record that finds it full is dropped and counted, so that a slow output never holds
	// up a request. Defaults to 4096.
	Buffer int
}

// Upstream configures one upstream MCP server: a child process speaking MCP
// over stdio (Command set), or a server reached over HTTP (URL set). Exactly
// one of Command and URL is set.
type Upstream struct {
	// Name identifies the upstream in logs, policy rules and messages (key
	// `name`). Required, unique (case-sensitive), 1 to 64 characters from
	// A-Z a-z 0-9 _ -.
	Name string

	// Command is the program to run for a stdio upstream (key `command`).
	// Either Command or URL is set, not both. SelfCommand ("@self") runs the
	// gateway's own program, for its demo server only (Args [demo], or
	// [demo, -name, NAME]).
	Command string

	// Args are the program's arguments (key `args`). Nil when absent. Only
	// with Command.
	Args []string

	// Env holds variables set for the child (key `env`). They are added to
	// what the child inherits from the gateway's environment (a small base
	// set and InheritEnv), overriding variables of the same name. Nil when
	// absent. Only with Command.
	Env map[string]string

	// InheritEnv names further variables of the gateway's environment the
	// child inherits, besides the base set every child gets (key
	// `inherit_env`, a list). An entry is a name ([A-Za-z_][A-Za-z0-9_]*),
	// or a name followed by "*" to match every variable with that prefix,
	// like "AWS_*". Nil when absent. Only with Command. The value `all` instead of
	// a list passes the whole environment (InheritAllEnv).
	//
	// Security: a variable listed here is readable by the child, and so by
	// anyone who can make the child's tools reveal its environment. List
	// only what the server needs.
	InheritEnv []string

	// InheritAllEnv makes the child inherit the gateway's whole environment
	// (inherit_env with the value `all`), instead of the base set and
	// InheritEnv. Only with Command.
	//
	// Security: every secret in the gateway's environment, such as a token
	// meant for another upstream's headers, is then readable by the child.
	InheritAllEnv bool

	// Dir is the child's working directory (key `dir`). Empty means the
	// gateway's working directory. In a config file read from disk (Load,
	// Build), a relative dir is relative to that file's directory, and so is
	// a relative Command path (one with a slash), within Dir when it is set;
	// a dir a top-level override sets for an imported server is relative to
	// the config file's directory too. Only with Command.
	Dir string

	// URL is the endpoint of an upstream reached over HTTP, a Streamable
	// HTTP or legacy SSE server (key `url`): an absolute URL with scheme
	// http or https and a host. Either Command or URL is set, not both.
	//
	// Security: the URL may carry credentials (user info, a query token);
	// messages never quote it.
	URL string

	// Headers are sent on every HTTP request to the upstream (key
	// `headers`), typically an Authorization header whose value comes from
	// ${ENV}. Nil when absent. Only with URL. Names are HTTP tokens, unique
	// case-insensitively, and exclude those the transport sets itself
	// (Accept, Content-Type, Content-Length, Host, Connection,
	// Transfer-Encoding, Mcp-Session-Id, Mcp-Protocol-Version,
	// Last-Event-ID, and Mcp-Method, Mcp-Name and Mcp-Param-*, which a
	// 2026-07-28 request computes from its message); values hold no CR, LF
	// or NUL. Messages never quote values.
	Headers map[string]string

	// Transport is how the gateway talks to the upstream (key `transport`):
	// TransportStdio (needs Command), or TransportStreamableHTTP,
	// TransportSSE (legacy HTTP+SSE, protocol 2024-11-05) or TransportAuto
	// (need URL). Auto tries Streamable HTTP and falls back to legacy SSE
	// when the server rejects the initialize POST with 400, 404 or 405. If
	// the key is absent, defaults to "stdio" when Command is set and
	// "streamable-http" when URL is set.
	Transport string

	// Protocol is the protocol era the gateway speaks to the upstream (key
	// `protocol`): ProtocolLegacy ("2025-11-25": the initialize handshake
	// and a session, as every upstream before 2026-07-28), ProtocolModern
	// ("2026-07-28": server/discover, then stateless requests that carry
	// their version and the calling client's capabilities in _meta; an
	// upstream that does not answer discover as a 2026-07-28 server fails to
	// connect) or ProtocolAuto (server/discover first, falling back to
	// initialize when the answer is not a 2026-07-28 one). Defaults to
	// "2025-11-25", which costs no probe at start; set "auto" or
	// "2026-07-28" for an upstream that speaks the new revision (what it
	// asks of a 2025 client mid-call is bridged). With transport "sse"
	// (protocol 2024-11-05) only "2025-11-25" and "auto" fit.
	Protocol string

	// InputBridge is what the gateway does when this upstream, speaking
	// 2025-11-25, sends a 2026-07-28 client's call a request for input
	// (sampling, elicitation, roots) in its middle (key `input_bridge`):
	// InputBridgePark ("park": the call waits, and the client gets an
	// input_required result; its retry with the answers continues it) or
	// InputBridgeRefuse ("refuse": the call fails with -32021 naming what
	// was asked). Defaults to "park". A 2025-11-25 session gets the request
	// itself either way.
	InputBridge string

	// InitializeTimeout bounds connecting (or starting the child),
	// initialize and the first fetch of the upstream's lists (key
	// `initialize_timeout`, a duration); greater than 0. Defaults to 30
	// seconds.
	InitializeTimeout time.Duration

	// FirstInitializeTimeout bounds the upstream's first start instead of
	// InitializeTimeout when it is not zero. It is no key of its own: when the
	// upstream sets no initialize_timeout (in its entry or an override) and its
	// command is npx, uvx or docker, which may fetch the server on first use,
	// it defaults to 2 minutes; else it is zero.
	FirstInitializeTimeout time.Duration

	// MaxResponseBytes is the largest message accepted from this upstream,
	// in bytes (key `max_response_bytes`): one stdio line, one HTTP JSON
	// body or one SSE event. Greater than 0. Defaults to 16777216 (16 MiB).
	MaxResponseBytes int64

	// Prefix namespaces this upstream's tool and prompt names and resource
	// URIs (key `prefix`): up to 32 characters from A-Z a-z 0-9 _ . -.
	// If the key is absent, defaults to Name. If it is present and empty
	// (`prefix: ""`), names and URIs pass unchanged ("unprefixed"); at most
	// one upstream may be unprefixed. Prefixes are unique, and a prefix
	// followed by the separator must not contain the separator earlier, so
	// that a namespaced name splits back in one way only.
	Prefix string

	// Isolation says how client sessions share this upstream (key `isolation`):
	// IsolationShared (one connection for all sessions; the default),
	// IsolationPrincipal (one per authenticated user; an anonymous session
	// gets one of its own) or IsolationSession (one per client session,
	// opened on its first call and closed with the session or after
	// IsolationIdleTimeout; a 2026-07-28 call, which has no session, gets
	// one of its own for the call). Upstreams that keep per-client state, or
	// send sampling, elicitation or roots requests while several sessions call
	// them over stdio, need principal or session.
	Isolation string

	// IsolationIdleTimeout closes a per-session or per-principal connection
	// unused this long (key `isolation_idle_timeout`); greater than 0.
	// Defaults to 5 minutes.
	IsolationIdleTimeout time.Duration

	// MaxConnections caps the per-session or per-principal connections (for a
	// stdio upstream: child processes) open at once (key `max_connections`);
	// greater than 0. Defaults to 100.
	MaxConnections int

	// AttributionWindow matters over transports that do not tie a request
	// from the upstream to the call that caused it (stdio, legacy SSE) on a
	// shared connection (key `attribution_window`, a duration). For this
	// long after a client session's call ended (answered, cancelled or timed
	// out), that session still counts as a possible owner of a request from
	// the upstream, so such a request is refused as ambiguous rather than
	// routed to another session. 0 turns the window off; negative is a
	// problem. Defaults to 2 seconds.
	AttributionWindow time.Duration

	// RequestTimeout bounds each request forwarded to this upstream (key
	// `request_timeout`, a duration such as "60s"); greater than 0. Defaults
	// to 60 seconds.
	RequestTimeout time.Duration

	// Enabled says whether the gateway starts this upstream (key `enabled`).
	// Defaults to true when the key is absent.
	Enabled bool

	// IncludeInstructions says whether the upstream's `instructions` are
	// passed on to clients (key `include_instructions`). They are text an
	// upstream injects into every client's context, so the default is false.
	IncludeInstructions bool

	// BroadcastLogs sends this upstream's log messages that cannot be attributed to one
	// client's call to every session (key `broadcast_logs`). Off by default: they may carry one
	// user's context to others.
	BroadcastLogs bool

	// TrustAnnotations lets policy rules match this upstream's tool annotations (key
	// `trust_annotations`). Annotations come from the upstream: off by default, a rule on
	// readOnlyHint never matches its tools.
	TrustAnnotations bool

	// Pinning guards this upstream's tool definitions (key `pinning`): withhold records each
	// tool's definition at first sight and withholds a tool whose definition changes until
	// an operator accepts the change on the admin API; log only logs the change; off (the
	// default) does neither.
	Pinning string

	// Credentials are what the gateway presents to this HTTP upstream besides Headers (key
	// `credentials`): header values read from files, the OAuth client credentials grant, a
	// token exchange per principal, or each user's own account connected at the upstream
	// (user_oauth).
	Credentials Credentials

	// Tools shapes the upstream's tools as clients see them (key `tools`): a filter by the
	// upstream's tool names and overrides of single tools.
	Tools Shaping

	// Prompts shapes the upstream's prompts as clients see them (key `prompts`), as Tools
	// does its tools; prompts have no annotations.
	Prompts Shaping

	// Resources filters the upstream's resources by their URIs, as the upstream lists them
	// (key `resources`, with `include` and `exclude`). It applies to reads too: a URI the
	// filter drops cannot be read, subscribed or completed through the gateway, unless it
	// matches a resource template the gateway lists.
	Resources Filter

	// ResourceTemplates filters the upstream's resource templates by their URI templates, as
	// the upstream lists them (key `resource_templates`).
	ResourceTemplates Filter

	// File is the file this upstream was read from: the config file, or an
	// imported server list. With Line, for messages at run time.
	File string

	// Line is the line of this upstream's entry in File (for an imported
	// server, the line of its key), for messages at run time.
	Line int
}

// EnabledUpstreams returns the upstreams with Enabled set, in file order, in
// a new slice; the elements share their slices and maps (Args, Env,
// InheritEnv, Headers, and those of Tools, Prompts, Resources and
// ResourceTemplates) with c. It returns nil if none is enabled.
func (c *Config) EnabledUpstreams() []Upstream {
	var out []Upstream
	for _, u := range c.Upstreams {
		if u.Enabled {
			out = append(out, u)
		}
	}
	return out
}

// Load reads and parses the config file at path; see Parse. lookupEnv
// resolves ${VAR} references (the command passes os.LookupEnv); nil means no
// variables are set.
//
// If the file cannot be read, the error wraps the one from the file system
// (test it with errors.Is, e.g. fs.ErrNotExist). If its content cannot be used,
// the error is an *Error listing every problem. Load is safe for concurrent
// use.
func Load(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return build(&source{path: path, data: data, onDisk: true}, nil, lookupEnv)
}

// Parse is Load on bytes already read; file is the name used in messages and
// in Config.File. lookupEnv resolves ${VAR} references; nil means no
// variables are set.
//
// It returns a Config with defaults applied, or nil and an *Error listing
// every problem, in file order. An empty file is a problem; a file with only
// `upstreams: []` is valid. Parse is safe for concurrent use.
func Parse(file string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	return build(&source{path: file, data: data}, nil, lookupEnv)
}

// Build loads the config file at configPath and the server lists at
// importPaths (see Import), and returns one Config: the config file's
// settings and upstreams, followed by the imported upstreams, file by file in
// the order given. Everything is validated together: names and prefixes are
// unique across all files, and a clash is reported where it occurs, naming
// the file and line of the other upstream.
//
// configPath may be "": the settings are then the defaults, as for a config
// file with no keys, and Config.File is the first import path. It is an
// error to give neither a config file nor an import.
//
// If any file cannot be read, the error joins one error per such file, each
// wrapping the one from the file system (test with errors.Is), and nothing is
// parsed. Otherwise, if any content cannot be used, the error is an *Error
// listing the problems of all files: those of the config file first, then
// those of each import, each file's in line order. lookupEnv resolves
// variables in every file; nil means none is set. Build is safe for
// concurrent use.
func Build(configPath string, importPaths []string, lookupEnv func(string) (string, bool)) (*Config, error) {
	if configPath == "" && len(importPaths) == 0 {
		return nil, errors.New("build config: no config file and no server list to import")
	}
	// Read every file before parsing any: a file that cannot be read is an
	// I/O error, not a problem with its content.
	var errs []error
	var cfg *source
	if configPath != "" {
		data, err := os.ReadFile(configPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("load config: %w", err))
		}
		cfg = &source{path: configPath, data: data, onDisk: true}
	}
	imports := make([]source, len(importPaths))
	for i, path := range importPaths {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("import server list: %w", err))
		}
		imports[i] = source{path: path, data: data}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return build(cfg, imports, lookupEnv)
}

// source is the content of one file, as read.
type source struct {
	path string
	data []byte
	// onDisk is set for a file read from path (Load, Build), not bytes given with a name
	// (Parse): only then do relative paths in it resolve against its directory.
	onDisk bool
}

// build decodes cfg (a config file, or nil for none) and the imported server
// lists, applies defaults and validates everything together. See Build.
func build(cfg *source, imports []source, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	var (
		c        *Config
		top      *where // where the top-level settings were read; nil if not from a file
		sites    []site
		problems []Problem
		sepKnown = true // whether c.Separator is the one the user meant
	)
	var d *decoder // the config file's decoder, nil if there is none to decode
	if cfg == nil {
		c = new(Config)
		applyDefaults(c, &index{})
		c.File = imports[0].path
	} else {
		var ps []Problem
		c, d, ps = decodeConfig(cfg.path, cfg.data, lookupEnv)
		problems = append(problems, ps...)
		if c == nil { // nothing to decode; go on with the imports
			c = new(Config)
			applyDefaults(c, &index{})
			sepKnown = false
		} else {
			top = &where{file: cfg.path, ix: &d.index}
		}
		c.File = cfg.path
		for i := range c.Upstreams {
			sites = append(sites, site{where: *top, path: upstreamPath(i)})
		}
	}
	fromConfig := len(c.Upstreams)
	for _, imp := range imports {
		ups, ss, ps := decodeImport(imp.path, imp.data, lookupEnv)
		c.Upstreams = append(c.Upstreams, ups...)
		sites = append(sites, ss...)
		problems = append(problems, ps...)
	}
	if d != nil {
		d.applyOverrides(c, sites)
		problems = append(problems, d.problems...)
	}
	// Credentials get their defaults once overrides are applied: an override that sets
	// credentials replaces them whole, defaults included.
	for i := range c.Upstreams {
		applyCredentialDefaults(&c.Upstreams[i], &sites[i])
	}
	if cfg != nil && cfg.onDisk {
		// Relative paths written in the config file, in an upstream's entry or in an
		// override, are relative to its directory.
		dir := filepath.Dir(cfg.path)
		resolvePluginPaths(c, dir)
		if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
			if base, err := filepath.Abs(dir); err == nil {
				c.StateDir = filepath.Join(base, c.StateDir)
			}
		}
		for i := range c.Upstreams {
			switch {
			case i < fromConfig:
				resolveAgainst(&c.Upstreams[i], dir, true)
			case sites[i].overridden("dir"):
				resolveAgainst(&c.Upstreams[i], dir, false)
			}
		}
	}

	sep := c.Separator
	if !sepKnown {
		sep = ""
	}
	problems = append(problems, validate(c, top, sites, sep)...)
	if len(problems) > 0 {
		sortProblems(problems, cfg, imports)
		return nil, &Error{Problems: problems, Partial: c}
	}
	return c, nil
}

// resolveAgainst makes a stdio upstream's relative `dir`, and if command is set its relative
// `command` path (one with a slash; a bare name is looked up on PATH), relative to the
// config file's directory rather than to wherever the gateway was started: a relative
// command is taken within the upstream's dir, as exec does, and within the config's
// directory without one. The command of an imported server is left as it is: it was not
// written in the config file.
func resolveAgainst(u *Upstream, configDir string, command bool) {
	base, err := filepath.Abs(configDir)
	if err != nil {
		return // the working directory is gone: leave the paths as they are
	}
	if u.Dir != "" && !filepath.IsAbs(u.Dir) {
		u.Dir = filepath.Join(base, u.Dir)
	}
	if command && strings.Contains(u.Command, "/") && !filepath.IsAbs(u.Command) {
		within := base
		if u.Dir != "" {
			within = u.Dir
		}
		u.Command = filepath.Join(within, u.Command)
	}
}

// sortProblems puts problems in the order Build documents: by file, the
// config file first and then the imports as given, and by line within a file.
func sortProblems(problems []Problem, cfg *source, imports []source) {
	rank := make(map[string]int)
	if cfg != nil {
		rank[cfg.path] = 0
	}
	for i, imp := range imports {
		if _, ok := rank[imp.path]; !ok {
			rank[imp.path] = i + 1
		}
	}
	slices.SortStableFunc(problems, func(a, b Problem) int {
		if r := rank[a.File] - rank[b.File]; r != 0 {
			return r
		}
		return a.Line - b.Line
	})
}

// decodeConfig decodes the YAML config file data and applies defaults. It
// returns the decoder, which holds the index, the problems found so far and
// the top-level overrides, still to be applied (see applyOverrides). If there
// is nothing to decode (a syntax error, an empty file), it returns a nil
// Config and decoder, and the problems.
func decodeConfig(file string, data []byte, lookupEnv func(string) (string, bool)) (*Config, *decoder, []Problem) {
	root, problems := parseYAML(file, data)
	if root == nil {
		return nil, nil, problems
	}
	d := newDecoder(file, lookupEnv)
	c := d.config(root)
	applyDefaults(c, &d.index)
	return c, d, nil
}

// applyDefaults sets every field the file left out. A field whose value could
// not be decoded (already a problem) gets its default too, so that validation
// does not report it a second time.
func applyDefaults(c *Config, ix *index) {
	if !ix.has("listen") {
		c.Listen = defaultListen
	}
	if !ix.has("separator") {
		c.Separator = defaultSeparator
	}
	if !ix.has("log_level") {
		c.LogLevel = defaultLogLevel
	}
	if !ix.has("allowed_origins") {
		c.AllowedOrigins = defaultAllowedOrigins()
	}
	if !ix.has("max_body_bytes") {
		c.MaxBodyBytes = defaultMaxBodyBytes
	}
	if !ix.has("max_sessions") {
		c.MaxSessions = defaultMaxSessions
	}
	if !ix.has("session_idle_timeout") {
		c.SessionIdleTimeout = defaultSessionIdleTimeout
	}
	if !ix.has("session_evict_idle") {
		c.SessionEvictIdle = defaultSessionEvictIdle
	}
	if !ix.has("page_size") {
		c.PageSize = defaultPageSize
	}
	if !ix.has("max_batch_entries") {
		c.MaxBatchEntries = defaultMaxBatchEntries
	}
	if !ix.has("max_calls_per_session") {
		c.MaxCallsPerSession = defaultMaxCallsPerSession
	}
	if !ix.has("max_calls_per_principal") {
		c.MaxCallsPerPrincipal = defaultMaxCallsPerPrincipal
	}
	if !ix.has("max_listens_per_principal") {
		c.MaxListensPerPrincipal = defaultMaxListensPerPrincipal
	}
	if !ix.has("max_calls") {
		c.MaxCalls = defaultMaxCalls
	}
	if !ix.has("body_read_timeout") {
		c.BodyReadTimeout = defaultBodyReadTimeout
	}
	if !ix.has("stream_after") {
		c.StreamAfter = defaultStreamAfter
	}
	if !ix.has("stream_retention") {
		c.StreamRetention = defaultStreamRetention
	}
	if !ix.has("stream_budget_bytes") {
		c.StreamBudgetBytes = defaultStreamBudgetBytes
	}
	if !ix.has("event_log_budget_bytes") {
		c.EventLogBudgetBytes = defaultEventLogBudgetBytes
	}
	if !ix.has("http_idle_timeout") {
		c.HTTPIdleTimeout = defaultHTTPIdleTimeout
	}
	if !ix.has("max_connections_per_address") {
		// As many as the gateway holds sessions: clients behind one address (a NAT, or a
		// proxy not yet in trusted_proxies) are not held to fewer than they could use.
		c.MaxConnectionsPerAddress = max(minMaxConnsPerAddress, c.MaxSessions)
	}
	if !ix.has("drain_timeout") {
		c.DrainTimeout = defaultDrainTimeout
	}
	if !ix.has("first_list_wait") {
		c.FirstListWait = defaultFirstListWait
	}
	if !ix.has("audit.sink") {
		c.Audit.Sink = defaultAuditSink
	}
	if !ix.has("audit.buffer") {
		c.Audit.Buffer = defaultAuditBuffer
	}
	applyTracingDefaults(c, ix)
	applyStoreDefaults(&c.SessionStore, ix)
	applyAuthDefaults(c, ix)
	applyPolicyDefaults(&c.Policy, ix)
	applyPluginDefaults(c, ix)
	for i := range c.Upstreams {
		u, path := &c.Upstreams[i], upstreamPath(i)
		if !ix.has(path + ".prefix") {
			u.Prefix = u.Name
		}
		if !ix.has(path + ".transport") {
			u.Transport = defaultTransport(u)
		}
		applyUpstreamDefaults(u, func(key string) bool { return ix.has(path + "." + key) })
	}
	applySelectorDefaults(c.Profiles, ix)
}

// applyUpstreamDefaults fills the settings an upstream entry leaves out, for the config file
// and imported server lists alike; has reports whether the entry set a key.
func applyUpstreamDefaults(u *Upstream, has func(key string) bool) {
	if !has("request_timeout") {
		u.RequestTimeout = defaultRequestTimeout
	}
	if !has("initialize_timeout") {
		u.InitializeTimeout = defaultInitializeTimeout
		if fetchesOnFirstUse(u.Command) {
			u.FirstInitializeTimeout = defaultFirstFetchTimeout
		}
	}
	if !has("max_response_bytes") {
		u.MaxResponseBytes = defaultMaxResponseBytes
	}
	if !has("enabled") {
		u.Enabled = true
	}
	if !has("isolation") {
		u.Isolation = defaultIsolation
	}
	if !has("protocol") {
		u.Protocol = ProtocolLegacy
	}
	if !has("input_bridge") {
		u.InputBridge = InputBridgePark
	}
	if !has("pinning") {
		u.Pinning = PinningOff
	}
	if !has("isolation_idle_timeout") {
		u.IsolationIdleTimeout = defaultIsolationIdle
	}
	if !has("max_connections") {
		u.MaxConnections = defaultMaxConnections
	}
	if !has("attribution_window") {
		u.AttributionWindow = defaultAttributionWindow
	}
}

// SelfCommand is the Command of an upstream that the gateway's own program serves: its demo
// server (`gateway demo`), which then starts at once, with nothing to build or fetch.
const SelfCommand = "@self"

// fetchesOnFirstUse reports whether command is one that may fetch the server it runs on first
// use (npx, uvx, docker), taking longer to start that once.
func fetchesOnFirstUse(command string) bool {
	switch filepath.Base(command) {
	case "npx", "uvx", "docker":
		return true
	}
	return false
}

// The values of Upstream.Isolation.
const (
	IsolationShared    = "shared"
	IsolationPrincipal = "principal"
	IsolationSession   = "session"
)

// defaultTransport returns the transport of u when none is given: stdio for
// a command, Streamable HTTP for a URL, and "" if u has both or neither
// (a problem reported by validation).
func defaultTransport(u *Upstream) string {
	switch {
	case u.Command != "" && u.URL == "":
		return TransportStdio
	case u.URL != "" && u.Command == "":
		return TransportStreamableHTTP
	}
	return ""
}

// upstreamPath returns the field path of the i'th upstream, "upstreams[i]".
func upstreamPath(i int) string { return fmt.Sprintf("upstreams[%d]", i) }

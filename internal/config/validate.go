package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

const (
	maxNameLen   = 64
	maxPrefixLen = 32
	maxPageSize  = 1000
	// maxAuditBuffer keeps a mistyped buffer from reserving gigabytes at start: a queued
	// record takes a few hundred bytes.
	maxAuditBuffer = 1 << 20
)

// where is a file and the index of its fields.
type where struct {
	file string
	ix   *index
}

// site says where one upstream was written, for messages: in the config
// file, or in an imported server list, whose keys differ.
type site struct {
	where
	// path is the field path of the upstream's entry: "upstreams[2]", or
	// "mcpServers.github" for an imported server, where it is also the
	// path of the name (the server key).
	path string
	// imported is set for a server of an imported list.
	imported bool
	// key is the server key as written, for an imported server.
	key string
	// over is where the top-level override of this upstream was written (the config
	// file), and overPath the override's path, "overrides[i]"; nil and "" if none.
	over     *where
	overPath string
}

// locate returns where the upstream's field named key was set, and its path there: in the
// upstream's top-level override if that sets the key, else in the upstream's own entry
// (see field). Checks of a field's value use it, so that a problem of a value an override
// set is reported at the override.
func (s *site) locate(key string) (where, string) {
	if s.over != nil {
		if p := join(s.overPath, key); s.over.ix.present(p) {
			return *s.over, p
		}
	}
	return s.where, s.field(key)
}

// present reports whether the upstream's field named key was set, by its entry or its
// override.
func (s *site) present(key string) bool {
	w, p := s.locate(key)
	return w.ix.present(p)
}

// overridden reports whether the upstream's top-level override sets key.
func (s *site) overridden(key string) bool {
	return s.over != nil && s.over.ix.present(join(s.overPath, key))
}

// field returns the path of the upstream's field named key in the config
// file (such as "dir"), as written in the upstream's own file.
func (s *site) field(key string) string {
	if s.imported {
		switch key {
		case "name":
			return s.path
		case "dir":
			key = "cwd"
		case "transport":
			key = "type"
		case "enabled":
			key = "disabled"
		}
	}
	return join(s.path, key)
}

// line returns the line of the upstream's entry.
func (s *site) line() int { return s.ix.line(s.path) }

// loc locates the upstream at s for a message about one at from: "line N",
// or "FILE:N" if the two are in different files.
func (s *site) loc(from *site) string {
	if s.file == from.file {
		return fmt.Sprintf("line %d", s.line())
	}
	return fmt.Sprintf("%s:%d", s.file, s.line())
}

// validator collects the problems of decoded upstreams and settings, with
// defaults applied.
type validator struct {
	problems []Problem
}

// check records msg as a problem of the field at path in w unless msg is
// empty or the field failed to decode (that problem is already reported).
func (v *validator) check(w where, path, msg string) {
	if msg == "" || !w.ix.usable(path) {
		return
	}
	v.problems = append(v.problems, Problem{File: w.file, Line: w.ix.line(path), Field: path, Message: msg})
}

// checkKey is check for the upstream's field named key, where it was set (see site.locate).
func (v *validator) checkKey(s *site, key, msg string) {
	w, p := s.locate(key)
	v.check(w, p, msg)
}

// validate returns every problem of c. top tells where the top-level
// settings were found and which failed to decode; nil means they are all
// defaults, which need no check. sites[i] tells the same of c.Upstreams[i].
// sep is the separator prefixes are checked against; "" skips that check.
func validate(c *Config, top *where, sites []site, sep string) []Problem {
	v := new(validator)
	if top != nil {
		v.settings(c, *top)
		if !top.ix.usable("separator") || checkSeparator(c.Separator) != "" {
			sep = ""
		}
	}
	v.upstreams(c.Upstreams, sites, sep, provisions(c, top))
	if top != nil {
		v.profiles(c.Profiles, *top, c.Upstreams)
	}
	return v.problems
}

// settings checks the top-level settings of c.
func (v *validator) settings(c *Config, w where) {
	v.check(w, "listen", checkListen(c.Listen))
	v.check(w, "separator", checkSeparator(c.Separator))
	v.check(w, "log_level", checkLogLevel(c.LogLevel))
	for i, o := range c.AllowedOrigins {
		v.check(w, fmt.Sprintf("allowed_origins[%d]", i), checkOrigin(o))
	}
	if c.MaxBodyBytes <= 0 {
		v.check(w, "max_body_bytes", "must be greater than 0: it is the largest request body accepted, in bytes (default 4194304, 4 MiB)")
	}
	if c.BodyReadTimeout <= 0 {
		v.check(w, "body_read_timeout", "must be greater than 0, like 30s: it is how long a POST body may take to arrive in full")
	}
	if c.StreamAfter < 0 {
		v.check(w, "stream_after", "must be 0 or more, like 1s: a request running longer becomes a resumable SSE stream (0: only when it emits a message)")
	}
	if c.StreamRetention <= 0 {
		v.check(w, "stream_retention", "must be greater than 0, like 1m: a finished stream is kept this long for a client to resume")
	}
	if c.StreamBudgetBytes <= 0 {
		v.check(w, "stream_budget_bytes", "must be greater than 0, like 67108864 (64 MiB): the bytes a replica keeps of its streams for clients to resume")
	}
	if c.EventLogBudgetBytes <= 0 {
		v.check(w, "event_log_budget_bytes", "must be greater than 0, like 268435456 (256 MiB): the bytes the event logs keep in Redis for clients to resume")
	}
	if c.FirstListWait < 0 {
		v.check(w, "first_list_wait", "must be 0 or more, like 5s: a list right after start waits this long for upstreams still starting")
	}
	if c.DrainTimeout < 0 {
		v.check(w, "drain_timeout", "must be 0 or more, like 10s: on SIGTERM, requests in flight get this long to finish")
	}
	if c.HTTPIdleTimeout <= 0 {
		v.check(w, "http_idle_timeout", "must be greater than 0, like 2m: an idle keep-alive connection is closed after it")
	}
	if c.MaxConnectionsPerAddress <= 0 {
		v.check(w, "max_connections_per_address", "must be greater than 0, like 256: the most connections one client address may hold open at once")
	}
	for i, p := range c.TrustedProxies {
		if _, err := ParseTrustedProxy(p); err != nil {
			v.check(w, fmt.Sprintf("trusted_proxies[%d]", i), fmt.Sprintf("%q is not a CIDR or an IP address: write the proxies' network, like 10.0.0.0/8, or one address, like 10.0.0.7", p))
		}
	}
	if c.MaxSessions <= 0 {
		v.check(w, "max_sessions", "must be greater than 0 (default 1000)")
	}
	if c.SessionIdleTimeout <= 0 {
		v.check(w, "session_idle_timeout", "must be greater than 0, like 30m")
	}
	if c.SessionEvictIdle <= 0 {
		v.check(w, "session_evict_idle", "must be greater than 0, like 5m: when max_sessions is reached, a session idle this long makes room for a new one")
	}
	if c.MaxBatchEntries <= 0 {
		v.check(w, "max_batch_entries", "must be greater than 0: it is the most entries a JSON-RPC batch may hold (default 64)")
	}
	if c.MaxCallsPerSession <= 0 {
		v.check(w, "max_calls_per_session", "must be greater than 0: it is the most requests one session may have in flight (default 64)")
	}
	if c.MaxCallsPerPrincipal <= 0 {
		v.check(w, "max_calls_per_principal", "must be greater than 0: it is the most 2026-07-28 requests one caller may have in flight on a replica (default 256)")
	}
	if c.MaxListensPerPrincipal <= 0 {
		v.check(w, "max_listens_per_principal", "must be greater than 0: it is the most subscriptions/listen streams one caller may hold open on a replica (default 16)")
	}
	if c.MaxCalls <= 0 {
		v.check(w, "max_calls", "must be greater than 0: it is the most requests in flight in the whole gateway (default 4096)")
	}
	if c.PageSize < 1 || c.PageSize > maxPageSize {
		v.check(w, "page_size", fmt.Sprintf("must be from 1 to %d (default 100)", maxPageSize))
	}
	v.audit(&c.Audit, w)
	v.tracing(c, w)
	v.sessionStore(&c.SessionStore, w)
	v.keys(c, w)
	v.authSettings(c, w)
	v.policy(c, w)
	v.admin(c, w)
	v.metrics(c, w)
	v.pins(c, w)
	v.plugins(c, w)
}

// audit checks the settings of the audit trail.
func (v *validator) audit(a *Audit, w where) {
	switch a.Sink {
	case AuditSinkOff, AuditSinkStdout, AuditSinkFile:
		// A path goes with the file sink only: with any other, it would be a file the user
		// expects the trail in, and it would stay empty.
		switch {
		case !w.ix.usable("audit.sink"): // its problem is reported already
		case a.Sink == AuditSinkFile && a.Path == "":
			v.check(w, "audit.path", "required when sink is file: set the file to append audit records to, like /var/log/manifold/audit.log")
		case a.Sink != AuditSinkFile && w.ix.present("audit.path"):
			v.check(w, "audit.path", fmt.Sprintf("only when sink is file, and it is %s: set sink: file to write the audit trail to this file, or remove path", a.Sink))
		}
	default:
		v.check(w, "audit.sink", fmt.Sprintf("%s is not an audit sink: use off, stdout or file", quote(a.Sink)))
	}
	if a.Buffer < 1 || a.Buffer > maxAuditBuffer {
		v.check(w, "audit.buffer", fmt.Sprintf("must be from 1 to %d: it is how many audit records may wait to be written (default 4096)", maxAuditBuffer))
	}
}

// upstreams checks each upstream (have: what the top-level settings provide that its
// credentials may need), and that names, prefixes and the names clients see of renamed
// tools and prompts are unique across all of them, whatever file they come from.
func (v *validator) upstreams(ups []Upstream, sites []site, sep string, have provided) {
	names := make(map[string]int)    // name → index of the first upstream with it
	prefixes := make(map[string]int) // effective prefix → index of the first upstream with it
	var tools, prompts []namedItem
	for i := range ups {
		u, s := &ups[i], &sites[i]
		if !s.ix.usable(s.path) {
			continue
		}

		// A name that is valid and unique can serve as the default prefix.
		nameOK := false
		namePath := s.field("name")
		switch j, dup := names[u.Name]; {
		case u.Name == "" && !s.ix.present(namePath):
			v.check(s.where, namePath, "required: a unique name for this upstream, like github (it is also the default prefix of its tools)")
		case s.imported && u.Name == "":
			v.check(s.where, namePath, fmt.Sprintf("an empty server key cannot name an upstream: rename the server (1 to %d characters from A-Z a-z 0-9 _ -)", maxNameLen))
		case !validName(u.Name):
			v.check(s.where, namePath, fmt.Sprintf("%q is not a valid name: use 1 to %d characters from A-Z a-z 0-9 _ -", u.Name, maxNameLen))
		case dup:
			msg := fmt.Sprintf("%q%s is also the name of %s (%s): names must be unique", u.Name, s.sanitized(u.Name), sites[j].path, sites[j].loc(s))
			if s.imported {
				msg += "; rename one of them"
			}
			v.check(s.where, namePath, msg)
		default:
			names[u.Name] = i
			nameOK = true
		}

		v.kind(u, s)
		if u.RequestTimeout <= 0 {
			v.checkKey(s, "request_timeout", "must be greater than 0, like 60s")
		}
		switch u.Isolation {
		case IsolationShared, IsolationPrincipal, IsolationSession:
		default:
			v.checkKey(s, "isolation", fmt.Sprintf("%q is not an isolation mode: use shared, principal or session", u.Isolation))
		}
		switch u.Protocol {
		case ProtocolLegacy, ProtocolAuto:
		case ProtocolModern:
			if u.Transport == TransportSSE {
				v.checkKey(s, "protocol", `transport "sse" speaks protocol 2024-11-05 only: use protocol "2025-11-25" or "auto", or transport streamable-http`)
			}
		default:
			v.checkKey(s, "protocol", fmt.Sprintf("%s is not a protocol: use 2025-11-25, 2026-07-28 or auto", quote(u.Protocol)))
		}
		switch u.InputBridge {
		case InputBridgePark, InputBridgeRefuse:
		default:
			v.checkKey(s, "input_bridge", fmt.Sprintf("%s is not an input bridge: use park or refuse", quote(u.InputBridge)))
		}
		switch u.Pinning {
		case PinningOff, PinningWithhold, PinningLog:
		default:
			v.checkKey(s, "pinning", fmt.Sprintf("%q is not a pinning mode: use withhold, log or off", u.Pinning))
		}
		if u.IsolationIdleTimeout <= 0 {
			v.checkKey(s, "isolation_idle_timeout", "must be greater than 0, like 5m")
		}
		if u.MaxConnections <= 0 {
			v.checkKey(s, "max_connections", "must be greater than 0, like 100")
		}
		if u.AttributionWindow < 0 {
			v.checkKey(s, "attribution_window", "must not be negative: use a duration like 2s, or 0 to turn the window off")
		}
		if u.InitializeTimeout <= 0 {
			v.checkKey(s, "initialize_timeout", "must be greater than 0, like 30s")
		}
		if u.MaxResponseBytes <= 0 {
			v.checkKey(s, "max_response_bytes", "must be greater than 0: it is the largest message accepted from this upstream, in bytes (default 16777216, 16 MiB)")
		}
		envWhere, envPath := s.locate("env")
		for _, k := range sortedKeys(u.Env) {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				v.check(envWhere, join(envPath, k), "not a valid environment variable name: it must be non-empty, without = or NUL")
			}
		}
		inheritWhere, inheritPath := s.locate("inherit_env")
		for i, name := range u.InheritEnv {
			if !validEnvPattern(name) {
				v.check(inheritWhere, fmt.Sprintf("%s[%d]", inheritPath, i),
					fmt.Sprintf("%s is not a variable name: use A-Z a-z 0-9 _, not starting with a digit, and optionally a final * to match a prefix, like AWS_*", quote(name)))
			}
		}
		v.headers(u, s)
		v.credentials(u, s, have)

		prefixOK := v.prefix(ups, sites, i, sep, nameOK, prefixes)
		v.upstreamFilter(s, "resources", &u.Resources)
		v.upstreamFilter(s, "resource_templates", &u.ResourceTemplates)
		c := shapingCheck{up: i, s: s, prefix: u.Prefix, sep: sep, exposedOK: prefixOK && (u.Prefix == "" || sep != "")}
		c.key, c.item = "tools", "tool"
		tools = append(tools, v.shaping(&u.Tools, c)...)
		c.key, c.item = "prompts", "prompt"
		prompts = append(prompts, v.shaping(&u.Prompts, c)...)
	}
	v.exposedNames(tools, "tool", ups, sites)
	v.exposedNames(prompts, "prompt", ups, sites)
}

// prefix checks the effective prefix of ups[i], and that it is unique; prefixes maps each
// prefix seen to the index of the first upstream with it. It reports whether the prefix is
// fine. nameOK says whether the upstream's name is valid and unique.
//
// A prefix taken from the name is reported at the name, where it is written; it is checked
// only if the name itself is fine. The prefix of an imported server comes from its key,
// unless the upstream's override sets one.
func (v *validator) prefix(ups []Upstream, sites []site, i int, sep string, nameOK bool, prefixes map[string]int) bool {
	u, s := &ups[i], &sites[i]
	fromKey := s.imported && !s.overridden("prefix") // the prefix is the server key
	w, prefixPath := s.locate("prefix")
	from := ""
	if fromKey || !s.present("prefix") {
		if !nameOK {
			return false
		}
		w, prefixPath, from = s.where, s.field("name"), " (taken from the name)"
		if fromKey {
			from = " (taken from the server key)"
		}
	}
	if !w.ix.usable(prefixPath) {
		return false
	}
	if msg := checkPrefix(u.Prefix, from); msg != "" {
		v.check(w, prefixPath, msg)
		return false
	}
	if sep != "" && u.Prefix != "" && strings.Index(u.Prefix+sep, sep) != len(u.Prefix) {
		fix := "choose another prefix or separator"
		if fromKey {
			fix = "rename the server, or choose another separator"
		}
		v.check(w, prefixPath, fmt.Sprintf("prefix %q%s clashes with the separator %q: in %q the separator is found too early; %s",
			u.Prefix, from, sep, u.Prefix+sep+"tool", fix))
		return false
	}
	j, dup := prefixes[u.Prefix]
	switch {
	case !dup:
		prefixes[u.Prefix] = i
		return true
	case u.Prefix == "":
		v.check(w, prefixPath, fmt.Sprintf(`"" (unprefixed) is also the prefix of %s %q (%s): at most one upstream can be unprefixed; give one of them a prefix`,
			sites[j].path, ups[j].Name, sites[j].loc(s)))
	default:
		otherFromKey := sites[j].imported && !sites[j].overridden("prefix")
		fix := "give one of them a distinct prefix"
		switch {
		case fromKey && otherFromKey:
			fix = "rename one of them"
		case fromKey:
			fix = "rename the server, or give the other a distinct prefix"
		}
		v.check(w, prefixPath, fmt.Sprintf("prefix %q%s is also the prefix of %s %q (%s): %s",
			u.Prefix, from, sites[j].path, ups[j].Name, sites[j].loc(s), fix))
	}
	return false
}

// sanitized returns a note for messages if name was made from an imported
// server key that is not a valid name as it stands.
func (s *site) sanitized(name string) string {
	if !s.imported || s.key == name {
		return ""
	}
	return fmt.Sprintf(" (made from the server key %q)", s.key)
}

// kind checks that u has exactly one of command and url, a transport that
// fits, and only the fields that go with it.
func (v *validator) kind(u *Upstream, s *site) {
	cmdPath, urlPath, transportPath := s.field("command"), s.field("url"), s.field("transport")
	if !s.ix.usable(cmdPath) || !s.ix.usable(urlPath) {
		return // the decoding problem says enough
	}
	stdio := u.Command != ""
	switch {
	case !stdio && u.URL == "":
		v.check(s.where, cmdPath, "required: set command, the program to start for a stdio upstream, or url, the endpoint of an HTTP upstream")
		return
	case stdio && u.URL != "":
		v.check(s.where, s.path, "both command and url are set: keep command for a stdio upstream, or url for an HTTP one")
		return
	}

	switch t := u.Transport; t {
	case TransportStdio:
		if !stdio {
			v.check(s.where, transportPath, `transport "stdio" needs command, and this upstream has url: use streamable-http, sse or auto, or remove transport`)
		}
	case TransportStreamableHTTP, TransportSSE, TransportAuto:
		if stdio {
			v.check(s.where, transportPath, fmt.Sprintf("transport %q needs url, and this upstream has command: use stdio, or remove transport", t))
		}
	default:
		v.check(s.where, transportPath, fmt.Sprintf("%s is not a transport: use stdio, streamable-http, sse or auto", quote(t)))
	}

	if stdio {
		if s.present("headers") {
			v.checkKey(s, "headers", "headers are for HTTP upstreams (with url): remove them, or pass values to the command through env")
		}
		v.self(u, s)
	} else {
		for _, key := range []string{"args", "env", "inherit_env", "dir"} {
			if s.present(key) {
				v.checkKey(s, key, "only for a stdio upstream (with command): remove it from this HTTP upstream")
			}
		}
		v.check(s.where, urlPath, checkURL(u.URL))
	}
}

// headers checks the names and values of u's HTTP headers. Messages never
// quote values.
func (v *validator) headers(u *Upstream, s *site) {
	w, path := s.locate("headers")
	seen := make(map[string]string) // lower-case name → name as written
	for _, name := range sortedKeys(u.Headers) {
		p := join(path, name)
		lower := strings.ToLower(name)
		switch {
		case !validToken(name):
			v.check(w, p, fmt.Sprintf("%s is not a valid header name: use letters, digits and !#$%%&'*+-.^_`|~", quote(name)))
		case isTransportHeader(lower):
			v.check(w, p, fmt.Sprintf("%s is set by the gateway's transport: remove it", quote(name)))
		case seen[lower] != "":
			v.check(w, p, fmt.Sprintf("same header as %s (header names are case-insensitive): keep one", quote(seen[lower])))
		default:
			seen[lower] = name
		}
		if strings.ContainsAny(u.Headers[name], "\r\n\x00") {
			v.check(w, p, "the value holds a line break or NUL, which an HTTP header cannot carry (the value is not shown)")
		}
	}
}

// transportHeaders are the headers, in lower case, that the HTTP transports
// set themselves and a config must not override.
var transportHeaders = map[string]bool{
	"accept":               true,
	"connection":           true,
	"content-length":       true,
	"content-type":         true,
	"host":                 true,
	"last-event-id":        true,
	"mcp-protocol-version": true,
	"mcp-session-id":       true,
	"transfer-encoding":    true,
	// The standard headers of a 2026-07-28 request, computed from each message.
	"mcp-method": true,
	"mcp-name":   true,
}

// isTransportHeader reports whether lower, a header name in lower case, is one
// the HTTP transports set themselves: one of transportHeaders, or an
// Mcp-Param-* header, which mirrors a tool argument of a 2026-07-28 call.
func isTransportHeader(lower string) bool {
	return transportHeaders[lower] || strings.HasPrefix(lower, "mcp-param-")
}

// validToken reports whether s is an HTTP token (RFC 9110, section 5.6.2),
// as a header name must be.
func validToken(s string) bool {
	return s != "" && onlyChars(s, "!#$%&'*+-.^_`|~")
}

// checkURL checks the url of an HTTP upstream. Messages do not quote it: it
// may hold a token.
func checkURL(s string) string {
	const want = "want an absolute http or https URL, like https://mcp.example.com/mcp"
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a valid URL: " + want + " (the value is not shown: it may hold a secret)"
	case u.Scheme == "":
		return "no scheme: " + want
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return fmt.Sprintf("scheme %s is not supported: %s", quote(u.Scheme), want)
	case u.Host == "" || u.Hostname() == "":
		return "no host: " + want
	}
	return ""
}

func checkListen(s string) string {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port: write e.g. 127.0.0.1:8080, or :8080 for all interfaces", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("port %q is not a number from 0 to 65535: write e.g. 127.0.0.1:8080", port)
	}
	return ""
}

func checkSeparator(s string) string {
	if len(s) < 1 || len(s) > 4 || !onlyChars(s, "_.-") {
		return fmt.Sprintf("%q is not a valid separator: use 1 to 4 characters from A-Z a-z 0-9 _ . -, like __", s)
	}
	return ""
}

func checkLogLevel(s string) string {
	switch s {
	case "debug", "info", "warn", "error":
		return ""
	}
	return fmt.Sprintf("%q is not a log level: use debug, info, warn or error", s)
}

func checkOrigin(s string) string {
	if _, ok := parseOrigin(s, true); !ok {
		return fmt.Sprintf("%q is not an origin: write scheme://host, scheme://host:port or scheme://host:* (any port), with scheme http or https and no path", s)
	}
	return ""
}

// checkPrefix checks the charset and length of prefix p; from says where it
// came from, for the message.
func checkPrefix(p, from string) string {
	switch {
	case len(p) > maxPrefixLen:
		return fmt.Sprintf("prefix %q%s is longer than %d characters: set a shorter prefix", p, from, maxPrefixLen)
	case !onlyChars(p, "_.-"):
		return fmt.Sprintf("%q is not a valid prefix: use up to %d characters from A-Z a-z 0-9 _ . -, or \"\" for none", p, maxPrefixLen)
	}
	return ""
}

// validEnvPattern reports whether p is an entry of inherit_env: a variable
// name, [A-Za-z_][A-Za-z0-9_]*, optionally followed by one "*".
func validEnvPattern(p string) bool {
	name := strings.TrimSuffix(p, "*")
	return name != "" && (name[0] < '0' || name[0] > '9') && onlyChars(name, "_")
}

func validName(s string) bool {
	return len(s) >= 1 && len(s) <= maxNameLen && onlyChars(s, "_-")
}

// onlyChars reports whether s consists of ASCII letters, digits and the
// characters in extra.
func onlyChars(s, extra string) bool {
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune(extra, r)) {
			return false
		}
	}
	return true
}

// sortedKeys returns the keys of m in order, for messages in a stable order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// self checks an upstream whose command is SelfCommand: the gateway's own program may serve
// its demo server, and nothing else (not serve, apikey or any other of its commands).
func (v *validator) self(u *Upstream, s *site) {
	if u.Command != SelfCommand {
		return
	}
	if !s.present("args") {
		v.checkKey(s, "command", `command "@self" runs this gateway's own program, for its demo server only: add args: [demo] (or [demo, -name, NAME])`)
		return
	}
	if len(u.Args) == 0 || u.Args[0] != "demo" || !demoFlags(u.Args[1:]) {
		v.checkKey(s, "args", `after command "@self" only the demo server may be named: args: [demo], or [demo, -name, NAME]`)
	}
}

// demoFlags reports whether args are flags the demo server takes: its -name, at most once.
func demoFlags(args []string) bool {
	switch len(args) {
	case 0:
		return true
	case 1:
		return strings.HasPrefix(args[0], "-name=") || strings.HasPrefix(args[0], "--name=")
	case 2:
		return args[0] == "-name" || args[0] == "--name"
	}
	return false
}

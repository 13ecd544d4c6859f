package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The decoder walks the yaml.Node tree itself instead of using yaml's struct
// decoding, so that every key and value has a line and a field path, and so
// that it can go on after a problem and report the next one.

// parseYAML parses data as one YAML document and returns its top-level node.
// If there is nothing to decode, it returns nil and the problems.
func parseYAML(file string, data []byte) (*yaml.Node, []Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{emptyProblem(file)}
		}
		return nil, []Problem{syntaxProblem(file, data, err)}
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, []Problem{syntaxProblem(file, data, err)}
	case !emptyDocument(&next): // a trailing "---" alone is harmless
		return nil, []Problem{{File: file, Line: next.Line, Message: "a second YAML document: put all settings in one document, without ---"}}
	}
	if emptyDocument(&doc) {
		return nil, []Problem{emptyProblem(file)}
	}
	return doc.Content[0], nil
}

func emptyDocument(doc *yaml.Node) bool {
	return len(doc.Content) == 0 || isNull(doc.Content[0])
}

func emptyProblem(file string) Problem {
	return Problem{File: file, Message: "empty config: add at least `upstreams: []` (the gateway can start with no upstreams)"}
}

// syntaxProblem turns err, a syntax error from yaml in data, into a Problem.
//
// For a parser error (as opposed to a scanner error), yaml gives the line of
// the enclosing block, counted from 0 (go-yaml/yaml#205), not the line of the
// problem, so errorLine finds that.
func syntaxProblem(file string, data []byte, err error) Problem {
	line, msg := splitSyntaxError(err)
	if n := errorLine(data, msg, line); n > 0 {
		line = n
	}
	return Problem{File: file, Line: line, Message: "not valid YAML: " + msg + " (check indentation and quoting)"}
}

// yamlLine matches the position yaml puts in its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// splitSyntaxError returns the line (0 if none) and the message of a syntax
// error from yaml.
func splitSyntaxError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line, msg[len(m[0]):]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// errorLine returns the first line n >= from such that lines 1 to n of data
// fail to parse with message msg, or 0 if data itself does not. Once the
// beginning of the file includes the problem, longer beginnings fail the same
// way, so a binary search finds n.
func errorLine(data []byte, msg string, from int) int {
	var ends []int // ends[i] is the offset just after line i+1
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		ends = append(ends, len(data))
	}
	fails := func(n int) bool {
		err := parseAll(data[:ends[n-1]])
		if err == nil {
			return false
		}
		_, m := splitSyntaxError(err)
		return m == msg
	}

	lo, hi := max(from, 1), len(ends)
	if lo > hi || !fails(hi) {
		return 0
	}
	for lo < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// parseAll parses every YAML document in data and returns the first error.
func parseAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// index records where each field was found in the file, so that the steps
// after decoding can tell absent fields from present ones and name lines.
type index struct {
	// lines maps a field path to the line of its key, or of its item in a
	// list. The path "" is the top-level mapping.
	lines map[string]int
	// bad holds the field paths that are present in the file but whose value
	// could not be decoded. The problem is reported; later steps skip them.
	bad map[string]bool
}

// present reports whether the field at path is present in the file.
func (ix *index) present(path string) bool {
	_, ok := ix.lines[path]
	return ok
}

// has reports whether the field at path is present in the file and decoded.
func (ix *index) has(path string) bool {
	return ix.present(path) && !ix.bad[path]
}

// line returns the line of the field at path or, if it is absent, of the
// nearest enclosing field.
func (ix *index) line(path string) int {
	for {
		if l, ok := ix.lines[path]; ok || path == "" {
			return l
		}
		path = parent(path)
	}
}

// usable reports whether neither the field at path nor any enclosing field
// failed to decode.
func (ix *index) usable(path string) bool {
	for {
		if ix.bad[path] {
			return false
		}
		if path == "" {
			return true
		}
		path = parent(path)
	}
}

// parent returns the path of the field enclosing the one at path.
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// join returns the path of field key inside the mapping at path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decoder decodes the YAML tree of one file into a Config, collecting
// problems instead of stopping at the first.
type decoder struct {
	file      string
	lookupEnv func(string) (string, bool)
	index
	problems []Problem
	// overrides are the entries of the config file's top-level `overrides`, kept until the
	// upstreams of every file are known (see applyOverrides).
	overrides []overrideEntry
	// seen, if set, is told the known keys of each mapping of settings decoded (see
	// reference.go).
	seen func(path string, fields []field)
}

func newDecoder(file string, lookupEnv func(string) (string, bool)) *decoder {
	return &decoder{
		file:      file,
		lookupEnv: lookupEnv,
		index:     index{lines: make(map[string]int), bad: make(map[string]bool)},
	}
}

func (d *decoder) problemf(line int, path, format string, args ...any) {
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: path, Message: fmt.Sprintf(format, args...)})
}

// A decodeFunc decodes the YAML value n of the field at path into its
// destination, reporting problems. It returns false if the value cannot be
// used.
type decodeFunc func(d *decoder, n *yaml.Node, path string) bool

// field is a known key of a mapping and the decoder of its value.
type field struct {
	key    string
	decode decodeFunc
	// unlisted leaves the key out of the known keys an unknown key's message lists: its
	// decoder only explains why it is not allowed there.
	unlisted bool
}

// config decodes the top-level mapping.
func (d *decoder) config(root *yaml.Node) *Config {
	c := new(Config)
	d.lines[""] = root.Line
	d.mapping(root, "", "a mapping of settings such as `upstreams:`", []field{
		{key: "listen", decode: str(&c.Listen)},
		{key: "separator", decode: str(&c.Separator)},
		{key: "log_level", decode: str(&c.LogLevel)},
		{key: "log_format", decode: str(&c.LogFormat)},
		{key: "allowed_origins", decode: notNull("write [] to accept only requests without an Origin header, or remove the key for the loopback defaults", strList(&c.AllowedOrigins))},
		{key: "max_body_bytes", decode: integer(&c.MaxBodyBytes)},
		{key: "body_read_timeout", decode: duration(&c.BodyReadTimeout)},
		{key: "http_idle_timeout", decode: duration(&c.HTTPIdleTimeout)},
		{key: "max_connections_per_address", decode: integer(&c.MaxConnectionsPerAddress)},
		{key: "trusted_proxies", decode: strList(&c.TrustedProxies)},
		{key: "drain_timeout", decode: duration(&c.DrainTimeout)},
		{key: "first_list_wait", decode: duration(&c.FirstListWait)},
		{key: "modern_protocol", decode: boolean(&c.ModernProtocol)},
		{key: "stream_after", decode: duration(&c.StreamAfter)},
		{key: "stream_retention", decode: duration(&c.StreamRetention)},
		{key: "stream_budget_bytes", decode: integer(&c.StreamBudgetBytes)},
		{key: "event_log_budget_bytes", decode: integer(&c.EventLogBudgetBytes)},
		{key: "max_sessions", decode: integer(&c.MaxSessions)},
		{key: "session_idle_timeout", decode: duration(&c.SessionIdleTimeout)},
		{key: "session_evict_idle", decode: duration(&c.SessionEvictIdle)},
		{key: "max_batch_entries", decode: integer(&c.MaxBatchEntries)},
		{key: "max_calls_per_session", decode: integer(&c.MaxCallsPerSession)},
		{key: "max_calls_per_principal", decode: integer(&c.MaxCallsPerPrincipal)},
		{key: "max_listens_per_principal", decode: integer(&c.MaxListensPerPrincipal)},
		{key: "max_calls", decode: integer(&c.MaxCalls)},
		{key: "page_size", decode: integer(&c.PageSize)},
		{key: "roots", decode: strList(&c.Roots)},
		{key: "audit", decode: audit(&c.Audit)},
		{key: "tracing", decode: tracingSettings(&c.Tracing)},
		{key: "session_store", decode: sessionStore(&c.SessionStore)},
		{key: "keys", decode: keyList(&c.Keys)},
		{key: "upstreams", decode: upstreams(&c.Upstreams)},
		{key: "overrides", decode: overrideList(&d.overrides)},
		{key: "profiles", decode: profiles(&c.Profiles)},
		{key: "public_url", decode: str(&c.PublicURL)},
		{key: "auth", decode: authSettings(&c.Auth)},
		{key: "policy", decode: policySettings(&c.Policy)},
		{key: "admin", decode: adminSettings(&c.Admin)},
		{key: "metrics", decode: metricsSettings(&c.Metrics)},
		{key: "state_dir", decode: str(&c.StateDir)},
		{key: "pins", decode: pinsSettings(&c.Pins)},
		{key: "plugins", decode: listOf(&c.Plugins, "a list of plugins (lines starting with `- name:`)", plugin)},
	})
	return c
}

// audit decodes the `audit` mapping; no value is a problem, as for any mapping of settings.
func audit(a *Audit) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with `sink:` off, stdout or file", []field{
			{key: "sink", decode: str(&a.Sink)},
			{key: "path", decode: str(&a.Path)},
			{key: "buffer", decode: integer(&a.Buffer)},
			{key: "arguments", decode: boolean(&a.Arguments)},
			{key: "redact", decode: strList(&a.Redact)},
			{key: "redact_defaults", decode: func(d *decoder, n *yaml.Node, path string) bool {
				var on bool
				if !boolean(&on)(d, n, path) {
					return false
				}
				a.SkipRedactDefaults = !on
				return true
			}},
		})
	}
}

func upstreams(dst *[]Upstream) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, "want a list of upstreams (lines starting with `- name:`), got %s", describe(v))
			return false
		}
		// Keep one element per entry, even a broken one, so that indexes
		// in the Config match those in the file.
		*dst = make([]Upstream, len(v.Content))
		for i, item := range v.Content {
			d.decodeField(fmt.Sprintf("%s[%d]", path, i), item.Line, item, upstream(&(*dst)[i]))
		}
		return true
	}
}

func upstream(u *Upstream) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		u.File, u.Line = d.file, n.Line
		return d.mapping(n, path, "a mapping with at least `name:` and `command:` or `url:`", upstreamFields(u))
	}
}

// upstreamFields returns the keys of an upstream entry, decoding into u. A key's decoder
// replaces the value of its field whole (a list, a mapping), so that a top-level override
// decoded into an upstream that has the field already replaces it.
func upstreamFields(u *Upstream) []field {
	return []field{
		{key: "name", decode: str(&u.Name)},
		{key: "command", decode: str(&u.Command)},
		{key: "args", decode: strList(&u.Args)},
		{key: "env", decode: strMap(&u.Env)},
		{key: "inherit_env", decode: inheritEnv(&u.InheritEnv, &u.InheritAllEnv)},
		{key: "dir", decode: str(&u.Dir)},
		{key: "url", decode: str(&u.URL)},
		{key: "headers", decode: strMap(&u.Headers)},
		{key: "credentials", decode: credentials(&u.Credentials)},
		{key: "trust_annotations", decode: boolean(&u.TrustAnnotations)},
		{key: "pinning", decode: str(&u.Pinning)},
		{key: "transport", decode: str(&u.Transport)},
		{key: "protocol", decode: str(&u.Protocol)},
		{key: "input_bridge", decode: str(&u.InputBridge)},
		{key: "prefix", decode: notNull(`write prefix: "" to leave names unprefixed, or remove the key to use the name`, str(&u.Prefix))},
		{key: "request_timeout", decode: duration(&u.RequestTimeout)},
		{key: "initialize_timeout", decode: duration(&u.InitializeTimeout)},
		{key: "max_response_bytes", decode: integer(&u.MaxResponseBytes)},
		{key: "isolation", decode: str(&u.Isolation)},
		{key: "isolation_idle_timeout", decode: duration(&u.IsolationIdleTimeout)},
		{key: "max_connections", decode: integer(&u.MaxConnections)},
		{key: "attribution_window", decode: duration(&u.AttributionWindow)},
		{key: "enabled", decode: boolean(&u.Enabled)},
		{key: "include_instructions", decode: boolean(&u.IncludeInstructions)},
		{key: "broadcast_logs", decode: boolean(&u.BroadcastLogs)},
		{key: "tools", decode: shaping(&u.Tools, "tool")},
		{key: "prompts", decode: shaping(&u.Prompts, "prompt")},
		{key: "resources", decode: filter(&u.Resources, `a mapping with include: and/or exclude:, lists of URI patterns like ["file:///docs/*"]`)},
		{key: "resource_templates", decode: filter(&u.ResourceTemplates, `a mapping with include: and/or exclude:, lists of URI template patterns like ["file:///{path}"]`)},
	}
}

// decodeField records the field at path, found on line, and decodes its
// value n with dec.
func (d *decoder) decodeField(path string, line int, n *yaml.Node, dec decodeFunc) bool {
	d.lines[path] = line
	ok := dec(d, n, path)
	if !ok {
		d.bad[path] = true
	}
	return ok
}

// mapping decodes the YAML mapping n at path, whose keys must be among
// fields. want describes the expected value for messages.
func (d *decoder) mapping(n *yaml.Node, path, want string, fields []field) bool {
	if d.seen != nil && resolve(n).Kind == yaml.MappingNode {
		d.seen(path, fields)
	}
	return d.eachKey(n, path, want, func(key string, line int, v *yaml.Node) {
		fpath := join(path, key)
		for _, f := range fields {
			if f.key == key {
				d.decodeField(fpath, line, v, f.decode)
				return
			}
		}
		var known []string
		for _, f := range fields {
			if !f.unlisted {
				known = append(known, f.key)
			}
		}
		d.problemf(line, fpath, "unknown field (known: %s)", strings.Join(known, ", "))
	})
}

// eachKey calls f with each key of the YAML mapping n at path, the key's line
// and its value. It reports, and skips, keys that are not plain scalars,
// merge keys and duplicate keys.
func (d *decoder) eachKey(n *yaml.Node, path, want string, f func(key string, line int, v *yaml.Node)) bool {
	m := resolve(n)
	if m.Kind != yaml.MappingNode {
		d.problemf(n.Line, path, "want %s, got %s", want, describe(m))
		return false
	}
	seen := make(map[string]int)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := resolve(m.Content[i]), m.Content[i+1]
		line := m.Content[i].Line
		switch {
		case k.Kind != yaml.ScalarNode:
			d.problemf(line, path, "a key must be a plain name, got %s", describe(k))
			continue
		case k.ShortTag() == "!!merge":
			d.problemf(line, path, "merge keys (<<) are not supported: write the settings out in full")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.problemf(line, join(path, k.Value), "duplicate key, first set on line %d: remove one of them", first)
			continue
		}
		seen[k.Value] = line
		f(k.Value, line, v)
	}
	return true
}

// scalar returns the text of the scalar value n of the field at path, with
// variables expanded. want describes the expected value for messages.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	v := resolve(n)
	switch {
	case v.Kind != yaml.ScalarNode:
		d.problemf(n.Line, path, "want %s, got %s", want, describe(v))
		return "", false
	case isNull(v):
		d.problemf(n.Line, path, "no value: want %s (to leave the field out, remove the key)", want)
		return "", false
	}
	s, problems := expand(v.Value, d.lookupEnv)
	for _, p := range problems {
		d.problemf(n.Line, path, "%s", p)
	}
	return s, len(problems) == 0
}

func str(dst *string) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		s, ok := d.scalar(n, path, "a string")
		if ok {
			*dst = s
		}
		return ok
	}
}

func integer[T int | int64](dst *T) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		s, ok := d.scalar(n, path, "a whole number")
		if !ok {
			return false
		}
		i, err := strconv.ParseInt(s, 10, 64)
		if err == nil && int64(T(i)) != i {
			err = strconv.ErrRange
		}
		switch {
		case errors.Is(err, strconv.ErrRange):
			d.problemf(n.Line, path, "%s is out of range", quote(s))
			return false
		case err != nil:
			d.problemf(n.Line, path, "want a whole number like 1000, got %s", quote(s))
			return false
		}
		*dst = T(i)
		return true
	}
}

func duration(dst *time.Duration) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		s, ok := d.scalar(n, path, "a duration")
		if !ok {
			return false
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.problemf(n.Line, path, "want a duration with a unit, like 30s, 5m or 1h30m; got %s", quote(s))
			return false
		}
		*dst = v
		return true
	}
}

func boolean(dst *bool) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		s, ok := d.scalar(n, path, "true or false")
		if !ok {
			return false
		}
		switch s {
		case "true", "True", "TRUE":
			*dst = true
		case "false", "False", "FALSE":
			*dst = false
		default:
			d.problemf(n.Line, path, "want true or false, got %s", quote(s))
			return false
		}
		return true
	}
}

// strList decodes a list of strings. No value means an empty list (nil); `[]` is an empty
// list that is not nil.
func strList(dst *[]string) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		if isNull(v) {
			*dst = nil
			return true
		}
		if v.Kind != yaml.SequenceNode {
			d.problemf(n.Line, path, `want a list of strings, like ["a", "b"]; got %s`, describe(v))
			return false
		}
		// An item that cannot be decoded is left empty and marked bad.
		list := make([]string, len(v.Content))
		for i, item := range v.Content {
			d.decodeField(fmt.Sprintf("%s[%d]", path, i), item.Line, item, str(&list[i]))
		}
		*dst = list
		return true
	}
}

// inheritEnv decodes inherit_env: the scalar `all`, which sets all, or a list
// of variable names into list. No value means an empty list.
func inheritEnv(list *[]string, all *bool) decodeFunc {
	const want = `all, or a list of variable names like [AWS_PROFILE, "AWS_*"]`
	return func(d *decoder, n *yaml.Node, path string) bool {
		v := resolve(n)
		switch {
		case isNull(v) || v.Kind == yaml.SequenceNode:
			*all = false
			return strList(list)(d, n, path)
		case v.Kind != yaml.ScalarNode:
			d.problemf(n.Line, path, "want %s; got %s", want, describe(v))
			return false
		}
		s, ok := d.scalar(n, path, want)
		if !ok {
			return false
		}
		if s != "all" {
			d.problemf(n.Line, path, "want %s; got %s (a single name is written as a list: [NAME])", want, quote(s))
			return false
		}
		*list, *all = nil, true
		return true
	}
}

// strMap decodes a mapping of any keys to strings (env, headers). No value
// means an empty mapping. Keys are taken as written, without variable
// expansion.
func strMap(dst *map[string]string) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		if isNull(resolve(n)) {
			*dst = nil
			return true
		}
		// An entry whose value cannot be decoded is left out and marked bad.
		m := make(map[string]string)
		ok := d.eachKey(n, path, "a mapping of NAME: value", func(key string, line int, v *yaml.Node) {
			var s string
			if d.decodeField(join(path, key), line, v, str(&s)) {
				m[key] = s
			}
		})
		if ok {
			*dst = m
		}
		return ok
	}
}

// notNull returns dec for a field where no value is a problem, since
// absence and emptiness mean different things; hint says what to write.
func notNull(hint string, dec decodeFunc) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		if isNull(resolve(n)) {
			d.problemf(n.Line, path, "no value: %s", hint)
			return false
		}
		return dec(d, n, path)
	}
}

// resolve returns the node an alias refers to, or n itself.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// isNull reports whether n is a YAML null: no value, "null" or "~".
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the kind of n for messages. It does not quote scalars: the
// field may hold a secret.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "no value"
	default:
		return "a single value"
	}
}

// quote quotes s for a message, shortened if long.
func quote(s string) string {
	const max = 40
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}

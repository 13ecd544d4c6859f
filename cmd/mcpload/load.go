package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Config describes one load run. Exactly one of URL and Command is set, and at least one
// of Calls and Duration; with both, workers stop at whichever comes first.
type Config struct {
	// URL is the Streamable HTTP endpoint. Each worker opens its own MCP session.
	URL string
	// Command is a stdio server command and its arguments. It is started once and all
	// workers share its one session, demultiplexed by request id.
	Command []string

	// Workers is the number of concurrent workers, each with one call in flight. If zero,
	// defaults to 1.
	Workers int
	// Calls is the number of measured calls per worker. If zero, there is no such limit.
	Calls int
	// Duration is the measured time, shared by all workers. If zero, there is no such
	// limit.
	Duration time.Duration
	// Warmup is a time, before measuring starts, during which calls are made but not
	// measured (their errors are still counted). If zero, there is none.
	Warmup time.Duration

	// Method is the JSON-RPC method measured: MethodCall or MethodList. If empty,
	// defaults to MethodCall.
	Method string
	// Tool is the tool to call (tools/call only). If empty, defaults to "echo".
	Tool string
	// Text is the start of each call's text argument, "<Text>-<worker>-<seq>"; the answer
	// must echo it (tools/call only). If empty, defaults to "hello".
	Text string
	// MinTools is the least number of tools a tools/list answer must list. If zero,
	// defaults to 1; a negative value accepts any tools array, an empty one included.
	MinTools int
	// Bearer is a token sent as "Authorization: Bearer <Bearer>" on every HTTP request of
	// every session (POST and DELETE alike). If empty, no Authorization header is sent. It
	// must be empty with Command.
	Bearer string
	// Timeout bounds each call, and each initialize. If zero, defaults to 30s.
	Timeout time.Duration
	// Delete makes each HTTP worker DELETE its session at the end.
	Delete bool
	// Stderr receives the stdio server's stderr. If nil, it goes to the null device.
	Stderr io.Writer
	// CoalesceWrites lets concurrent stdio workers share one pipe write. Off, each message
	// is written on its own, as the gateway writes to a stdio upstream: the fair floor for it.
	CoalesceWrites bool
	// Protocol is the MCP revision spoken: ProtocolLegacy, where each HTTP worker opens a
	// session with initialize, or ProtocolModern, where no worker initializes and every
	// request carries the version, capabilities and client info in its _meta and the
	// MCP-Protocol-Version, Mcp-Method and Mcp-Name headers (mcp-2026-notes §1.2, §1.5);
	// ProtocolModern needs URL. If empty, defaults to ProtocolLegacy.
	Protocol string
}

// Result is what a run measured. Latencies are of successful measured calls only.
type Result struct {
	Target   string // the URL, or the command line
	Method   string // the method measured
	Protocol string // the MCP revision spoken
	Workers  int
	Sessions int // sessions initialized (stdio: at most 1; ProtocolModern: none)
	// Calls counts successful measured calls.
	Calls int64
	// Errors counts failed calls and initializations by kind (see checkEcho, checkList).
	// Never nil.
	Errors map[string]int64
	// Samples holds one error message per kind in Errors.
	Samples map[string]string
	// Duration is the measured time: from the end of the warm-up to the last answer.
	Duration time.Duration
	// Latency holds the latencies of successful measured calls.
	Latency histogram
	// Init holds the initialize latencies, sorted.
	Init []time.Duration
}

// ErrorCount returns the number of errors of every kind.
func (r *Result) ErrorCount() int64 {
	var n int64
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// CallsPerSecond returns the rate of successful measured calls.
func (r *Result) CallsPerSecond() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Duration.Seconds()
}

// The methods a run can measure.
const (
	MethodCall = "tools/call"
	MethodList = "tools/list"
)

// The MCP revisions a run can speak.
const (
	ProtocolLegacy = "2025-11-25"
	ProtocolModern = "2026-07-28"
)

// errNoTarget, errNoStop, errMethod, errBearer and errProtocol report incomplete or bad
// configs.
var (
	errNoTarget = errors.New("need exactly one of a URL and a stdio command")
	errNoStop   = errors.New("need a number of calls or a duration")
	errMethod   = errors.New("method must be " + MethodCall + " or " + MethodList)
	errBearer   = errors.New("a bearer token is sent over HTTP only, and must be visible ASCII without spaces")
	errProtocol = errors.New("protocol must be " + ProtocolLegacy + ", or " + ProtocolModern + " over HTTP")
)

// withDefaults returns cfg with its zero fields defaulted, or an error when it cannot run.
func (cfg Config) withDefaults() (Config, error) {
	if (cfg.URL == "") == (len(cfg.Command) == 0) {
		return cfg, errNoTarget
	}
	if cfg.Calls <= 0 && cfg.Duration <= 0 {
		return cfg, errNoStop
	}
	if cfg.Bearer != "" && (cfg.URL == "" || !validBearer(cfg.Bearer)) {
		return cfg, errBearer
	}
	switch cfg.Method {
	case "":
		cfg.Method = MethodCall
	case MethodCall, MethodList:
	default:
		return cfg, errMethod
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolLegacy
	case ProtocolLegacy:
	case ProtocolModern:
		if cfg.URL == "" {
			return cfg, errProtocol
		}
	default:
		return cfg, errProtocol
	}
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.MinTools == 0 {
		cfg.MinTools = 1
	}
	if cfg.Tool == "" {
		cfg.Tool = "echo"
	}
	if cfg.Text == "" {
		cfg.Text = "hello"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	return cfg, nil
}

// validBearer reports whether tok can follow "Bearer " in a header: visible ASCII, no
// spaces (RFC 6750 §2.1 allows less; the server judges the rest).
func validBearer(tok string) bool {
	for i := range len(tok) {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Run performs one load run and returns what it measured. Failed calls are counted in
// the result, not returned; the error reports a run that could not start (a bad config, a
// command that does not start). Run stops early, with the calls so far, when ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.URL != "" {
		return runHTTP(ctx, &cfg)
	}
	return runStdio(ctx, &cfg)
}

// kindCanceled is the pseudo-kind of a call cut short because the run's ctx ended; such
// calls are not counted.
const kindCanceled = "canceled"

// caller makes calls for one worker. Implementations: *httpSession, *stdioWorker.
type caller interface {
	// roundTrip sends req, the request with the given id, and returns its answer, valid
	// until the next roundTrip. start is when the call began (for deadlines). On failure
	// it returns an error kind and a description; kindCanceled when ctx ended.
	roundTrip(ctx context.Context, req []byte, id int64, start time.Time) (msg []byte, kind string, err error)
}

// workload writes one worker's requests and checks their answers, without allocating on
// success. Implementations: *requestBuilder (tools/call), *listBuilder (tools/list).
type workload interface {
	// build returns the request with id and sequence number seq, valid until the next
	// build.
	build(id int64, seq int) []byte
	// check checks msg, the answer to the last request built, whose id is id. It returns
	// "" on success, else an error kind and a description.
	check(msg []byte, id int64) (kind string, err error)
}

// newWorkload returns worker w's workload for cfg, which has its defaults.
func newWorkload(cfg *Config, w int) workload {
	var meta string
	if cfg.Protocol == ProtocolModern {
		meta = modernMeta
	}
	if cfg.Method == MethodList {
		return newListBuilder(cfg.MinTools, meta)
	}
	return newRequestBuilder(cfg.Tool, cfg.Text, meta, w)
}

// stats is what one worker (or the initialization phase) counted.
type stats struct {
	ok      int64
	latency histogram
	errors  map[string]int64
	samples map[string]string
}

// fail counts one error.
func (s *stats) fail(kind string, err error) {
	if s.errors == nil {
		s.errors = make(map[string]int64)
		s.samples = make(map[string]string)
	}
	s.errors[kind]++
	if _, ok := s.samples[kind]; !ok && err != nil {
		s.samples[kind] = err.Error()
	}
}

// addTo merges s into r.
func (s *stats) addTo(r *Result) {
	r.Calls += s.ok
	r.Latency.merge(&s.latency)
	for k, n := range s.errors {
		r.Errors[k] += n
		if _, ok := r.Samples[k]; !ok {
			r.Samples[k] = s.samples[k]
		}
	}
}

// newResult returns an empty result for cfg.
func newResult(cfg *Config, target string) *Result {
	return &Result{
		Target:   target,
		Method:   cfg.Method,
		Protocol: cfg.Protocol,
		Workers:  cfg.Workers,
		Errors:   make(map[string]int64),
		Samples:  make(map[string]string),
	}
}

// drive runs the call phase: callers[w] (nil for a worker whose session failed) makes
// calls as worker w until the config's stop condition, and the counts are merged into r.
// Each worker writes only its own stats slot, so a failing worker does not stop the others.
func drive(ctx context.Context, cfg *Config, callers []caller, r *Result) {
	all := make([]stats, len(callers))
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	var wg sync.WaitGroup
	for w, c := range callers {
		if c == nil {
			continue
		}
		wg.Go(func() { callLoop(ctx, cfg, w, c, measureFrom, &all[w]) })
	}
	wg.Wait()
	r.Duration = max(time.Since(measureFrom), 0)
	for i := range all {
		all[i].addTo(r)
	}
}

// callLoop makes worker w's calls through c.
func callLoop(ctx context.Context, cfg *Config, w int, c caller, measureFrom time.Time, st *stats) {
	wl := newWorkload(cfg, w)
	end := measureFrom.Add(cfg.Duration)
	measured := 0
	for seq := 1; ctx.Err() == nil; seq++ {
		start := time.Now()
		warm := start.Before(measureFrom)
		if !warm && (cfg.Calls > 0 && measured >= cfg.Calls || cfg.Duration > 0 && !start.Before(end)) {
			return
		}
		// Ids are unique across workers, so stdio answers can be routed by id alone.
		id := int64(seq)*int64(cfg.Workers) + int64(w)
		msg, kind, err := c.roundTrip(ctx, wl.build(id, seq), id, start)
		elapsed := time.Since(start) // the answer is in; checking it is not the server's time
		if kind == "" {
			kind, err = wl.check(msg, id)
		}
		switch {
		case kind == kindCanceled:
			return
		case kind != "":
			st.fail(kind, err)
		case !warm:
			st.ok++
			st.latency.record(elapsed)
		}
		if !warm {
			measured++
		}
	}
}

// requestBuilder writes one worker's tools/call requests into a reused buffer.
type requestBuilder struct {
	mid      []byte // from after the id to the text argument's "<worker>-", JSON-escaped
	textHead []byte // "<text>-<worker>-", unescaped
	req      []byte // the last request built
	text     []byte // the text argument of the last request built
}

// newRequestBuilder returns the builder of worker w's calls of tool; meta, unless empty, is
// the "_meta" member every call's params begin with.
func newRequestBuilder(tool, text, meta string, w int) *requestBuilder {
	name, _ := json.Marshal(tool) // marshaling a string cannot fail
	quoted, _ := json.Marshal(text)
	head := strconv.Itoa(w) + "-"
	if meta != "" {
		meta += ","
	}
	mid := `,"method":"tools/call","params":{` + meta + `"name":` + string(name) +
		`,"arguments":{"text":` + string(quoted[:len(quoted)-1]) + "-" + head
	return &requestBuilder{mid: []byte(mid), textHead: []byte(text + "-" + head)}
}

// build implements workload: it writes the request with id and sequence number seq into
// b.req, and its text into b.text. The suffix "-<worker>-<seq>" needs no JSON escaping.
func (b *requestBuilder) build(id int64, seq int) []byte {
	b.req = append(b.req[:0], `{"jsonrpc":"2.0","id":`...)
	b.req = strconv.AppendInt(b.req, id, 10)
	b.req = append(b.req, b.mid...)
	b.req = strconv.AppendInt(b.req, int64(seq), 10)
	b.req = append(b.req, `"}}}`...)
	b.text = strconv.AppendInt(append(b.text[:0], b.textHead...), int64(seq), 10)
	return b.req
}

// check implements workload: the answer must echo the last text built.
func (b *requestBuilder) check(msg []byte, id int64) (string, error) {
	return checkEcho(msg, id, b.text)
}

// listBuilder writes one worker's tools/list requests (no cursor: the first page) into a
// reused buffer.
type listBuilder struct {
	min  int    // the least number of tools an answer must list
	tail []byte // from after the id to the end
	req  []byte // the last request built
}

// newListBuilder returns the builder of tools/list requests whose answers must list at least
// min tools; meta, unless empty, is the "_meta" member of their params, else they have none.
func newListBuilder(min int, meta string) *listBuilder {
	tail := `,"method":"tools/list"}`
	if meta != "" {
		tail = `,"method":"tools/list","params":{` + meta + `}}`
	}
	return &listBuilder{min: min, tail: []byte(tail)}
}

// build implements workload.
func (b *listBuilder) build(id int64, _ int) []byte {
	b.req = append(b.req[:0], `{"jsonrpc":"2.0","id":`...)
	b.req = strconv.AppendInt(b.req, id, 10)
	b.req = append(b.req, b.tail...)
	return b.req
}

// check implements workload: the answer must list at least b.min tools.
func (b *listBuilder) check(msg []byte, id int64) (string, error) {
	return checkList(msg, id, b.min)
}

// initializeRequest returns the initialize request with the given id.
func initializeRequest(id int64) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) +
		`,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},` +
		`"clientInfo":{"name":"mcpload","version":"` + version + `"}}}`)
}

// modernMeta is the "_meta" member of every ProtocolModern request: the version, no optional
// client capability, and the client's name (mcp-2026-notes §1.2).
var modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + ProtocolModern + `",` +
	`"io.modelcontextprotocol/clientCapabilities":{},` +
	`"io.modelcontextprotocol/clientInfo":{"name":"mcpload","version":"` + version + `"}}`

// initializedNotification is sent after a successful initialize (mcp-notes §1.1).
var initializedNotification = []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

// sortedDurations returns ds sorted.
func sortedDurations(ds []time.Duration) []time.Duration {
	slices.Sort(ds)
	return ds
}

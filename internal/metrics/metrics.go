// Package metrics owns the gateway's Prometheus metrics: one registry per Set, with the Go
// runtime and process collectors and every manifold_* family, and the handler that serves
// it (GET /metrics, on the admin listener or a listener of its own).
//
// The gateway records what happens through typed methods; what is a state rather than an
// event (upstream states, sessions and streams open, approvals pending, stream bytes) is read
// when Prometheus scrapes, from the State func the gateway gives (Set.Watch):
//
//	set := metrics.New(&metrics.Options{Upstreams: names, Plugins: plugins, ConfigVersion: cfg.Version()})
//	set.Watch(gw.metricsState)               // what is read at each scrape
//	set.ObserveRequest(method, era, outcome, d)
//	http.Handle("/metrics", set.Handler())
//
// Every label's values are bounded: methods, eras, outcomes, kinds and effects come from
// fixed lists ("other" for anything else), upstreams and plugins from the configuration. The
// children of each family are resolved when the Set is built, so that recording does not
// allocate. A nil *Set records nothing, at the cost of one comparison: metrics off.
//
// A Set is safe for concurrent use.
package metrics

import (
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Other is the label value of anything outside a label's bounded list of values.
const Other = "other"

// Methods are the values of the method label: the client requests the gateway serves.
var Methods = []string{
	protocol.MethodInitialize, protocol.MethodPing, protocol.MethodDiscover, protocol.MethodSetLogLevel,
	protocol.MethodListTools, protocol.MethodCallTool, protocol.MethodListResources,
	protocol.MethodListResourceTemplates, protocol.MethodReadResource, protocol.MethodSubscribe,
	protocol.MethodUnsubscribe, protocol.MethodListPrompts, protocol.MethodGetPrompt,
	protocol.MethodComplete, protocol.MethodListen,
	"tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
	Other,
}

// Eras are the values of the era label: the protocol versions the gateway speaks, newest
// first; "" (a request before its session negotiated one) counts as "other".
var Eras = append(append(slices.Clone(protocol.ModernVersions), protocol.SupportedVersions...), Other)

// Outcomes are the values of the outcome label of manifold_requests_total: ok, error,
// cancelled, or the reason of a refusal (the machine-readable reasons of refused tool
// results and audit records).
var Outcomes = []string{
	"ok", "error", "cancelled",
	"unknown_tool", "unknown_prompt", "resource_not_found",
	"upstream_unavailable", "upstream_timeout", "upstream_interrupted", "connection_limit",
	"too_many_calls", "too_many_tasks", "denied", "rate_limited", "unauthenticated",
	"approval_declined", "approval_timeout", "approval_unavailable", "plugin_unavailable",
	"connect_required",
	Other,
}

// ReverseKinds are the values of the kind label of manifold_reverse_requests_total.
var ReverseKinds = []string{"sampling", "elicitation", "roots", Other}

// ReverseOutcomes are the values of the outcome label of manifold_reverse_requests_total:
//
//   - answered: the client answered with a result;
//   - client_error: the client answered with an error, or its stream ended first;
//   - gateway_roots: roots/list outside any client's call, answered with the configured roots;
//   - refused_capability: the client did not declare the capability;
//   - refused_ambiguous: several sessions had calls in flight on the shared connection;
//   - refused_outside_calls: no session had a call in flight there;
//   - refused_standalone: it came on a shared connection's standalone stream;
//   - refused_modern: the call's client speaks 2026-07-28, to which no request can be sent;
//   - relayed_input: the call's 2026-07-28 client is asked in an input_required result;
//   - timed_out: the upstream's own deadline ended the wait;
//   - cancelled: the upstream cancelled it, or the client's call ended first.
var ReverseOutcomes = []string{
	"answered", "client_error", "gateway_roots", "refused_capability", "refused_ambiguous",
	"refused_outside_calls", "refused_standalone", "refused_modern", "relayed_input",
	"timed_out", "cancelled", Other,
}

// DecisionChecks and DecisionEffects are the values of the labels of
// manifold_policy_decisions_total: the stage that decided and what it decided.
var (
	DecisionChecks  = []string{"policy", "rate_limit", "plugin", "inspect", "approval", Other}
	DecisionEffects = []string{"allow", "deny", "hide", "approve", "rewrite", "ask", Other}
)

// UpstreamStates are the values of the state label of manifold_upstream_state.
var UpstreamStates = []string{"starting", "ready", "down", "closed"}

// PluginStages are the values of the stage label of manifold_plugin_call_duration_seconds:
// decide (before a request is forwarded) and inspect (its result).
var PluginStages = []string{"decide", "inspect"}

// Options are what a Set is built for. Nil is allowed: no upstreams, no plugins, no version.
type Options struct {
	// Upstreams are the configured upstreams' names, the values of the upstream label;
	// another name counts as "other".
	Upstreams []string
	// Plugins are the configured policy plugins' names, the values of the plugin label.
	Plugins []string
	// ConfigVersion is the version of the configuration the gateway runs
	// (config.Config.Version), the label of manifold_config_info.
	ConfigVersion string
	// Logger receives the handler's errors. If nil, they are discarded.
	Logger *slog.Logger
}

// State is what a scrape reads of the gateway at that moment.
type State struct {
	// Upstreams are each configured upstream's state (one of UpstreamStates), by name.
	Upstreams map[string]string
	// Sessions are the client sessions live on this replica; Streams the SSE streams a
	// connection writes now.
	Sessions, Streams int
	// ApprovalsPending are the calls held for an operator's approval.
	ApprovalsPending int
	// StreamBytes are the bytes of events the streams hold; StreamBudget their budget
	// (stream_budget_bytes), 0 for none.
	StreamBytes, StreamBudget int64
}

// Set is the gateway's metrics: its registry, and the children of its families resolved
// for every bounded combination of label values. Its methods may be called on a nil *Set, and
// then do nothing. Must not be copied.
type Set struct {
	registry *prometheus.Registry
	logger   *slog.Logger

	methods, eras, outcomes map[string]int

	requests        []prometheus.Counter  // [method][era][outcome]
	requestDuration []prometheus.Observer // [method]
	// perUpstream are the children of the families labelled by upstream, for the upstreams
	// configured: replaced, grown, when a reload adds some (SetUpstreams).
	perUpstream atomic.Pointer[upstreamSeries]
	// perPlugin are the children of the families labelled by plugin, for the plugins
	// configured: replaced, grown, when a reload adds some (SetPlugins).
	perPlugin atomic.Pointer[pluginSeries]
	// upstreamMu serializes SetUpstreams, SetPlugins and SetConfigVersion; the vectors are
	// what they resolve children of.
	upstreamMu               sync.Mutex
	pluginFailureVec         *prometheus.CounterVec
	toolCallVec              *prometheus.HistogramVec
	restartVec, reconnectVec *prometheus.CounterVec
	reverse                  []prometheus.Counter  // [kind][outcome]
	decisions                []prometheus.Counter  // [check][effect][dry run]
	approvals                []prometheus.Counter  // [outcome]
	pluginDuration           []prometheus.Observer // [stage]
	redisDuration            prometheus.Observer
	redisErrors              prometheus.Counter
	configInfo               *prometheus.GaugeVec
	configVersion            string // the version configInfo names; guarded by upstreamMu

	// state is the func Watch gave, read at each scrape; nil until then.
	state atomic.Pointer[func() State]
}

// ApprovalOutcomes are the values of the outcome label of manifold_approvals_total:
// approved (by an operator or the client's user), declined, timed_out, remembered (an
// earlier approval still stood), unavailable (nobody could be asked, or the call could not
// be held).
var ApprovalOutcomes = []string{"approved", "declined", "timed_out", "remembered", "unavailable", Other}

// New returns a Set with its registry: the Go runtime and process collectors, and every
// manifold_* family, each child resolved.
func New(opts *Options) *Set {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Set{
		registry: prometheus.NewRegistry(),
		logger:   o.Logger,
		methods:  index(Methods), eras: index(Eras), outcomes: index(Outcomes),
	}
	r := s.registry
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_requests_total",
		Help: "Client requests served, by method, protocol era and outcome (ok, error, cancelled, or the reason of a refusal)."},
		[]string{"method", "era", "outcome"})
	for _, m := range Methods {
		for _, e := range Eras {
			for _, oc := range Outcomes {
				s.requests = append(s.requests, requests.WithLabelValues(m, e, oc))
			}
		}
	}
	requestDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "manifold_request_duration_seconds",
		Help: "Time from a client request's arrival to its answer, by method.", Buckets: latencyBuckets},
		[]string{"method"})
	s.requestDuration = observers(requestDuration, Methods)
	toolCalls := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "manifold_tool_call_duration_seconds",
		Help: "Time an upstream took to answer a tools/call the gateway forwarded, by upstream.", Buckets: latencyBuckets},
		[]string{"upstream"})
	s.toolCallVec = toolCalls
	restarts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_upstream_restarts_total",
		Help: "Times a stdio upstream's process was started again and became ready, after its first start."}, []string{"upstream"})
	s.restartVec = restarts
	reconnects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_upstream_reconnects_total",
		Help: "Times a network upstream's connection became ready again, after its first."}, []string{"upstream"})
	s.reconnectVec = reconnects
	s.SetUpstreams(o.Upstreams)
	reverse := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_reverse_requests_total",
		Help: "Requests upstreams sent toward clients (sampling, elicitation, roots), by kind and outcome."}, []string{"kind", "outcome"})
	for _, k := range ReverseKinds {
		for _, oc := range ReverseOutcomes {
			s.reverse = append(s.reverse, reverse.WithLabelValues(k, oc))
		}
	}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_policy_decisions_total",
		Help: "Decisions of the policy chain, by the check that decided, its effect, and whether it was a dry run (not enforced)."},
		[]string{"check", "effect", "dry_run"})
	for _, c := range DecisionChecks {
		for _, e := range DecisionEffects {
			s.decisions = append(s.decisions, decisions.WithLabelValues(c, e, "false"), decisions.WithLabelValues(c, e, "true"))
		}
	}
	approvals := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_approvals_total",
		Help: "Approvals of held or asked-about calls, by outcome."}, []string{"outcome"})
	s.approvals = counters(approvals, ApprovalOutcomes)
	pluginDuration := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "manifold_plugin_call_duration_seconds",
		Help: "Time the policy plugins took to decide on a request or inspect its result, all plugins asked together, by stage.", Buckets: latencyBuckets},
		[]string{"stage"})
	s.pluginDuration = observers(pluginDuration, PluginStages)
	pluginFailures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "manifold_plugin_failures_total",
		Help: "Times a policy plugin gave no usable answer (crashed, timed out, answered badly), by plugin."}, []string{"plugin"})
	s.pluginFailureVec = pluginFailures
	s.SetPlugins(o.Plugins)
	redisDuration := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "manifold_redis_command_duration_seconds",
		Help: "Round-trip time of commands and pipelines to the Redis session store.", Buckets: redisBuckets})
	s.redisDuration = redisDuration
	redisErrors := prometheus.NewCounter(prometheus.CounterOpts{Name: "manifold_redis_errors_total",
		Help: "Commands and pipelines to the Redis session store that failed (not counting a key not found)."})
	s.redisErrors = redisErrors
	configInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "manifold_config_info",
		Help: "The version of the configuration this replica runs (config.Version): 1 for it."}, []string{"version"})
	configInfo.WithLabelValues(o.ConfigVersion).Set(1)
	s.configInfo, s.configVersion = configInfo, o.ConfigVersion

	r.MustRegister(requests, requestDuration, toolCalls, restarts, reconnects, reverse, decisions, approvals,
		pluginDuration, pluginFailures, redisDuration, redisErrors, configInfo, &stateCollector{s: s})
	return s
}

// latencyBuckets span a fast local answer to a tool that runs for minutes, in seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// redisBuckets span the round trips of a store on the same host to one across a region.
var redisBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

func index(values []string) map[string]int {
	m := make(map[string]int, len(values))
	for i, v := range values {
		if _, dup := m[v]; !dup {
			m[v] = i
		}
	}
	return m
}

func counters(v *prometheus.CounterVec, values []string) []prometheus.Counter {
	out := make([]prometheus.Counter, len(values))
	for i, x := range values {
		out[i] = v.WithLabelValues(x)
	}
	return out
}

func observers(v *prometheus.HistogramVec, values []string) []prometheus.Observer {
	out := make([]prometheus.Observer, len(values))
	for i, x := range values {
		out[i] = v.WithLabelValues(x)
	}
	return out
}

// of returns value's index in m, or that of "other" (the last) when it is not there.
func of(m map[string]int, value string) int {
	if i, ok := m[value]; ok {
		return i
	}
	return len(m) - 1
}

// Watch sets what each scrape reads of the gateway's state; the last call wins. state must
// be safe for concurrent use and quick: it runs on every scrape.
func (s *Set) Watch(state func() State) {
	if s == nil {
		return
	}
	s.state.Store(&state)
}

// Handler serves the registry in the Prometheus exposition formats. For a nil Set it
// answers 404.
func (s *Set) Handler() http.Handler {
	if s == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.logger}, ErrorHandling: promhttp.ContinueOnError})
}

// Values gathers the Set's series as a scrape shows them, keyed as Series keys them.
func (s *Set) Values() (map[string]float64, error) {
	families, err := s.registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var b strings.Builder
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			return nil, fmt.Errorf("encode metrics: %w", err)
		}
	}
	return Series(strings.NewReader(b.String()))
}

// ObserveRequest counts a client request that ended, by method, era (the protocol version
// it was served at) and outcome (ok, error, cancelled or a refusal's reason), and observes
// how long it took.
func (s *Set) ObserveRequest(method, era, outcome string, d time.Duration) {
	if s == nil {
		return
	}
	m := of(s.methods, method)
	i := (m*len(Eras)+of(s.eras, era))*len(Outcomes) + of(s.outcomes, outcome)
	s.requests[i].Inc()
	s.requestDuration[m].Observe(d.Seconds())
}

// SetConfigVersion replaces the version manifold_config_info names, for a gateway that
// runs another configuration now. The upstreams and plugins of the labels stay those the
// Set was built with: others count as "other".
func (s *Set) SetConfigVersion(version string) {
	if s == nil {
		return
	}
	// The new series first, then the old one goes: a scrape in between never sees none.
	s.configInfo.WithLabelValues(version).Set(1)
	s.upstreamMu.Lock()
	defer s.upstreamMu.Unlock()
	if s.configVersion != version {
		s.configInfo.DeleteLabelValues(s.configVersion)
		s.configVersion = version
	}
}

// upstreamSeries are the children of the per-upstream families for a set of upstream names
// (and Other), by index. Immutable.
type upstreamSeries struct {
	index      map[string]int
	toolCalls  []prometheus.Observer
	restarts   []prometheus.Counter
	reconnects []prometheus.Counter
}

// SetUpstreams makes the names, beside those given before, the values of the upstream label
// that the per-upstream families count apart (others count as Other): a reload that adds
// upstreams calls it with the new list. A name no longer configured keeps its series, as a
// counter keeps what it counted.
func (s *Set) SetUpstreams(names []string) {
	if s == nil {
		return
	}
	s.upstreamMu.Lock()
	defer s.upstreamMu.Unlock()
	var cur map[string]int
	if u := s.perUpstream.Load(); u != nil {
		cur = u.index
	}
	all := grown(cur, names)
	s.perUpstream.Store(&upstreamSeries{index: index(all), toolCalls: observers(s.toolCallVec, all),
		restarts: counters(s.restartVec, all), reconnects: counters(s.reconnectVec, all)})
}

// pluginSeries are the children of the families labelled by plugin.
type pluginSeries struct {
	index    map[string]int
	failures []prometheus.Counter
}

// SetPlugins makes names, the policy plugins configured now, the values of the plugin label
// that count apart (others count as Other): a reload that adds plugins calls it with the new
// list. A name no longer configured keeps its series.
func (s *Set) SetPlugins(names []string) {
	if s == nil {
		return
	}
	s.upstreamMu.Lock()
	defer s.upstreamMu.Unlock()
	var cur map[string]int
	if p := s.perPlugin.Load(); p != nil {
		cur = p.index
	}
	all := grown(cur, names)
	s.perPlugin.Store(&pluginSeries{index: index(all), failures: counters(s.pluginFailureVec, all)})
}

// grown is the label values of cur (an index, Other last) with names added, Other last again.
func grown(cur map[string]int, names []string) []string {
	all := make([]string, len(cur))
	for name, i := range cur {
		all[i] = name
	}
	if len(all) > 0 {
		all = all[:len(all)-1] // Other goes last again
	}
	for _, name := range names {
		if !slices.Contains(all, name) && name != Other {
			all = append(all, name)
		}
	}
	return append(all, Other)
}

// ObserveToolCall observes how long upstream took to answer a forwarded tools/call.
func (s *Set) ObserveToolCall(upstream string, d time.Duration) {
	if s == nil {
		return
	}
	u := s.perUpstream.Load()
	u.toolCalls[of(u.index, upstream)].Observe(d.Seconds())
}

// UpstreamRestarted counts an upstream that became ready again after it was ready before:
// a restart of a stdio upstream's process, or a reconnect of a network upstream.
func (s *Set) UpstreamRestarted(upstream string, stdio bool) {
	if s == nil {
		return
	}
	u := s.perUpstream.Load()
	if stdio {
		u.restarts[of(u.index, upstream)].Inc()
		return
	}
	u.reconnects[of(u.index, upstream)].Inc()
}

// ReverseKind is the kind label of a request an upstream sends toward a client, by method.
func ReverseKind(method string) string {
	switch method {
	case protocol.MethodCreateMessage:
		return "sampling"
	case protocol.MethodElicit:
		return "elicitation"
	case protocol.MethodListRoots:
		return "roots"
	}
	return Other
}

// ReverseRequest counts a request an upstream sent toward a client, by method (its kind)
// and outcome (one of ReverseOutcomes).
func (s *Set) ReverseRequest(method, outcome string) {
	if s == nil {
		return
	}
	k := slices.Index(ReverseKinds, ReverseKind(method))
	oc := slices.Index(ReverseOutcomes, outcome)
	if oc < 0 {
		oc = len(ReverseOutcomes) - 1
	}
	s.reverse[k*len(ReverseOutcomes)+oc].Inc()
}

// Decision counts a decision of the policy chain: the check that took it, its effect,
// whether it was a dry run.
func (s *Set) Decision(check, effect string, dryRun bool) {
	if s == nil {
		return
	}
	c, e := indexOr(DecisionChecks, check), indexOr(DecisionEffects, effect)
	i := (c*len(DecisionEffects) + e) * 2
	if dryRun {
		i++
	}
	s.decisions[i].Inc()
}

// Approval counts an approval's outcome, one of ApprovalOutcomes.
func (s *Set) Approval(outcome string) {
	if s == nil {
		return
	}
	s.approvals[indexOr(ApprovalOutcomes, outcome)].Inc()
}

// ObservePlugins observes how long the plugins took at a stage (decide or inspect).
func (s *Set) ObservePlugins(stage string, d time.Duration) {
	if s == nil {
		return
	}
	i := 0
	if stage == PluginStages[1] {
		i = 1
	}
	s.pluginDuration[i].Observe(d.Seconds())
}

// PluginFailed counts a plugin that gave no usable answer.
func (s *Set) PluginFailed(plugin string) {
	if s == nil {
		return
	}
	p := s.perPlugin.Load()
	p.failures[of(p.index, plugin)].Inc()
}

// ObserveRedis observes one round trip to Redis (a command or a pipeline), and counts it
// as an error when failed.
func (s *Set) ObserveRedis(d time.Duration, failed bool) {
	if s == nil {
		return
	}
	s.redisDuration.Observe(d.Seconds())
	if failed {
		s.redisErrors.Inc()
	}
}

// indexOr returns value's index in values, or the last's ("other").
func indexOr(values []string, value string) int {
	if i := slices.Index(values, value); i >= 0 {
		return i
	}
	return len(values) - 1
}

// stateCollector reads the gateway's State at each scrape.
type stateCollector struct{ s *Set }

var (
	upstreamStateDesc = prometheus.NewDesc("manifold_upstream_state",
		"1 for the state each upstream is in (starting, ready, down, closed), 0 for the others.", []string{"upstream", "state"}, nil)
	sessionsDesc = prometheus.NewDesc("manifold_sessions_open",
		"Client sessions live on this replica.", nil, nil)
	streamsDesc = prometheus.NewDesc("manifold_streams_open",
		"SSE streams of sessions on this replica that a client connection is reading now.", nil, nil)
	approvalsPendingDesc = prometheus.NewDesc("manifold_approvals_pending",
		"Calls held for an operator's approval: with a Redis session store, those of every replica (take the max across replicas, not the sum).", nil, nil)
	streamBytesDesc = prometheus.NewDesc("manifold_stream_retained_bytes",
		"Bytes of events the streams on this replica hold, open or kept for resumption.", nil, nil)
	streamBudgetDesc = prometheus.NewDesc("manifold_stream_budget_bytes",
		"The budget of manifold_stream_retained_bytes (stream_budget_bytes); 0: none.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{upstreamStateDesc, sessionsDesc, streamsDesc, approvalsPendingDesc, streamBytesDesc, streamBudgetDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.s.state.Load()
	if f == nil {
		return
	}
	st := (*f)()
	// The upstreams configured now: a reload adds and removes them.
	for _, u := range slices.Sorted(maps.Keys(st.Upstreams)) {
		now := st.Upstreams[u]
		for _, state := range UpstreamStates {
			v := 0.0
			if state == now {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(upstreamStateDesc, prometheus.GaugeValue, v, u, state)
		}
	}
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(st.Sessions))
	ch <- prometheus.MustNewConstMetric(streamsDesc, prometheus.GaugeValue, float64(st.Streams))
	ch <- prometheus.MustNewConstMetric(approvalsPendingDesc, prometheus.GaugeValue, float64(st.ApprovalsPending))
	ch <- prometheus.MustNewConstMetric(streamBytesDesc, prometheus.GaugeValue, float64(st.StreamBytes))
	ch <- prometheus.MustNewConstMetric(streamBudgetDesc, prometheus.GaugeValue, float64(st.StreamBudget))
}

// slogPrinter is promhttp's error log on a slog.Logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.l.Warn("serving metrics failed", "error", strings.TrimSpace(fmt.Sprintln(v...)))
}

// Package audit owns the gateway's audit trail: one Record per completed client request, who
// asked for what and how it ended, written as a JSON line.
//
// A Log takes records without ever making the request wait: they go into a bounded queue that
// a goroutine of the Log writes out, and a record that finds the queue full is dropped and
// counted rather than held. An audit trail that could stall requests would let a full disk or
// a blocked pipe take the gateway down; one that loses records under overload says so in the
// gateway's log, with a count.
//
//	w, err := audit.OpenSink(cfg.Audit.Sink, cfg.Audit.Path) // nil for "off"
//	if err != nil { ... }
//	var trail *audit.Log // nil: auditing is off, and Record does nothing
//	if w != nil {
//		trail = audit.New(w, &audit.Options{Buffer: cfg.Audit.Buffer, Logger: logger})
//		defer w.Close()     // after trail.Close, which does not close w
//		defer trail.Close() // drains the queue, waiting at most CloseTimeout
//	}
//	...
//	trail.Record(audit.Record{RequestID: id, Session: fp, Principal: "anonymous", ...})
//
// Each line is a JSON object with "time", "msg" (always "audit") and the fields of Record
// under the names their docs give, for example:
//
//	{"time":"2026-01-02T15:04:05.123Z","msg":"audit","requestId":"7","session":"3f9a1c2b7d4e",
//	 "principal":"anonymous","method":"tools/call","upstream":"github","target":"create_issue",
//	 "latencyMs":12.5,"outcome":"ok"}
package audit

import (
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// The values of Record.Outcome.
const (
	// OutcomeOK: the request was answered with a result. A tool result with isError set
	// that came from the upstream is still "ok": the gateway delivered what the tool said.
	OutcomeOK = "ok"
	// OutcomeError: the request failed, at the upstream or in the gateway (an upstream that
	// is down, a timeout, a malformed answer).
	OutcomeError = "error"
	// OutcomeRefused: the gateway declined the request before forwarding it (an unknown or
	// hidden tool, a limit, a policy rule).
	OutcomeRefused = "refused"
	// OutcomeCancelled: the request ended before its answer, by the client's
	// notifications/cancelled, the loss of the stream that would carry the answer, or the end
	// of its session.
	OutcomeCancelled = "cancelled"
)

// Record is what the audit trail keeps of one client request. It is plain data: the caller
// fills it in when the request completes and hands it to Log.Record, which keeps a copy; the
// Decisions slice is shared, so it must not be modified after.
//
// Security: every field is written as given. Fill in only what may be kept in a log read by
// operators: never a session id, a token or a tool's arguments.
type Record struct {
	// Time is when the request completed (JSON "time"); it started Latency earlier. If zero,
	// Log.Record fills in the time of its call.
	Time time.Time

	// RequestID is the gateway's correlation id of the request, the one its own log lines
	// carry as request_id (JSON "requestId").
	RequestID string

	// Session is the fingerprint of the client's session (JSON "session"), the short hash
	// the gateway's log names sessions by. Never the session id: that is a bearer secret.
	Session string

	// Era is the protocol revision of a request served without a session (JSON "era"), such
	// as "2026-07-28": Session is then empty, and the principal and RequestID stand in for
	// it. Empty, and left out, for a request of a session.
	Era string

	// Principal is who made the request (JSON "principal"): the authenticated subject, or
	// "anonymous" when authentication is off. The caller fills it in either way, so that an
	// empty value means a caller forgot.
	Principal string

	// Method is the JSON-RPC method of the request, such as "tools/call" (JSON "method").
	Method string

	// Upstream is the name of the upstream the request went to, from the config (JSON
	// "upstream"); empty when it went to none, such as a refused call or a list the gateway
	// merges itself.
	Upstream string

	// Target is what the request was about, as the upstream knows it (JSON "target"): its own
	// tool or prompt name, or its resource URI, without the gateway's prefix. For an item
	// the caller may not see, or one that does not exist, it is the name or URI as the
	// client sent it, and Upstream is empty: the record does not tell what is hidden. Empty
	// for methods without a target.
	Target string

	// Latency is how long the gateway took to complete the request (JSON "latencyMs", in
	// milliseconds with a fraction).
	Latency time.Duration

	// Outcome is how the request ended: OutcomeOK, OutcomeError, OutcomeRefused or
	// OutcomeCancelled (JSON "outcome").
	Outcome string

	// Code is the JSON-RPC error code the client got, for the outcomes error and refused
	// (JSON "code"); zero, and left out, when the answer was not a JSON-RPC error, such as a
	// tool result with isError.
	Code int64

	// Reason says why a request was refused or failed in a word a machine can match, such as
	// "unknown_tool" or "upstream_unavailable" (JSON "reason"): the same vocabulary as the
	// reason the gateway puts in a tool result's _meta. Empty when there is none.
	Reason string

	// Decisions are what the policy stages decided on the way (JSON "decisions"), in the
	// order they ran; nil, and left out, when no stage recorded one.
	Decisions []Decision

	// Inputs are the rounds in which the upstream asked the client for input during the call
	// (JSON "inputs"), in order: for a call the gateway bridged between protocol eras, each
	// round's requests and what became of them. nil, and left out, when there were none.
	Inputs []InputRound

	// TraceID is the OpenTelemetry trace id of the request's span, 32 hex digits (JSON
	// "traceId"), when the gateway traces; empty, and left out, otherwise.
	TraceID string

	// Arguments are the request's arguments with the configured fields redacted (JSON
	// "arguments"), when the trail is configured to keep them; nil otherwise.
	Arguments json.RawMessage
}

// InputLog collects the input rounds of one call as they happen, for its record. Safe for
// concurrent use: a call's rounds may end on other goroutines than the one writing the record.
type InputLog struct {
	mu     sync.Mutex
	rounds []InputRound // guarded by mu
}

// Add appends a round.
func (l *InputLog) Add(r InputRound) {
	l.mu.Lock()
	l.rounds = append(l.rounds, r)
	l.mu.Unlock()
}

// Rounds returns the rounds so far, in order; nil for a nil log.
func (l *InputLog) Rounds() []InputRound {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rounds)
}

// InputRound is one round of input an upstream asked the client for during a call.
type InputRound struct {
	// Round counts the call's rounds from 1.
	Round int `json:"round"`
	// Asked are the methods asked of the client, such as "elicitation/create", one per
	// input request, in the order of their keys; empty for a round that asked for nothing
	// (the upstream asked to be called again).
	Asked []string `json:"asked,omitempty"`
	// Outcome is "answered" when every request got the client's answer, else why the round
	// ended the call, such as "client_error" or "not_declared".
	Outcome string `json:"outcome"`
}

// Decision is what one policy stage decided about a request, for the record.
type Decision struct {
	// Check names the stage, such as "visibility" or "rate_limit".
	Check string `json:"check"`
	// Effect is what it decided, such as "allow" or "deny".
	Effect string `json:"effect"`
	// Rule identifies the configured rule that decided, if one did.
	Rule string `json:"rule,omitempty"`
	// DryRun marks a decision made but not enforced (the policy's dry run).
	DryRun bool `json:"dryRun,omitempty"`
	// By names the person who decided, such as the operator who approved a held call.
	By string `json:"by,omitempty"`
}

// slogRecord returns r as the slog record of its JSON line: the time as the record's own, the
// fields as flat attributes, empty optional fields left out.
func (r *Record) slogRecord() slog.Record {
	rec := slog.NewRecord(r.Time, slog.LevelInfo, "audit", 0)
	rec.AddAttrs(
		slog.String("requestId", r.RequestID),
		slog.String("session", r.Session),
	)
	if r.Era != "" {
		rec.AddAttrs(slog.String("era", r.Era))
	}
	rec.AddAttrs(
		slog.String("principal", r.Principal),
		slog.String("method", r.Method),
	)
	if r.Upstream != "" {
		rec.AddAttrs(slog.String("upstream", r.Upstream))
	}
	if r.Target != "" {
		rec.AddAttrs(slog.String("target", r.Target))
	}
	rec.AddAttrs(
		slog.Float64("latencyMs", float64(r.Latency)/float64(time.Millisecond)),
		slog.String("outcome", r.Outcome),
	)
	if r.Code != 0 {
		rec.AddAttrs(slog.Int64("code", r.Code))
	}
	if r.Reason != "" {
		rec.AddAttrs(slog.String("reason", r.Reason))
	}
	if r.TraceID != "" {
		rec.AddAttrs(slog.String("traceId", r.TraceID))
	}
	if len(r.Decisions) > 0 {
		rec.AddAttrs(slog.Any("decisions", r.Decisions))
	}
	if len(r.Inputs) > 0 {
		rec.AddAttrs(slog.Any("inputs", r.Inputs))
	}
	if len(r.Arguments) > 0 {
		rec.AddAttrs(slog.Any("arguments", r.Arguments))
	}
	return rec
}

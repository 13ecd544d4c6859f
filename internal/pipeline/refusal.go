package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/protocol"
)

// Reasons a request is refused: machine-readable, in a refused tool result's _meta and in
// audit records.
const (
	ReasonUnknownTool         = "unknown_tool"
	ReasonUnknownPrompt       = "unknown_prompt"
	ReasonResourceNotFound    = "resource_not_found"
	ReasonUpstreamUnavailable = "upstream_unavailable"
	ReasonUpstreamTimeout     = "upstream_timeout"
	// ReasonUpstreamInterrupted: the request went out, and the upstream's connection ended
	// before it answered; it may have run in part there.
	ReasonUpstreamInterrupted = "upstream_interrupted"
	ReasonConnectionLimit     = "connection_limit"
	ReasonTooManyCalls        = "too_many_calls"
	ReasonTooManyTasks        = "too_many_tasks"
	ReasonDenied              = "denied"
	ReasonRateLimited         = "rate_limited"
	ReasonUnauthenticated     = "unauthenticated"
	// ReasonConnectRequired: the upstream is called with each user's own account there,
	// which the caller has not connected (or not with the scope needed); the message carries
	// the URL that connects it.
	ReasonConnectRequired = "connect_required"
)

// Keys of the gateway's own _meta entries in a refused tool result.
const (
	MetaReason     = "dev.manifold/reason"
	MetaUpstream   = "dev.manifold/upstream"
	MetaRetryAfter = "dev.manifold/retryAfterSeconds"
)

// Refusal is a request the gateway will not serve, for a reason of the refusal table. Map
// gives it its wire form: for tools/call mostly a tool result the model can act on, for other
// methods a JSON-RPC error with a code of the gateway's table.
type Refusal struct {
	Reason string
	// Message says what happened and what to do next, in words for the client's user or model.
	Message string
	// Upstream names the upstream concerned, if any.
	Upstream string
	// RetryAfter says when the request may succeed if tried again; 0 when unknown.
	RetryAfter time.Duration
	// Cause is what led to the refusal, for the log only.
	Cause error
}

func (r *Refusal) Error() string {
	if r.Cause != nil {
		return r.Reason + ": " + r.Message + ": " + r.Cause.Error()
	}
	return r.Reason + ": " + r.Message
}

func (r *Refusal) Unwrap() error { return r.Cause }

// UpstreamError is a JSON-RPC error an upstream answered to a forwarded request.
type UpstreamError struct {
	Upstream string
	Err      *protocol.Error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream %s answered: %v", e.Upstream, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// Outcome is how a request ended, for its audit record.
type Outcome struct {
	// Result is one of audit's outcomes: ok, refused, error, cancelled.
	Result string
	// Code is the JSON-RPC error code the client got, 0 for a result.
	Code int64
	// Reason is the refusal's reason, or a short word for an error.
	Reason string
}

// Map turns how a request ended into what its client receives, a result or a JSON-RPC error,
// and its outcome for the audit record: the one place where failures meet the wire (design
// decisions 7 and 9). t may be nil (the request was refused before it was resolved).
//
//   - A Refusal takes the form the refusal table gives its reason.
//   - An upstream's JSON-RPC error with a code the specifications define passes with its
//     message and data; a resource-not-found names the resource as the client did. Internal
//     and implementation-defined errors of an upstream reach the client as a generic -32603,
//     the original in the log with the request's id.
//   - The gateway's own JSON-RPC errors (invalid params, method not found) pass.
//   - Anything else is an internal failure: a generic -32603, the details in the log.
func Map(req *Request, t *Target, result json.RawMessage, err error, logger *slog.Logger) (json.RawMessage, *protocol.Error, Outcome) {
	if err == nil {
		return result, nil, Outcome{Result: audit.OutcomeOK}
	}
	var refusal *Refusal
	var upstreamErr *UpstreamError
	var rpcErr *protocol.Error
	switch {
	case errors.As(err, &refusal):
		if refusal.Cause != nil {
			logger.Warn("request refused", "request_id", req.LogID, "method", req.Method, "reason", refusal.Reason, "upstream", refusal.Upstream, "error", refusal.Cause.Error())
		}
		return refusalWire(req, t, refusal)
	case errors.As(err, &upstreamErr):
		return upstreamWire(req, t, upstreamErr, logger)
	case errors.As(err, &rpcErr):
		switch rpcErr.Code {
		case protocol.CodeURLElicitationRequired:
			// The gateway's own ask that its user connect an account first: a refusal, as
			// the tool error a client that cannot be asked gets instead.
			return nil, rpcErr, Outcome{Result: audit.OutcomeRefused, Code: rpcErr.Code, Reason: ReasonConnectRequired}
		case protocol.CodeInternalError:
			return nil, rpcErr, Outcome{Result: audit.OutcomeError, Code: rpcErr.Code, Reason: "internal"}
		}
		return nil, rpcErr, Outcome{Result: audit.OutcomeError, Code: rpcErr.Code, Reason: "invalid_request"}
	case errors.Is(err, context.Canceled):
		e := protocol.Errorf(protocol.CodeInternalError, "request cancelled")
		return nil, e, Outcome{Result: audit.OutcomeCancelled, Code: e.Code}
	}
	logger.Error("request failed", "request_id", req.LogID, "method", req.Method, "error", err.Error())
	e := protocol.Errorf(protocol.CodeInternalError, "internal error (request %s); the gateway's log has the details", req.LogID)
	return nil, e, Outcome{Result: audit.OutcomeError, Code: e.Code, Reason: "internal"}
}

// refusalWire is the refusal table of design decision 7.
func refusalWire(req *Request, t *Target, r *Refusal) (json.RawMessage, *protocol.Error, Outcome) {
	out := Outcome{Result: audit.OutcomeRefused, Reason: r.Reason}
	switch r.Reason {
	case ReasonUnknownTool, ReasonUnknownPrompt:
		// A hidden item is indistinguishable from a missing one.
		out.Code = protocol.CodeInvalidParams
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: r.Message}, out
	case ReasonResourceNotFound:
		uri := ""
		if t != nil {
			uri = t.Exposed
		}
		data, _ := json.Marshal(map[string]string{"uri": uri})
		out.Code = protocol.CodeResourceNotFound
		return nil, &protocol.Error{Code: protocol.CodeResourceNotFound, Message: r.Message, Data: data}, out
	}
	if req.Method == protocol.MethodCallTool {
		meta := map[string]any{MetaReason: r.Reason}
		if r.Upstream != "" {
			meta[MetaUpstream] = r.Upstream
		}
		if r.RetryAfter > 0 {
			meta[MetaRetryAfter] = retrySeconds(r.RetryAfter)
		}
		res, _ := json.Marshal(map[string]any{
			"content": []map[string]string{{"type": "text", "text": r.Message}},
			"isError": true,
			"_meta":   meta,
		})
		return res, nil, out
	}
	code := int64(protocol.CodeDenied)
	switch r.Reason {
	case ReasonUpstreamUnavailable, ReasonConnectionLimit:
		code = protocol.CodeUpstreamUnavailable
	case ReasonUpstreamInterrupted:
		// It may have run: not the code of "try again later".
		code = protocol.CodeInterrupted
	case ReasonUpstreamTimeout:
		code = protocol.CodeUpstreamTimeout
	case ReasonTooManyCalls, ReasonTooManyTasks, ReasonRateLimited:
		code = protocol.CodeTooManyRequests
	}
	data := map[string]any{"reason": r.Reason}
	if r.RetryAfter > 0 {
		data["retryAfterSeconds"] = retrySeconds(r.RetryAfter)
	}
	raw, _ := json.Marshal(data)
	out.Code = code
	return nil, &protocol.Error{Code: code, Message: r.Message, Data: raw}, out
}

func retrySeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// upstreamWire applies the error rule of design decision 9 to an upstream's JSON-RPC error.
func upstreamWire(req *Request, t *Target, ue *UpstreamError, logger *slog.Logger) (json.RawMessage, *protocol.Error, Outcome) {
	e := ue.Err
	if e.Code == protocol.CodeResourceNotFound && t != nil && t.Exposed != "" {
		// One form for every missing resource, whether the upstream or the gateway says so:
		// a resource the policy hides must be indistinguishable from one that does not exist.
		_, wire, _ := refusalWire(req, t, &Refusal{Reason: ReasonResourceNotFound, Message: "resource not found: " + t.Exposed})
		return nil, wire, Outcome{Result: audit.OutcomeError, Code: wire.Code, Reason: "upstream_error"}
	}
	if !protocol.IsSpecDefined(e.Code) {
		// At error level, as every record a client's message points to by request id: a log
		// limiter must not hold it back.
		logger.Error("an upstream answered with an internal error; the client got a generic one",
			"request_id", req.LogID, "method", req.Method, "upstream", ue.Upstream, "code", e.Code, "message", e.Message, "data", string(e.Data))
		out := protocol.Errorf(protocol.CodeInternalError, "upstream %s failed to handle the request (request %s); the gateway's log has the details", ue.Upstream, req.LogID)
		return nil, out, Outcome{Result: audit.OutcomeError, Code: out.Code, Reason: "upstream_error"}
	}
	if t != nil && t.Exposed != "" && t.Original != "" && t.Original != t.Exposed {
		// The client knows the item by the gateway's name or URI; the upstream's own stays
		// inside: resource-not-found names its URI in data.uri (as -32002 by 2025-11-25, as
		// -32602 by later revisions), and messages often quote it.
		data := e.Data
		if uri, ok, _ := protocol.StringMember(data, "uri"); ok && uri == t.Original {
			if out, err := protocol.SetMember(data, "uri", protocol.AppendString(nil, t.Exposed)); err == nil {
				data = out
			}
		}
		msg := e.Message
		if strings.Contains(t.Original, ":") || t.Kind == Task {
			// A URI or an upstream's task id is specific enough to replace wherever it is
			// quoted; a bare tool name (echo) may be part of other words.
			msg = strings.ReplaceAll(msg, t.Original, t.Exposed)
		}
		e = &protocol.Error{Code: e.Code, Message: msg, Data: data}
	}
	return nil, e, Outcome{Result: audit.OutcomeError, Code: e.Code, Reason: "upstream_error"}
}

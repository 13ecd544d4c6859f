package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"github.com/manifold-mcp/manifold/internal/audit"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/pipeline"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/tracing"
)

// writeAudit hands the audit trail one record for a completed request (never waiting: the
// trail drops what it cannot queue, and says so), and at log level debug logs one line for it.
// Nothing when the trail is off and the level above debug.
func (g *requestPipeline) writeAudit(ctx context.Context, req *pipeline.Request, t *pipeline.Target, outcome pipeline.Outcome) {
	g.observeRequest(ctx, req, outcome)
	debug := g.logger.Enabled(ctx, slog.LevelDebug)
	if !g.audit.on() && !debug {
		return
	}
	now := g.opts.Now()
	rec := audit.Record{
		Time:      now,
		RequestID: req.LogID,
		Principal: req.Client.Principal.String(),
		Method:    req.Method,
		Latency:   now.Sub(req.Received),
		Outcome:   outcome.Result,
		Code:      outcome.Code,
		Reason:    outcome.Reason,
	}
	if req.Client.SessionID != "" {
		rec.Session = fingerprint(req.Client.SessionID)
	} else if slices.Contains(protocol.ModernVersions, req.Client.ProtocolVersion) {
		rec.Era = req.Client.ProtocolVersion
	}
	if t != nil {
		rec.Upstream, rec.Target = t.Upstream, t.Original
		switch {
		case t.Hidden:
			// A hidden item is named as the client asked for it: the record must not tell
			// its reader where it lives or what the upstream calls it.
			rec.Upstream, rec.Target = "", t.Exposed
		case rec.Target == "":
			rec.Target = t.Exposed
		}
	}
	if g.tracer != nil {
		rec.TraceID = tracing.TraceID(ctx)
	}
	rec.Decisions = req.Decisions
	rec.Inputs = req.Inputs.Rounds()
	if ctx.Err() != nil {
		// The client cancelled the request, or its session ended: nobody got an answer.
		rec.Outcome, rec.Code = audit.OutcomeCancelled, 0
	}
	if debug {
		g.logger.Debug("request", "request_id", rec.RequestID, "method", rec.Method, "session", rec.Session,
			"upstream", rec.Upstream, "target", rec.Target, "duration", rec.Latency.String(), "outcome", rec.Outcome, "code", rec.Code, "reason", rec.Reason, "trace_id", rec.TraceID)
	}
	var args json.RawMessage
	if t != nil {
		args = t.Arguments // kept, redacted, if the trail in force says so
	}
	g.audit.recordWith(rec, args)
}

// redaction is how the config's audit settings redact arguments: for the audit trail and the
// approval webhook's payload (the admin API and page show them whole, to the operator who
// decides).
func redaction(a *config.Audit) audit.Redaction {
	return audit.Redaction{Names: a.Redact, SkipDefaults: a.SkipRedactDefaults}
}

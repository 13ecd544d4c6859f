package gateway

import (
	"context"

	"github.com/manifold-mcp/manifold/audit"
	"github.com/manifold-mcp/manifold/pipeline"
)

// writeAudit hands the audit trail one record for a completed request (never waiting: the
// trail drops what it cannot queue, and says so). Nothing when the trail is off.
func (g *Gateway) writeAudit(ctx context.Context, req *pipeline.Request, t *pipeline.Target, outcome pipeline.Outcome) {
	if g.opts.Audit == nil {
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
	}
	if t != nil {
		rec.Upstream, rec.Target = t.Upstream, t.Original
		if rec.Target == "" {
			rec.Target = t.Exposed
		}
	}
	if ctx.Err() != nil {
		// The client cancelled the request, or its session ended: nobody got an answer.
		rec.Outcome, rec.Code = audit.OutcomeCancelled, 0
	}
	g.opts.Audit.Record(rec)
}

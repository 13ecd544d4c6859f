package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler wraps h so that a record logged with a context that carries a span (the
// *Context methods of slog.Logger) gets the span's trace_id and span_id, in text and JSON
// alike; a record without one passes unchanged.
func LogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*logHandler); ok {
		return h
	}
	return &logHandler{h}
}

// logHandler is LogHandler's handler.
type logHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h.Handler.WithGroup(name)}
}

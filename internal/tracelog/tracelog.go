// Package tracelog is a log/slog handler that adds the trace and span IDs
// of the context's span to every record logged with a context, so that a
// log line about a request leads to its trace in Jaeger.
package tracelog

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Handler wraps a slog.Handler. Records logged with a context that carries
// a valid span get "trace_id" and "span_id" attributes.
type Handler struct{ next slog.Handler }

var _ slog.Handler = Handler{}

// New returns next wrapped.
func New(next slog.Handler) Handler { return Handler{next: next} }

// Enabled reports whether next handles level.
func (h Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle adds the IDs and passes r on.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs wraps next's.
func (h Handler) WithAttrs(attrs []slog.Attr) slog.Handler { return Handler{h.next.WithAttrs(attrs)} }

// WithGroup wraps next's.
func (h Handler) WithGroup(name string) slog.Handler { return Handler{h.next.WithGroup(name)} }

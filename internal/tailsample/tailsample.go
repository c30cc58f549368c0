// Package tailsample is a span processor that decides at the end of a
// request whether its trace is exported: every trace whose root says the
// request was rejected (or failed) is kept, admitted ones at a ratio.
//
// A head sampler cannot do this: when the root span starts, nobody knows
// whether the pipeline will admit the request. So the tracer provider
// records every span (sdktrace.AlwaysSample) and this processor, placed in
// front of the exporting processor, holds a trace's spans until its root
// ends:
//
//   - A child span ends before its root. If the trace ID falls inside the
//     admitted ratio the trace is kept whatever the outcome, so the child
//     goes straight on. Otherwise it is buffered under its trace ID.
//   - When the root ends, its attributes decide: Keep(root) true, or the
//     trace ID inside the ratio, sends the buffered spans and the root on;
//     anything else drops them.
//
// The ratio test uses the trace ID's low 63 bits, like
// sdktrace.TraceIDRatioBased, so every instance of a fleet agrees and a
// trace that crosses instances is kept or dropped as a whole.
//
// Buffers are bounded: at most MaxTraces traces wait for their root (beyond
// it, children go on unbuffered: evidence is kept, at the cost of sampling),
// and a trace whose root has not ended within MaxAge is dropped when the
// next root ends (a late child, after its root, is treated the same way).
package tailsample

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is the processor's policy. The zero value keeps only traces that
// Keep selects (and, with a nil Keep, those whose root has status Error).
type Config struct {
	// Ratio is the fraction of the other traces kept, 0 to 1.
	Ratio float64
	// Keep says whether a root span must be exported whatever the ratio.
	// Nil means: the root's status is Error.
	Keep func(root sdktrace.ReadOnlySpan) bool
	// MaxTraces bounds the traces waiting for their root. Zero means 10000.
	MaxTraces int
	// MaxAge is how long a trace may wait for its root. Zero means 1 minute.
	MaxAge time.Duration
	// Now is the clock for MaxAge. Nil means time.Now.
	Now func() time.Time
}

// KeepAttr returns a Keep function that keeps a root whose status is Error,
// or whose string attribute key is present and not equal to normal
// (fairgate: "admission.decision" not "admit").
func KeepAttr(key attribute.Key, normal string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool {
		if s.Status().Code == codes.Error {
			return true
		}
		for _, kv := range s.Attributes() {
			if kv.Key == key {
				return kv.Value.AsString() != normal
			}
		}
		return false
	}
}

// Processor is the tail-sampling sdktrace.SpanProcessor. It is safe for
// concurrent use.
type Processor struct {
	next      sdktrace.SpanProcessor
	bound     uint64 // trace IDs whose low 63 bits are below it are in the ratio
	keep      func(sdktrace.ReadOnlySpan) bool
	maxTraces int
	maxAge    time.Duration
	now       func() time.Time

	mu        sync.Mutex
	pending   map[trace.TraceID]*pendingTrace
	nextSweep time.Time
	dropped   uint64 // spans dropped by the ratio or by age
}

type pendingTrace struct {
	since time.Time
	spans []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanProcessor = (*Processor)(nil)

// New returns a Processor that passes the spans it keeps to next (usually
// a batch span processor in front of an OTLP exporter).
func New(next sdktrace.SpanProcessor, cfg Config) *Processor {
	p := &Processor{next: next, keep: cfg.Keep, maxTraces: cfg.MaxTraces, maxAge: cfg.MaxAge, now: cfg.Now,
		pending: map[trace.TraceID]*pendingTrace{}}
	switch {
	case cfg.Ratio >= 1:
		p.bound = 1 << 63
	case cfg.Ratio > 0:
		p.bound = uint64(cfg.Ratio * (1 << 63))
	}
	if p.keep == nil {
		p.keep = func(s sdktrace.ReadOnlySpan) bool { return s.Status().Code == codes.Error }
	}
	if p.maxTraces <= 0 {
		p.maxTraces = 10000
	}
	if p.maxAge <= 0 {
		p.maxAge = time.Minute
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p
}

// inRatio reports whether id falls in the kept fraction of admitted traces.
func (p *Processor) inRatio(id trace.TraceID) bool {
	return binary.BigEndian.Uint64(id[8:16])>>1 < p.bound
}

// isRoot reports whether s is the first span of its trace in this process.
func isRoot(s sdktrace.ReadOnlySpan) bool {
	parent := s.Parent()
	return !parent.IsValid() || parent.IsRemote()
}

// OnStart passes s on.
func (p *Processor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { p.next.OnStart(ctx, s) }

// OnEnd buffers, forwards or drops s as the package doc describes.
func (p *Processor) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().TraceID()
	if !isRoot(s) {
		if p.inRatio(id) || !p.buffer(id, s) {
			p.next.OnEnd(s)
		}
		return
	}
	p.mu.Lock()
	pt := p.pending[id]
	delete(p.pending, id)
	p.sweepLocked()
	keep := p.inRatio(id) || p.keep(s)
	if !keep && pt != nil {
		p.dropped += uint64(len(pt.spans)) + 1
	} else if !keep {
		p.dropped++
	}
	p.mu.Unlock()
	if !keep {
		return
	}
	if pt != nil {
		for _, c := range pt.spans {
			p.next.OnEnd(c)
		}
	}
	p.next.OnEnd(s)
}

// buffer holds s until its root ends. It returns false when the buffer is
// full and s must go on now.
func (p *Processor) buffer(id trace.TraceID, s sdktrace.ReadOnlySpan) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	pt := p.pending[id]
	if pt == nil {
		if len(p.pending) >= p.maxTraces {
			return false
		}
		pt = &pendingTrace{since: p.now()}
		p.pending[id] = pt
	}
	pt.spans = append(pt.spans, s)
	return true
}

// sweepLocked drops traces that waited longer than MaxAge for their root.
// It runs when a root ends, and scans only when the oldest entries could be
// due (at most once per MaxAge/4). p.mu must be held.
func (p *Processor) sweepLocked() {
	if len(p.pending) == 0 {
		return
	}
	now := p.now()
	if now.Before(p.nextSweep) {
		return
	}
	p.nextSweep = now.Add(p.maxAge / 4)
	for id, pt := range p.pending {
		if now.Sub(pt.since) > p.maxAge {
			p.dropped += uint64(len(pt.spans))
			delete(p.pending, id)
		}
	}
}

// Pending returns how many traces wait for their root (for tests and
// metrics).
func (p *Processor) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// Dropped returns how many spans were not exported: admitted traces outside
// the ratio, and traces whose root never ended.
func (p *Processor) Dropped() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Shutdown drops what still waits for a root and shuts next down.
func (p *Processor) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.pending = map[trace.TraceID]*pendingTrace{}
	p.mu.Unlock()
	return p.next.Shutdown(ctx)
}

// ForceFlush flushes next. Traces still waiting for their root stay
// buffered: their outcome is not known yet.
func (p *Processor) ForceFlush(ctx context.Context) error { return p.next.ForceFlush(ctx) }

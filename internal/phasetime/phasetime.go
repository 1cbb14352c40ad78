// Package phasetime times the steps of one operation (a pod's or a container's creation)
// for a single debug log line, so that a slow start can be taken apart without a
// profiler: which step grew is the first question when starts slow down as pods pile up.
// Where the call is traced ([tracing], a sampled call), each step is also a span, child of
// the call's, so the same steps show in the trace kubelet started.
package phasetime

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/trace"
)

// Timer collects the duration of each step since the previous mark. A Timer made while
// debug logging is off and the call is not traced does nothing: the clock is not read on
// the hot path for a line nobody will see.
type Timer struct {
	on          bool // the debug line
	begin, last time.Time
	fields      logrus.Fields
	// op names the operation in the steps' spans; tracer is nil unless ctx's span records.
	ctx    context.Context
	op     string
	tracer trace.Tracer
}

// Start begins timing op (a CRI call's name, "RunPodSandbox"), whose call ctx carries.
func Start(ctx context.Context, op string) *Timer {
	var tracer trace.Tracer
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		tracer = span.TracerProvider().Tracer("github.com/rtshimd/rtshimd")
	}
	on := logrus.IsLevelEnabled(logrus.DebugLevel)
	if !on && tracer == nil {
		return &Timer{}
	}
	now := time.Now()
	return &Timer{on: on, begin: now, last: now, fields: logrus.Fields{}, ctx: ctx, op: op, tracer: tracer}
}

// Mark ends the step called name: it took the time since the previous mark. A name
// marked twice adds up (and is two spans).
func (t *Timer) Mark(name string) {
	if !t.on && t.tracer == nil {
		return
	}
	now := time.Now()
	if t.tracer != nil {
		_, span := t.tracer.Start(t.ctx, t.op+" "+name, trace.WithTimestamp(t.last))
		span.End(trace.WithTimestamp(now))
	}
	if t.on {
		d, _ := t.fields[name].(time.Duration)
		t.fields[name] = d + now.Sub(t.last)
	}
	t.last = now
}

// Log writes the steps, and the total since Start, at debug level with fields.
func (t *Timer) Log(fields logrus.Fields, msg string) {
	if !t.on {
		return
	}
	all := logrus.Fields{"total": time.Since(t.begin)}
	for k, v := range fields {
		all[k] = v
	}
	for k, v := range t.fields {
		all[k] = v
	}
	logrus.WithFields(all).Debug(msg)
}

package phasetime

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestTimerLogsStepsAtDebug(t *testing.T) {
	log, hook := test.NewNullLogger()
	old, oldOut := logrus.GetLevel(), logrus.StandardLogger().Out
	logrus.SetLevel(logrus.DebugLevel)
	logrus.SetOutput(log.Out)
	logrus.AddHook(hook)
	t.Cleanup(func() {
		logrus.SetLevel(old)
		logrus.SetOutput(oldOut)
		logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	})

	tm := Start(context.Background(), "op")
	time.Sleep(2 * time.Millisecond)
	tm.Mark("a")
	tm.Mark("b")
	tm.Mark("a")
	tm.Log(logrus.Fields{"id": "x"}, "timing")
	e := hook.LastEntry()
	if e == nil || e.Message != "timing" || e.Data["id"] != "x" {
		t.Fatalf("entry %+v", e)
	}
	if a := e.Data["a"].(time.Duration); a < 2*time.Millisecond {
		t.Errorf("a = %v, want >= 2ms", a)
	}
	if _, ok := e.Data["b"].(time.Duration); !ok {
		t.Errorf("no b in %v", e.Data)
	}
	if e.Data["total"].(time.Duration) < e.Data["a"].(time.Duration) {
		t.Errorf("total %v < a %v", e.Data["total"], e.Data["a"])
	}
}

func TestTimerOffBelowDebug(t *testing.T) {
	old := logrus.GetLevel()
	logrus.SetLevel(logrus.InfoLevel)
	t.Cleanup(func() { logrus.SetLevel(old) })
	tm := Start(context.Background(), "op")
	tm.Mark("a")
	if tm.on || tm.fields != nil {
		t.Fatalf("timer on at info level: %+v", tm)
	}
}

// In a traced call each step is a span, child of the call's, named after the operation
// and the step, covering the step's time; at info level and untraced nothing is made.
func TestTimerSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	ctx, call := tp.Tracer("test").Start(context.Background(), "call")
	tm := Start(ctx, "RunPodSandbox")
	time.Sleep(2 * time.Millisecond)
	tm.Mark("network")
	tm.Mark("persist")
	call.End()
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want the call's and 2 steps", len(spans))
	}
	for i, name := range []string{"RunPodSandbox network", "RunPodSandbox persist"} {
		s := spans[i]
		if s.Name != name || s.Parent.SpanID() != call.SpanContext().SpanID() {
			t.Errorf("span %d: %q, parent %v; want %q, child of the call", i, s.Name, s.Parent.SpanID(), name)
		}
	}
	if d := spans[0].EndTime.Sub(spans[0].StartTime); d < 2*time.Millisecond {
		t.Errorf("the network step's span lasts %v, want the 2 ms it took", d)
	}
	if tm := Start(context.Background(), "op"); tm.tracer != nil || tm.on {
		t.Error("an untraced call at info level times anything")
	}
}

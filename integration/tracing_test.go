//go:build integration

package integration

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/rtshimd/rtshimd/internal/config"
)

// otlpSink is an OTLP/gRPC trace collector: it keeps every span it is sent, with its
// resource's service.name.
type otlpSink struct {
	coltrace.UnimplementedTraceServiceServer
	mu       sync.Mutex
	spans    []*tracev1.Span
	services []string
}

func (s *otlpSink) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				s.services = append(s.services, a.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			s.spans = append(s.spans, ss.Spans...)
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// With [tracing] on, every CRI call kubelet's client makes in a sampled trace becomes a
// server span of the daemon's, child of the client's span, sent to the collector over
// OTLP/gRPC (the last ones when the daemon stops); a call the client did not sample, or
// one with no trace at sampling_rate_per_million 0, sends nothing.
func TestTracing(t *testing.T) {
	sink := &otlpSink{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(g, sink)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	d := newDaemon(t, withConfig(func(_ *Daemon, c *config.Config) {
		c.Tracing = config.Tracing{Enabled: true, Endpoint: ln.Addr().String()}
	}))
	ctx := ctxT(t)

	// kubelet's client, with a tracer provider as kubelet's tracing gives it.
	client := func(sampler trace.Sampler) (*tracetest.InMemoryExporter, *trace.TracerProvider, internalapi.RuntimeService) {
		exp := tracetest.NewInMemoryExporter()
		tp := trace.NewTracerProvider(trace.WithSyncer(exp), trace.WithSampler(sampler))
		rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + d.Socket).WithConnectionTimeout(time.Minute).WithTracerProvider(tp).Build(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return exp, tp, rs
	}
	exp, tp, rs := client(trace.AlwaysSample())
	sctx, parent := tp.Tracer("kubelet").Start(ctx, "SyncPod")
	if _, err := rs.Version(sctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.PodSandboxStatus(sctx, "no-such-pod", false); err == nil {
		t.Fatal("PodSandboxStatus of an unknown pod answered")
	}
	// A pod's start: its steps are spans too, children of the call's.
	podID, err := rs.RunPodSandbox(sctx, podConfig("traced", runtimeapi.NamespaceMode_CONTAINER), "runc")
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StopPodSandbox(sctx, podID); err != nil {
		t.Fatal(err)
	}
	if err := rs.RemovePodSandbox(sctx, podID); err != nil {
		t.Fatal(err)
	}
	parent.End()
	traceID := parent.SpanContext().TraceID()
	clientSpans := map[string]oteltrace.SpanID{} // the client's span of each call, by name
	for _, s := range exp.GetSpans() {
		if s.SpanKind == oteltrace.SpanKindClient {
			clientSpans[s.Name] = s.SpanContext.SpanID()
		}
	}

	_, tpOff, rsOff := client(trace.NeverSample())
	octx, off := tpOff.Tracer("kubelet").Start(ctx, "SyncPod")
	if _, err := rsOff.ListPodSandbox(octx, nil); err != nil {
		t.Fatal(err)
	}
	off.End()
	if _, err := d.RS.ListContainers(ctx, &runtimeapi.ContainerFilter{}); err != nil { // no trace at all
		t.Fatal(err)
	}
	d.Stop() // sends what it holds

	sink.mu.Lock()
	defer sink.mu.Unlock()
	got := map[string]*tracev1.Span{}
	for _, s := range sink.spans {
		got[s.Name] = s
	}
	for _, name := range []string{"runtime.v1.RuntimeService/Version", "runtime.v1.RuntimeService/PodSandboxStatus"} {
		s, ok := got[name]
		if !ok {
			t.Errorf("no span %s among %d sent", name, len(sink.spans))
			continue
		}
		want := clientSpans[name]
		if !bytes.Equal(s.TraceId, traceID[:]) || !bytes.Equal(s.ParentSpanId, want[:]) || s.Kind != tracev1.Span_SPAN_KIND_SERVER {
			t.Errorf("span %s: trace %x parent %x kind %v, want trace %x, parent %x (the client's span), server", name, s.TraceId, s.ParentSpanId, s.Kind, traceID[:], want[:])
		}
	}
	if run := got["runtime.v1.RuntimeService/RunPodSandbox"]; run == nil {
		t.Error("no span of RunPodSandbox")
	} else {
		var steps []string
		for _, s := range sink.spans {
			if bytes.Equal(s.ParentSpanId, run.SpanId) && strings.HasPrefix(s.Name, "RunPodSandbox ") {
				steps = append(steps, strings.TrimPrefix(s.Name, "RunPodSandbox "))
			}
		}
		for _, step := range []string{"namespaces", "persist", "publish"} {
			if !slices.Contains(steps, step) {
				t.Errorf("no span of RunPodSandbox's step %s under its call's span; steps: %v", step, steps)
			}
		}
	}
	if s := got["runtime.v1.RuntimeService/PodSandboxStatus"]; s != nil && !hasStatusCode(s, 5, "NOT_FOUND") {
		t.Errorf("the failed call's span does not carry its gRPC code NotFound: %v", s.Attributes)
	}
	for _, name := range []string{"runtime.v1.RuntimeService/ListPodSandbox", "runtime.v1.RuntimeService/ListContainers"} {
		if _, ok := got[name]; ok {
			t.Errorf("span %s sent for a call its client did not sample", name)
		}
	}
	for _, svc := range sink.services {
		if svc != "rtshimd" {
			t.Errorf("service.name %q, want rtshimd", svc)
		}
	}
}

// hasStatusCode says whether span carries the gRPC status code, as a number or by name
// (key and form differ between semantic-convention versions: rpc.grpc.status_code = 5,
// rpc.response.status_code = "NOT_FOUND").
func hasStatusCode(span *tracev1.Span, code int64, name string) bool {
	for _, a := range span.Attributes {
		if !strings.Contains(a.Key, "status_code") {
			continue
		}
		switch v := a.GetValue().GetValue().(type) {
		case *commonv1.AnyValue_IntValue:
			if v.IntValue == code {
				return true
			}
		case *commonv1.AnyValue_StringValue:
			if v.StringValue == name {
				return true
			}
		}
	}
	return false
}

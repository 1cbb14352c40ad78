// Package tracing sends OpenTelemetry spans of the CRI calls to an OTLP/gRPC collector,
// continuing the trace kubelet's calls carry (W3C trace context in the gRPC metadata), as
// containerd and CRI-O do. Off by default; off means no provider and nothing on the calls.
package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Tracer is the daemon's span pipeline.
type Tracer struct {
	tp *sdktrace.TracerProvider
}

// New starts the exporter for cfg; nil when tracing is off. The exporter connects
// lazily: a collector that is down loses spans, never a CRI call.
func New(ctx context.Context, cfg config.Tracing, version string) (*Tracer, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("tracing.endpoint %s: %w", cfg.Endpoint, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "rtshimd"), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		// The caller's decision first; calls without one (crictl) at the configured rate.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(cfg.SamplingRatePerMillion)/1e6))),
	)
	return &Tracer{tp: tp}, nil
}

// ServerOption makes a gRPC server record a span per call, child of the caller's.
func (t *Tracer) ServerOption() grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
	))
}

// Shutdown sends what is buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

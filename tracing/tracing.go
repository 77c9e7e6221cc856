// Package tracing owns the daemon's OpenTelemetry tracing: from the configuration
// (tracing_endpoint, tracing_sampling_rate_per_million) and the standard OTEL_*
// environment it decides whether tracing is on, and when it is, makes the tracer provider
// (an OTLP/gRPC exporter behind a batch span processor, a sampler that follows the
// caller's decision), the CRI server's otelgrpc stats handler that takes the kubelet's
// W3C trace context from the request's metadata, and the tracer the journal makes its
// step spans with; it flushes them at the stop.
//
// When tracing is off, Start returns a nil *Tracing and nothing is made: no provider, no
// exporter, no goroutine; every method of a nil *Tracing is a no-op.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/crijournal/crijournal/config"
)

// ServiceName is the service.name of the daemon's spans unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) names another.
const ServiceName = "crijournal"

// ShutdownTimeout bounds the flush of the spans not yet exported at the stop: a
// collector that does not answer must not hold the daemon's stop up.
const ShutdownTimeout = 5 * time.Second

// Settings are the configuration's part of tracing.
type Settings struct {
	// Endpoint is the OTLP/gRPC collector: host:port (plain gRPC, as CRI-O's
	// tracing_endpoint), http://host:port (plain) or https://host:port (TLS). Empty:
	// the environment's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT,
	// and with neither, tracing is off.
	Endpoint string
	// SamplingRatePerMillion is how many of a million traces that start here (no
	// caller's trace context: crictl, recovery, background undos) are sampled; a
	// caller's trace context is followed whatever it is. OTEL_TRACES_SAMPLER overrides it.
	SamplingRatePerMillion int
	// Version is the daemon's version, the spans' service.version.
	Version string
}

// Tracing is tracing switched on: the provider and what it gives the CRI server and the
// journal. A nil *Tracing is tracing off.
type Tracing struct {
	provider *sdktrace.TracerProvider
	// describe says where spans go and how they are sampled, for the start's log line.
	describe []any
}

// Start decides from s and the environment (getenv, os.Getenv in the daemon) whether
// tracing is on and, when it is, sets it up. Off, it returns nil and no error, having
// made nothing. An OTEL_* variable crijournal cannot honour is an error naming it.
//
// The environment, as the OpenTelemetry specification has it:
//   - OTEL_SDK_DISABLED=true, or OTEL_TRACES_EXPORTER=none: off, whatever else is set.
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT: the collector when
//     s.Endpoint is empty (their presence turns tracing on); OTEL_EXPORTER_OTLP_HEADERS,
//     _TIMEOUT, _COMPRESSION, _CERTIFICATE, _INSECURE and their _TRACES_ forms, read by
//     the exporter. OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL must be grpc if set.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG: the sampler, over s's rate.
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: the spans' resource.
//   - OTEL_BSP_*: the batch span processor's delays and sizes, read by the SDK.
func Start(ctx context.Context, s Settings, getenv func(string) string, log *slog.Logger) (*Tracing, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: crijournal exports traces over OTLP only (otlp, or none for off)", exp)
	}
	endpoint := s.Endpoint
	source := "tracing_endpoint"
	if endpoint == "" {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			if e := getenv(v); e != "" {
				endpoint, source = e, v
				break
			}
		}
	}
	if endpoint == "" {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" && p != "grpc" {
			return nil, fmt.Errorf("%s=%q: crijournal exports traces over OTLP/gRPC only (grpc)", v, p)
		}
	}
	sampler, samplerText, err := samplerFrom(s.SamplingRatePerMillion, getenv)
	if err != nil {
		return nil, err
	}

	var opts []otlptracegrpc.Option
	if s.Endpoint != "" {
		// The configuration's endpoint; otherwise the exporter reads the environment's.
		if err := config.ValidateTracingEndpoint(s.Endpoint); err != nil {
			return nil, fmt.Errorf("tracing_endpoint %q: %w", s.Endpoint, err)
		}
		if strings.Contains(s.Endpoint, "://") {
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.Endpoint))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(s.Endpoint), otlptracegrpc.WithInsecure())
		}
	}
	// New dials lazily: a collector that is not up yet costs the spans exported before
	// it is, not the daemon's start.
	exporter, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s (%s): %w", endpoint, source, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName), attribute.String("service.version", s.Version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after ours, so they win
	)
	if err != nil {
		_ = exporter.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	}
	// The SDK reports an export that failed through otel's global error handler, by
	// default to the standard logger: to the daemon's log instead.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", "endpoint", endpoint, "err", err)
	}))
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exporter),
		sdktrace.WithSampler(sampler),
		sdktrace.WithResource(res),
	)
	return &Tracing{provider: provider, describe: []any{"endpoint", endpoint, "from", source, "sampler", samplerText}}, nil
}

// samplerFrom returns the sampler OTEL_TRACES_SAMPLER (and _ARG) names when it is set,
// else the parent-based one of a rate per million: a caller's sampled flag decides, and
// a trace that starts here is sampled at the rate.
func samplerFrom(rate int, getenv func(string) string) (sdktrace.Sampler, string, error) {
	name := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))
	if name == "" {
		if rate < 0 || rate > config.MaxTracingSamplingRatePerMillion {
			return nil, "", fmt.Errorf("tracing_sampling_rate_per_million: must be between 0 and %d, got %d", config.MaxTracingSamplingRatePerMillion, rate)
		}
		text := fmt.Sprintf("parentbased_traceidratio (tracing_sampling_rate_per_million %d)", rate)
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(float64(rate) / config.MaxTracingSamplingRatePerMillion)), text, nil
	}
	ratio := 1.0
	if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" && strings.HasSuffix(name, "traceidratio") {
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio between 0 and 1", arg)
		}
		ratio = f
	}
	text := name + " (OTEL_TRACES_SAMPLER)"
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample(), text, nil
	case "always_off":
		return sdktrace.NeverSample(), text, nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), text, nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), text, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), text, nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), text, nil
	}
	return nil, "", fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// LogAttrs says where spans go and how they are sampled (nil when off).
func (t *Tracing) LogAttrs() []any {
	if t == nil {
		return nil
	}
	return t.describe
}

// Tracer returns the tracer of the journal's step spans; nil when tracing is off.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer("github.com/crijournal/crijournal/journal")
}

// ServerOptions returns the CRI gRPC server's options for tracing: otelgrpc's stats
// handler, which makes a server span of every call, a child of the W3C traceparent (and
// baggage) in the call's metadata when it carries one. None when tracing is off.
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.provider),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()), // metrics are Prometheus's (package metrics)
	))}
}

// Shutdown exports the spans still queued and stops the exporter, within
// ShutdownTimeout. A nil *Tracing has nothing to do.
func (t *Tracing) Shutdown() error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing the spans at the stop (within %s): %w", ShutdownTimeout, err)
	}
	return nil
}

package tracing

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestStartOff checks that tracing stays off, having made nothing, unless a collector
// is named, and that the environment can turn it off.
func TestStartOff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		endpoint string
		env      map[string]string
	}{
		{"nothing configured", "", nil},
		{"only a sampler", "", map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_SERVICE_NAME": "x"}},
		{"SDK disabled", "127.0.0.1:4317", map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{"exporter none", "", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Start(context.Background(), Settings{Endpoint: tc.endpoint}, envOf(tc.env), slog.New(slog.DiscardHandler))
			if err != nil || tr != nil {
				t.Fatalf("Start = %v, %v; want nil, nil (off)", tr, err)
			}
			if tr.Tracer() != nil || tr.ServerOptions() != nil || tr.Shutdown() != nil {
				t.Error("a nil *Tracing gave a tracer, server options or a shutdown error")
			}
		})
	}
}

// TestStartRefuses checks that what crijournal cannot honour stops the start, naming
// the variable.
func TestStartRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"HTTP protocol", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"HTTP traces protocol", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"zipkin exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{"unknown sampler", map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, `OTEL_TRACES_SAMPLER="jaeger_remote"`},
		{"ratio above one", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Start(context.Background(), Settings{Endpoint: "127.0.0.1:4317"}, envOf(tc.env), slog.New(slog.DiscardHandler))
			if err == nil {
				tr.Shutdown()
				t.Fatal("Start succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// TestSampler checks the sampler's decisions: a caller's sampled flag decides, and a
// trace that starts here follows the rate, unless OTEL_TRACES_SAMPLER names another.
func TestSampler(t *testing.T) {
	sampledParent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampledParent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, Remote: true})
	for _, tc := range []struct {
		name                      string
		rate                      int
		env                       map[string]string
		root, sampled, notSampled bool // decisions for a root, a sampled and an unsampled caller
	}{
		{"rate 0", 0, nil, false, true, false},
		{"rate a million", 1_000_000, nil, true, true, false},
		{"environment's parent-based always off", 1_000_000, map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_always_off"}, false, true, false},
		{"environment's ratio one, parent-based", 0, map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}, true, true, false},
		{"environment's always on ignores the caller", 0, map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := samplerFrom(tc.rate, envOf(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			decide := func(parent trace.SpanContext) bool {
				ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
				r := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: trace.TraceID{0xff, 0xff}, Name: "x"})
				return r.Decision == sdktrace.RecordAndSample
			}
			if got := decide(trace.SpanContext{}); got != tc.root {
				t.Errorf("root sampled %v, want %v", got, tc.root)
			}
			if got := decide(sampledParent); got != tc.sampled {
				t.Errorf("sampled caller's trace sampled %v, want %v", got, tc.sampled)
			}
			if got := decide(unsampledParent); got != tc.notSampled {
				t.Errorf("unsampled caller's trace sampled %v, want %v", got, tc.notSampled)
			}
		})
	}
}

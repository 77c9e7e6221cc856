package test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/crijournal/crijournal/internal/testenv"
)

// otlpReceiver is an in-process OpenTelemetry collector for the tests: a gRPC server on
// loopback implementing OTLP's TraceService, which keeps every span exported to it.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string // host:port, for tracing_endpoint

	mu       sync.Mutex
	spans    []receivedSpan
	services map[string]bool // the service.name of every resource that exported
}

// receivedSpan is one exported span, its IDs in hex.
type receivedSpan struct {
	Name                    string
	TraceID, SpanID, Parent string
	Kind                    tracepb.Span_SpanKind
	Status                  tracepb.Status_StatusCode
	Attrs                   map[string]string
}

// startOTLPReceiver serves OTLP/gRPC on 127.0.0.1 until the test ends.
func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String(), services: map[string]bool{}}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, r)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		g.Stop()
		<-served
	})
	return r
}

// Export keeps the spans of one export.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				r.services[a.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, a := range s.GetAttributes() {
					attrs[a.GetKey()] = a.GetValue().GetStringValue()
				}
				r.spans = append(r.spans, receivedSpan{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Parent: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(), Status: s.GetStatus().GetCode(), Attrs: attrs,
				})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// received returns the spans received so far.
func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// waitFor waits (up to limit) until ok holds of the spans received, and returns them.
func (r *otlpReceiver) waitFor(t *testing.T, limit time.Duration, what string, ok func([]receivedSpan) bool) []receivedSpan {
	t.Helper()
	deadline := time.Now().Add(testenv.Scaled(limit))
	for {
		spans := r.received()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s; spans received:\n%s", what, testenv.Scaled(limit), describeSpans(spans))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverSpan returns the one server span of method (such as
// "runtime.v1.RuntimeService/RunPodSandbox") among spans, failing the test unless there
// is exactly one.
func serverSpan(t *testing.T, spans []receivedSpan, method string) receivedSpan {
	t.Helper()
	var found []receivedSpan
	for _, s := range spans {
		if s.Name == method && s.Kind == tracepb.Span_SPAN_KIND_SERVER {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d server spans %q, want 1; spans:\n%s", len(found), method, describeSpans(spans))
	}
	return found[0]
}

// childrenOf returns the spans whose parent is span parent, in the order received.
func childrenOf(spans []receivedSpan, parent receivedSpan) []receivedSpan {
	var out []receivedSpan
	for _, s := range spans {
		if s.Parent == parent.SpanID && s.TraceID == parent.TraceID {
			out = append(out, s)
		}
	}
	return out
}

func spanNames(spans []receivedSpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func describeSpans(spans []receivedSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace %s span %s parent %s kind %s status %s\n", s.Name, s.TraceID, s.SpanID, s.Parent, s.Kind, s.Status)
	}
	return b.String()
}

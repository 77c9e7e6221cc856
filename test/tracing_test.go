package test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

const (
	methodRunPodSandbox    = "runtime.v1.RuntimeService/RunPodSandbox"
	methodStopPodSandbox   = "runtime.v1.RuntimeService/StopPodSandbox"
	methodRemovePodSandbox = "runtime.v1.RuntimeService/RemovePodSandbox"
)

// TestTracingRunPodSandbox runs a pod with crictl against a daemon whose tracing_endpoint
// is an in-process OTLP receiver, every trace sampled, and checks what it exported, all
// of it at the stop (the batch delay is ten minutes): RunPodSandbox's server span with a
// child span per journaled step of the pod's record, named after the step's kind, in
// the same trace; StopPodSandbox's with the undo of the network; RemovePodSandbox's with
// the removal's run and its undos below it; OTEL_SERVICE_NAME as the service.
func TestTracingRunPodSandbox(t *testing.T) {
	otlp := startOTLPReceiver(t)
	d := startDaemon(t, daemonOptions{
		extraTOML: []string{
			"tracing_endpoint = " + strconv.Quote(otlp.addr),
			"tracing_sampling_rate_per_million = 1000000",
		},
		// Nothing is exported before the stop: what the receiver has then, the stop
		// flushed.
		env: []string{"OTEL_BSP_SCHEDULE_DELAY=600000", "OTEL_SERVICE_NAME=crijournal-e2e"},
	})
	id := d.mustRunp(t, podConfig(t, "traced", "e2e", randomHex(t, 16), 0, false))
	var rec journal.Record
	for _, r := range d.liveRecords(t) {
		if r.ID == id {
			rec = r
		}
	}
	if rec.ID == "" {
		t.Fatalf("no journal record of sandbox %s", id)
	}
	var kinds []string
	for _, s := range rec.Steps {
		kinds = append(kinds, string(s.Kind))
	}
	d.removePod(t, id)
	if spans := otlp.received(); len(spans) != 0 {
		t.Errorf("%d spans exported before the stop, with a batch delay of ten minutes:\n%s", len(spans), describeSpans(spans))
	}
	d.stop(t)
	spans := otlp.received()
	t.Logf("spans exported:\n%s", describeSpans(spans))

	run := serverSpan(t, spans, methodRunPodSandbox)
	if run.Parent != "" {
		t.Errorf("RunPodSandbox's span has parent %s; crictl sent no trace context, so it is a root", run.Parent)
	}
	steps := childrenOf(spans, run)
	got := spanNames(steps)
	slices.Sort(got) // the steps of a group end in any order
	want := slices.Sorted(slices.Values(kinds))
	if !slices.Equal(got, want) {
		t.Errorf("RunPodSandbox's child spans %v, want one per step of the record: %v\n%s", got, want, describeSpans(spans))
	}
	for _, s := range steps {
		if s.Status == tracepb.Status_STATUS_CODE_ERROR || s.Attrs["crijournal.record.id"] != id || s.Attrs["crijournal.step.kind"] != s.Name {
			t.Errorf("step span %s: status %s, attributes %v; want no error, the record's ID %s and its kind", s.Name, s.Status, s.Attrs, id)
		}
	}
	for _, s := range spans {
		if s.Attrs["crijournal.record.id"] == id && slices.Contains(kinds, s.Name) && (s.TraceID != run.TraceID || s.Parent != run.SpanID) {
			t.Errorf("step span %s is in trace %s under %s, not under RunPodSandbox's span %s of trace %s", s.Name, s.TraceID, s.Parent, run.SpanID, run.TraceID)
		}
	}

	stop := serverSpan(t, spans, methodStopPodSandbox)
	if names := spanNames(childrenOf(spans, stop)); !slices.Contains(names, "undo cni-attach") {
		t.Errorf("StopPodSandbox's child spans %v, want the undo of the network, undo cni-attach", names)
	}
	remove := serverSpan(t, spans, methodRemovePodSandbox)
	var runs []receivedSpan
	for _, s := range childrenOf(spans, remove) {
		if s.Name == "journal remove" {
			runs = append(runs, s)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("RemovePodSandbox's child spans %v, want one journal remove", spanNames(childrenOf(spans, remove)))
	}
	undos := childrenOf(spans, runs[0])
	if len(undos) == 0 {
		t.Errorf("the removal's span has no undo spans below it\n%s", describeSpans(spans))
	}
	for _, u := range undos {
		if !strings.HasPrefix(u.Name, "undo ") || !slices.Contains(kinds, strings.TrimPrefix(u.Name, "undo ")) {
			t.Errorf("span %q below the removal: want undo <a step kind of the record>", u.Name)
		}
	}
	otlp.mu.Lock()
	services := otlp.services
	otlp.mu.Unlock()
	if !services["crijournal-e2e"] || len(services) != 1 {
		t.Errorf("spans exported by services %v, want only OTEL_SERVICE_NAME's crijournal-e2e", services)
	}
}

// TestTracingFollowsCaller calls RunPodSandbox with a Go gRPC client carrying a W3C
// traceparent in its metadata, as the kubelet does, against a daemon that samples no
// trace of its own (tracing_sampling_rate_per_million 0, the default), its collector
// named by OTEL_EXPORTER_OTLP_ENDPOINT alone: a sampled caller's call is traced in the
// caller's trace, as a child of the caller's span, with its steps; an unsampled caller's
// leaves no span, and neither do calls without a trace context.
func TestTracingFollowsCaller(t *testing.T) {
	otlp := startOTLPReceiver(t)
	d := startDaemon(t, daemonOptions{env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlp.addr, "OTEL_BSP_SCHEDULE_DELAY=100"}})
	cri := d.cri(t)
	sampledTrace, callerSpan := randomHex(t, 16), randomHex(t, 8)
	unsampledTrace := randomHex(t, 16)
	run := func(name, traceparent string) string {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(time.Minute))
		defer cancel()
		if traceparent != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", traceparent)
		}
		resp, err := cri.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: randomHex(t, 16)},
			Hostname: "e2e",
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
		}})
		if err != nil {
			t.Fatalf("RunPodSandbox %s (traceparent %q): %v", name, traceparent, err)
		}
		return resp.GetPodSandboxId()
	}
	sampled := run("sampled", "00-"+sampledTrace+"-"+callerSpan+"-01")
	unsampled := run("unsampled", "00-"+unsampledTrace+"-"+randomHex(t, 8)+"-00")
	untraced := run("untraced", "")

	// Exported while the daemon runs (a batch delay of 100 ms), not only at the stop.
	otlp.waitFor(t, 30*time.Second, "RunPodSandbox span in the caller's trace", func(spans []receivedSpan) bool {
		for _, s := range spans {
			if s.Name == methodRunPodSandbox && s.TraceID == sampledTrace {
				return true
			}
		}
		return false
	})
	for _, id := range []string{sampled, unsampled, untraced} {
		d.requireRemoveRPC(t, id, "the tracing test's pod")
	}
	d.stop(t) // flushes whatever a trace started here would have left
	spans := otlp.received()

	server := serverSpan(t, spans, methodRunPodSandbox)
	if server.TraceID != sampledTrace || server.Parent != callerSpan {
		t.Errorf("RunPodSandbox's span is in trace %s under %s, want the caller's trace %s under its span %s", server.TraceID, server.Parent, sampledTrace, callerSpan)
	}
	if steps := childrenOf(spans, server); len(steps) == 0 {
		t.Errorf("RunPodSandbox's span in the caller's trace has no step spans\n%s", describeSpans(spans))
	}
	for _, s := range spans {
		if s.TraceID != sampledTrace {
			t.Errorf("span %s in trace %s: only the sampled caller's trace %s may be exported (the unsampled caller's is %s; the daemon samples none of its own)",
				s.Name, s.TraceID, sampledTrace, unsampledTrace)
		}
		if id := s.Attrs["crijournal.record.id"]; id != "" && id != sampled {
			t.Errorf("span %s of record %s: only the sampled caller's sandbox %s may have spans", s.Name, id, sampled)
		}
	}
}

// TestTracingRollback makes RunPodSandbox fail once the network is attached (a failure
// point) and checks the trace: the attach step's span ends in error, and the rollback is
// a span under the request's with the undo of every step below it.
func TestTracingRollback(t *testing.T) {
	otlp := startOTLPReceiver(t)
	d := startDaemon(t, daemonOptions{
		extraTOML: []string{"tracing_endpoint = " + strconv.Quote("http://"+otlp.addr), "tracing_sampling_rate_per_million = 1000000"},
		env:       []string{"CRIJOURNAL_FAILPOINTS=sandbox-create/cni-attach/after-action=error"},
	})
	_, stderr, err := d.runp(t, podConfig(t, "rolled-back", "e2e", randomHex(t, 16), 0, false))
	if err == nil {
		t.Fatal("crictl runp succeeded with the failure point armed after cni-attach")
	}
	t.Logf("runp failed as armed: %s", lastLine(stderr))
	d.stop(t)
	spans := otlp.received()
	t.Logf("spans exported:\n%s", describeSpans(spans))

	run := serverSpan(t, spans, methodRunPodSandbox)
	if run.Status != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the failed RunPodSandbox's span has status %s, want an error", run.Status)
	}
	var attach, rollback []receivedSpan
	for _, s := range childrenOf(spans, run) {
		switch s.Name {
		case "cni-attach":
			attach = append(attach, s)
		case "journal rollback":
			rollback = append(rollback, s)
		}
	}
	if len(attach) != 1 || attach[0].Status != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("cni-attach spans under RunPodSandbox: %v, want one, in error (rolled back before it was done)", attach)
	}
	if len(rollback) != 1 {
		t.Fatalf("%d journal rollback spans under RunPodSandbox, want 1", len(rollback))
	}
	undos := spanNames(childrenOf(spans, rollback[0]))
	for _, want := range []string{"undo cni-attach", "undo netns-pin"} {
		if !slices.Contains(undos, want) {
			t.Errorf("the rollback's undo spans %v lack %s", undos, want)
		}
	}
}

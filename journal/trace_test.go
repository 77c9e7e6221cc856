package journal

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// tracedSpan is what TestStepSpans checks of a span: its name, its parent's name ("" for
// a root) and its status.
type tracedSpan struct {
	Name, Parent string
	Status       codes.Code
}

// TestStepSpans drives the journal with a Tracer under a request's span and checks the
// spans it made: one per step, from intent to done, a child of the request's span, ended
// in error when a rollback ends it; one per undo, a child of its run's span, itself a
// child of the request's.
func TestStepSpans(t *testing.T) {
	errUndo := errors.New("device busy")
	tests := []struct {
		name    string
		sampled bool
		fail    map[StepKind]error
		drive   func(t *testing.T, j *Journal, id string, ctx context.Context)
		want    []tracedSpan // in the order they ended; the request's span is not listed
	}{{
		name:    "intent then done",
		sampled: true,
		drive: func(t *testing.T, j *Journal, id string, _ context.Context) {
			seq := must(j.Intent(id, "pin", kindA, nil))
			mustNil(t, j.Done(id, seq))
		},
		want: []tracedSpan{{"test-a", "request", codes.Unset}},
	}, {
		name:    "a batch, one step done, rolled back",
		sampled: true,
		drive: func(t *testing.T, j *Journal, id string, ctx context.Context) {
			seq := must(j.Intents(id, Intended{Kind: kindA, Stage: "a"}, Intended{Kind: kindB, Stage: "b"}))
			mustNil(t, j.Done(id, seq))
			mustNil(t, j.Rollback(ctx, id))
		},
		want: []tracedSpan{
			{"test-a", "request", codes.Unset},
			{"test-b", "request", codes.Error},
			{"undo test-b", "journal rollback", codes.Unset},
			{"undo test-a", "journal rollback", codes.Unset},
			{"journal rollback", "request", codes.Unset},
		},
	}, {
		name:    "a failed undo",
		sampled: true,
		fail:    map[StepKind]error{kindA: errUndo},
		drive: func(t *testing.T, j *Journal, id string, ctx context.Context) {
			seq := must(j.Intent(id, "a", kindA, nil))
			mustNil(t, j.Done(id, seq))
			if err := j.Rollback(ctx, id); !errors.Is(err, errUndo) {
				t.Fatalf("rollback: %v, want %v", err, errUndo)
			}
		},
		want: []tracedSpan{
			{"test-a", "request", codes.Unset},
			{"undo test-a", "journal rollback", codes.Error},
			{"journal rollback", "request", codes.Error},
		},
	}, {
		name:    "a noted step, then the removal",
		sampled: true,
		drive: func(t *testing.T, j *Journal, id string, ctx context.Context) {
			must(j.Noted(id, Intended{Kind: kindC, Stage: "c"}))
			if _, err := j.Settle(id, "obj", true); err != nil {
				t.Fatal(err)
			}
			mustNil(t, j.Remove(ctx, id))
		},
		want: []tracedSpan{
			{"test-c", "request", codes.Unset},
			{"undo test-c", "journal remove", codes.Unset},
			{"journal remove", "request", codes.Unset},
		},
	}, {
		name:    "the caller's trace is not sampled",
		sampled: false,
		drive: func(t *testing.T, j *Journal, id string, ctx context.Context) {
			seq := must(j.Intents(id, Intended{Kind: kindA, Stage: "a"}, Intended{Kind: kindB, Stage: "b"}))
			mustNil(t, j.Done(id, seq))
			must(j.Noted(id, Intended{Kind: kindC, Stage: "c"}))
			mustNil(t, j.Rollback(ctx, id))
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
			undos := &undoLog{fail: tt.fail}
			j, _ := testJournal(t, Options{Tracer: tp.Tracer("journal"), Registry: undos.registry(kindA, kindB, kindC)})

			var reqCtx context.Context
			var request trace.Span
			if tt.sampled {
				reqCtx, request = tp.Tracer("test").Start(context.Background(), "request")
			} else {
				// A caller's traceparent with the sampled flag clear.
				reqCtx = trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true}))
				reqCtx, request = tp.Tracer("test").Start(reqCtx, "request")
			}
			r, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "pod", Trace: request.SpanContext()})
			if err != nil {
				t.Fatal(err)
			}
			tt.drive(t, j, r.ID, reqCtx)
			request.End()

			ended := rec.Ended()
			names := map[trace.SpanID]string{}
			for _, s := range ended {
				names[s.SpanContext().SpanID()] = s.Name()
				if s.SpanContext().TraceID() != request.SpanContext().TraceID() {
					t.Errorf("span %q is in trace %s, not the request's %s", s.Name(), s.SpanContext().TraceID(), request.SpanContext().TraceID())
				}
			}
			var got []tracedSpan
			for _, s := range ended {
				if s.Name() == "request" {
					continue
				}
				got = append(got, tracedSpan{s.Name(), names[s.Parent().SpanID()], s.Status().Code})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("spans (-want +got):\n%s", diff)
			}
			for _, s := range ended {
				if s.Name() == "request" || s.Name() == spanRollback || s.Name() == spanRemove {
					continue
				}
				attrs := attribute.NewSet(s.Attributes()...)
				if v, _ := attrs.Value(attrRecordID); v.AsString() != r.ID {
					t.Errorf("span %q: %s = %q, want %q", s.Name(), attrRecordID, v.AsString(), r.ID)
				}
				if v, _ := attrs.Value(attrStepKind); s.Name() != v.AsString() && s.Name() != spanUndo+v.AsString() {
					t.Errorf("span %q: %s = %q, which it is not named after", s.Name(), attrStepKind, v.AsString())
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package journal

// Tracing of the steps: with Options.Tracer set, each step is an OpenTelemetry span from
// the call that commits its intent to the one that marks it done (or to the rollback that
// ends it), a child of the span its creation began under (BeginRequest.Trace); each undo
// is a span of its own, a child of its run (a rollback or a removal), itself a child of
// the span of the context it runs under (a request's, or none: recovery, Maintain). The
// spans are made here, where every step is journaled, so that no caller need make them.
// Without a Tracer nothing of this runs: no span, no allocation.

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the journal's spans.
const (
	attrRecordKind  = attribute.Key("crijournal.record.kind")
	attrRecordID    = attribute.Key("crijournal.record.id")
	attrRecordName  = attribute.Key("crijournal.record.name")
	attrStepKind    = attribute.Key("crijournal.step.kind")
	attrStepSeq     = attribute.Key("crijournal.step.seq")
	attrStepStage   = attribute.Key("crijournal.step.stage")
	attrStepNoted   = attribute.Key("crijournal.step.noted")
	attrUndoAttempt = attribute.Key("crijournal.undo.attempt")
)

// Span names of an undo run and of one undo; a step's span is named after its kind.
const (
	spanRollback = "journal rollback"
	spanRemove   = "journal remove"
	spanUndo     = "undo "
)

// stepSpans are the spans of a record's steps whose intent is committed and that are not
// done yet, by sequence number, with the span context they are children of. Kept in the
// record's entry, under the journal's lock.
type stepSpans struct {
	parent trace.SpanContext
	open   map[int]trace.Span
}

func recordAttrs(rec *Record) []attribute.KeyValue {
	return []attribute.KeyValue{
		attrRecordKind.String(string(rec.Kind)),
		attrRecordID.String(rec.ID),
		attrRecordName.String(rec.Name),
	}
}

func stepAttrs(rec *Record, s Step) []attribute.KeyValue {
	return append(recordAttrs(rec),
		attrStepKind.String(string(s.Kind)),
		attrStepSeq.Int(s.Seq),
		attrStepStage.String(s.Stage),
	)
}

// startSteps starts the spans of the n steps from seq of e, whose intents were just
// queued for a commit; the caller ends them with endStep (the commit failed, or the step
// is done) or endOpenSteps (a rollback). The caller holds j.mu.
func (j *Journal) startSteps(e *entry, seq, n int) {
	if j.opts.Tracer == nil || e.spans == nil {
		return
	}
	ctx := trace.ContextWithSpanContext(context.Background(), e.spans.parent)
	for i := seq; i < seq+n && i < len(e.rec.Steps); i++ {
		s := e.rec.Steps[i]
		_, span := j.opts.Tracer.Start(ctx, string(s.Kind),
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(stepAttrs(&e.rec, s)...))
		if !span.IsRecording() {
			continue // not sampled: nothing to end
		}
		if e.spans.open == nil {
			e.spans.open = map[int]trace.Span{}
		}
		e.spans.open[i] = span
	}
}

// noteStep records the span of a step Noted: done as soon as recorded. The caller holds
// j.mu.
func (j *Journal) noteStep(e *entry, seq int) {
	if j.opts.Tracer == nil || seq >= len(e.rec.Steps) {
		return
	}
	var parent trace.SpanContext
	if e.spans != nil {
		parent = e.spans.parent
	}
	ctx := trace.ContextWithSpanContext(context.Background(), parent)
	s := e.rec.Steps[seq]
	_, span := j.opts.Tracer.Start(ctx, string(s.Kind), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(stepAttrs(&e.rec, s), attrStepNoted.Bool(true))...))
	span.End()
}

// endStep ends the span of step seq of e, successfully when err is nil. The caller holds
// j.mu.
func (j *Journal) endStep(e *entry, seq int, err error) {
	if e.spans == nil {
		return
	}
	span, ok := e.spans.open[seq]
	if !ok {
		return
	}
	delete(e.spans.open, seq)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// endOpenSteps ends the spans of e's steps still in intent, as failed: their record is
// being rolled back. The caller holds j.mu.
func (j *Journal) endOpenSteps(e *entry) {
	if e.spans == nil {
		return
	}
	for seq, span := range e.spans.open {
		span.SetStatus(codes.Error, "rolled back before the step was done")
		span.End()
		delete(e.spans.open, seq)
	}
}

// startUndoRun starts the span of an undo run (a rollback, or a removal) of rec under
// ctx's span, and returns ctx with it; end ends it. Without a Tracer it returns ctx and
// a no-op.
func (j *Journal) startUndoRun(ctx context.Context, rec *Record, removal bool) (context.Context, func(failures int)) {
	if j.opts.Tracer == nil {
		return ctx, func(int) {}
	}
	name := spanRollback
	if removal {
		name = spanRemove
	}
	ctx, span := j.opts.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(recordAttrs(rec)...))
	return ctx, func(failures int) {
		if failures > 0 {
			span.SetStatus(codes.Error, strconv.Itoa(failures)+" undo(s) failed; retried later")
		}
		span.End()
	}
}

// startUndo starts the span of one undo under ctx's span; end ends it with the undo's
// error. Without a Tracer it returns a no-op.
func (j *Journal) startUndo(ctx context.Context, rec *Record, step Step) (end func(error)) {
	if j.opts.Tracer == nil {
		return func(error) {}
	}
	_, span := j.opts.Tracer.Start(ctx, spanUndo+string(step.Kind), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(stepAttrs(rec, step), attrUndoAttempt.Int(step.UndoAttempts+1))...))
	return func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

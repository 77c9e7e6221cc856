package journal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkIntent measures durable intent commits with 1, 4 and 16 creations running at
// once. Each goroutine runs creation-shaped work, as a server flow does: Begin, five
// intents each followed by Done, Ready, Answer. Group commit lets concurrent creations share
// fsyncs. Reported per intent: ns and commits (all commits of the run, Begin and Answer
// included, divided by the intents).
func BenchmarkIntent(b *testing.B) {
	const stepsPerCreation = 5
	for _, creations := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("creations=%d", creations), func(b *testing.B) {
			j, _ := testJournal(b, Options{})
			before := j.Stats()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + creations*stepsPerCreation - 1) / (creations * stepsPerCreation)
			for g := range creations {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range per {
						rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: fmt.Sprintf("pod-%d-%d", g, i)})
						if err != nil {
							b.Error(err)
							return
						}
						for range stepsPerCreation {
							seq, err := j.Intent(rec.ID, "bench", kindA, map[string]string{"path": "/run/crijournal/ns/netns/" + rec.ID})
							if err != nil {
								b.Error(err)
								return
							}
							j.Done(rec.ID, seq)
						}
						j.ready(rec.ID, map[string]string{"ip": "10.88.0.2"})
						if _, err := j.answer(rec.ID, true); err != nil {
							b.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			after := j.Stats()
			intents := float64(per * creations * stepsPerCreation)
			b.ReportMetric(float64(after.Commits-before.Commits)/intents, "commits/intent")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/intents, "ns/intent")
		})
	}
}

// BenchmarkOpen measures Open (preflight, migrations, index rebuild) of a journal holding
// 10,000 records in mixed states.
func BenchmarkOpen(b *testing.B) {
	j, path := testJournal(b, Options{})
	for i := range 10000 {
		rec := begin(b, j, fmt.Sprintf("pod-%d", i), time.Time{})
		step(b, j, rec.ID, kindA, "1")
		if i%3 == 0 {
			continue
		}
		j.ready(rec.ID, map[string]string{"ip": "10.0.0.1"})
		j.answer(rec.ID, i%3 == 1)
	}
	j.Close()
	b.ResetTimer()
	for b.Loop() {
		j2, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		j2.Close()
	}
}

// BenchmarkRemove measures the removal of a created record with one step, as a pod's
// sandbox or container is removed: the removing mark's durable commit, the undo, and the
// delete, which rides on the next commit. Reported per removal: ns, and the commits made
// while it ran (the next removal's mark carries the last one's delete).
func BenchmarkRemove(b *testing.B) {
	var u undoLog
	j, _ := testJournal(b, Options{Registry: u.registry(kindA)})
	var commits int64
	for range b.N {
		b.StopTimer()
		rec := createdRecord(b, j) // the last one removed, its name is free
		before := j.Stats().Commits
		b.StartTimer()
		if err := j.Remove(ctx, rec.ID); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		commits += j.Stats().Commits - before
		b.StartTimer()
	}
	b.ReportMetric(float64(commits)/float64(b.N), "commits/op")
}

// discardExporter drops the spans of BenchmarkStepTracing.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkStepTracing measures one journaled step (its intent's durable commit and its
// done mark, in creations of five steps, as BenchmarkIntent) with tracing off (no
// Tracer, the daemon's default) and on (the SDK's provider, every trace sampled, a batch
// processor in front of an exporter that drops the spans: what a span costs the daemon,
// not its export), with fsync and without (where the commit costs least, so the spans'
// share is largest). One op is one step (every fifth begins a creation and rolls the
// previous one back); compare the pairs.
func BenchmarkStepTracing(b *testing.B) {
	const stepsPerCreation = 5
	for _, noSync := range []bool{false, true} {
		for _, traced := range []bool{false, true} {
			b.Run(fmt.Sprintf("nosync=%v/tracing=%v", noSync, traced), func(b *testing.B) {
				opts := Options{NoSync: noSync, Registry: NewRegistry()}
				parent := trace.SpanContext{}
				if traced {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}),
						sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
					b.Cleanup(func() { tp.Shutdown(context.Background()) })
					opts.Tracer = tp.Tracer("bench")
					_, span := tp.Tracer("bench").Start(context.Background(), "request")
					parent = span.SpanContext()
				}
				opts.Registry.Register(kindA, func(context.Context, Record, Step) error { return nil })
				j, _ := testJournal(b, opts)
				var rec Record
				steps := 0 // one per iteration: ns/op is per step
				for i := 0; b.Loop(); i++ {
					if steps%stepsPerCreation == 0 {
						if rec.ID != "" {
							if err := j.Rollback(context.Background(), rec.ID); err != nil {
								b.Fatal(err)
							}
						}
						var err error
						if rec, err = j.Begin(BeginRequest{Kind: KindSandbox, Name: fmt.Sprintf("pod-%d", i), Trace: parent}); err != nil {
							b.Fatal(err)
						}
					}
					seq, err := j.Intents(rec.ID, Intended{Kind: kindA, Stage: "bench", Args: map[string]string{"path": "/run/crijournal/ns/netns/" + rec.ID}})
					if err != nil {
						b.Fatal(err)
					}
					if err := j.Done(rec.ID, seq); err != nil {
						b.Fatal(err)
					}
					steps++
				}
			})
		}
	}
}

package journal

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkIntent measures durable intent commits with 1, 4 and 16 creations running at
// once. Each creation records its intents one after another, as a server flow does; group
// commit lets concurrent creations share fsyncs. Reported: ns per intent and commits per
// intent.
func BenchmarkIntent(b *testing.B) {
	for _, creations := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("creations=%d", creations), func(b *testing.B) {
			j, _ := testJournal(b, Options{})
			ids := make([]string, creations)
			for i := range ids {
				ids[i] = begin(b, j, fmt.Sprintf("pod-%d", i), time.Time{}).ID
			}
			before := j.Stats()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + creations - 1) / creations
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						seq, err := j.Intent(ctx, id, "bench", kindA, map[string]string{"path": "/run/x"})
						if err != nil {
							b.Error(err)
							return
						}
						j.Done(id, seq)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			after := j.Stats()
			intents := float64(per * creations)
			b.ReportMetric(float64(after.Commits-before.Commits)/intents, "commits/op")
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
		j.Ready(rec.ID, map[string]string{"ip": "10.0.0.1"})
		j.Answer(ctx, rec.ID, i%3 == 1)
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

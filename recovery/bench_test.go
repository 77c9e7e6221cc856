package recovery

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// BenchmarkRecovery10k measures startup recovery (Open, then Run) of a journal holding
// 10,000 records in mixed states: a quarter each interrupted creations (rolled back),
// finished-but-unanswered (cached), cached, and created (reconciled, nothing to do).
func BenchmarkRecovery10k(b *testing.B) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	u := &undos{ran: map[string]int{}}
	dir := b.TempDir()
	golden := filepath.Join(dir, "golden.db")
	j, err := journal.Open(golden, journal.Options{Logger: log, Registry: u.registry(), CacheTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			rec, err := j.Begin(ctx, journal.BeginRequest{Kind: journal.KindSandbox, Name: fmt.Sprintf("pod-%d", i), Fingerprint: "fp"})
			if err != nil {
				errs <- err
				return
			}
			for range 2 {
				seq, err := j.Intent(ctx, rec.ID, "s", stepOK, map[string]string{"path": "/run/x/" + rec.ID})
				if err != nil {
					errs <- err
					return
				}
				j.Done(rec.ID, seq)
			}
			switch i % 4 {
			case 0: // interrupted
				return
			case 1:
				j.Ready(rec.ID, map[string]string{"ip": "10.0.0.1"})
			case 2, 3:
				j.Ready(rec.ID, map[string]string{"ip": "10.0.0.1"})
				_, err = j.Answer(ctx, rec.ID, i%4 == 3)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	j.Close()
	goldenBytes := mustRead(b, golden)

	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		path := filepath.Join(dir, fmt.Sprintf("run-%d.db", i))
		mustWrite(b, path, goldenBytes)
		b.StartTimer()
		j, err := journal.Open(path, journal.Options{Logger: log, Registry: u.registry(), CacheTTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		sum := Run(ctx, j, log, func(context.Context, journal.Record) (bool, error) { return false, nil })
		b.StopTimer()
		if sum.RolledBack != n/4 || sum.Cached != n/4 || sum.Kept != n/4 {
			b.Fatalf("summary %+v", sum)
		}
		j.Close()
		b.StartTimer()
	}
}

func mustRead(b *testing.B, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func mustWrite(b *testing.B, path string, data []byte) {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
}

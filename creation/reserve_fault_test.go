package creation

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// TestWaiterWithoutDeadlineIsBoundedByExpiry: a retry without a deadline that
// waits on a creation which becomes cached meanwhile used to wait for ever. It now gives
// up at the record's expiry, and the record is kept for the next retry, which claims it.
func TestWaiterWithoutDeadlineIsBoundedByExpiry(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	const ttl = time.Second
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Logger: log, CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	s := New(j, log, nil)

	holder, err := s.journal.Begin(beginReq("pod", "fp"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.journal.Settle(holder.ID, 1, false)
	}()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := s.Reserve(context.Background(), beginReq("pod", "fp"), Same{})
		done <- err
	}()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(10 * ttl):
		t.Fatalf("a waiter without a deadline still waits %v after the creation became cached with a %v TTL", 10*ttl, ttl)
	}
	if !errors.Is(werr, ErrTimedOut) {
		t.Fatalf("the waiter got %v, want ErrTimedOut saying the next retry gets it", werr)
	}
	t.Logf("the waiter gave up after %v", time.Since(start).Round(time.Millisecond))
	rec, err := s.journal.Get(holder.ID)
	if err != nil || rec.State != journal.StateCached || !rec.Expiry.After(time.Now()) {
		t.Fatalf("holder after the waiter gave up: %+v, %v; want cached, not yet expired", rec, err)
	}
	res, err := s.Reserve(context.Background(), beginReq("pod", "fp"), Same{})
	if err != nil || res.ExistingID != holder.ID {
		t.Fatalf("next retry = %+v, %v; want the cached holder", res, err)
	}
}

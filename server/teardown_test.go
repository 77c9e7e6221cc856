package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestTeardownsKeepOneSandboxApart: a second teardown of a sandbox waits for the first,
// one of another sandbox does not, a waiter gives up with its context, and no lock is
// kept once nobody holds or waits for it.
func TestTeardownsKeepOneSandboxApart(t *testing.T) {
	var td teardowns
	ctx := context.Background()
	unlockA, err := td.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := td.lock(ctx, "b")
	if err != nil {
		t.Fatalf("a teardown of another sandbox waited: %v", err)
	}
	unlockB()

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := td.lock(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second teardown of a held sandbox = %v, want it to wait until its context ends", err)
	}

	got := make(chan func(), 1)
	go func() {
		unlock, err := td.lock(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- unlock
	}()
	select {
	case <-got:
		t.Fatal("a second teardown got the lock while the first held it")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	(<-got)()

	td.mu.Lock()
	defer td.mu.Unlock()
	if len(td.locks) != 0 {
		t.Errorf("locks kept after every teardown ended: %v", td.locks)
	}
}

package server

import (
	"context"
	"sync"
)

// teardowns keeps the teardowns of one sandbox (StopPodSandbox, RemovePodSandbox) apart:
// one runs at a time per sandbox, the others wait for it. Without it, two overlapping
// teardowns both run CNI DEL, and the undo of each kills the plugins of the other (see
// netns.KillPlugins); a Stop whose work was done could then fail, or answer NotFound
// because a Remove deleted the record under it.
//
// The locks are in memory only: after a restart no teardown is running.
type teardowns struct {
	mu    sync.Mutex
	locks map[string]*teardownLock
}

type teardownLock struct {
	held    chan struct{} // holds one token while a teardown runs
	waiters int           // teardowns holding or waiting for the lock
}

// lock waits until no other teardown of the sandbox runs, and returns the function that
// lets the next one in. It gives up with ctx's error when ctx ends first.
func (t *teardowns) lock(ctx context.Context, sandboxID string) (unlock func(), err error) {
	t.mu.Lock()
	if t.locks == nil {
		t.locks = make(map[string]*teardownLock)
	}
	l, ok := t.locks[sandboxID]
	if !ok {
		l = &teardownLock{held: make(chan struct{}, 1)}
		t.locks[sandboxID] = l
	}
	l.waiters++
	t.mu.Unlock()

	release := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		l.waiters--
		if l.waiters == 0 {
			delete(t.locks, sandboxID)
		}
	}
	select {
	case l.held <- struct{}{}:
		return func() { <-l.held; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

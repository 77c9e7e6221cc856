package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestPodGateRemovalWaitsForCreations: a removal waits until every creation that passed
// the gate has left; meanwhile the gate refuses new creations; afterwards it lets them in
// again and forgets the pod.
func TestPodGateRemovalWaitsForCreations(t *testing.T) {
	var g podGates
	leaveA, okA := g.enter("pod")
	leaveB, okB := g.enter("pod")
	if !okA || !okB {
		t.Fatal("an open gate refused a creation")
	}
	closed := make(chan func(), 1)
	go func() {
		reopen, err := g.close(context.Background(), "pod")
		if err != nil {
			t.Errorf("close: %v", err)
		}
		closed <- reopen
	}()
	// The removal is waiting: no new creation gets in, and other pods are not concerned.
	testenv.Eventually(t, 5*time.Second, time.Millisecond, testenv.Until("one teardown of the pod's gate", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.gates["pod"].teardowns == 1
	}))
	if _, ok := g.enter("pod"); ok {
		t.Fatal("a creation got into a pod being removed")
	}
	leaveOther, ok := g.enter("other")
	if !ok {
		t.Fatal("the removal of one pod closed another pod's gate")
	}
	leaveOther()

	leaveA()
	select {
	case <-closed:
		t.Fatal("the removal went on while a creation was still running")
	case <-time.After(50 * time.Millisecond):
	}
	leaveB()
	reopen := <-closed
	if _, ok := g.enter("pod"); ok {
		t.Fatal("a creation got in before the removal reopened the gate")
	}
	reopen()
	leave, ok := g.enter("pod")
	if !ok {
		t.Fatal("the reopened gate refused a creation")
	}
	leave()
	if len(g.gates) != 0 {
		t.Errorf("gates left after everything ended: %v", g.gates)
	}
}

// TestPodGateRemovalGivesUp: a removal whose context ends while a creation runs returns the
// context's error and leaves the gate open.
func TestPodGateRemovalGivesUp(t *testing.T) {
	var g podGates
	leave, _ := g.enter("pod")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.close(ctx, "pod"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with a running creation and an ending context = %v, want DeadlineExceeded", err)
	}
	leave2, ok := g.enter("pod")
	if !ok {
		t.Fatal("a removal that gave up left the gate closed")
	}
	leave2()
	leave()
	if len(g.gates) != 0 {
		t.Errorf("gates left after everything ended: %v", g.gates)
	}
}

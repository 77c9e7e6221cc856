package server

import (
	"context"
	"sync"
)

// podGates keeps a pod's container creations and its stop or removal apart. A
// CreateContainer passes the gate of its sandbox for as long as its creation runs (which
// may be past its request's deadline); StopPodSandbox and RemovePodSandbox close the
// gate, wait until every creation that passed it has finished, stop or remove the pod's
// containers (and the sandbox), and open it again. Without it, a container whose creation
// was still running when its pod was removed would be finished after the removal had
// listed the pod's containers, and leak: its root filesystem and runtime container would
// belong to no pod; and one finished after a stop would run in a stopped pod whose
// /dev/shm is gone. A creation after the stop finds the sandbox stopped and is refused.
//
// The gates are in memory only: after a restart no creation is running (recovery
// rolled the unfinished ones back), so there is nothing to keep apart.
type podGates struct {
	mu    sync.Mutex
	gates map[string]*podGate
}

type podGate struct {
	creations int           // creations that passed the gate and have not finished
	teardowns int           // stops or removals waiting for the creations, or running
	idle      chan struct{} // closed (and replaced) whenever creations falls to 0
}

// enter lets a container creation in the pod through. ok is false while the pod is
// being stopped or removed; otherwise leave must be called when the creation has finished.
func (g *podGates) enter(podID string) (leave func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate := g.gate(podID)
	if gate.teardowns > 0 {
		return nil, false
	}
	gate.creations++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		gate.creations--
		if gate.creations == 0 {
			close(gate.idle)
			gate.idle = make(chan struct{})
		}
		g.forget(podID, gate)
	}, true
}

// close shuts the pod's gate to new creations and waits until the running ones have
// finished. It returns the function that opens the gate again (to be called once the
// stop or removal is over, whether it succeeded or not); on ctx's end it reopens the gate
// itself and returns ctx's error.
func (g *podGates) close(ctx context.Context, podID string) (reopen func(), err error) {
	g.mu.Lock()
	gate := g.gate(podID)
	gate.teardowns++
	reopen = func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		gate.teardowns--
		g.forget(podID, gate)
	}
	for gate.creations > 0 {
		idle := gate.idle
		g.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			reopen()
			return nil, ctx.Err()
		}
		g.mu.Lock()
	}
	g.mu.Unlock()
	return reopen, nil
}

// gate returns the pod's gate, making it. Called with mu held.
func (g *podGates) gate(podID string) *podGate {
	if g.gates == nil {
		g.gates = make(map[string]*podGate)
	}
	gate, ok := g.gates[podID]
	if !ok {
		gate = &podGate{idle: make(chan struct{})}
		g.gates[podID] = gate
	}
	return gate
}

// forget drops a gate nobody uses any more. Called with mu held.
func (g *podGates) forget(podID string, gate *podGate) {
	if gate.creations == 0 && gate.teardowns == 0 && g.gates[podID] == gate {
		delete(g.gates, podID)
	}
}

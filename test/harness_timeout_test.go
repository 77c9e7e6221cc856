package test

import (
	"os"
	"slices"
	"testing"
	"time"
)

// Helpers of the sandbox timeout tests: a RunPodSandbox that times out while
// the network is being set up, and its retry that gets the cached sandbox.

// The timeout tests slow the bridge plugin down (slowADD) so that a
// RunPodSandbox made with `crictl runp -T 1s` times out while the network is
// being set up. crictl gives RunPodSandbox twice the -T value (about 2 s
// here); each test logs what it measured.
const (
	slowADD  = 4 * time.Second
	shortTTL = 3 * time.Second
	// expiryWait bounds how long a cached sandbox may take to be cleaned up
	// once it is no longer wanted: the TTL, a sweep, the undo.
	expiryWait = 10 * time.Second
)

// timeOut makes a RunPodSandbox of pod time out during a slow CNI ADD
// (`crictl runp -T 1s`), and returns the ID of the sandbox the daemon goes
// on creating. crictl pods stays empty meanwhile. The CNI plugin is fast
// again when it returns, for the calls that follow (DEL, other pods).
func (d *daemon) timeOut(t *testing.T, pod string) string {
	t.Helper()
	nADD := len(d.addedIDs(t))
	d.slowCNI(t, slowADD)
	start := time.Now()
	_, stderr, err := d.runp(t, "-T", "1s", pod)
	elapsed := time.Since(start)
	requireCode(t, "crictl runp -T 1s with a slow network", err, stderr, "DeadlineExceeded")
	t.Logf("crictl runp -T 1s: RunPodSandbox failed with DeadlineExceeded after %v", elapsed.Round(time.Millisecond))
	if elapsed > slowADD-500*time.Millisecond {
		t.Fatalf("crictl runp -T 1s took %v, too close to the CNI delay %v for this test", elapsed, slowADD)
	}
	created := d.waitADD(t, nADD+1, 5*time.Second)
	d.slowCNI(t, 0)
	if _, err := os.Stat(d.cniResultPath(created)); err == nil {
		t.Fatalf("CNI ADD of %s finished before the request timed out; the test's timing is off", created)
	}
	d.requirePods(t, "while the timed-out creation is still running")
	return created
}

// requireRetryGetsCached retries pod and requires the cached sandbox created: the same
// ID, listed, ready and reachable, with no second CNI ADD; then removes it and checks that
// the node and the journal are clean.
func (d *daemon) requireRetryGetsCached(t *testing.T, pod, created, what string) {
	t.Helper()
	id := d.mustRunp(t, pod)
	if id != created {
		t.Fatalf("%s got sandbox %s, want %s, the one the daemon created for the timed-out request", what, id, created)
	}
	d.requirePods(t, "after "+what, id)
	st := d.requireState(t, id, "SANDBOX_READY")
	if st.Status.Network != nil && st.Status.Network.IP != "" {
		d.requireReachable(t, st.Status.Network.IP)
	}
	if adds := d.addedIDs(t); !slices.Equal(adds, []string{id}) {
		t.Errorf("CNI ADD calls %v, want only the one of %s", adds, id)
	}
	d.assertNoLeaks(t, id)

	d.removePod(t, id)
	d.stopClean(t)
}

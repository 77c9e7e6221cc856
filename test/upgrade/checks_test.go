package upgrade

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// What this build's daemon must do with the previous one's state: containerd's checks
// (recover, exec, manipulate, recover-images, metrics) and the journal's (cached
// creations claimed by their retries, the in-flight one rolled back, the failing undo
// retried), and nothing left at the end.

// check runs the checks in order; each is a subtest, so that one failing still lets the
// others report. manipulate removes everything, and leaks comes last.
func (u *upgrade) check(t *testing.T) {
	type check struct {
		name string
		f    func(t *testing.T)
	}
	checks := []check{
		{"recover", u.recover},
		{"exec", u.exec},
		{"recover-images", u.recoverImages},
		{"metrics", u.metrics},
		{"cached sandbox claimed", u.claimCachedPod},
		{"cached container claimed", u.claimCachedContainer},
	}
	if u.inflightID != "" { // the SIGKILL run
		checks = append(checks, check{"in-flight rolled back", u.inflightRolledBack})
	}
	checks = append(checks,
		check{"failing undo retried", u.failingUndoRetried},
		check{"manipulate", u.manipulate},
		check{"no leaks", u.noLeaks},
	)
	for _, c := range checks {
		t.Run(c.name, c.f)
	}
}

// recover: the same pods and containers in the same states; the container whose conmon
// and process were killed is exited, the one whose conmon alone was killed still runs.
func (u *upgrade) recover(t *testing.T) {
	n := u.n
	if got := n.podStates(t); !maps.Equal(got, u.podsBefore) {
		t.Errorf("pods after the upgrade %v, before %v", got, u.podsBefore)
	}
	want := maps.Clone(u.ctrsBefore)
	got := n.ctrStates(t)
	dead, ok := got[u.dead]
	if !ok || dead.State != "CONTAINER_EXITED" {
		t.Errorf("the container killed with its conmon while no daemon ran: %+v (listed %v), want exited", dead, ok)
	}
	t.Logf("the container killed with its conmon: %+v, reason %q", dead, n.inspectCtr(t, u.dead).Reason)
	delete(want, u.dead)
	delete(got, u.dead)
	if !maps.Equal(got, want) {
		t.Errorf("containers after the upgrade %v, before %v", got, want)
	}
	if st := got[u.exited]; st.Exit != 3 {
		t.Errorf("the exited container's exit code is %d after the upgrade, want 3", st.Exit)
	}
	// Everything the previous daemon left on the node is owned by a record this build
	// read, the killed container's leftovers included.
	leaked, held := n.leaks(t, u.cur)
	if len(leaked) > 0 {
		t.Errorf("inspect --leaks right after the upgrade:\n  %s", strings.Join(leaked, "\n  "))
	}
	if held == 0 {
		t.Errorf("inspect --leaks found nothing that records own right after the upgrade: it does not see the node")
	}
	t.Logf("inspect --leaks right after the upgrade: %d things owned by records, %d leaked", held, len(leaked))
}

// exec: the running containers run on (the log grows) and ExecSync works in them, the
// one whose conmon was killed and the one in a user namespace too.
func (u *upgrade) exec(t *testing.T) {
	n := u.n
	n.requireCtrState(t, u.running, "CONTAINER_RUNNING")
	before := n.logSize(t, u.running)
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		if after := n.logSize(t, u.running); after <= before {
			return fmt.Errorf("the running container's log stays at %d bytes", after)
		}
		return nil
	})
	if out := n.must(t, "logs", "--tail", "1", u.running); !strings.Contains(out, "tick") {
		t.Errorf("crictl logs --tail 1 of the running container: %q", out)
	}
	for _, id := range []string{u.running, u.alive, u.usernsCtr} {
		if got := n.execSync(t, id, "echo", "upgraded"); got != "upgraded" {
			t.Errorf("crictl exec --sync %s echo upgraded printed %q", id, got)
		}
	}
	requireUIDMap(t, n, u.usernsCtr)
}

// recoverImages: the same images with the same IDs and tags.
func (u *upgrade) recoverImages(t *testing.T) {
	if got := u.n.images(t); !maps.EqualFunc(got, u.imagesBefore, slices.Equal) {
		t.Errorf("images after the upgrade %v, before %v", got, u.imagesBefore)
	}
}

// metrics: the endpoint answers with the daemon's metrics.
func (u *upgrade) metrics(t *testing.T) {
	if body := u.n.metrics(t); !strings.Contains(body, "\ncrijournal_") {
		t.Errorf("the metrics hold no crijournal_ sample:\n%.2000s", body)
	}
}

// claimCachedPod: the timed-out RunPodSandbox's retry gets the sandbox the previous
// daemon cached, without another CNI ADD.
func (u *upgrade) claimCachedPod(t *testing.T) {
	n := u.n
	if id := n.mustID(t, "runp", u.cachedPod.path); id != u.cachedPodID {
		t.Fatalf("the retry of the timed-out RunPodSandbox got %s, want the cached %s", id, u.cachedPodID)
	}
	if adds := n.cniCalls(t, "ADD", u.cachedPod.name); len(adds) != 1 {
		t.Errorf("CNI ADD calls of the cached pod: %v, want only the first", adds)
	}
	if st := n.podStates(t)[u.cachedPodID]; st != "SANDBOX_READY" {
		t.Errorf("the claimed sandbox is %q, want SANDBOX_READY", st)
	}
}

// claimCachedContainer: the timed-out CreateContainer's retry gets the container the
// previous daemon cached, without starting conmon again, and it starts.
func (u *upgrade) claimCachedContainer(t *testing.T) {
	n := u.n
	starts := n.conmonStarts(t)
	if id := n.mustID(t, "create", u.fullID, u.cachedCtr, u.full.path); id != u.cachedCtrID {
		t.Fatalf("the retry of the timed-out CreateContainer got %s, want the cached %s", id, u.cachedCtrID)
	}
	if got := n.conmonStarts(t); got != starts {
		t.Errorf("the retry started conmon again (%d starts, want %d)", got, starts)
	}
	n.must(t, "start", u.cachedCtrID)
	n.waitCtrState(t, u.cachedCtrID, "CONTAINER_RUNNING", 20*time.Second)
}

// inflightRolledBack (SIGKILL only): the creation under way when the previous daemon
// died is rolled back at start (its network deleted, its record gone), and the pod can
// be made again.
func (u *upgrade) inflightRolledBack(t *testing.T) {
	n := u.n
	if r, ok := n.record(t, u.cur, u.inflightID); ok {
		t.Errorf("the journal still holds the in-flight creation: %s", describe(r))
	}
	if !slices.Contains(n.cniCalls(t, "DEL", u.inflight.name), u.inflightID) {
		t.Errorf("no CNI DEL of the in-flight sandbox %s", u.inflightID)
	}
	if _, ok := n.podStates(t)[u.inflightID]; ok {
		t.Errorf("the rolled-back sandbox %s is listed", u.inflightID)
	}
	if owner := slices.Collect(maps.Values(n.ipAllocations(t))); slices.Contains(owner, u.inflightID) {
		t.Errorf("the rolled-back sandbox %s still holds an address", u.inflightID)
	}
	id := n.mustID(t, "runp", u.inflight.path)
	if id == u.inflightID {
		t.Errorf("runp of the rolled-back pod got the rolled-back sandbox %s", id)
	}
}

// failingUndoRetried: this build's daemon retries the undo the previous one left
// failing; once CNI DEL works again the record is gone and the address freed.
func (u *upgrade) failingUndoRetried(t *testing.T) {
	n := u.n
	if r, ok := n.record(t, u.cur, u.undoingID); !ok || !isFailingUndo(r) {
		t.Errorf("the failing undo after the upgrade: found %v, %s; want undoing without the name, its undo failed", ok, describe(r))
	}
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		if dels := len(n.cniCalls(t, "DEL", "undo-fails")); dels <= u.undoDELsBefore {
			return fmt.Errorf("this build's daemon did not retry the failing DEL of %s (%d calls, as before it started)", u.undoingID, dels)
		}
		return nil
	})
	n.fault(t, "undo-fails", "fail-DEL", false, "")
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		if r, ok := n.record(t, u.cur, u.undoingID); ok {
			return fmt.Errorf("the undo of %s still in the journal once DEL works: %s", u.undoingID, describe(r))
		}
		return nil
	})
	if owner := slices.Collect(maps.Values(n.ipAllocations(t))); slices.Contains(owner, u.undoingID) {
		t.Errorf("the undone sandbox %s still holds an address", u.undoingID)
	}
}

// manipulate: every container can be started (if created), stopped and removed; a new
// container runs in an old pod and a new pod runs; once every pod is removed nothing is
// listed.
func (u *upgrade) manipulate(t *testing.T) {
	n := u.n
	for id, st := range n.ctrStates(t) {
		switch st.State {
		case "CONTAINER_CREATED":
			n.must(t, "start", id)
			n.waitCtrState(t, id, "CONTAINER_RUNNING", 20*time.Second)
			fallthrough
		case "CONTAINER_RUNNING":
			n.must(t, "stop", "-t", "0", id)
			n.requireCtrState(t, id, "CONTAINER_EXITED")
		}
		n.must(t, "rm", id)
	}
	if ids := n.ctrStates(t); len(ids) != 0 {
		t.Errorf("containers listed after each was removed: %v", ids)
	}

	newCtr := n.mustID(t, "create", u.fullID, ctrConfig(t, "new-in-old", otherImage, podPID, false, sleeper...), u.full.path)
	n.must(t, "start", newCtr)
	n.waitCtrState(t, newCtr, "CONTAINER_RUNNING", 20*time.Second)
	if got := n.execSync(t, newCtr, "echo", "new"); got != "new" {
		t.Errorf("exec in the new container of an old pod printed %q", got)
	}
	p := n.podConfig(t, "new-pod", podPID, false)
	podID := n.mustID(t, "runp", p.path)
	c := n.mustID(t, "create", podID, ctrConfig(t, "new-pod-ctr", image, podPID, false, sleeper...), p.path)
	n.must(t, "start", c)
	n.waitCtrState(t, c, "CONTAINER_RUNNING", 20*time.Second)

	for id := range n.podStates(t) {
		n.must(t, "stopp", id)
		n.must(t, "rmp", id)
	}
	if pods, ctrs := n.podStates(t), n.ctrStates(t); len(pods) != 0 || len(ctrs) != 0 {
		t.Errorf("after every pod was removed: pods %v, containers %v", pods, ctrs)
	}
	for _, id := range []string{u.fullID, podID} {
		if pids := pauseProcesses(id); len(pids) != 0 {
			t.Errorf("pause processes %v of the removed pod %s", pids, id)
		}
	}
}

// noLeaks: inspect --leaks finds nothing, with the daemon running and once it is
// stopped (the journal's records then count), and the journal is empty.
func (u *upgrade) noLeaks(t *testing.T) {
	n := u.n
	var left []string
	err := testenv.Poll(20*time.Second, 200*time.Millisecond, func() error {
		if left, _ = n.leaks(t, u.cur); len(left) > 0 {
			return fmt.Errorf("leaked")
		}
		return nil
	})
	if err != nil {
		t.Errorf("inspect --leaks with the daemon running, 20s after the removals:\n  %s", strings.Join(left, "\n  "))
	}
	n.stop(t, syscall.SIGTERM)
	if left, _ := n.leaks(t, u.cur); len(left) > 0 {
		t.Errorf("inspect --leaks with the daemon stopped:\n  %s", strings.Join(left, "\n  "))
	}
	for _, r := range n.records(t, u.cur) {
		t.Errorf("the journal still holds %s %s: %s", r.Kind, r.ID, describe(r))
	}
}

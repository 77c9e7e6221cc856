package test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
)

// The crash tests arm one failure point with the action "kill" (the daemon
// sends itself SIGKILL there), make the request that reaches it, start the
// daemon again unarmed, and check THE invariant: what the crash interrupted
// is either fully gone (nothing listed, nothing left on the node) or kept and
// handed to the retry of the same request; never a third state (listed but
// half made, or hidden while it holds an address forever).

// crashCase is one row of the matrix: a failure point of a flow and the
// trigger that reaches it.
type crashCase struct {
	flow    string
	point   string
	trigger *crashTrigger
}

// name is the case's subtest name: the point, and the trigger's variant.
func (c crashCase) name() string {
	if c.trigger.variant == "" {
		return c.point
	}
	return c.point + " (" + c.trigger.variant + ")"
}

// Triggers of the pod sandbox flows (pod network: host network skips the
// network points).
var (
	// createSandboxTrigger: RunPodSandbox of a new pod. A creation may be
	// rolled back, cached for the retry, or created (if the crash came
	// after the record was answered).
	createSandboxTrigger = &crashTrigger{
		how: "crictl runp of a new pod",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			if id, _, err := d.runp(t, pod); err == nil {
				t.Fatalf("crictl runp returned sandbox %s: the daemon did not crash at the armed point (a misspelt point name?)", id)
			}
			return ""
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone, outcomeCached, outcomeCreated},
	}

	// timedOutSandboxTrigger: RunPodSandbox whose request times out
	// (crictl runp -T 1s) during a slow CNI ADD; the daemon goes on, so the
	// creation finishes after the deadline and is answered "cached". A crash
	// then must not lose it: the retry gets it, after the restart.
	timedOutSandboxTrigger = &crashTrigger{
		how:     "crictl runp -T 1s of a new pod while CNI ADD takes 3s",
		variant: "timed out",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			d.slowCNI(t, 3*time.Second)
			_, stderr, err := d.runp(t, "-T", "1s", pod)
			requireCode(t, "crictl runp -T 1s with a slow network", err, stderr, "DeadlineExceeded")
			id := d.waitADD(t, 1, 5*time.Second)
			d.slowCNI(t, 0)
			return id
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeCached},
	}

	// removeSandboxTrigger: RemovePodSandbox of a created, ready sandbox
	// (not stopped: the network is still attached, so the removal undoes
	// both steps). crictl rmp refuses a ready sandbox without -f, and -f
	// stops it first, so the RPC is called directly. After the restart the
	// removal must have been finished.
	removeSandboxTrigger = &crashTrigger{
		how: "crictl runp, then RemovePodSandbox of the ready sandbox",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			id := d.mustRunp(t, pod)
			d.requireState(t, id, "SANDBOX_READY")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := d.cri(t).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err == nil {
				t.Fatalf("RemovePodSandbox of %s succeeded: the daemon did not crash at the armed point (a misspelt point name?)", id)
			} else {
				t.Logf("RemovePodSandbox of %s: %v (the daemon crashed)", id, err)
			}
			return id
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone},
	}

	// rollbackSandboxTrigger: RunPodSandbox while CNI ADD fails, so the
	// creation is rolled back at once and the crash hits the rollback. A
	// failed creation can only end gone.
	rollbackSandboxTrigger = &crashTrigger{
		how: "crictl runp while CNI ADD fails",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			d.failCNI(t, "ADD", true)
			if id, _, err := d.runp(t, pod); err == nil {
				t.Fatalf("crictl runp returned sandbox %s although CNI ADD fails", id)
			}
			return ""
		},
		reset:   func(t *testing.T, d *daemon) { d.failCNI(t, "ADD", false) },
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone},
	}
)

// usernsTrigger is trigger for a pod with its own user namespace (mode POD, a
// shared pid namespace: one userns-pin step, whose pause process is the child that
// made the pod's namespaces). Its settle also requires that a crashed request
// that left nothing listed and nothing pinned left no pause process either (the
// leak check does not look for processes), and that none is left at the end.
func usernsTrigger(trigger *crashTrigger) *crashTrigger {
	u := *trigger
	u.variant = "userns"
	u.how += " with its own user namespace"
	u.pod = func(t *testing.T, d *daemon) string {
		return usernsPod(t, "crash", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": idMapping(0, usernsHostID, 65536), "gids": idMapping(0, usernsHostID, 65536)})
	}
	u.settle = func(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
		t.Helper()
		if crashed != "" && len(d.pods(t)) == 0 && len(d.leaks(t)) == 0 {
			if pids := pauseProcesses(crashed); len(pids) > 0 {
				t.Errorf("after the restart nothing of %s is listed or pinned, yet its pause processes %v run", crashed, pids)
			}
		}
		out := trigger.settle(t, d, pod, crashed)
		if crashed != "" {
			if pids := pauseProcesses(crashed); len(pids) > 0 {
				t.Errorf("pause processes %v of %s run after its removal", pids, crashed)
			}
		}
		return out
	}
	return &u
}

// crashMatrix lists every failure point the crash test covers. Add rows
// here when a flow gains steps. The container flows' triggers are in
// container_test.go.
var crashMatrix = []crashCase{
	{"sandbox-create", "sandbox-create/netns-pin/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/netns-pin/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/netns-pin/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/cni-attach/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/cni-attach/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/cni-attach/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pause-process/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pause-process/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pause-process/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-resolv-conf/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-resolv-conf/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-resolv-conf/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-hostname/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-hostname/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-hostname/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-shm/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-shm/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/pod-shm/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/before-answer", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/after-answer", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/after-answer", timedOutSandboxTrigger},

	{"sandbox-remove", "journal/remove/cni-attach/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/cni-attach/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pause-process/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pause-process/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-shm/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-shm/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-hostname/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-hostname/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-resolv-conf/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/pod-resolv-conf/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/netns-pin/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/netns-pin/after-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/before-forget", removeSandboxTrigger},

	{"sandbox-rollback", "journal/rollback/cni-attach/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/cni-attach/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pause-process/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pause-process/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-shm/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-shm/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-hostname/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-hostname/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-resolv-conf/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/pod-resolv-conf/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/netns-pin/before-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/netns-pin/after-undo", rollbackSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/before-forget", rollbackSandboxTrigger},

	{"sandbox-create", "sandbox-create/userns-pin/before-intent", usernsTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/userns-pin/after-intent", usernsTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/userns-pin/after-action", usernsTrigger(createSandboxTrigger)},
	{"sandbox-remove", "journal/remove/userns-pin/before-undo", usernsTrigger(removeSandboxTrigger)},
	{"sandbox-remove", "journal/remove/userns-pin/after-undo", usernsTrigger(removeSandboxTrigger)},
	{"sandbox-rollback", "journal/rollback/userns-pin/before-undo", usernsTrigger(rollbackSandboxTrigger)},

	{"container-create", "container-create/storage-container/before-intent", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-intent", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-action", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-intent", usernsContainerTrigger(createContainerTrigger)},
	{"container-create", "container-create/storage-container/after-action", usernsContainerTrigger(createContainerTrigger)},
	{"container-create", "container-create/oci-container/before-intent", createContainerTrigger},
	{"container-create", "container-create/oci-container/after-intent", createContainerTrigger},
	{"container-create", "container-create/oci-container/after-action", createContainerTrigger},
	{"container-create", "container-create/before-answer", createContainerTrigger},
	{"container-create", "container-create/after-answer", createContainerTrigger},
	{"container-create", "container-create/after-answer", timedOutContainerTrigger},
	{"container-create", "container-create/storage-image-volume/before-intent", createImageVolumeTrigger},
	{"container-create", "container-create/storage-image-volume/after-intent", createImageVolumeTrigger},
	{"container-create", "container-create/storage-image-volume/after-action", createImageVolumeTrigger},
	{"container-create", "container-create/oci-container/after-action", createImageVolumeTrigger},

	{"container-rollback", "journal/rollback/oci-container/before-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/oci-container/after-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/before-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/after-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/before-undo", usernsContainerTrigger(rollbackContainerTrigger)},
	{"container-rollback", "journal/rollback/before-forget", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-image-volume/before-undo", rollbackImageVolumeTrigger},
	{"container-rollback", "journal/rollback/storage-image-volume/after-undo", rollbackImageVolumeTrigger},

	{"container-remove", "journal/remove/oci-container/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/oci-container/after-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/storage-container/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/storage-container/after-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/before-forget", removeContainerTrigger},
	{"container-remove", "journal/remove/storage-image-volume/before-undo", removeImageVolumeTrigger},
	{"container-remove", "journal/remove/storage-image-volume/after-undo", removeImageVolumeTrigger},
}

// TestCrashMatrix kills the daemon at every failure point of the table (each
// point in its own daemon), restarts it unarmed and checks that the
// interrupted work is gone or handed to the retry, that nothing leaks, and
// that the journal is empty and consistent afterwards.
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	type result struct {
		out    crashOutcome // "" when the subtest stopped before an outcome
		failed bool
	}
	var mu sync.Mutex
	results := map[string]result{} // subtests that ran (-run may filter some out)
	t.Cleanup(func() {
		// Runs once every subtest has finished.
		mu.Lock()
		defer mu.Unlock()
		count := map[crashOutcome]int{}
		covered, failed := 0, 0
		for _, c := range crashMatrix {
			r, ran := results[c.name()]
			verdict := string(r.out)
			switch {
			case !ran:
				verdict = "not run"
			case r.failed:
				failed++
				verdict = "FAILED " + verdict
			default:
				covered++
				count[r.out]++
			}
			t.Logf("crash matrix: %-16s %-57s %s", c.flow, c.name(), verdict)
		}
		points := map[string]bool{}
		for _, c := range crashMatrix {
			if r, ran := results[c.name()]; ran && !r.failed {
				points[c.point] = true
			}
		}
		t.Logf("crash matrix: %d of %d cases passed, covering %d distinct failure points (%s %d, %s %d, %s %d; %d failed, %d not run)",
			covered, len(crashMatrix), len(points), outcomeGone, count[outcomeGone], outcomeCached, count[outcomeCached],
			outcomeCreated, count[outcomeCreated], failed, len(crashMatrix)-len(results))
	})
	seen := map[string]bool{}
	for _, c := range crashMatrix {
		if seen[c.name()] {
			t.Fatalf("%s is twice in the crash matrix", c.name())
		}
		seen[c.name()] = true
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			var out crashOutcome
			defer func() {
				// Deferred: also when the subtest stops at a t.Fatal.
				mu.Lock()
				results[c.name()] = result{out, t.Failed()}
				mu.Unlock()
			}()
			out = runCrashCase(t, c)
		})
	}
}

// runCrashCase runs one row of the crash matrix and returns its outcome.
func runCrashCase(t *testing.T, c crashCase) crashOutcome {
	t.Helper()
	armed := c.point + "=kill"
	if c.trigger.alsoArm != "" {
		armed += "," + c.trigger.alsoArm
	}
	opts := daemonOptions{env: []string{failpoint.EnvVar + "=" + armed}}
	if c.trigger.containers {
		opts.registries = startImageRegistry(t).mirror()
		opts.conmonPath = conmonWrapper(t)
	}
	d := startDaemon(t, opts)
	pod := podConfig(t, "crash", "e2e", randomHex(t, 16), 0, false)
	if c.trigger.containers {
		pod = d.containerPod(t, "crash", false)
	}
	if c.trigger.pod != nil {
		pod = c.trigger.pod(t, d)
	}
	t.Logf("%s: %s", c.name(), c.trigger.how)
	known := c.trigger.provoke(t, d, pod)
	d.requireKilledAt(t, c.point, 10*time.Second)

	// The journal as the crash left it, before recovery touches it.
	recs := d.records(t)
	if c.trigger.containers {
		recs = slices.DeleteFunc(recs, func(r journal.Record) bool { return r.Kind != journal.KindContainer })
	}
	for _, r := range recs {
		t.Logf("journal at the crash: %s", describeSteps(r))
	}
	requireJournalAtPoint(t, c, recs, known)
	crashed := known
	if crashed == "" && len(recs) == 1 {
		crashed = recs[0].ID
	}
	d.checkJournal(t)

	if c.trigger.reset != nil {
		c.trigger.reset(t, d)
	}
	d.restartUnarmed(t)
	out := c.trigger.settle(t, d, pod, crashed)
	if !slices.Contains(c.trigger.allowed, out) {
		t.Errorf("%s: outcome %s, want one of %v", c.name(), out, c.trigger.allowed)
	}
	t.Logf("%s: outcome %s", c.name(), out)

	d.stopClean(t)
	return out
}

// requireJournalAtPoint checks what the journal file holds when the daemon
// died at the point: an intent is durable before its action ("after-intent",
// "after-action" find the step), a finished creation is durably ready before
// it is answered, a removal is durable before anything is undone, and an
// answered creation is durably created.
func requireJournalAtPoint(t *testing.T, c crashCase, recs []journal.Record, known string) {
	t.Helper()
	parts := strings.Split(c.point, "/")
	last := parts[len(parts)-1]
	if len(recs) == 0 && known == "" && last == "before-intent" {
		// Nothing acted yet: the record need not be durable.
		return
	}
	if len(recs) != 1 {
		var got []string
		for _, r := range recs {
			got = append(got, describeRecord(r))
		}
		t.Fatalf("journal at the crash at %s: %d records %q, want the one of the crashed request", c.point, len(recs), got)
	}
	rec := recs[0]
	if known != "" && rec.ID != known {
		t.Fatalf("journal at the crash at %s: record %s, want %s", c.point, rec.ID, known)
	}
	hasStep := func(kind string) bool {
		for _, s := range rec.Steps {
			if string(s.Kind) == kind {
				return true
			}
		}
		return false
	}
	switch {
	case strings.HasPrefix(c.point, "journal/remove/"):
		if rec.State != journal.StateRemoving {
			t.Errorf("journal at the crash at %s: state %s, want %s (a removal is durable before anything is undone)", c.point, rec.State, journal.StateRemoving)
		}
	case strings.HasPrefix(c.point, "journal/rollback/"):
		// A rollback need not be durable first: creating or undoing.
		if rec.State != journal.StateCreating && rec.State != journal.StateUndoing {
			t.Errorf("journal at the crash at %s: state %s, want %s or %s", c.point, rec.State, journal.StateCreating, journal.StateUndoing)
		}
	case last == "before-answer":
		// Every step's intent durable, the object and the answer not yet: they are
		// committed together (journal.Settle), so recovery rolls the creation back.
		if rec.State != journal.StateCreating || len(rec.Steps) == 0 || rec.Object != nil {
			t.Errorf("journal at the crash at %s: state %s with %d steps and object %s, want %s with its steps and no object (the object and the answer are one commit)",
				c.point, rec.State, len(rec.Steps), rec.Object, journal.StateCreating)
		}
	case last == "after-answer":
		// Created for a live request, cached for one past its deadline:
		// either way durable before the answer is sent.
		if rec.State != journal.StateCreated && rec.State != journal.StateCached {
			t.Errorf("journal at the crash at %s: state %s, want %s or %s (the answer is durable before it is sent)", c.point, rec.State, journal.StateCreated, journal.StateCached)
		}
	case len(parts) == 3 && (last == "after-intent" || last == "after-action"):
		if !hasStep(parts[1]) {
			t.Errorf("journal at the crash at %s: no %s step, want its intent committed before the action", c.point, parts[1])
		}
	case len(parts) == 3 && last == "before-intent":
		if hasStep(parts[1]) {
			t.Errorf("journal at the crash at %s: a %s step is there before its intent", c.point, parts[1])
		}
	}
}

// settleSandbox checks the invariant for a pod sandbox whose request crashed
// (crashed is its ID when known), after the restart: either nothing is listed
// and nothing is left (gone), or nothing is listed and what is left is handed
// whole to the retry (cached), or the sandbox is listed ready and whole and
// the retry gets the same ID (created). Then it removes the sandbox the
// retry got and checks the node is clean.
func settleSandbox(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
	t.Helper()
	listed := d.pods(t)
	left := d.leaks(t) // the daemon runs: no journal part
	adds := len(d.addedIDs(t))
	var out crashOutcome
	var id string
	switch {
	case len(listed) == 0 && len(left) == 0:
		out = outcomeGone
		id = d.mustRunp(t, pod)
		if id == crashed {
			t.Fatalf("nothing of %s was left after the restart, yet the retry got it back", crashed)
		}
		if got := d.addedIDs(t); len(got) != adds+1 || got[len(got)-1] != id {
			t.Fatalf("the retry got %s, but CNI ADD calls are %v: want one new ADD for it", id, got)
		}
	case len(listed) == 0:
		out = outcomeCached
		t.Logf("after the restart nothing is listed; the node holds:\n  %s", strings.Join(left, "\n  "))
		id = d.mustRunp(t, pod)
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart nothing is listed but the node holds what %s made; the retry got a new sandbox %s instead: the kept work is orphaned (neither gone nor returned)", crashed, id)
		}
		if got := d.addedIDs(t); len(got) != adds {
			t.Fatalf("the retry got the kept sandbox %s but CNI ADD was called again (calls %v)", id, got)
		}
	case len(listed) == 1:
		out = outcomeCreated
		id = listed[0]
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart crictl pods lists %s, want the crashed request's %s", id, crashed)
		}
		d.requireState(t, id, "SANDBOX_READY")
		again := d.mustRunp(t, pod)
		if again != id {
			t.Fatalf("the retry of a created sandbox %s got %s, want the same ID (a true duplicate)", id, again)
		}
		if got := d.addedIDs(t); len(got) != adds {
			t.Fatalf("the retry of the created sandbox %s called CNI ADD again (calls %v)", id, got)
		}
	default:
		t.Fatalf("after the restart crictl pods lists %v: more than the one pod requested", listed)
	}
	d.requirePods(t, "after the retry", id)
	d.requireWholeSandbox(t, id)
	d.assertNoLeaks(t, id)

	d.removePod(t, id)
	d.requirePods(t, "after stopp and rmp")
	d.assertNoLeaks(t)
	return out
}

// TestCrashDuringSlowCNI kills the daemon while a slow CNI ADD is in flight:
// after the restart the half-made sandbox is rolled back, no plugin works on
// for it, and no IP allocation appears later, when the plugin's sleep would
// have ended. Two cases: the bridge plugin is slow (it dies with the daemon,
// by its parent-death signal), and the IPAM plugin is slow: the bridge
// plugin's child, which has no parent-death signal, so it outlives the
// daemon and would allocate an address after recovery's DEL unless recovery
// kills it first.
func TestCrashDuringSlowCNI(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	for _, tc := range []struct {
		name string
		slow func(t *testing.T, d *daemon)        // slows the ADD down
		wait func(t *testing.T, d *daemon) string // waits until the slow part runs; the sandbox ID
	}{
		{
			"slow bridge plugin",
			func(t *testing.T, d *daemon) { d.slowCNI(t, delay) },
			func(t *testing.T, d *daemon) string { return d.waitADD(t, 2, 5*time.Second) },
		},
		{
			"slow IPAM plugin outliving the daemon",
			func(t *testing.T, d *daemon) { d.writeSlowIPAMWrapper(t, delay) },
			func(t *testing.T, d *daemon) string {
				id := d.waitADD(t, 2, 5*time.Second)
				d.waitIPAMCall(t, "ADD "+id, 5*time.Second)
				return id
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			// One pod first, so that the bridge plugin has set the bridge
			// up completely: a bridge whose first ADD is cut off between
			// attaching the veth and pinning the bridge's MAC is left, once
			// the veth is gone, with MAC 00:00:00:00:00:00, and bridge
			// 1.1.1 then fails every ADD ("could not set bridge's mac").
			d.removePod(t, d.mustRunp(t, podConfig(t, "warm-up", "e2e", randomHex(t, 16), 0, false)))
			pod := podConfig(t, "crash-slow", "e2e", randomHex(t, 16), 0, false)
			tc.slow(t, d)
			bg := d.runpBackground(t, "-T", "10s", pod)
			id := tc.wait(t, d)
			killedAt := time.Now()
			d.kill(t)
			r := <-bg
			if r.err == nil {
				t.Fatalf("crictl runp succeeded (%s) although the daemon was killed during CNI ADD", strings.TrimSpace(r.stdout))
			}
			t.Logf("CNI processes of %s still running after the kill: %q", id, pluginProcesses(t, id))
			d.slowCNI(t, 0)

			d.restart(t)
			if procs := pluginProcesses(t, id); len(procs) != 0 {
				t.Errorf("after recovery, CNI processes still work for the rolled-back sandbox %s: %q", id, procs)
			}
			d.requirePods(t, "after the restart")
			if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{"DEL", id}) {
				t.Errorf("recovery did not undo the interrupted CNI ADD of %s with a DEL (calls %v)", id, calls)
			}
			d.assertNoLeaks(t)

			// Past the end of the plugin's sleep: an ADD that lived on would
			// have allocated an address by now.
			time.Sleep(time.Until(killedAt.Add(delay + 2*time.Second)))
			if allocs := d.ipamAllocations(t); len(allocs) != 0 {
				t.Errorf("%v after the crash, host-local holds %v: the interrupted ADD finished after recovery", time.Since(killedAt).Round(time.Second), allocs)
			}
			d.assertNoLeaks(t)

			// The name is free.
			d.writeSlowIPAMWrapper(t, 0)
			again := d.mustRunp(t, pod)
			if again == id {
				t.Fatalf("runp after recovery returned the rolled-back sandbox %s", id)
			}
			d.requireWholeSandbox(t, again)
			d.removePod(t, again)
			d.stopClean(t)
		})
	}
}

// writeSlowIPAMWrapper installs (or, with 0, makes fast) a host-local
// wrapper first in the plugin path: the bridge plugin delegates IPAM to it.
// It logs "<COMMAND> <container ID>" to ipam-calls.log, sleeps delay on ADD,
// then execs the real host-local. It is a child of the bridge plugin with no
// parent-death signal, as the real IPAM plugin is.
func (d *daemon) writeSlowIPAMWrapper(t *testing.T, delay time.Duration) {
	t.Helper()
	script := `#!/bin/bash
# crijournal end-to-end tests: host-local, slowed on ADD.
echo "${CNI_COMMAND} ${CNI_CONTAINERID}" >> ` + shellQuote(filepath.Join(d.base, "ipam-calls.log")) + `
if [ "${CNI_COMMAND}" = ADD ]; then
	sleep ` + strconv.FormatFloat(delay.Seconds(), 'f', 3, 64) + `
fi
exec ` + cniDir + `/host-local "$@"
`
	writeFile(t, filepath.Join(d.pluginDir, "host-local"), script, 0o755)
}

// waitIPAMCall waits until the host-local wrapper has logged the call
// ("<COMMAND> <container ID>").
func (d *daemon) waitIPAMCall(t *testing.T, call string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(filepath.Join(d.base, "ipam-calls.log"))
		if slices.Contains(strings.Split(string(b), "\n"), call) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the IPAM plugin was not called with %q within %v (calls: %q)", call, within, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSIGTERMDuringSlowCreation stops the daemon (SIGTERM) while a creation
// waits on a CNI ADD that would take 20 s: the daemon exits within its
// graceful stop timeout (5 s) plus a margin, and the next start rolls the
// creation back or keeps it for the retry; nothing leaks.
func TestSIGTERMDuringSlowCreation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	pod := podConfig(t, "sigterm", "e2e", randomHex(t, 16), 0, false)
	d.slowCNI(t, 20*time.Second)
	bg := d.runpBackground(t, "-T", "60s", pod)
	id := d.waitADD(t, 1, 5*time.Second)

	d.terminate(t, 10*time.Second) // graceful stop: 5 s, then requests are cut off
	r := <-bg
	if r.err == nil {
		t.Fatalf("crictl runp succeeded (%s) although the CNI ADD it waited on takes 20s and the daemon stopped", strings.TrimSpace(r.stdout))
	}
	t.Logf("crictl runp failed after %v: %s", r.elapsed.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	for _, rec := range d.records(t) {
		t.Logf("journal after the stop: %s", describeSteps(rec))
	}
	d.checkJournal(t)
	d.slowCNI(t, 0)

	d.restart(t)
	if procs := pluginProcesses(t, id); len(procs) != 0 {
		t.Errorf("after recovery, CNI processes still work for the interrupted sandbox %s: %q", id, procs)
	}
	out := settleSandbox(t, d, pod, id)
	if out != outcomeGone && out != outcomeCached {
		t.Errorf("creation interrupted by SIGTERM: outcome %s, want %s or %s", out, outcomeGone, outcomeCached)
	}
	t.Logf("creation interrupted by SIGTERM: outcome %s", out)
	d.stopClean(t)
}

package test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	{"sandbox-create", "sandbox-create/nri-pod/before-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/nri-pod/after-intent", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/nri-pod/after-action", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/before-answer", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/after-answer", createSandboxTrigger},
	{"sandbox-create", "sandbox-create/after-answer", timedOutSandboxTrigger},

	{"sandbox-remove", "journal/remove/nri-pod/before-undo", removeSandboxTrigger},
	{"sandbox-remove", "journal/remove/nri-pod/after-undo", removeSandboxTrigger},
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

	{"sandbox-rollback", "journal/rollback/nri-pod/before-undo", rollbackAnsweredSandboxTrigger},
	{"sandbox-rollback", "journal/rollback/nri-pod/after-undo", rollbackAnsweredSandboxTrigger},
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

	{"container-create", "container-create/oci-conmon/before-intent", createContainerTrigger},
	{"container-create", "container-create/oci-conmon/after-intent", createContainerTrigger},
	{"container-create", "container-create/oci-conmon/after-action", createContainerTrigger},
	{"container-create", "container-create/storage-container/before-intent", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-intent", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-action", createContainerTrigger},
	{"container-create", "container-create/storage-container/after-intent", usernsContainerTrigger(createContainerTrigger)},
	{"container-create", "container-create/storage-container/after-action", usernsContainerTrigger(createContainerTrigger)},
	{"container-create", "container-create/nri-container/before-intent", createContainerTrigger},
	{"container-create", "container-create/nri-container/after-intent", createContainerTrigger},
	{"container-create", "container-create/nri-container/after-action", createContainerTrigger},
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
	{"container-rollback", "journal/rollback/nri-container/before-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/nri-container/after-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/before-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/after-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-container/before-undo", usernsContainerTrigger(rollbackContainerTrigger)},
	{"container-rollback", "journal/rollback/oci-conmon/before-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/oci-conmon/after-undo", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/before-forget", rollbackContainerTrigger},
	{"container-rollback", "journal/rollback/storage-image-volume/before-undo", rollbackImageVolumeTrigger},
	{"container-rollback", "journal/rollback/storage-image-volume/after-undo", rollbackImageVolumeTrigger},

	{"container-remove", "journal/remove/oci-container/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/oci-container/after-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/nri-container/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/nri-container/after-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/storage-container/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/storage-container/after-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/oci-conmon/before-undo", removeContainerTrigger},
	{"container-remove", "journal/remove/oci-conmon/after-undo", removeContainerTrigger},
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
	only, err := crashRowsFilter()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crashMatrix {
		if seen[c.name()] {
			t.Fatalf("%s is twice in the crash matrix", c.name())
		}
		seen[c.name()] = true
		if only != nil && !only.MatchString(c.name()) {
			continue
		}
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

// envCrashRows narrows the crash matrix to the rows whose names (point and variant) match
// this regular expression (-run cannot: the points' names hold slashes).
const envCrashRows = "CRIJOURNAL_E2E_CRASH_ROWS"

// crashRowsFilter is envCrashRows compiled; nil when unset.
func crashRowsFilter() (*regexp.Regexp, error) {
	s := os.Getenv(envCrashRows)
	if s == "" {
		return nil, nil
	}
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envCrashRows, err)
	}
	return re, nil
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
	// The network attaches beside a pause process's start: a crash at the pause's
	// points may kill the bridge plugin's first ADD part way (see presetBridge).
	d.presetBridge(t)
	if strings.Contains(c.point, "/nri-") {
		// With no plugin registered, an NRI step is noted, not journaled before it acts
		// (it has nobody to tell; see package nri): the rows of its failure points check
		// the journaled path, a plugin's.
		connectPlugin(t, d, &nriPlugin{})
	}
	pod := podConfig(t, "crash", "e2e", randomHex(t, 16), 0, false)
	if e2eSystemd() {
		// In the node's own slice, so that its units are told from other nodes' in the
		// same systemd (the default slice is shared).
		pod = sliceCrashPod(t, d)
	}
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

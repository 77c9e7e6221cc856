package test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/server"
)

// The full-disk fault tests (issue 10, issue 40): the journal lives on a small tmpfs of
// its own (journal_path), mounted and unmounted by the test; the rest of the node (images,
// namespaces, CNI) stays on the ordinary disk. At the step a test targets, a file fills
// the tmpfs.
//
// The journal keeps journal_reserve_mib (16 MiB by default) preallocated ahead of its
// file's growth: on the full disk it is low on space, new pods and containers are refused
// (ResourceExhausted) and the commits of everything else (stops, removals, recovery) go
// into the reserve, so that the kubelet can free the disk
// (TestFullDiskRemovalsCommitIntoReserve). A commit that needs more than the reserve has
// left fails, and the daemon must fail-stop: exit non-zero with one clear message, having
// published nothing the file does not hold. After the space is freed and the daemon
// restarted, recovery runs from the file: nothing leaked, nothing lost.
//
// What "needs space" means: bbolt writes every change into pages its file already has
// when enough are free (copy on write reuses the pages the previous version of a record
// freed), and grows the file only when they are not; on a full disk only growth needs
// space. So each fail-stop test makes the targeted commit write more than the file has
// free, and more than the reserve when there is one (those tests set a 1 MiB reserve,
// smallReserve, and their pods carry 1.5 MiB, beyondReserve):
//   - creation: the pod carries a big annotation, so its Ready commit (the first to hold
//     the pod's config) needs pages a small journal never had;
//   - recovery: the same pod, cached (its request timed out) and expired while the daemon
//     was down: its rollback at the next start first commits it undoing, which rewrites
//     that record, and the file has no free run of its size (caching it took fresh pages);
//   - removal, without a reserve: the pod's CNI DEL fails with a 64 KiB message, which
//     the record keeps as the failed undo's error, so the removal's last commit grows the
//     record by 16 pages.

// journalFSSize is the size of the journal's tmpfs: room for the file and its default
// reserve, and as much again free (less free than the reserve is low on space already).
const journalFSSize = 48 << 20

// The pods' ballast (see bigPod): one that fits in the default reserve, and one bigger
// than smallReserve, the setting of the tests that exhaust the reserve.
const (
	ballastFits   = 200 << 10
	beyondReserve = 3 << 19
	smallReserve  = "journal_reserve_mib = 1"
	noReserve     = "journal_reserve_mib = 0"
)

// fullDiskDaemon starts a daemon whose journal is on a tmpfs of its own, and returns the
// tmpfs's directory.
func fullDiskDaemon(t *testing.T, extraTOML ...string) (*daemon, string) {
	t.Helper()
	requirePrereqs(t)
	testenv.RequireRoot(t, "the full-disk tests mount a tmpfs for the journal")
	dir := testenv.SmallFS(t, "", journalFSSize)
	return startDaemon(t, daemonOptions{journalDir: dir, extraTOML: extraTOML}), dir
}

// bigPod writes a pod configuration with an annotation of ballast bytes (see above).
func bigPod(t *testing.T, name string, ballast int) string {
	t.Helper()
	cfg := map[string]any{
		"metadata":    map[string]any{"name": name, "namespace": "fulldisk", "uid": randomHex(t, 8), "attempt": 0},
		"hostname":    "e2e",
		"labels":      map[string]string{"e2e": "crijournal"},
		"annotations": map[string]string{"e2e.crijournal/ballast": strings.Repeat("b", ballast)},
	}
	return writePodJSON(t, "pod-"+sanitize(name), cfg)
}

// requireFailStop waits for the daemon to end by itself after a journal commit failed,
// and requires the fail-stop: a non-zero exit (not a signal), and the one message that
// names the cause, printed once (no warning or error logged it before).
func (d *daemon) requireFailStop(t *testing.T, when string, within time.Duration) {
	t.Helper()
	_, start, exitErr := d.awaitOwnExit(t, within, "after the journal's disk filled")
	var ee *exec.ExitError
	if !errors.As(exitErr, &ee) || ee.ExitCode() <= 0 {
		t.Fatalf("the daemon ended with %v, want a non-zero exit status; log:\n%s", exitErr, d.logTail(60))
	}
	log := d.logOfStart(start)
	want := "crijournal: stopped " + when + ": journal commit failed"
	if n := strings.Count(log, "crijournal: stopped "); n != 1 || !strings.Contains(log, want) || !strings.Contains(log, "no space left on device") ||
		!strings.Contains(log, d.journalPath()) {
		t.Fatalf("the daemon exited (%v), but its log has %d stop messages, want one saying %q, naming ENOSPC and %s; log:\n%s",
			exitErr, n, want, d.journalPath(), d.logTail(60))
	}
	for line := range strings.Lines(log) {
		if (strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN")) && strings.Contains(line, "journal commit failed") {
			t.Errorf("the failed commit is logged before the stop message too: %s", firstLine(errors.New(strings.TrimSpace(line))))
		}
		if strings.HasPrefix(line, "crijournal: stopped ") {
			t.Logf("the daemon failed stop (%v): %s", exitErr, firstLine(errors.New(strings.TrimSpace(line))))
		}
	}
}

// firstLine shortens an error that may carry a plugin's long message.
func firstLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// freeSpace removes the file that filled the journal's tmpfs.
func freeSpace(t *testing.T, filler string) {
	t.Helper()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
}

// TestFullDiskDuringCreation: the disk fills while a pod's network is being attached
// (a creation under way is not refused: its commits go into the reserve); the commit of
// the finished pod needs more than the reserve, fails, the daemon fail-stops, the request
// fails. After the restart the half-made pod is rolled back (IP, veth, namespaces, pause:
// nothing left) and the pod made before the disk filled is still there.
func TestFullDiskDuringCreation(t *testing.T) {
	d, dir := fullDiskDaemon(t, smallReserve)
	kept := d.mustRunp(t, podConfig(t, "kept", "fulldisk", randomHex(t, 8), 0, false))

	d.slowCNI(t, 3*time.Second)
	type result struct {
		stdout, stderr string
		err            error
	}
	runp := make(chan result, 1)
	victim := bigPod(t, "victim", beyondReserve)
	go func() {
		stdout, stderr, err := d.crictlTimeout(2*time.Minute, "runp", victim)
		runp <- result{stdout, stderr, err}
	}()
	d.waitADD(t, 2, time.Minute) // the attach step's intent is on disk; its plugin sleeps
	filler := testenv.FillFS(t, dir, "filler")

	d.requireFailStop(t, "while serving", time.Minute)
	res := <-runp
	if res.err == nil || !strings.Contains(res.stderr, "journal commit failed") {
		t.Errorf("runp on a full disk: %v, stdout %q, stderr %q; want a failure naming the failed commit", res.err, res.stdout, res.stderr)
	}

	freeSpace(t, filler)
	d.slowCNI(t, 0)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requirePods(t, "after the restart, the pod made before the disk filled", kept)
	d.assertNoLeaks(t, kept)
	d.removePod(t, kept)
	d.stopClean(t)
}

// TestFullDiskDuringRemoval: without a space reserve (journal_reserve_mib = 0, or a file
// system that cannot preallocate), the disk is full when a pod is removed and its CNI
// DEL fails with a long message: the removal's commit that records the failed undo needs
// space, the daemon fail-stops. After the restart (space freed, DEL working), the
// interrupted removal is finished: nothing of the pod is left. (With the reserve, the same
// removal commits: TestFullDiskRemovalsCommitIntoReserve.)
func TestFullDiskDuringRemoval(t *testing.T) {
	d, dir := fullDiskDaemon(t, noReserve)
	id := d.mustRunp(t, podConfig(t, "doomed", "fulldisk", randomHex(t, 8), 0, false))
	other := d.mustRunp(t, podConfig(t, "other", "fulldisk", randomHex(t, 8), 0, false))

	writeFile(t, filepath.Join(d.base, "cni-fail-DEL"), strings.Repeat("m", 64<<10), 0o644)
	filler := testenv.FillFS(t, dir, "filler")
	// RemovePodSandbox of the ready pod (crictl rmp would stop it first, and the stop
	// fails on the DEL before it writes anything): the DEL is the removal's undo here.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := d.cri(t).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "journal commit failed") {
		t.Errorf("RemovePodSandbox on a full disk: %v; want Unavailable naming the failed commit", firstLine(err))
	}
	d.requireFailStop(t, "while serving", time.Minute)

	freeSpace(t, filler)
	d.failCNI(t, "DEL", false)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	// The removal was asked for and its mark reached the file: recovery finished it.
	// Had the mark itself failed, the pod would still be listed, whole.
	if pods := d.pods(t); len(pods) == 2 {
		t.Logf("the removal's first commit failed: the pod is still there; removing it again")
		d.removePod(t, id)
	}
	d.requirePods(t, "after the restart", other)
	d.assertNoLeaks(t, other)
	d.removePod(t, other)
	d.stopClean(t)
}

// TestFullDiskDuringRecovery: a pod had every step done but was not yet settled when the
// daemon was killed (its object and answer are one commit, journal.Settle, so the file
// holds it creating); the disk is full when the daemon starts again. Recovery rolls the
// creation back, which only deletes from the file and so needs no space: the daemon
// starts and serves, with nothing of the pod left. After the space is freed, the retry of
// the same request gets a pod: nothing leaked.
//
// The reserve is off here (journal_reserve_mib = 0): with it, the rollback's commit has
// room whatever it needs (TestFullDiskDuringRecoveryWrite); without it, as on a file
// system that cannot preallocate, a recovery that only deletes still needs none.
//
// (Before Settle, the file held such a pod ready, and recovery had to write it cached:
// that commit failed on the full disk and the daemon fail-stopped during recovery. No
// crash of this version leaves a ready record, so that path is no longer reached here.)
//
// NRI is off here. With it on, the creation has one more step, the file's pages lie
// differently, and the rollback's one commit needed a page the full disk could not
// give: the daemon fail-stopped during recovery (the safe outcome
// TestFullDiskDuringRecoveryWrite requires when recovery must write) instead of
// serving. That a delete needs no new page is bbolt's page layout, not a guarantee;
// this test keeps the layout it was written for.
//
// The rollback's commit rewrites a few pages, which must be free ones the file already
// has (see the top of the file): a pod made and removed first (a big one: a run of pages
// freed at once) gives the file that room, as a node that has run a while has it.
// Without it, whether the file had enough free pages at the crash depended on how many
// lazy commits the creation's timing had made (seen in a CI run: the rollback's commit
// grew the file, and the daemon fail-stopped in recovery).
func TestFullDiskDuringRecovery(t *testing.T) {
	d, dir := fullDiskDaemon(t, "enable_nri = false", noReserve)
	d.removePod(t, d.mustRunp(t, bigPod(t, "room", ballastFits)))
	const point = "sandbox-create/before-answer"
	d.restartArmed(t, point)
	pod := bigPod(t, "survivor", ballastFits)
	if _, _, err := d.runp(t, pod); err == nil {
		t.Fatal("runp succeeded through a kill failure point")
	}
	d.requireKilledAt(t, point, time.Minute)

	filler := testenv.FillFS(t, dir, "filler")
	d.mu.Lock()
	d.opts.env = nil
	d.mu.Unlock()
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requirePods(t, "after recovery on a full disk, the unsettled pod is rolled back, not listed")

	freeSpace(t, filler)
	id := d.mustRunp(t, pod)
	d.requirePods(t, "the retry made the pod", id)
	d.assertNoLeaks(t, id)
	d.removePod(t, id)
	d.stopClean(t)
}

// TestFullDiskDuringRecoveryWrite: a recovery that must write. A pod's request timed out,
// its creation finished and was cached, and the daemon stopped; the cached pod expires
// while the daemon is down, and the disk is full when it starts again. Recovery rolls the
// expired pod back, and a rollback of a cached record first commits it undoing (so that a
// crash part way cannot hand a half-undone pod to a retry), rewriting the record:
//   - beyond the reserve (a 1.5 MiB pod, a 1 MiB reserve): that commit fails, and the
//     daemon fail-stops during recovery, before it serves, with the file unchanged. After
//     the space is freed, the next start rolls the pod back.
//   - within the reserve (the default one, left from the daemon's earlier run: the
//     blocks stay with the file): the rollback commits, and the daemon serves on the full
//     disk, low on space: a new pod is refused.
//
// Either way nothing leaked once the space is freed, and the retry gets a new pod.
func TestFullDiskDuringRecoveryWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    []string // journal_reserve_mib, when not the default
		ballast  int
		failStop bool
	}{
		{"beyond the reserve", []string{smallReserve}, beyondReserve, true},
		{"within the reserve", nil, ballastFits, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requirePrereqs(t)
			testenv.RequireRoot(t, "the full-disk tests mount a tmpfs for the journal")
			dir := testenv.SmallFS(t, "", journalFSSize)
			d := startDaemon(t, daemonOptions{journalDir: dir, cacheTTL: 8 * time.Second, extraTOML: tc.extra})
			pod := bigPod(t, "expiring", tc.ballast)
			created := d.timeOut(t, pod)
			d.waitNetworkDone(t, created, 2*slowADD)
			d.stop(t)
			recs := d.records(t)
			if len(recs) != 1 || recs[0].ID != created || recs[0].State != journal.StateCached {
				t.Fatalf("journal after the stop: %v, want one cached record %s", recs, created)
			}

			filler := testenv.FillFS(t, dir, "filler")
			time.Sleep(time.Until(recs[0].Expiry) + 100*time.Millisecond)
			d.start(t, daemonBinary(t))
			if tc.failStop {
				d.requireFailStop(t, "during recovery", 2*time.Minute)
				if after := d.records(t); len(after) != 1 || after[0].ID != created || after[0].State != journal.StateCached {
					t.Errorf("after the failed recovery the file holds %v, want the cached %s as it was", after, created)
				}
				freeSpace(t, filler)
				d.start(t, daemonBinary(t))
				d.waitReady(t)
			} else {
				d.waitReady(t)
				if left := d.liveRecords(t); len(left) != 0 {
					t.Errorf("after recovery on the full disk the journal still holds %s", describeSteps(left[0]))
				}
				d.requireJournalSpace(t, false)
				_, stderr, err := d.runp(t, pod)
				d.requireRefusedForSpace(t, "RunPodSandbox after recovery on the full disk", stderr, err)
				freeSpace(t, filler)
				d.requireJournalSpace(t, true)
			}
			if left := d.liveRecords(t); len(left) != 0 {
				t.Errorf("after recovery with space the journal still holds %s", describeSteps(left[0]))
			}
			d.assertNoLeaks(t)
			id := d.mustRunp(t, pod)
			if id == created {
				t.Errorf("the retry got the expired pod %s", id)
			}
			d.removePod(t, id)
			d.stopClean(t)
		})
	}
}

// TestFullDiskRemovalsCommitIntoReserve (issue 40): the kubelet frees a full disk by
// stopping and removing pods, so those calls must commit on it. With the journal's disk
// full and the default reserve, Status says the journal is low on space while the runtime
// stays ready; a new pod, and a new container in a running pod, are refused with
// ResourceExhausted before anything is made; a running container and its pod are stopped
// and removed; and a pod whose CNI DEL fails with a 64 KiB message is removed too, its
// failed undo kept and retried: commits that grow the file, which fail-stop the daemon
// without the reserve (TestFullDiskDuringRemoval). The daemon keeps serving. Once the
// space is freed, the DEL's retry finishes the removal and creations work again.
func TestFullDiskRemovalsCommitIntoReserve(t *testing.T) {
	requirePrereqs(t)
	testenv.RequireRoot(t, "the full-disk tests mount a tmpfs for the journal")
	dir := testenv.SmallFS(t, "", journalFSSize)
	d, _ := startContainerDaemon(t, daemonOptions{journalDir: dir})
	pod := d.containerPod(t, "evicted", false)
	podID := d.mustRunp(t, pod)
	ctrID := d.run(t, podID, containerConfig(t, "victim", 0, sleeper), pod)
	doomed := d.mustRunp(t, podConfig(t, "doomed", "fulldisk", randomHex(t, 8), 0, false))
	d.requireJournalSpace(t, true)

	filler := testenv.FillFS(t, dir, "filler")
	d.requireJournalSpace(t, false)
	adds, records := len(d.addedIDs(t)), len(d.liveRecords(t))
	_, stderr, err := d.runp(t, podConfig(t, "refused", "fulldisk", randomHex(t, 8), 0, false))
	d.requireRefusedForSpace(t, "RunPodSandbox on the full disk", stderr, err)
	_, stderr, err = d.create(t, nil, podID, containerConfig(t, "refused", 0, sleeper), pod)
	d.requireRefusedForSpace(t, "CreateContainer on the full disk", stderr, err)
	if n := len(d.addedIDs(t)); n != adds {
		t.Errorf("the refused creations made %d CNI ADD calls", n-adds)
	}
	if n := len(d.liveRecords(t)); n != records {
		t.Errorf("the refused creations left %d journal records", n-records)
	}
	d.requirePods(t, "after the refused creations", podID, doomed)
	d.requirePs(t, "after the refused creations", ctrID)

	d.mustCrictl(t, "stop", ctrID)
	d.mustCrictl(t, "rm", ctrID)
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "rmp", podID)
	writeFile(t, filepath.Join(d.base, "cni-fail-DEL"), strings.Repeat("m", 64<<10), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.cri(t).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: doomed}); err != nil {
		t.Errorf("RemovePodSandbox on the full disk, its CNI DEL failing: %v; want it answered, the DEL left to a retry", firstLine(err))
	}
	d.requirePods(t, "after the removals on the full disk")
	// The DEL's retries record its error again, each a commit of a 64 KiB record.
	testenv.Eventually(t, time.Minute, 100*time.Millisecond, func() error {
		for _, r := range d.liveRecords(t) {
			for _, s := range r.Steps {
				if s.UndoAttempts >= 3 {
					return nil
				}
			}
		}
		return errors.New("no undo of the removed pod has failed three times yet")
	})
	if alive, _ := d.running(); !alive {
		t.Fatalf("the daemon stopped on the full disk; log:\n%s", d.logTail(60))
	}
	d.requireJournalSpace(t, false)

	freeSpace(t, filler)
	d.failCNI(t, "DEL", false)
	d.requireJournalSpace(t, true)
	d.waitNoLeaks(t, time.Minute)
	id := d.mustRunp(t, podConfig(t, "after", "fulldisk", randomHex(t, 8), 0, false))
	d.removePod(t, id)
	d.stopClean(t)
}

// requireJournalSpace requires Status (crictl info) to show RuntimeReady true and the
// condition JournalHasSpace as want; false must come with its reason and a message naming
// the journal file.
func (d *daemon) requireJournalSpace(t *testing.T, want bool) {
	t.Helper()
	type condition struct {
		Type    string `json:"type"`
		Status  bool   `json:"status"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	var status struct {
		Conditions []condition `json:"conditions"`
	}
	mustDecode(t, "status", d.info(t)["status"], &status)
	conds := map[string]condition{}
	for _, c := range status.Conditions {
		conds[c.Type] = c
	}
	if !conds[runtimeapi.RuntimeReady].Status {
		t.Errorf("RuntimeReady is %+v, want true: the kubelet stops syncing pods while the runtime is not ready", conds[runtimeapi.RuntimeReady])
	}
	c, ok := conds[server.ConditionJournalHasSpace]
	if !ok || c.Status != want || (!want && (c.Reason != server.ReasonJournalLowSpace || !strings.Contains(c.Message, d.journalPath()))) {
		t.Fatalf("Status condition %s is %+v (present %v), want status %v (false with reason %s and a message naming %s)",
			server.ConditionJournalHasSpace, c, ok, want, server.ReasonJournalLowSpace, d.journalPath())
	}
}

// requireRefusedForSpace requires a crictl call to have been refused with
// ResourceExhausted, with a message naming the journal file and what to do.
func (d *daemon) requireRefusedForSpace(t *testing.T, what, stderr string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(stderr, "code = ResourceExhausted") || !strings.Contains(stderr, d.journalPath()) ||
		!strings.Contains(stderr, "until space is freed") {
		t.Errorf("%s: %v, stderr %q; want ResourceExhausted naming %s and what to do", what, err, stderr, d.journalPath())
	}
}

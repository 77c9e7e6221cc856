package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/leaks"
)

// Containers and crashes: the daemon killed during StartContainer or during a
// slow conmon, restarted with containers running, and a reboot; and the
// container flows' triggers of the crash matrix (crash_matrix_test.go).

// TestCrashDuringStart kills the daemon (SIGKILL) while StartContainer
// waits on a runtime whose `runc start` has started the container but not
// yet returned: the journal does not know the container runs. After the
// restart the container must be reported running (the kubelet would
// otherwise call StartContainer again, which can only fail), and be stopped
// and removed without leaks.
func TestCrashDuringStart(t *testing.T) {
	t.Parallel()
	runc, err := nodeRunc()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	// The daemon runs `runc --root <root> --log-format json start <id>`.
	wrapper := filepath.Join(dir, "runc")
	writeFile(t, wrapper, `#!/bin/bash
# crijournal end-to-end tests: runc, whose start returns late on demand.
dir=`+shellQuote(dir)+`
if [ "$5" = start ] && [ -f "$dir/start-sleep" ]; then
	`+shellQuote(runc)+` "$@"
	echo "start $6 $? $$" >> "$dir/start.log"
	exec sleep "$(cat "$dir/start-sleep")"
fi
exec `+shellQuote(runc)+` "$@"
`, 0o755)
	d, _ := startContainerDaemon(t, daemonOptions{runtimePath: wrapper})
	pod := d.containerPod(t, "start", false)
	podID := d.mustRunp(t, pod)
	id := d.mustCreate(t, podID, containerConfig(t, "late", 0, sleeper), pod)

	writeFile(t, filepath.Join(dir, "start-sleep"), "30\n", 0o644)
	bg := make(chan error, 1)
	go func() {
		_, _, err := d.crictl(t, "start", id)
		bg <- err
	}()
	var sleeperPid int
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		b, _ := os.ReadFile(filepath.Join(dir, "start.log"))
		if _, err := fmt.Sscanf(string(b), "start "+id+" 0 %d", &sleeperPid); err == nil {
			return nil
		}
		return fmt.Errorf("runc start did not start the container within 10s: %q", b)
	})
	d.kill(t)
	// The wrapper, now sleeping in place of the runc start that returned, is
	// no longer needed.
	_ = syscall.Kill(sleeperPid, syscall.SIGKILL)
	if err := <-bg; err == nil {
		t.Fatal("crictl start succeeded although the daemon was killed during it")
	}
	if err := os.Remove(filepath.Join(dir, "start-sleep")); err != nil {
		t.Fatal(err)
	}
	d.start(t, daemonBinary(t))
	d.waitReady(t)

	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "echo", "running"); got != "running" {
		t.Fatalf("exec printed %q", got)
	}
	_, stderr, err := d.crictl(t, "start", id)
	requireCode(t, "crictl start of a running container", err, stderr, "FailedPrecondition")
	d.mustCrictl(t, "stop", "-t", "1", id)
	d.requireExited(t, id, 137)
	d.mustCrictl(t, "rm", id)
	d.removePod(t, podID)
	d.stopClean(t)
}

// Triggers of the container flows for the crash matrix (crash_matrix_test.go). The
// daemon pulls the test image and runs a pod first; the failure points of
// the container flows are not on the pod's path.
var (
	// createContainerTrigger: CreateContainer of a new container in a
	// ready pod. A creation may be rolled back, cached for the retry, or
	// created (if the crash came after the record was answered).
	createContainerTrigger = &crashTrigger{
		how:        "crictl runp, then crictl create of a new container",
		containers: true,
		provoke:    createCrashingContainer,
		settle:     settleContainer,
		allowed:    []crashOutcome{outcomeGone, outcomeCached, outcomeCreated},
	}

	// timedOutContainerTrigger: CreateContainer whose request times out
	// (crictl create -T 2s) while conmon is slow; the daemon goes on, so
	// the creation finishes after the deadline and is answered "cached". A
	// crash then must not lose it: the retry gets it, after the restart.
	timedOutContainerTrigger = &crashTrigger{
		how:        "crictl runp, then crictl create -T 2s while conmon takes 4s to start",
		variant:    "timed out",
		containers: true,
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			d.pull(t, testImage)
			podID := d.mustRunp(t, pod)
			d.slowConmon(t, slowConmonDelay)
			_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, crashContainerConfig(t, pod), pod)
			requireCode(t, "crictl create -T 2s with a slow conmon", err, stderr, "DeadlineExceeded")
			d.waitConmonCall(t, 1, 5*time.Second)
			d.slowConmon(t, 0)
			return ""
		},
		settle:  settleContainer,
		allowed: []crashOutcome{outcomeCached},
	}

	// rollbackContainerTrigger: CreateContainer whose last step fails (an
	// injected error where the answer would be given), so the creation,
	// runtime container and all, is rolled back at once and the crash hits
	// the rollback. A failed creation can only end gone.
	rollbackContainerTrigger = &crashTrigger{
		how:        "crictl runp, then crictl create whose answer fails (container-create/before-answer=error)",
		variant:    "container",
		containers: true,
		alsoArm:    "container-create/before-answer=error",
		provoke:    createCrashingContainer,
		settle:     settleContainer,
		allowed:    []crashOutcome{outcomeGone},
	}

	// removeContainerTrigger: RemoveContainer of a running container
	// (crictl rm refuses one without -f, and -f stops it first, so the RPC
	// is called directly). After the restart the removal must have been
	// finished.
	removeContainerTrigger = &crashTrigger{
		how:        "crictl runp, create, start, then RemoveContainer of the running container",
		variant:    "container",
		containers: true,
		provoke: func(t *testing.T, d *daemon, pod string) string {
			return removeCrashingContainerWith(t, d, pod, crashContainerConfig)
		},
		settle:  settleContainer,
		allowed: []crashOutcome{outcomeGone},
	}
)

// usernsContainerTrigger is trigger (one whose request is createCrashingContainer's) for
// a container in a pod with its own user namespace: its root filesystem is bind-mounted
// under the daemon's usernsRootfsDir, and neither the crash nor the undo may leave that
// mount or its directory (leaks checks both).
func usernsContainerTrigger(trigger *crashTrigger) *crashTrigger {
	u := *trigger
	u.variant = strings.TrimSpace(trigger.variant + " userns")
	u.how += ", in a pod with its own user namespace"
	u.pod = func(t *testing.T, d *daemon) string {
		return d.usernsContainerPod(t, "crash", runtimeapi.NamespaceMode_CONTAINER)
	}
	u.provoke = func(t *testing.T, d *daemon, pod string) string {
		return createCrashingContainerWith(t, d, pod, usernsCrashContainerConfig)
	}
	u.settle = func(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
		return settleContainerWith(t, d, pod, crashed, usernsCrashContainerConfig)
	}
	return &u
}

// usernsCrashContainerConfig is crashContainerConfig with the pod's user namespace, as
// the kubelet copies it into each container's namespace options.
func usernsCrashContainerConfig(t *testing.T, pod string) string {
	t.Helper()
	return writeCrashContainerConfig(t, pod, "ctr-crash-userns.json", usernsOptions(runtimeapi.NamespaceMode_CONTAINER))
}

// TestContainerSurvivesRestart checks that a running container outlives the
// daemon, stopped (SIGTERM) or killed (SIGKILL): after each start it is
// listed running, takes exec and keeps logging; then it stops with the
// right exit code and is removed without leaks.
func TestContainerSurvivesRestart(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "survivor", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "ticker", 0,
		[]string{"sh", "-c", "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done"}), pod)
	d.waitLog(t, id, "tick-1", 10*time.Second)
	created := d.mustCreate(t, podID, containerConfig(t, "waiting", 0, sleeper), pod)

	for round, how := range []string{"SIGTERM", "SIGKILL"} {
		if how == "SIGKILL" {
			d.kill(t)
			d.start(t, daemonBinary(t))
			d.waitReady(t)
		} else {
			d.restart(t)
		}
		d.requirePs(t, "after a restart ("+how+")", id, created)
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
		d.requireCtrState(t, created, "CONTAINER_CREATED")
		if got := d.execSync(t, id, "echo", "still-here"); got != "still-here" {
			t.Fatalf("exec after a restart (%s) printed %q", how, got)
		}
		d.waitLog(t, id, fmt.Sprintf("tick-%d", 10*(round+1)), 10*time.Second)
		d.assertNoLeaks(t, podID, id, created)
	}
	// The container created before the restarts still starts.
	d.mustCrictl(t, "start", created)
	d.waitLog(t, created, "hello-from-container", 10*time.Second)

	d.mustCrictl(t, "stop", "-t", "1", id)
	d.requireExited(t, id, 137)
	d.mustCrictl(t, "rm", id)
	d.removeCtr(t, created)
	d.requirePs(t, "after rm")
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestContainerReboot stops the daemon under a pod with a running and a
// created container, and takes away what a reboot takes away: every process
// (the containers' and their conmons), the runtime's and conmon's state on
// tmpfs, the pinned namespaces and the veths. At the next start both
// containers are reported exited, with exit code 255 and reason
// ContainerStatusUnknown as the kubelet expects of a lost container, the pod
// is NOTREADY, and all of it can be removed without leaks.
func TestContainerReboot(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "rebooted", false)
	podID := d.mustRunp(t, pod)
	running := d.run(t, podID, containerConfig(t, "running", 0, sleeper), pod)
	created := d.mustCreate(t, podID, containerConfig(t, "created", 0, sleeper), pod)
	var pids []int
	for _, id := range []string{running, created} {
		out, err := runcCmd("--root", d.runcRoot(), "state", id).CombinedOutput()
		var st struct {
			Pid int `json:"pid"`
		}
		if err != nil || json.Unmarshal(out, &st) != nil || st.Pid <= 0 {
			t.Fatalf("runc state %s: %v\n%s", id, err, out)
		}
		pids = append(pids, st.Pid)
	}
	d.stop(t)

	// The reboot: every process of the containers dies, /run is emptied.
	for _, p := range leaks.Conmons(d.ociStateDir) {
		pids = append(pids, p.PID)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Gone, or a zombie (conmon's children are reaped by PID 1 late).
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, pid := range pids {
			if testenv.Alive(pid) {
				return fmt.Errorf("process %d survived SIGKILL", pid)
			}
		}
		return nil
	})
	for _, dir := range []string{d.runcRoot(), d.ociStateDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	// The containers' cgroups (empty now) go with the cgroup file systems.
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", d.cgroupRoot(), "*"))
	for _, cg := range cgroups {
		if st, err := os.Stat(cg); err == nil && st.IsDir() {
			if err := syscall.Rmdir(cg); err != nil {
				t.Fatalf("reboot: remove cgroup %s: %v", cg, err)
			}
		}
	}
	d.simulateReboot(t)

	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requireState(t, podID, "SANDBOX_NOTREADY")
	for _, id := range []string{running, created} {
		st := d.requireCtrState(t, id, "CONTAINER_EXITED")
		if st.Status.ExitCode != 255 || st.Status.Reason != "ContainerStatusUnknown" || st.Status.FinishedAt == "" {
			t.Errorf("container %s after the reboot: exit %d, reason %q, finished %q; want 255, ContainerStatusUnknown, a time",
				id, st.Status.ExitCode, st.Status.Reason, st.Status.FinishedAt)
		}
	}
	d.mustCrictl(t, "rm", running, created)
	d.removePod(t, podID)
	d.requirePs(t, "after rm and rmp")
	d.stopClean(t)
}

// TestCrashDuringSlowConmon kills the daemon (SIGKILL), or stops it
// (SIGTERM, which cuts the request off after its graceful stop timeout),
// while a CreateContainer waits on a conmon that takes 6 s to start: conmon
// (here its wrapper) is in a session of its own and outlives the daemon.
// After the restart the creation must be rolled back or kept for the retry,
// and no runtime container may appear later, when conmon would have started.
func TestCrashDuringSlowConmon(t *testing.T) {
	t.Parallel()
	const delay = 6 * time.Second
	for _, how := range []string{"SIGKILL", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			d, _ := startContainerDaemon(t, daemonOptions{conmonPath: conmonWrapper(t)})
			pod := d.containerPod(t, "crash-slow", false)
			podID := d.mustRunp(t, pod)
			ctr := containerConfig(t, "slow", 0, sleeper)
			d.slowConmon(t, delay)
			bg := make(chan crictlResult, 1)
			go func() {
				start := time.Now()
				stdout, stderr, err := d.crictl(t, "create", "-T", "60s", podID, ctr, pod)
				bg <- crictlResult{stdout, stderr, err, time.Since(start)}
			}()
			d.waitConmonCall(t, 1, 5*time.Second)
			stoppedAt := time.Now()
			if how == "SIGKILL" {
				d.kill(t)
			} else {
				d.terminate(t, 10*time.Second)
			}
			r := <-bg
			if r.err == nil {
				t.Fatalf("crictl create succeeded (%s) although the daemon stopped while conmon was starting", strings.TrimSpace(r.stdout))
			}
			for _, rec := range d.records(t) {
				t.Logf("journal after the %s: %s", how, describeSteps(rec))
			}
			d.checkJournal(t)
			d.slowConmon(t, 0)

			d.restart(t)
			d.requirePs(t, "after the restart")
			// Recovery (done before the daemon serves) settles the creation
			// in one go: rolled back, nothing left; or kept, cached. No undo
			// is left failing, to be retried in the background.
			if recs := d.containerRecords(t); len(recs) == 0 {
				d.assertNoLeaks(t, podID)
			} else if len(recs) != 1 || recs[0].State != journal.StateCached || len(recs[0].FailedUndos()) != 0 {
				t.Errorf("after the restart the journal holds %s, want no container record or a cached one", describeSteps(recs[0]))
			} else {
				d.assertNoLeaks(t, podID, recs[0].ID)
			}
			// Past the end of conmon's sleep: a conmon that lived on would
			// have created its container by now. The creation must be
			// rolled back (no record; an undo that failed is retried in the
			// background) or kept for the retry (cached).
			time.Sleep(time.Until(stoppedAt.Add(delay + 2*time.Second)))
			var recs []journal.Record
			testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
				recs = d.containerRecords(t)
				if len(recs) == 0 || (len(recs) == 1 && recs[0].State == journal.StateCached) {
					return nil
				}
				return fmt.Errorf("%v after the %s the journal holds %s, want no container record or a cached one",
					time.Since(stoppedAt).Round(time.Second), how, describeSteps(recs[0]))
			})
			if len(recs) == 0 {
				d.waitNoLeaks(t, 5*time.Second, podID)
			} else {
				d.assertNoLeaks(t, podID, recs[0].ID)
			}
			id := d.mustCreate(t, podID, ctr, pod)
			if len(recs) == 1 && id != recs[0].ID {
				t.Errorf("the retry got %s, not the kept creation %s", id, recs[0].ID)
			}
			t.Logf("after the %s the creation was %s", how, map[bool]string{true: "rolled back", false: "kept for the retry"}[len(recs) == 0])
			d.requireWholeContainer(t, id)
			d.assertNoLeaks(t, podID, id)
			d.removeCtr(t, id)
			d.removePod(t, podID)
			d.stopClean(t)
		})
	}
}

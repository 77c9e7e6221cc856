package test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// Shared pid namespaces: a pod whose namespace option pid is POD (the
// kubelet's shareProcessNamespace) gets a pause process, the pause program run
// as "crijournal-pause pause <sandbox ID>", as PID 1 of a pid namespace pinned
// at <namespace_dir>/pidns/<sandbox ID>; its containers with pid POD join it.
// Other pods have no pause process.

// defaultPauseCgroups returns the directories of the cgroup of a sandbox's pause
// process, for a pod that names no cgroup_parent (oci.DefaultCgroupParent), in every
// hierarchy that has it.
func defaultPauseCgroups(id string) []string {
	var dirs []string
	for _, pattern := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/*"} {
		m, _ := filepath.Glob(filepath.Join(pattern, oci.DefaultCgroupParent, "crijournal-"+id))
		dirs = append(dirs, m...)
	}
	return dirs
}

// TestPidNamespaceShared runs a pod that shares its pid namespace: its
// containers see each other and the pause process as PID 1, a container that
// asks for its own pid namespace does not; the pause process survives
// stopp and goes with rmp, leaving nothing.
func TestPidNamespaceShared(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	bin := pauseBinary(daemonBinary(t))

	pod := d.pidPod(t, "shared", nsModePod)
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	pausePID := d.requirePause(t, podID)
	t.Logf("pause process of %s: %d", podID, pausePID)

	sleep := []string{"sleep", "3600"}
	a := d.run(t, podID, containerConfig(t, "a", 0, sleep, withPidMode(nsModePod)), pod)
	b := d.run(t, podID, containerConfig(t, "b", 0, sleep, withPidMode(nsModePod)), pod)
	own := d.run(t, podID, containerConfig(t, "own", 0, sleep, withPidMode(nsModeContainer)), pod)

	wantPause := bin + " pause " + podID
	for _, id := range []string{a, b} {
		procs := d.containerPs(t, id)
		t.Logf("ps in %s: %v", id, procs)
		if got := commandOf(procs, 1); got != wantPause {
			t.Errorf("PID 1 in container %s is %q, want the pause process %q", id, got, wantPause)
		}
		if n := countCommand(procs, "sleep 3600"); n != 2 {
			t.Errorf("ps in container %s shows %d sleep 3600, want 2 (its own and the other container's): %v", id, n, procs)
		}
	}
	// A container with pid CONTAINER has a pid namespace of its own.
	procs := d.containerPs(t, own)
	if got := commandOf(procs, 1); got != "sleep 3600" {
		t.Errorf("PID 1 in container %s (pid CONTAINER) is %q, want its own sleep 3600: %v", own, got, procs)
	}
	if n := countCommand(procs, "sleep 3600"); n != 1 {
		t.Errorf("container %s (pid CONTAINER) sees %d sleep 3600, want only its own: %v", own, n, procs)
	}
	d.assertNoLeaks(t, podID, a, b, own)

	// stopp stops the containers; the pause process stays until rmp.
	d.mustCrictl(t, "stopp", podID)
	d.requireState(t, podID, "SANDBOX_NOTREADY")
	if pid := d.requirePause(t, podID); pid != pausePID {
		t.Fatalf("after stopp the pause process is %d, want the same %d", pid, pausePID)
	}
	d.mustCrictl(t, "rmp", podID)
	d.requirePods(t, "after rmp")
	d.requireNoPause(t, podID, "after rmp", 10*time.Second)
	d.requireNoPidnsPins(t)
	d.assertNoLeaks(t)
	d.stopClean(t)
}

// TestPidNamespaceNotShared runs a pod that does not share its pid namespace
// (what the kubelet asks for by default): no pause process, no pid namespace
// pin, and its containers do not see each other.
func TestPidNamespaceNotShared(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})

	pod := d.pidPod(t, "private", nsModeContainer)
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	if pids := pauseProcesses(podID); len(pids) != 0 {
		t.Fatalf("a pod with pid CONTAINER has pause processes %v", pids)
	}
	if _, err := os.Lstat(d.pidnsPin(podID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a pod with pid CONTAINER has a pid namespace pin: %v", err)
	}
	sleep := []string{"sleep", "3600"}
	a := d.run(t, podID, containerConfig(t, "a", 0, sleep, withPidMode(nsModeContainer)), pod)
	// pid POD in a pod without a shared pid namespace: a namespace of its own.
	b := d.run(t, podID, containerConfig(t, "b", 0, sleep, withPidMode(nsModePod)), pod)
	for _, id := range []string{a, b} {
		procs := d.containerPs(t, id)
		if got := commandOf(procs, 1); got != "sleep 3600" {
			t.Errorf("PID 1 in container %s is %q, want its own sleep 3600: %v", id, got, procs)
		}
		if n := countCommand(procs, "sleep 3600"); n != 1 {
			t.Errorf("container %s sees %d sleep 3600, want only its own: %v", id, n, procs)
		}
	}
	d.removePod(t, podID)
	d.requirePods(t, "after rmp")
	d.requireNoPidnsPins(t)
	d.stopClean(t)
}

// TestPidNamespaceCrash kills the daemon while a pod with a shared pid
// namespace is made or removed, restarts it, and checks that recovery kills
// the pause process and removes its pin. A pod whose pause process died while
// the daemon was down is reported not ready after the restart.
func TestPidNamespaceCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		point string
		// provoke makes the daemon reach the point; it returns the sandbox ID
		// when it knows it.
		provoke func(t *testing.T, d *daemon, pod string) string
		// startingAtCrash: the pause process is still being started when the daemon
		// dies (the network attaches beside it), and may not be there yet, or not yet
		// pinned or in its cgroup; it is found by its command line if it is.
		startingAtCrash bool
	}{
		{point: "sandbox-create/pause-process/after-action", provoke: runpCrashes},
		{point: "sandbox-create/cni-attach/after-intent", provoke: runpCrashes, startingAtCrash: true},
		{point: "sandbox-create/before-answer", provoke: runpCrashes},
		{point: "journal/remove/pause-process/before-undo", provoke: func(t *testing.T, d *daemon, pod string) string {
			id := d.mustRunp(t, pod)
			d.mustCrictl(t, "stopp", id)
			if _, _, err := d.crictl(t, "rmp", id); err == nil {
				t.Fatalf("crictl rmp %s succeeded: the daemon did not crash at the armed point", id)
			}
			return id
		}},
	} {
		t.Run(strings.ReplaceAll(tc.point, "/", "_"), func(t *testing.T) {
			t.Parallel()
			reaper := newPauseReaper(t)
			d := startDaemon(t, daemonOptions{env: []string{failpoint.EnvVar + "=" + tc.point + "=kill"}})
			pod := podConfig(t, "pidcrash", "e2e", randomHex(t, 16), 0, false) // pid POD: the CRI default
			known := tc.provoke(t, d, pod)
			d.requireKilledAt(t, tc.point, 10*time.Second)

			recs := d.records(t)
			if len(recs) != 1 || (known != "" && recs[0].ID != known) {
				var got []string
				for _, r := range recs {
					got = append(got, describeSteps(r))
				}
				t.Fatalf("journal at the crash: %q, want the one record of the crashed request", got)
			}
			id := recs[0].ID
			reaper.add(id)
			t.Logf("journal at the crash: %s", describeSteps(recs[0]))
			if !slices.ContainsFunc(recs[0].Steps, func(s journal.Step) bool { return s.Kind == "pause-process" }) {
				t.Fatalf("no pause-process step in the journal at the crash")
			}
			// The pause process outlived the daemon, pinned, in its cgroup.
			if !tc.startingAtCrash {
				d.requirePause(t, id)
				if len(defaultPauseCgroups(id)) == 0 {
					t.Errorf("no cgroup of the pause process of %s at the crash", id)
				}
			}

			d.restartUnarmed(t)
			d.requireNoPause(t, id, "after recovery", 15*time.Second)
			if dirs := defaultPauseCgroups(id); len(dirs) > 0 {
				t.Errorf("the cgroup of the pause process of %s is left after recovery: %v", id, dirs)
			}
			d.requirePods(t, "after recovery")
			d.requireNoPidnsPins(t)
			d.stopClean(t)
		})
	}

	t.Run("pause_died_while_down", func(t *testing.T) {
		t.Parallel()
		reaper := newPauseReaper(t)
		d := startDaemon(t, daemonOptions{})
		pod := podConfig(t, "pidlost", "e2e", randomHex(t, 16), 0, false)
		id := d.mustRunp(t, pod)
		reaper.add(id)
		pid := d.requirePause(t, id)
		d.stop(t)
		// The pause process outlives a stopped daemon, like a container.
		if got := d.requirePause(t, id); got != pid {
			t.Fatalf("after the daemon stopped the pause process is %d, want %d", got, pid)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
			if len(pauseProcesses(id)) > 0 {
				return fmt.Errorf("pause process %d still alive 5s after SIGKILL", pid)
			}
			return nil
		})
		d.restart(t)
		// Its containers can never run again: reconciled as not ready, and the
		// network is torn down.
		d.requirePods(t, "after the restart", id)
		st := d.requireState(t, id, "SANDBOX_NOTREADY")
		if st.Status.Network != nil && st.Status.Network.IP != "" {
			t.Errorf("a sandbox that lost its pid namespace still reports IP %s", st.Status.Network.IP)
		}
		d.requireRemoveRPC(t, id, "a sandbox whose pause process died")
		d.requirePods(t, "after the removal")
		d.requireNoPause(t, id, "after the removal", 10*time.Second)
		d.requireNoPidnsPins(t)
		d.stopClean(t)
	})
}

// runpCrashes runs crictl runp, which must fail: the daemon dies on the way.
func runpCrashes(t *testing.T, d *daemon, pod string) string {
	t.Helper()
	if id, _, err := d.runp(t, pod); err == nil {
		t.Fatalf("crictl runp returned %s: the daemon did not crash at the armed point", id)
	}
	return ""
}

// TestPidNamespacePauseDies: when the pause process of a running pod dies, the pod is
// reported NOTREADY at once (the daemon watches the process), and removing it leaves
// nothing behind.
func TestPidNamespacePauseDies(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.pidPod(t, "pausedies", nsModePod)
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	pausePID := d.requirePause(t, podID)
	d.requireState(t, podID, "SANDBOX_READY")

	if err := syscall.Kill(pausePID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the pause process %d: %v", pausePID, err)
	}
	testenv.Eventually(t, 5*time.Second, 100*time.Millisecond, func() error {
		if st := d.inspectp(t, podID); st.Status.State != "SANDBOX_NOTREADY" {
			return fmt.Errorf("the pod is %s 5 s after its pause process was killed, want SANDBOX_NOTREADY", st.Status.State)
		}
		return nil
	})
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "rmp", podID)
	d.requireNoPidnsPins(t)
	d.stopClean(t)
}

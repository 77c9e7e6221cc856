package test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// OCI runtime faults: the runtime handler's path is a wrapper around the real runc that
// the test controls (fails, sleeps, or is missing), conmon is killed or frozen. The rule
// under test (DESIGN §6, "absence of an answer is not evidence"): no container is ever
// reported exited while its process runs, and an exit is recorded with its real code.

// runcWrapper writes an executable wrapper around the real runc into dir: it fails every
// call (as a runtime being upgraded, or broken, does) while <dir>/runc-fail exists, and
// sleeps before `state` for the duration in <dir>/runc-state-sleep. Its path is returned.
func runcWrapper(t *testing.T, dir string) string {
	t.Helper()
	real, err := nodeRunc()
	if err != nil {
		t.Fatalf("the OCI fault tests need runc in PATH: %v", err)
	}
	script := `#!/bin/sh
# crijournal end-to-end tests: runc, failing or slow on demand.
dir=` + shellQuote(dir) + `
if [ -e "$dir/runc-fail" ]; then
	echo "runc wrapper: injected failure, the runtime is unavailable" >&2
	exit 1
fi
for a in "$@"; do
	if [ "$a" = state ] && [ -f "$dir/runc-state-sleep" ]; then
		sleep "$(cat "$dir/runc-state-sleep")"
	fi
done
exec ` + shellQuote(real) + ` "$@"
`
	path := filepath.Join(dir, "runc-wrapper")
	writeFile(t, path, script, 0o755)
	return path
}

// initPID returns the host PID of a container's init process, from runc itself.
func (d *daemon) initPID(t *testing.T, id string) int {
	t.Helper()
	out, err := runcCmd("--root", d.runcRoot(), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		Pid    int    `json:"pid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runc state %s: %v: %s", id, err, out)
	}
	return st.Pid
}

// conmonPID returns the PID of a container's conmon, from the pid file it was started with.
func (d *daemon) conmonPID(t *testing.T, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.ociStateDir, "containers", id, "conmon.pid"))
	if err != nil {
		t.Fatalf("conmon pid of %s: %v", id, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("conmon pid of %s: %q", id, b)
	}
	return pid
}

// requireRunningWhileAlive fails the test unless the container's process runs and
// crictl inspect says RUNNING.
func (d *daemon) requireRunningWhileAlive(t *testing.T, id string, pid int, when string) {
	t.Helper()
	if !testenv.Alive(pid) {
		t.Fatalf("%s: the init process %d of %s is gone", when, pid, id)
	}
	if st := d.inspect(t, id); st.Status.State != "CONTAINER_RUNNING" {
		t.Fatalf("%s: container %s is %s (exit %d, reason %q) while its process %d runs",
			when, id, st.Status.State, st.Status.ExitCode, st.Status.Reason, pid)
	}
}

// TestOCIRuntimeFaults runs containers while the OCI runtime or conmon fails in the ways
// a node sees: runc failing or missing for a while (a package upgrade), runc slow while
// the client gives up, conmon killed, conmon late with the exit file, and a record that
// an earlier version wrongly marked exited. Each subtest uses its own container of one
// pod on one daemon.
func TestOCIRuntimeFaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	wrapper := runcWrapper(t, dir)
	d, _ := startContainerDaemon(t, daemonOptions{runtimePath: wrapper})
	pod := d.containerPod(t, "ocifaults", false)
	podID := d.mustRunp(t, pod)
	failFlag := filepath.Join(dir, "runc-fail")
	sleepFlag := filepath.Join(dir, "runc-state-sleep")
	attempt := 0
	start := func(t *testing.T, name string, opts ...ctrOption) (string, int) {
		t.Helper()
		attempt++
		id := d.run(t, podID, containerConfig(t, name, attempt, sleeper, opts...), pod)
		d.waitLog(t, id, "hello-from-container", 10*time.Second)
		return id, d.initPID(t, id)
	}

	t.Run("runc failing for a while", func(t *testing.T) {
		id, pid := start(t, "runcfails")
		// In the node's pid namespace: its kill needs the runtime (runc kill --all).
		nodeID, nodePid := start(t, "runcfails-nodepid", withSecurity(map[string]any{"namespace_options": map[string]any{"pid": 2}}))
		writeFile(t, failFlag, "", 0o644)
		defer os.Remove(failFlag)
		for range 3 {
			d.requireRunningWhileAlive(t, id, pid, "while runc fails")
			d.requireRunningWhileAlive(t, nodeID, nodePid, "while runc fails")
		}
		// A stop that cannot reach the runtime it needs fails; it does not pretend.
		if _, _, err := d.crictl(t, "stop", "-t", "0", nodeID); err == nil {
			t.Errorf("crictl stop of a container in the node's pid namespace succeeded while runc fails")
		}
		d.requireRunningWhileAlive(t, nodeID, nodePid, "after a stop that could not reach runc")
		// One whose init is PID 1 of a pid namespace of its own is killed through its
		// pidfd, without the runtime: that stop does stop it.
		d.mustCrictl(t, "stop", "-t", "0", id)
		testenv.WaitGone(t, pid, 10*time.Second)
		d.requireExited(t, id, 137)
		if err := os.Remove(failFlag); err != nil {
			t.Fatal(err)
		}
		d.requireRunningWhileAlive(t, nodeID, nodePid, "once runc works again")
		d.mustCrictl(t, "stop", "-t", "0", nodeID)
		testenv.WaitGone(t, nodePid, 10*time.Second)
		d.requireExited(t, nodeID, 137)
		d.mustCrictl(t, "rm", id, nodeID)
	})

	t.Run("runc missing for a while", func(t *testing.T) {
		id, pid := start(t, "runcmissing")
		moved := wrapper + ".moved"
		if err := os.Rename(wrapper, moved); err != nil {
			t.Fatal(err)
		}
		restore := func() {
			if err := os.Rename(moved, wrapper); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Error(err)
			}
		}
		defer restore()
		for range 3 {
			d.requireRunningWhileAlive(t, id, pid, "while runc is missing")
		}
		restore()
		d.requireRunningWhileAlive(t, id, pid, "once runc is back")
		d.mustCrictl(t, "stop", "-t", "0", id)
		testenv.WaitGone(t, pid, 10*time.Second)
		d.requireExited(t, id, 137)
		d.mustCrictl(t, "rm", id)
	})

	t.Run("runc slow while the client gives up", func(t *testing.T) {
		id, pid := start(t, "runcslow")
		writeFile(t, sleepFlag, "2\n", 0o644)
		defer os.Remove(sleepFlag)
		cri := d.cri(t)
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err := cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
			cancel()
			t.Logf("ContainerStatus with a 300ms deadline while runc state takes 2s: %v", err)
		}
		time.Sleep(2500 * time.Millisecond) // the abandoned queries finish
		if err := os.Remove(sleepFlag); err != nil {
			t.Fatal(err)
		}
		d.requireRunningWhileAlive(t, id, pid, "after clients gave up on slow runtime queries")
		d.removeCtr(t, id)
		testenv.WaitGone(t, pid, 10*time.Second)
	})

	t.Run("conmon killed", func(t *testing.T) {
		id, pid := start(t, "conmonkilled")
		conmon := d.conmonPID(t, id)
		if err := syscall.Kill(conmon, syscall.SIGKILL); err != nil {
			t.Fatalf("kill conmon %d: %v", conmon, err)
		}
		testenv.WaitGone(t, conmon, 10*time.Second)
		for range 2 {
			d.requireRunningWhileAlive(t, id, pid, "after conmon was killed")
		}
		d.mustCrictl(t, "stop", "-t", "0", id)
		testenv.WaitGone(t, pid, 10*time.Second)
		// No conmon, no exit file: the exit is recorded, its code unknown.
		st := d.requireCtrState(t, id, "CONTAINER_EXITED")
		t.Logf("exit without conmon: code %d, reason %q", st.Status.ExitCode, st.Status.Reason)
		d.mustCrictl(t, "rm", id)
	})

	t.Run("exit file late", func(t *testing.T) {
		id, pid := start(t, "exitlate")
		conmon := d.conmonPID(t, id)
		// Frozen, conmon cannot reap the container's init nor write its exit file,
		// while runc already says the container stopped (its init is a zombie).
		if err := syscall.Kill(conmon, syscall.SIGSTOP); err != nil {
			t.Fatalf("stop conmon %d: %v", conmon, err)
		}
		thawed := make(chan struct{})
		defer func() { <-thawed }()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			close(thawed)
			t.Fatalf("kill the container's init %d: %v", pid, err)
		}
		go func() {
			defer close(thawed)
			time.Sleep(1500 * time.Millisecond)
			_ = syscall.Kill(conmon, syscall.SIGCONT)
		}()
		// The checks below tell what went wrong if it still runs 5s later.
		_ = testenv.Poll(5*time.Second, 10*time.Millisecond, testenv.Until("the container's process to exit", func() bool {
			return !testenv.Alive(pid)
		}))
		st := d.inspect(t, id)
		if st.Status.State == "CONTAINER_EXITED" && st.Status.ExitCode != 137 {
			t.Fatalf("container %s exited with %d (reason %q) while conmon had not yet written its exit file, want 137",
				id, st.Status.ExitCode, st.Status.Reason)
		}
		<-thawed
		_ = testenv.Poll(10*time.Second, 50*time.Millisecond, testenv.Until("the container to exit", func() bool {
			if st.Status.State == "CONTAINER_EXITED" {
				return true
			}
			st = d.inspect(t, id)
			return false
		}))
		if st.Status.State != "CONTAINER_EXITED" || st.Status.ExitCode != 137 || st.Status.Reason != "Error" {
			t.Fatalf("container %s after conmon wrote the exit file: %s %d %q, want EXITED 137 Error",
				id, st.Status.State, st.Status.ExitCode, st.Status.Reason)
		}
		d.mustCrictl(t, "rm", id)
	})

	t.Run("stop of containers wrongly marked exited", func(t *testing.T) {
		// Two running containers, recorded as an earlier version recorded them after
		// one failed runc state: one is stopped by StopContainer, the other by
		// StopPodSandbox. Neither may be skipped as "exited".
		byCtr, byCtrPID := start(t, "wronglyexited")
		byPod, byPodPID := start(t, "wronglyexitedpod")
		d.stop(t)
		j, err := journal.Open(d.journalPath(), journal.Options{LockTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC().Format(time.RFC3339Nano)
		code, reason := "255", "ContainerStatusUnknown"
		for _, id := range []string{byCtr, byPod} {
			if err == nil {
				err = j.SetMarkers(id, map[string]*string{"exit_code": &code, "reason": &reason, "finished_at": &at})
			}
		}
		if cerr := j.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		d.start(t, daemonBinary(t))
		d.waitReady(t)
		for _, pid := range []int{byCtrPID, byPodPID} {
			if !testenv.Alive(pid) {
				t.Fatalf("the container process %d did not survive the restart", pid)
			}
		}
		d.mustCrictl(t, "stop", "-t", "0", byCtr)
		testenv.WaitGone(t, byCtrPID, 10*time.Second)
		d.mustCrictl(t, "rm", byCtr)
		d.mustCrictl(t, "stopp", podID)
		testenv.WaitGone(t, byPodPID, 10*time.Second)
		d.mustCrictl(t, "rm", byPod)
	})

	d.requirePs(t, "after every fault")
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}

package test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// The kubelet's own retries (a real kubelet, v1.37.2): a node slower than the kubelet's
// deadlines must converge on the kubelet's retries with no duplicate work. The kubelet
// retries a RunPodSandbox that timed out under the same attempt (it numbers sandboxes
// from those the runtime lists, and a hidden one is not listed), and a CreateContainer
// that timed out under the next attempt (it finds 0.log in the container's log
// directory), with a new log path and termination-message file.

// Deadlines of the kubelet tests: the kubelet's runtimeRequestTimeout (CreateContainer's
// deadline; RunPodSandbox gets twice it) and how much slower than that the slowed step is.
const (
	kubeletRequestTimeout = 5 * time.Second
	slowRuncCreate        = 8 * time.Second   // > kubeletRequestTimeout
	slowKubeletADD        = 14 * time.Second  // > 2 * kubeletRequestTimeout
	kubeletConverge       = 150 * time.Second // bound of the wait for Running
	kubeletPodGone        = 60 * time.Second  // bound of the kubelet's stop of a deleted pod
)

// slowCreateRunc is a runc wrapper (daemonOptions.runtimePath) that logs the ID of every
// `create` to create.log in its directory and, while the file create-sleep there holds a
// duration, sleeps that long before creating. It returns the wrapper's path.
func slowCreateRunc(t *testing.T) string {
	t.Helper()
	real, err := nodeRunc()
	if err != nil {
		t.Fatalf("the kubelet retry tests need runc: %v", err)
	}
	dir := t.TempDir()
	script := `#!/bin/bash
# crijournal end-to-end tests: runc, whose create is slow on demand.
dir=` + shellQuote(dir) + `
for a in "$@"; do
	if [ "$a" = create ]; then
		echo "${@: -1}" >> "$dir/create.log"
		if [ -f "$dir/create-sleep" ]; then
			sleep "$(cat "$dir/create-sleep")"
		fi
		break
	fi
done
exec ` + shellQuote(real) + ` "$@"
`
	path := filepath.Join(dir, "runc")
	writeFile(t, path, script, 0o755)
	return path
}

// slowRuncCreates makes the daemon's runc wrapper (slowCreateRunc) sleep dur before each
// create; 0 makes it fast again.
func (d *daemon) slowRuncCreates(t *testing.T, dur time.Duration) {
	t.Helper()
	path := filepath.Join(filepath.Dir(d.opts.runtimePath), "create-sleep")
	if dur <= 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(dur.Seconds(), 'f', 3, 64)+"\n", 0o644)
}

// runcCreates returns the container IDs runc create was run for, in order.
func (d *daemon) runcCreates(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(d.opts.runtimePath), "create.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// waitRuncCreates waits until runc create has been run n times.
func (d *daemon) waitRuncCreates(t *testing.T, n int, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 50*time.Millisecond, func() error {
		if creates := d.runcCreates(t); len(creates) < n {
			return fmt.Errorf("runc create was not run %d times within %v (%v)", n, within, creates)
		}
		return nil
	})
}

// kubeletOnSlowNode starts a daemon whose runc create and CNI ADD the test can slow down,
// and a kubelet on it with the short deadlines of these tests.
func kubeletOnSlowNode(t *testing.T, config map[string]any) (*daemon, *kubelet) {
	t.Helper()
	d, _ := startContainerDaemon(t, daemonOptions{runtimePath: slowCreateRunc(t), cacheTTL: 2 * time.Minute})
	k := startKubelet(t, d, kubeletOptions{runtimeRequestTimeout: kubeletRequestTimeout, config: config})
	return d, k
}

// rotatesLogs is the kubelet configuration of a log rotation every few seconds: at the
// shortest interval the kubelet takes, past 1 KiB.
var rotatesLogs = map[string]any{"containerLogMaxSize": "1Ki", "containerLogMaxFiles": 3, "containerLogMonitorInterval": "3s"}

// deletePod removes the static pod name and waits until the kubelet has stopped it, then
// removes its sandbox (as the kubelet's garbage collection would, a minute later), stops
// the daemon and requires that nothing is left: no leak, no journal record.
func deletePod(t *testing.T, d *daemon, k *kubelet, name string) {
	t.Helper()
	k.removeStaticPod(t, name)
	k.waitPodGone(t, name, kubeletPodGone)
	d.waitNoContainers(t, kubeletPodGone)
	k.stop(t)
	d.mustCrictl(t, "rmp", "-fa")
	d.stopClean(t)
	if recs := d.records(t); len(recs) != 0 {
		t.Errorf("the journal holds %d records once the pod is deleted: %v", len(recs), recs)
	}
}

// containerLogFiles lists the logs of a container's log directory (the kubelet's
// <pod logs dir>/<namespace>_<pod>_<uid>/<container>/): the files N.log, and how many
// rotated ones (N.log.<time>[.gz]) there are of each.
func (k *kubelet) containerLogFiles(t *testing.T, p kubeletPod, container string) (logs []string, rotated map[string]int) {
	t.Helper()
	dir := filepath.Join(k.podLogsDir, p.Metadata.Namespace+"_"+p.Metadata.Name+"_"+p.Metadata.UID, container)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the container's log directory: %v", err)
	}
	rotated = map[string]int{}
	for _, e := range entries {
		if log, _, ok := strings.Cut(e.Name(), ".log."); ok {
			rotated[log+".log"]++
			continue
		}
		logs = append(logs, e.Name())
	}
	return logs, rotated
}

// logLink returns the kubelet's link in /var/log/containers for container id.
func (k *kubelet) logLink(t *testing.T, id string) string {
	t.Helper()
	for _, l := range k.logLinks() {
		if strings.HasSuffix(l, "-"+id+".log") {
			return l
		}
	}
	t.Fatalf("no link in %s for container %s (links: %v)", containerLogsDir, id, k.logLinks())
	return ""
}

// requireLogLink requires that the kubelet's link in /var/log/containers for container
// id resolves to the file name (such as "1.log") of the container's log directory, and
// that the file holds what the container printed.
func (k *kubelet) requireLogLink(t *testing.T, id, name, printed string) {
	t.Helper()
	link := k.logLink(t, id)
	target, err := os.Readlink(link)
	if err != nil || filepath.Base(target) != name {
		t.Fatalf("%s links to %q (%v), want the log file %s", link, target, err, name)
	}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		b, err := os.ReadFile(link)
		if err == nil && strings.Contains(string(b), printed) {
			return nil
		}
		return fmt.Errorf("%s (-> %s) holds %q (%v), want the container's output %q", link, target, b, err, printed)
	})
}

// failedCalls counts the kubelet's calls of a CRI method (such as "CreateContainer")
// that failed, from its log.
func (k *kubelet) failedCalls(t *testing.T, method string) int {
	t.Helper()
	b, err := os.ReadFile(k.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), `"`+method+` from runtime service failed"`) +
		strings.Count(string(b), `"`+method+` in sandbox from runtime service failed"`)
}

// ticker prints "tick" twenty times a second until SIGTERM.
var ticker = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do echo tick-tick-tick-tick-tick-tick-tick-tick; sleep 0.05; done & wait"}

// TestKubeletSlowContainerConverges: runc create slower than the kubelet's
// CreateContainer deadline. The kubelet's first call times out; its retry (attempt 1)
// claims the container made for it, which runs: exactly one runc create. What the kubelet
// sees is consistent: its link in /var/log/containers names the log path it asked for
// (1.log), which holds the container's output, also across the kubelet's log rotations
// (conmon reopens its own path, and the runtime moves the new file to 1.log); the
// container reports restart count 1, as asked, so that the next real restart is attempt
// 2 with a log of its own, and the link of the first container still shows its own log.
func TestKubeletSlowContainerConverges(t *testing.T) {
	t.Parallel()
	d, k := kubeletOnSlowNode(t, rotatesLogs)
	d.slowRuncCreates(t, slowRuncCreate)
	k.writeStaticPod(t, "slowctr", staticPod("slowctr", kubeletContainer{name: "app", command: ticker}))
	took := k.waitPodRunning(t, "slowctr", kubeletConverge)
	creates := d.runcCreates(t)
	t.Logf("MEASURE kubelet slow container: Running %v after the manifest; runc creates %d; failed CreateContainer calls %d",
		took.Round(time.Millisecond), len(creates), k.failedCalls(t, "CreateContainer"))
	if len(creates) != 1 {
		t.Fatalf("runc create ran %d times for one container (%v), want once", len(creates), creates)
	}
	d.slowRuncCreates(t, 0)

	p, _ := k.pod(t, "slowctr")
	st := p.Status.ContainerStatuses[0]
	first := st.runtimeID()
	if first != creates[0] {
		t.Fatalf("the kubelet runs container %s, want %s, the one runc created", first, creates[0])
	}
	if st.RestartCount != 1 {
		t.Errorf("the kubelet reports restart count %d, want 1 (the attempt it asked for)", st.RestartCount)
	}
	t.Logf("the kubelet sees container %s, restart count %d", first, st.RestartCount)
	k.requireLogLink(t, first, "1.log", "tick")

	// The kubelet rotates 1.log (past 1 KiB, every 3 s): the container's output goes
	// on into 1.log, nothing appears at 0.log.
	testenv.Eventually(t, 30*time.Second, 500*time.Millisecond, func() error {
		_, rotated := k.containerLogFiles(t, p, "app")
		if rotated["1.log"] >= 2 {
			t.Logf("the kubelet rotated 1.log %d times", rotated["1.log"])
			return nil
		}
		return fmt.Errorf("the kubelet did not rotate 1.log twice within 30s (rotated: %v)", rotated)
	})
	// (During a rotation, for a moment, 1.log is gone and conmon's new file is 0.log.)
	var logs []string
	for range 20 {
		if logs, _ = k.containerLogFiles(t, p, "app"); slices.Equal(logs, []string{"1.log"}) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !slices.Equal(logs, []string{"1.log"}) {
		t.Fatalf("after the rotations the container's log directory holds %v, want the log at the path of the kubelet's retry, 1.log, alone", logs)
	}
	k.requireLogLink(t, first, "1.log", "tick")

	// The next real restart: the container exits, the kubelet makes attempt 2, whose
	// log is a file of its own; the first container's link still shows its own log.
	d.mustCrictl(t, "stop", first)
	testenv.Eventually(t, kubeletConverge, 200*time.Millisecond, func() error {
		p, _ = k.pod(t, "slowctr")
		if p.running() && p.Status.ContainerStatuses[0].runtimeID() != first {
			return nil
		}
		return fmt.Errorf("the kubelet did not restart the container within %v: %s", kubeletConverge, p.describe())
	})
	second := p.Status.ContainerStatuses[0]
	if second.RestartCount != 2 {
		t.Errorf("after the restart the kubelet reports restart count %d, want 2", second.RestartCount)
	}
	if logs, _ := k.containerLogFiles(t, p, "app"); !slices.Equal(logs, []string{"1.log", "2.log"}) {
		t.Errorf("after the restart the container's log directory holds %v, want 1.log and 2.log", logs)
	}
	k.requireLogLink(t, second.runtimeID(), "2.log", "tick")
	if target, err := os.Readlink(k.logLink(t, first)); err != nil || filepath.Base(target) != "1.log" {
		t.Errorf("the first container's link points to %q (%v), want its own 1.log", target, err)
	}
	deletePod(t, d, k, "slowctr")
}

// TestKubeletSlowSandboxConverges: CNI ADD slower than the kubelet's RunPodSandbox
// deadline. The kubelet's retry claims the sandbox made for its first call: one ADD.
func TestKubeletSlowSandboxConverges(t *testing.T) {
	t.Parallel()
	d, k := kubeletOnSlowNode(t, nil)
	d.slowCNI(t, slowKubeletADD)
	k.writeStaticPod(t, "slowpod", staticPod("slowpod", kubeletContainer{name: "app"}))
	took := k.waitPodRunning(t, "slowpod", kubeletConverge)
	adds := d.addedIDs(t)
	t.Logf("MEASURE kubelet slow sandbox: Running %v after the manifest; CNI ADDs %d; failed RunPodSandbox calls %d",
		took.Round(time.Millisecond), len(adds), k.failedCalls(t, "RunPodSandbox"))
	if len(adds) != 1 {
		t.Fatalf("CNI ADD ran %d times for one pod (%v), want once", len(adds), adds)
	}
	d.slowCNI(t, 0)
	d.requirePods(t, "the pod running", adds[0])
	deletePod(t, d, k, "slowpod")
}

// TestKubeletKilledDuringSlowCreation: a SIGKILL while a slow runc create of the
// kubelet's container runs, then a restart.
//   - The daemon: recovery rolls the interrupted creation back (its conmon and runc
//     killed), the kubelet's retries converge as before on a second creation, and nothing
//     of the first is left.
//   - The kubelet: the restarted kubelet finds the pod's sandbox listed and retries the
//     container, which claims the creation its predecessor asked for: one runc create,
//     one CNI ADD.
func TestKubeletKilledDuringSlowCreation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		killRestart func(t *testing.T, d *daemon, k *kubelet)
		wantCreates int
	}{
		{"daemon", func(t *testing.T, d *daemon, k *kubelet) { d.kill(t); d.restart(t) }, 2},
		{"kubelet", func(t *testing.T, d *daemon, k *kubelet) { k.restart(t) }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, k := kubeletOnSlowNode(t, nil)
			d.slowRuncCreates(t, slowRuncCreate)
			k.writeStaticPod(t, "killed", staticPod("killed", kubeletContainer{name: "app"}))
			d.waitRuncCreates(t, 1, kubeletConverge)
			tt.killRestart(t, d, k)
			took := k.waitPodRunning(t, "killed", kubeletConverge)
			creates := d.runcCreates(t)
			t.Logf("MEASURE kubelet, %s killed during a slow create: Running %v after the restart; runc creates %d; failed CreateContainer calls %d (in the log of the kubelet that ran last)",
				tt.name, took.Round(time.Millisecond), len(creates), k.failedCalls(t, "CreateContainer"))
			if len(creates) != tt.wantCreates {
				t.Errorf("runc create ran %d times (%v), want %d", len(creates), creates, tt.wantCreates)
			}
			d.slowRuncCreates(t, 0)
			if adds := d.addedIDs(t); len(adds) != 1 {
				t.Errorf("CNI ADD ran %d times, want once: the pod keeps its sandbox", len(adds))
			}
			p, _ := k.pod(t, "killed")
			running := p.Status.ContainerStatuses[0].runtimeID()
			if running != creates[len(creates)-1] {
				t.Errorf("the kubelet runs %s, want %s, the last container runc created", running, creates[len(creates)-1])
			}
			d.assertNoLeaks(t, d.pods(t)[0], running)
			deletePod(t, d, k, "killed")
		})
	}
}

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// The container tests. Each starts its own daemon (startContainerDaemon),
// with a loopback registry holding busybox (image_test.go), runs pods whose
// cgroup parent and log directory belong to the node, and ends with the leak
// check, which covers containers too (containerLeaks, below): runtime
// containers, conmons, storage containers, cgroups, conmon's state files and
// mounts. Their helpers are at the end of the file.

// TestContainerLifecycle drives a container through its life with the real
// crictl: pull, images, inspecti; runp, create, start, ps, logs, exec, stop,
// inspect, rm, rmp, rmi (refused while a container uses the image); a
// graceful stop; and a memory limit seen in the container's cgroup.
func TestContainerLifecycle(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})

	imgs := d.images(t)
	if len(imgs) != 1 || !slices.Contains(imgs[0].RepoTags, testImage) {
		t.Fatalf("crictl images after the pull: %+v, want one image tagged %s", imgs, testImage)
	}
	imageID := imgs[0].ID
	out := d.mustCrictl(t, "inspecti", "-o", "json", testImage)
	if !strings.Contains(out, imageID) {
		t.Fatalf("crictl inspecti %s does not show the image's ID %s:\n%s", testImage, imageID, out)
	}

	pod := d.containerPod(t, "lifecycle", false)
	podID := d.mustRunp(t, pod)
	ctr := containerConfig(t, "hello", 0, sleeper)
	id := d.mustCreate(t, podID, ctr, pod)
	d.requirePs(t, "after create", id)
	if running := d.ps(t, false); len(running) != 0 {
		t.Fatalf("crictl ps lists %v before the container is started", running)
	}
	d.requireCtrState(t, id, "CONTAINER_CREATED")

	d.mustCrictl(t, "start", id)
	if running := d.ps(t, false); !slices.Equal(running, []string{id}) {
		t.Fatalf("crictl ps lists %v after start, want %s", running, id)
	}
	st := d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if st.Status.LogPath == "" || !strings.HasPrefix(st.Status.LogPath, d.podLogDir+"/") {
		t.Errorf("log path %q, want one in the pod's log directory under %s", st.Status.LogPath, d.podLogDir)
	}
	d.waitLog(t, id, "hello-from-container", 10*time.Second)

	if got := d.execSync(t, id, "echo", "hi"); got != "hi" {
		t.Errorf("crictl exec --sync %s echo hi printed %q, want hi", id, got)
	}
	_, stderr, err := d.crictl(t, "exec", "-s", id, "sh", "-c", "exit 3")
	if err == nil || !strings.Contains(stderr, "exited with 3") {
		t.Errorf("crictl exec -s %s sh -c 'exit 3': %v, want a failure saying it exited with 3\nstderr: %s", id, err, stderr)
	}
	if got := d.execSync(t, id, "hostname"); got != "e2e" {
		t.Errorf("hostname in the container is %q, want the pod's e2e", got)
	}

	// The image is in use: rmi is refused.
	_, stderr, err = d.crictl(t, "rmi", testImage)
	requireCode(t, "crictl rmi of an image a container uses", err, stderr, "FailedPrecondition")

	// sh as PID 1 ignores SIGTERM: stop ends with SIGKILL after the timeout.
	start := time.Now()
	d.mustCrictl(t, "stop", "-t", "1", id)
	took := time.Since(start)
	st = d.requireExited(t, id, 137)
	t.Logf("stop -t 1 took %v; exit code %d, reason %q", took.Round(time.Millisecond), st.Status.ExitCode, st.Status.Reason)
	if took < time.Second {
		t.Errorf("stop -t 1 returned after %v, before the timeout", took)
	}
	if running := d.ps(t, false); len(running) != 0 {
		t.Errorf("crictl ps lists %v after stop", running)
	}

	// A container that exits on SIGTERM stops at once, with its own code.
	graceful := d.run(t, podID, containerConfig(t, "graceful", 0,
		[]string{"sh", "-c", "trap 'exit 0' TERM; echo ready; while true; do sleep 0.1; done"}), pod)
	d.waitLog(t, graceful, "ready", 10*time.Second)
	start = time.Now()
	d.mustCrictl(t, "stop", "-t", "20", graceful)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("stop of a container that exits on SIGTERM took %v", took)
	}
	d.requireExited(t, graceful, 0)

	// The kubelet creates containers from the image ID (PullImage's image
	// ref), and rmi by ID is refused while they use it.
	byID := d.mustCreate(t, podID, containerConfig(t, "by-id", 0, sleeper, withImage(imageID)), pod)
	if st := d.inspect(t, byID); st.Status.ImageRef == "" {
		t.Errorf("container %s created from image ID %s: no imageRef in its status", byID, imageID)
	}
	_, stderr, err = d.crictl(t, "rmi", imageID)
	requireCode(t, "crictl rmi by ID of an image a container uses", err, stderr, "FailedPrecondition")
	d.mustCrictl(t, "rm", byID)

	// A memory limit, as the container's cgroup shows it.
	const limit = 64 << 20
	limited := d.run(t, podID, containerConfig(t, "limited", 0, sleeper, withMemoryLimit(limit)), pod)
	cg := d.memoryCgroup(t, limited)
	if !strings.HasPrefix(cg, d.cgroupParent+"/") || !strings.Contains(cg, limited) {
		t.Errorf("memory cgroup of %s is %q, want one under the pod's cgroup parent %s named after it", limited, cg, d.cgroupParent)
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != fmt.Sprint(limit) {
		t.Errorf("memory.limit_in_bytes of %s is %s, want %d", cg, got, limit)
	}
	// Resources can be changed while it runs.
	d.mustCrictl(t, "update", "--memory", fmt.Sprint(2*limit), limited)
	if b, err = os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes")); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != fmt.Sprint(2*limit) {
		t.Errorf("after crictl update --memory %d, memory.limit_in_bytes is %s", 2*limit, got)
	}
	// An exec that outlives its timeout is killed, and says so.
	start = time.Now()
	_, stderr, err = d.crictl(t, "exec", "--sync", "--timeout", "1", limited, "sleep", "30")
	requireCode(t, "crictl exec --sync --timeout 1 sleep 30", err, stderr, "DeadlineExceeded")
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("exec with a 1s timeout took %v", took)
	}
	if ps := d.execSync(t, limited, "ps"); strings.Contains(ps, "sleep 30") {
		t.Errorf("the timed-out exec still runs in the container:\n%s", ps)
	}
	d.assertNoLeaks(t, podID, id, graceful, limited)
	// The leak check sees containers: keeping only the pod, it reports each
	// part of the running one.
	left := strings.Join(d.leaks(t, podID), "\n")
	for _, part := range []string{"runtime container " + limited, "conmon process", "storage container " + limited, "cgroup ", "conmon state "} {
		if !strings.Contains(left, part) {
			t.Errorf("the leak check does not report %q of the running container %s; it reports:\n%s", part, limited, left)
		}
	}

	d.mustCrictl(t, "rm", "-f", limited)
	d.mustCrictl(t, "rm", id)
	d.mustCrictl(t, "rm", graceful)
	d.requirePs(t, "after rm")
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.mustCrictl(t, "rmi", testImage)
	if left := d.images(t); len(left) != 0 {
		t.Errorf("after rmi crictl images lists %+v", left)
	}
	d.stopClean(t)
}

// memoryCgroup returns the memory cgroup of a running container's init
// process (from runc state and /proc/<pid>/cgroup).
func (d *daemon) memoryCgroup(t *testing.T, id string) string {
	t.Helper()
	out, err := exec.Command("runc", "--root", d.runcRoot(), "state", id).CombinedOutput()
	if err != nil {
		t.Fatalf("runc state %s: %v\n%s", id, err, out)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runc state %s: %v\n%s", id, err, out)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", st.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			return f[2]
		}
	}
	t.Fatalf("no memory cgroup in /proc/%d/cgroup:\n%s", st.Pid, b)
	return ""
}

// requireNoContainerTrace fails the test if the daemon holds anything of a
// container: a listed one, a journal record, a storage or runtime container.
func (d *daemon) requireNoContainerTrace(t *testing.T, why string, keep ...string) {
	t.Helper()
	if ids := d.ps(t, true); len(ids) != 0 {
		t.Errorf("%s: crictl ps -a lists %v", why, ids)
	}
	for _, r := range d.containerRecords(t) {
		t.Errorf("%s: the journal holds %s", why, describeSteps(r))
	}
	kept := func(s string) bool {
		for _, k := range keep {
			if strings.Contains(s, k) {
				return true
			}
		}
		return false
	}
	for _, l := range d.containerLeaks(t, kept) {
		t.Errorf("%s: left %s", why, l)
	}
}

// TestContainerBadRequests makes CreateContainer requests the daemon must
// refuse, and checks each is refused with the right code and leaves nothing
// behind: no listed container, journal record, storage or runtime container.
// The name stays free: a good request under it then succeeds.
func TestContainerBadRequests(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "bad", false)
	podID := d.mustRunp(t, pod)
	existing := t.TempDir()

	for _, tc := range []struct {
		name     string
		podID    string
		opts     []ctrOption
		code     string
		contains string
	}{
		{"unknown image", podID, []ctrOption{withImage(testImagePrefix + "/e2e/missing:1.0")}, "NotFound", "pull it first"},
		{"unknown sandbox", randomID(t), nil, "NotFound", "not found"},
		{"mount with a relative container path", podID, []ctrOption{withMount("data", existing)}, "InvalidArgument", "data"},
		{"mount with .. in the container path", podID, []ctrOption{withMount("/data/../etc", existing)}, "InvalidArgument", ".."},
		{"mount of a host path that does not exist", podID, []ctrOption{withMount("/data", "/nonexistent-"+randomHex(t, 4))}, "InvalidArgument", "nonexistent"},
		{"log path escaping the log directory", podID, []ctrOption{withLogPath("../../escape.log")}, "InvalidArgument", "log"},
		{"absolute log path", podID, []ctrOption{withLogPath("/tmp/escape.log")}, "InvalidArgument", "log"},
		{"relative working directory", podID, []ctrOption{func(cfg map[string]any) { cfg["working_dir"] = "../work" }}, "InvalidArgument", "not absolute"},
	} {
		ctr := containerConfig(t, "bad", 0, sleeper, tc.opts...)
		_, stderr, err := d.create(t, nil, tc.podID, ctr, pod)
		requireCode(t, tc.name, err, stderr, tc.code)
		if !strings.Contains(stderr, tc.contains) {
			t.Errorf("%s: the error does not say %q: %s", tc.name, tc.contains, strings.TrimSpace(stderr))
		}
		for line := range strings.Lines(stderr) {
			if strings.Count(line, "desc =") > 1 {
				t.Errorf("%s: the error nests one gRPC status in another: %s", tc.name, strings.TrimSpace(line))
			}
		}
		t.Logf("%s: %s", tc.name, strings.TrimSpace(stderr))
		d.requireNoContainerTrace(t, "after "+tc.name)
	}
	if _, err := os.Stat(filepath.Join(d.podLogDir, "escape.log")); err == nil {
		t.Error("a log file was made outside the pod's log directory")
	}

	// The name was never kept: a good request under it succeeds.
	id := d.run(t, podID, containerConfig(t, "bad", 0, sleeper), pod)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	d.removeCtr(t, id)
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestContainerExit checks that a container's exit is recorded by the daemon
// as it happens (the journal shows it without any status call), and that an
// exit while the daemon is stopped is found at the next start.
func TestContainerExit(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "exit", false)
	podID := d.mustRunp(t, pod)

	// Exit noticed without polling: the record gets its exit markers
	// from conmon's exit file, and no CRI call is made meanwhile.
	seven := d.run(t, podID, containerConfig(t, "seven", 0, []string{"sh", "-c", "exit 7"}), pod)
	rec := d.waitContainerRecord(t, "with an exit", 10*time.Second, func(r journal.Record) bool {
		_, ok := r.Marker("finished_at")
		return r.ID == seven && ok
	})
	if code, _ := rec.Marker("exit_code"); code != "7" {
		t.Errorf("the journal records exit code %q for %s, want 7", code, seven)
	}
	st := d.requireExited(t, seven, 7)
	if st.Status.Reason != "Error" {
		t.Errorf("reason %q, want Error", st.Status.Reason)
	}
	d.mustCrictl(t, "rm", seven)

	// Killed by the kernel for want of memory: the reason says so, as the
	// kubelet expects.
	oom := d.run(t, podID, containerConfig(t, "oom", 0, []string{"sh", "-c", "a=0123456789abcdef; while true; do a=$a$a; done"},
		withMemoryLimit(16<<20)), pod)
	d.waitContainerRecord(t, "with an exit", 20*time.Second, func(r journal.Record) bool {
		_, ok := r.Marker("finished_at")
		return r.ID == oom && ok
	})
	st = d.requireExited(t, oom, 137)
	if st.Status.Reason != "OOMKilled" {
		t.Errorf("a container killed for want of memory: reason %q, want OOMKilled", st.Status.Reason)
	}
	d.mustCrictl(t, "rm", oom)

	// Exit while the daemon is down.
	five := d.run(t, podID, containerConfig(t, "five", 0, []string{"sh", "-c", "sleep 2; exit 5"}), pod)
	d.requireCtrState(t, five, "CONTAINER_RUNNING")
	d.stop(t)
	time.Sleep(3 * time.Second)
	exitFile := filepath.Join(d.ociStateDir, "exits", five)
	if _, err := os.Stat(exitFile); err != nil {
		t.Fatalf("conmon did not record the exit while the daemon was down: %v", err)
	}
	restarted := time.Now()
	d.restart(t)
	st = d.requireExited(t, five, 5)
	finished, err := time.Parse(time.RFC3339Nano, st.Status.FinishedAt)
	if err != nil {
		t.Fatalf("finishedAt %q: %v", st.Status.FinishedAt, err)
	}
	if !finished.Before(restarted) {
		t.Errorf("finishedAt %v is after the restart at %v: the exit time is not the container's", finished, restarted)
	}
	d.mustCrictl(t, "rm", five)
	d.requirePs(t, "after rm")
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestPodStopRemoveContainers checks that StopPodSandbox stops the pod's
// containers (running and created) and RemovePodSandbox removes them.
func TestPodStopRemoveContainers(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "stoprm", false)
	podID := d.mustRunp(t, pod)
	a := d.run(t, podID, containerConfig(t, "a", 0, sleeper), pod)
	b := d.run(t, podID, containerConfig(t, "b", 0, sleeper), pod)
	c := d.mustCreate(t, podID, containerConfig(t, "c", 0, sleeper), pod)
	d.requirePs(t, "three containers", a, b, c)

	// List filters: by pod, state and label; another pod's container is
	// not listed with the pod's.
	other := d.containerPod(t, "other", true)
	otherID := d.mustRunp(t, other)
	o := d.mustCreate(t, otherID, containerConfig(t, "o", 0, sleeper), other)
	for _, f := range []struct {
		args []string
		want []string
	}{
		{[]string{"--pod", podID}, []string{a, b}},
		{[]string{"-a", "--pod", podID}, []string{a, b, c}},
		{[]string{"-a", "--pod", otherID}, []string{o}},
		{[]string{"-a", "--state", "created"}, []string{c, o}},
		{[]string{"-a", "--label", "e2e=crijournal"}, []string{a, b, c, o}},
		{[]string{"-a", "--label", "e2e=other"}, nil},
		{[]string{"-a", "--id", a[:12]}, []string{a}},
	} {
		got := strings.Fields(d.mustCrictl(t, append([]string{"ps", "-q"}, f.args...)...))
		slices.Sort(got)
		want := slices.Clone(f.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("crictl ps -q %s lists %v, want %v", strings.Join(f.args, " "), got, want)
		}
	}
	d.mustCrictl(t, "rm", o)
	d.removePod(t, otherID)

	start := time.Now()
	d.mustCrictl(t, "stopp", podID)
	t.Logf("stopp with two running containers took %v", time.Since(start).Round(time.Millisecond))
	d.requireState(t, podID, "SANDBOX_NOTREADY")
	for _, id := range []string{a, b, c} {
		d.requireCtrState(t, id, "CONTAINER_EXITED")
	}
	if running := d.ps(t, false); len(running) != 0 {
		t.Errorf("crictl ps lists %v after stopp", running)
	}
	// Nothing runs any more; the runtime containers are still there (stopped).
	for _, p := range conmonProcesses(d.ociStateDir) {
		t.Errorf("conmon still running after stopp: %d %s", p.pid, p.cmdline)
	}
	// A stopped pod takes no new container.
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "late", 0, sleeper), pod)
	requireCode(t, "create in a stopped pod", err, stderr, "FailedPrecondition")

	d.mustCrictl(t, "rmp", podID)
	d.requirePods(t, "after rmp")
	d.requirePs(t, "after rmp")
	d.assertNoLeaks(t)

	// RemovePodSandbox of a ready pod with a running container, at once.
	pod2 := d.containerPod(t, "rmready", false)
	pod2ID := d.mustRunp(t, pod2)
	d.run(t, pod2ID, containerConfig(t, "x", 0, sleeper), pod2)
	d.requireRemoveRPC(t, pod2ID, "a ready pod with a running container")
	d.requirePods(t, "after RemovePodSandbox")
	d.requirePs(t, "after RemovePodSandbox")
	d.stopClean(t)
}

// TestCrashDuringStart kills the daemon (SIGKILL) while StartContainer
// waits on a runtime whose `runc start` has started the container but not
// yet returned: the journal does not know the container runs. After the
// restart the container must be reported running (the kubelet would
// otherwise call StartContainer again, which can only fail), and be stopped
// and removed without leaks.
func TestCrashDuringStart(t *testing.T) {
	t.Parallel()
	runc, err := exec.LookPath("runc")
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
	deadline := time.Now().Add(10 * time.Second)
	var sleeperPid int
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "start.log"))
		if _, err := fmt.Sscanf(string(b), "start "+id+" 0 %d", &sleeperPid); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runc start did not start the container within 10s: %q", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// TestContainerOverlay runs containers on the overlay driver, whose root
// filesystems are mounts: they are mounted while their containers exist,
// stay mounted across a daemon crash, and are unmounted when the container
// is removed or its creation rolled back.
func TestContainerOverlay(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{storageDriver: "overlay"})
	pod := d.containerPod(t, "overlay", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "layered", 0, sleeper), pod)
	d.waitLog(t, id, "hello-from-container", 10*time.Second)
	if got := d.execSync(t, id, "sh", "-c", "echo written > /tmp/f; cat /tmp/f"); got != "written" {
		t.Fatalf("writing in the container's root filesystem: %q", got)
	}
	d.assertNoLeaks(t, podID, id)
	var rootfs []string
	for _, m := range mountsBelow(d.storageRoot()) {
		if strings.Contains(m, "/merged") {
			rootfs = append(rootfs, m)
		}
	}
	if len(rootfs) != 1 {
		t.Fatalf("overlay mounts of root filesystems under %s: %v, want the container's", d.storageRoot(), rootfs)
	}
	left := strings.Join(d.leaks(t, podID), "\n")
	if !strings.Contains(left, "mount "+rootfs[0]) {
		t.Errorf("the leak check does not report the root filesystem mount %s; it reports:\n%s", rootfs[0], left)
	}

	d.kill(t)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "cat", "/tmp/f"); got != "written" {
		t.Fatalf("after a daemon crash the container's file reads %q", got)
	}
	// A creation rolled back after its root filesystem was mounted: a bad
	// mount is refused once storage is made.
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "bad", 0, sleeper, withMount("rel", t.TempDir())), pod)
	requireCode(t, "create with a relative mount path", err, stderr, "InvalidArgument")
	d.assertNoLeaks(t, podID, id)

	d.removeCtr(t, id)
	d.assertNoLeaks(t, podID)

	// Crashes with a root filesystem mounted: during a creation (rolled
	// back at the next start) and during a removal (finished then).
	crash := func(point string, provoke func()) {
		t.Helper()
		d.restartArmed(t, point)
		provoke()
		d.requireKilledAt(t, point, 10*time.Second)
		d.restartUnarmed(t)
		d.requirePs(t, "after a crash at "+point)
		d.assertNoLeaks(t, podID)
	}
	crash("container-create/oci-container/after-intent", func() {
		if _, _, err := d.create(t, nil, podID, containerConfig(t, "crash-create", 0, sleeper), pod); err == nil {
			t.Fatal("create succeeded: the daemon did not crash")
		}
	})
	victim := d.run(t, podID, containerConfig(t, "crash-remove", 0, sleeper), pod)
	crash("journal/remove/storage-container/before-undo", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := d.cri(t).RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: victim}); err == nil {
			t.Fatal("RemoveContainer succeeded: the daemon did not crash")
		}
	})

	d.removePod(t, podID)
	d.mustCrictl(t, "rmi", testImage)
	d.stopClean(t)
}

// TestContainerConcurrency creates, starts and removes containers in two
// pods at once through the gRPC API, as a kubelet starting several pods
// does: every one is created once, runs, and goes without leaks.
func TestContainerConcurrency(t *testing.T) {
	t.Parallel()
	const perPod = 6
	d, _ := startContainerDaemon(t, daemonOptions{})
	cri := d.cri(t)
	type result struct {
		id  string
		err error
	}
	var pods []string
	results := make(chan result, 2*perPod)
	for p := range 2 {
		pod := d.containerPod(t, fmt.Sprintf("conc%d", p), false)
		podID := d.mustRunp(t, pod)
		pods = append(pods, podID)
		podCfg := loadPodConfig(t, pod)
		for i := range perPod {
			cfg := loadContainerConfig(t, containerConfig(t, fmt.Sprintf("c%d", i), 0, sleeper))
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				resp, err := cri.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
				if err != nil {
					results <- result{err: err}
					return
				}
				_, err = cri.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
				results <- result{resp.ContainerId, err}
			}()
		}
	}
	var ids []string
	for range 2 * perPod {
		r := <-results
		if r.err != nil {
			t.Errorf("create and start: %v", r.err)
			continue
		}
		ids = append(ids, r.id)
	}
	if t.Failed() {
		t.FailNow()
	}
	d.requirePs(t, "after the concurrent creations", ids...)
	for _, id := range ids {
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
	}
	d.assertNoLeaks(t, append(slices.Clone(pods), ids...)...)

	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := cri.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Errorf("remove: %v", err)
		}
	}
	d.requirePs(t, "after the concurrent removals")
	d.assertNoLeaks(t, pods...)
	for _, p := range pods {
		d.removePod(t, p)
	}
	d.stopClean(t)
}

// TestContainerLatency measures CreateContainer + StartContainer through the
// gRPC API, one container at a time, and the pull of the test image.
func TestContainerLatency(t *testing.T) {
	t.Parallel()
	const n = 30
	d, pullTook := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "latency", false)
	podID := d.mustRunp(t, pod)
	podCfg := loadPodConfig(t, pod)
	cri := d.cri(t)
	var lat []time.Duration
	for i := range n {
		cfg := loadContainerConfig(t, containerConfig(t, fmt.Sprintf("c%d", i), 0, []string{"sleep", "3600"}))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		resp, err := cri.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err == nil {
			_, err = cri.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
		}
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("container %d: %v", i, err)
		}
		lat = append(lat, took)
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	pct := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	t.Logf("MEASURE CreateContainer+StartContainer over %d containers (sequential, gRPC): p50 %v, p99 %v, min %v, max %v; image pull %v",
		n, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), sorted[0].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond), pullTook.Round(time.Millisecond))
	if got := d.ps(t, false); len(got) != n {
		t.Errorf("crictl ps lists %d running containers, want %d", len(got), n)
	}
	start := time.Now()
	d.removePod(t, podID)
	t.Logf("stopp + rmp of a pod with %d running containers took %v", n, time.Since(start).Round(time.Millisecond))
	d.requirePs(t, "after rmp")
	d.stopClean(t)
}

// The container timeout tests slow conmon down (conmonWrapper) so that a
// CreateContainer made with `crictl create -T 2s` times out while the
// runtime creates the container. crictl gives CreateContainer the -T value
// itself (RunPodSandbox gets twice it); each test logs the deadline the
// daemon saw.
const slowConmonDelay = 4 * time.Second

// timeOutCreate makes a CreateContainer time out during a slow conmon start
// (crictl create -T 2s) and returns the ID of the container the daemon goes
// on creating, from its live journal. crictl ps -a stays empty meanwhile,
// and the container refuses inspect.
func (d *daemon) timeOutCreate(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	calls := d.conmonCalls(t)
	d.slowConmon(t, slowConmonDelay)
	start := time.Now()
	_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
	elapsed := time.Since(start)
	requireCode(t, "crictl create -T 2s with a slow conmon", err, stderr, "DeadlineExceeded")
	d.waitConmonCall(t, calls+1, 5*time.Second)
	d.slowConmon(t, 0)
	if elapsed > slowConmonDelay-time.Second {
		t.Fatalf("crictl create -T 2s took %v, too close to conmon's delay %v for this test", elapsed, slowConmonDelay)
	}
	rec := d.waitContainerRecord(t, "of the timed-out creation", 5*time.Second, func(r journal.Record) bool { return true })
	if rec.State != journal.StateCreating {
		t.Fatalf("the timed-out creation %s is %s, want still %s (conmon is slow)", rec.ID, rec.State, journal.StateCreating)
	}
	t.Logf("crictl create -T 2s failed with DeadlineExceeded after %v; the daemon saw a deadline %v after the record began",
		elapsed.Round(time.Millisecond), rec.Deadline.Sub(rec.Created).Round(time.Millisecond))
	d.requirePs(t, "while the timed-out creation is still running")
	_, stderr, err = d.crictl(t, "inspect", rec.ID)
	requireCode(t, "inspect of a container being created", err, stderr, "NotFound")
	return rec.ID
}

// waitCached waits until the timed-out creation id is cached.
func (d *daemon) waitCached(t *testing.T, id string) journal.Record {
	t.Helper()
	return d.waitContainerRecord(t, id+" cached", slowConmonDelay+5*time.Second, func(r journal.Record) bool {
		return r.ID == id && r.State == journal.StateCached
	})
}

// requireNotYetCreated checks that a cached container refuses operations.
func (d *daemon) requireNotYetCreated(t *testing.T, id string) {
	t.Helper()
	for _, args := range [][]string{
		{"start", id},
		{"exec", "--sync", id, "echo", "hi"},
		{"inspect", id},
		{"stop", id},
	} {
		_, stderr, err := d.crictl(t, args...)
		requireCode(t, "crictl "+args[0]+" of a cached container", err, stderr, "NotFound")
		if !strings.Contains(stderr, "not yet created") {
			t.Errorf("crictl %s of a cached container: the error does not say it is not yet created: %s", args[0], strings.TrimSpace(stderr))
		}
	}
	d.requirePs(t, "with a cached container")
}

// requireWholeContainer checks that a created container can be started (if
// it is not) and runs: its log, exec.
func (d *daemon) requireWholeContainer(t *testing.T, id string) {
	t.Helper()
	if st := d.inspect(t, id); st.Status.State == "CONTAINER_CREATED" {
		d.mustCrictl(t, "start", id)
	}
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "echo", "whole"); got != "whole" {
		t.Fatalf("crictl exec --sync %s echo whole printed %q", id, got)
	}
	d.waitLog(t, id, "hello-from-container", 10*time.Second)
}

// TestContainerTimeouts covers a CreateContainer that times out while conmon
// is slow: the creation is kept (cached) and handed to the retry, also after
// a restart; it is cleaned up when no matching retry comes, or when its pod
// is removed; and a true duplicate of a created container gets it at once.
func TestContainerTimeouts(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, opts daemonOptions) (d *daemon, pod, podID string) {
		t.Helper()
		opts.conmonPath = conmonWrapper(t)
		d, _ = startContainerDaemon(t, opts)
		pod = d.containerPod(t, "slow", false)
		return d, pod, d.mustRunp(t, pod)
	}
	finish := func(t *testing.T, d *daemon, podID string) {
		t.Helper()
		d.removePod(t, podID)
		d.requirePs(t, "after rmp")
		d.stopClean(t)
	}

	t.Run("retry gets the same container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		created := d.timeOutCreate(t, podID, ctr, pod)
		rec := d.waitCached(t, created)
		if left := time.Until(rec.Expiry); left < 30*time.Second {
			t.Errorf("the cached container expires in %v, want about the 1m TTL", left)
		}
		d.requireNotYetCreated(t, created)
		d.assertNoLeaks(t, podID, created)

		calls := d.conmonCalls(t)
		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the retry got container %s, want %s, the one made for the timed-out request", id, created)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Errorf("the retry started conmon again (%d starts, want %d)", n, calls)
		}
		d.requirePs(t, "after the retry", id)
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("retry after a restart gets the same container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		created := d.timeOutCreate(t, podID, ctr, pod)
		d.waitCached(t, created)
		d.stop(t)
		var cached []journal.Record
		for _, r := range d.records(t) {
			if r.Kind == journal.KindContainer {
				cached = append(cached, r)
			}
		}
		if len(cached) != 1 || cached[0].ID != created || cached[0].State != journal.StateCached {
			t.Fatalf("container records after the stop: %v, want one cached record %s", cached, created)
		}
		d.assertNoLeaks(t, podID, created)
		d.restart(t)
		d.requireNotYetCreated(t, created)

		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the retry after the restart got container %s, want %s", id, created)
		}
		d.requirePs(t, "after the retry", id)
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("retry with another attempt gets a new container, the cached one expires", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: shortTTL})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)

		id := d.mustCreate(t, podID, containerConfig(t, "slow", 1, sleeper), pod)
		if id == created {
			t.Fatalf("the retry with attempt 1 got the container %s made for attempt 0", id)
		}
		d.requirePs(t, "after the retry with attempt 1", id)
		d.requireWholeContainer(t, id)
		d.waitNoLeaks(t, expiryWait, podID, id)
		if recs := d.containerRecords(t); len(recs) != 1 || recs[0].ID != id {
			t.Errorf("after the expiry the journal holds %d container records, want only %s", len(recs), id)
		}
		finish(t, d, podID)
	})

	t.Run("never re-requested, the cached container expires", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: shortTTL})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)
		if !strings.Contains(strings.Join(d.leaks(t, podID), "\n"), "runtime container "+created) {
			t.Fatalf("the cached container %s has no runtime container", created)
		}
		d.waitNoLeaks(t, expiryWait, podID)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after the expiry the journal holds %d container records", len(recs))
		}
		finish(t, d, podID)
	})

	t.Run("removing the pod removes its cached container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)
		d.removePod(t, podID)
		d.requirePods(t, "after rmp")
		d.assertNoLeaks(t)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after rmp the journal holds %d container records", len(recs))
		}
		d.stopClean(t)
	})

	t.Run("duplicate while running waits and fails at its deadline, the next retry gets it", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		d.slowConmon(t, 6*time.Second)
		first := make(chan crictlResult, 1)
		go func() {
			start := time.Now()
			_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
			first <- crictlResult{stderr: stderr, err: err, elapsed: time.Since(start)}
		}()
		d.waitConmonCall(t, 1, 5*time.Second)
		d.slowConmon(t, 0)
		created := d.waitContainerRecord(t, "being created", 5*time.Second, func(journal.Record) bool { return true }).ID

		// The creation is at its runtime stage: a duplicate waits for it
		// until its own deadline.
		start := time.Now()
		_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
		elapsed := time.Since(start)
		r1 := <-first
		requireCode(t, "the first create -T 2s", r1.err, r1.stderr, "DeadlineExceeded")
		requireCode(t, "the duplicate create -T 2s", err, stderr, "DeadlineExceeded")
		if elapsed < 3*time.Second/2 {
			t.Errorf("the duplicate failed after %v, well before its 2s deadline: it should wait", elapsed)
		}
		t.Logf("first request failed after %v; duplicate after %v: %s", r1.elapsed.Round(time.Millisecond), elapsed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if !strings.Contains(stderr, "container runtime creation") {
			t.Errorf("the duplicate's error does not name the stage the creation is at:\n%s", stderr)
		}
		d.requirePs(t, "while the creation is still running")

		d.waitCached(t, created)
		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the next retry got container %s, want %s", id, created)
		}
		if n := d.conmonCalls(t); n != 1 {
			t.Errorf("conmon was started %d times, want once", n)
		}
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	// RemovePodSandbox waits for the container creations running in the pod,
	// so that none finishes after the removal has listed the pod's containers:
	// right after rmp nothing is listed, left on the node or in the journal.
	requireNothingAfterRmp := func(t *testing.T, d *daemon) {
		t.Helper()
		d.requirePods(t, "after rmp")
		d.requirePs(t, "after rmp")
		d.assertNoLeaks(t)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after rmp the journal still holds %s", describeSteps(recs[0]))
		}
		d.stopClean(t)
	}
	t.Run("removing the pod while a timed-out creation runs waits for it and leaves nothing", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		start := time.Now()
		d.removePod(t, podID)
		t.Logf("stopp+rmp during the creation of %s took %v", created, time.Since(start).Round(time.Millisecond))
		// At once, not after the cache's minute: the creation had ended
		// (cached) before rmp returned, and rmp removed it.
		requireNothingAfterRmp(t, d)
	})

	t.Run("removing the pod while a live creation runs removes the container it returns", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{})
		d.slowConmon(t, 3*time.Second)
		result := make(chan crictlResult, 1)
		go func() {
			var r crictlResult // stdout: the container's ID
			r.stdout, r.stderr, r.err = d.create(t, []string{"-T", "20s"}, podID, containerConfig(t, "live", 0, sleeper), pod)
			result <- r
		}()
		d.waitConmonCall(t, 1, 5*time.Second)
		d.slowConmon(t, 0)
		d.mustCrictl(t, "stopp", podID)
		start := time.Now()
		d.mustCrictl(t, "rmp", podID)
		t.Logf("rmp during a live creation took %v", time.Since(start).Round(time.Millisecond))
		var id string
		select {
		case r := <-result:
			if r.err != nil {
				t.Fatalf("the live create failed: %v: %s", r.err, r.stderr)
			}
			id = r.stdout
		case <-time.After(10 * time.Second):
			t.Fatal("the live create did not return within 10s of rmp")
		}
		// The creation was answered, and rmp, which waited for it, removed
		// the container with the pod: nothing of it is left, now or later.
		_, stderr, err := d.crictl(t, "inspect", id)
		requireCode(t, "inspect of the container after its pod was removed", err, stderr, "NotFound")
		requireNothingAfterRmp(t, d)
	})

	t.Run("true duplicate of a created container returns it at once", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{})
		ctr := containerConfig(t, "fast", 0, sleeper)
		id := d.mustCreate(t, podID, ctr, pod)
		calls := d.conmonCalls(t)
		for _, when := range []string{"created", "running"} {
			start := time.Now()
			again := d.mustCreate(t, podID, ctr, pod)
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("the duplicate of a %s container took %v, want an answer at once", when, elapsed)
			}
			if again != id {
				t.Fatalf("the duplicate of a %s container got %s, want %s", when, again, id)
			}
			if when == "created" {
				d.requireWholeContainer(t, id)
			}
		}
		if n := d.conmonCalls(t); n != calls {
			t.Errorf("the duplicates started conmon again (%d starts, want %d)", n, calls)
		}
		d.requirePs(t, "after the duplicates", id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})
}

// Triggers of the container flows for the crash matrix (crash_test.go). The
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
			t.Helper()
			d.pull(t, testImage)
			podID := d.mustRunp(t, pod)
			id := d.run(t, podID, crashContainerConfig(t, pod), pod)
			d.requireCtrState(t, id, "CONTAINER_RUNNING")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := d.cri(t).RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err == nil {
				t.Fatalf("RemoveContainer of %s succeeded: the daemon did not crash at the armed point (a misspelt point name?)", id)
			} else {
				t.Logf("RemoveContainer of %s: %v (the daemon crashed)", id, err)
			}
			return id
		},
		settle:  settleContainer,
		allowed: []crashOutcome{outcomeGone},
	}
)

// createCrashingContainer pulls the test image, runs the pod and creates a
// container in it, a request that must not succeed: the daemon crashes at
// the armed point on the way.
func createCrashingContainer(t *testing.T, d *daemon, pod string) string {
	t.Helper()
	d.pull(t, testImage)
	podID := d.mustRunp(t, pod)
	if id, _, err := d.create(t, nil, podID, crashContainerConfig(t, pod), pod); err == nil {
		t.Fatalf("crictl create returned container %s: the daemon did not crash at the armed point (a misspelt point name?)", id)
	}
	return ""
}

// crashContainerConfig writes (the same every time) and returns the
// container configuration of a crash case, kept beside its pod's.
func crashContainerConfig(t *testing.T, pod string) string {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{
		"metadata": map[string]any{"name": "crash", "attempt": 0},
		"image":    map[string]any{"image": testImage},
		"command":  sleeper,
		"log_path": "crash_0.log",
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)},
		}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(pod), "ctr-crash.json")
	writeFile(t, path, string(b), 0o644)
	return path
}

// settleContainer checks the invariant for a container whose request crashed
// (crashed is its ID when known), after the restart: the pod is ready, and
// either no container is listed and nothing of one is left (gone), or none
// is listed and what is left is handed whole to the retry (cached), or the
// container is listed whole and the retry gets the same ID (created). Then
// it runs the container the retry got, removes it and the pod, and checks
// the node is clean.
func settleContainer(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
	t.Helper()
	pods := d.pods(t)
	if len(pods) != 1 {
		t.Fatalf("after the restart crictl pods lists %v, want the one pod", pods)
	}
	podID := pods[0]
	d.requireWholeSandbox(t, podID)
	ctr := crashContainerConfig(t, pod)
	listed := d.ps(t, true)
	left := d.leaks(t, podID) // the daemon runs: no journal part
	calls := d.conmonCalls(t)
	var out crashOutcome
	var id string
	switch {
	case len(listed) == 0 && len(left) == 0:
		out = outcomeGone
		id = d.mustCreate(t, podID, ctr, pod)
		if id == crashed {
			t.Fatalf("nothing of %s was left after the restart, yet the retry got it back", crashed)
		}
		if n := d.conmonCalls(t); n != calls+1 {
			t.Fatalf("the retry got a new container %s but conmon was started %d times, want once", id, n-calls)
		}
	case len(listed) == 0:
		out = outcomeCached
		t.Logf("after the restart nothing is listed; the node holds:\n  %s", strings.Join(left, "\n  "))
		id = d.mustCreate(t, podID, ctr, pod)
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart nothing is listed but the node holds what %s made; the retry got a new container %s instead: the kept work is orphaned (neither gone nor returned)", crashed, id)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Fatalf("the retry got the kept container %s but conmon was started again", id)
		}
		if !strings.Contains(strings.Join(left, "\n"), "runtime container "+id) {
			t.Fatalf("the retry got %s, which the node held no runtime container of:\n  %s", id, strings.Join(left, "\n  "))
		}
	case len(listed) == 1:
		out = outcomeCreated
		id = listed[0]
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart crictl ps -a lists %s, want the crashed request's %s", id, crashed)
		}
		again := d.mustCreate(t, podID, ctr, pod)
		if again != id {
			t.Fatalf("the retry of a created container %s got %s, want the same ID (a true duplicate)", id, again)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Fatalf("the retry of the created container %s started conmon again", id)
		}
	default:
		t.Fatalf("after the restart crictl ps -a lists %v: more than the one container requested", listed)
	}
	d.requirePs(t, "after the retry", id)
	d.requireWholeContainer(t, id)
	d.assertNoLeaks(t, podID, id)

	d.removeCtr(t, id)
	d.requirePs(t, "after stop and rm")
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.requirePods(t, "after stopp and rmp")
	d.assertNoLeaks(t)
	return out
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
		out, err := exec.Command("runc", "--root", d.runcRoot(), "state", id).CombinedOutput()
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
	for _, p := range conmonProcesses(d.ociStateDir) {
		pids = append(pids, p.pid)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		// Gone, or a zombie (conmon's children are reaped by PID 1 late).
		for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d survived SIGKILL", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, dir := range []string{d.runcRoot(), d.ociStateDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	// The containers' cgroups (empty now) go with the cgroup file systems.
	cgroups, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", d.cgroupParent, "*"))
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
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				recs = d.containerRecords(t)
				if len(recs) == 0 || (len(recs) == 1 && recs[0].State == journal.StateCached) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after the %s the journal holds %s, want no container record or a cached one",
						time.Since(stoppedAt).Round(time.Second), how, describeSteps(recs[0]))
				}
			}
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

// Helpers of the container tests: configurations, crictl calls, the daemon's
// live journal, and the container part of the leak check.

func (d *daemon) runcRoot() string    { return filepath.Join(d.runRoot, "runc") }
func (d *daemon) storageRoot() string { return filepath.Join(d.root, "storage") }

// ---------------------------------------------------------------------------
// Configurations

// containerPod writes a pod configuration for the container tests: a pod
// network (or the host's), no shared pid namespace, a log directory (made,
// as the kubelet makes it) and the node's own cgroup parent, so that the
// leak check can find every cgroup the pod's containers got.
func (d *daemon) containerPod(t *testing.T, name string, hostNetwork bool) string {
	t.Helper()
	uid := randomHex(t, 16)
	logDir := filepath.Join(d.podLogDir, "e2e_"+name+"_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// pid CONTAINER, as the kubelet asks for pods that do not share their
	// process namespace: each container's command is PID 1 of its own.
	nsOpts := map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)}
	if hostNetwork {
		nsOpts["network"] = int(runtimeapi.NamespaceMode_NODE)
	}
	linux := map[string]any{"cgroup_parent": d.cgroupParent, "security_context": map[string]any{"namespace_options": nsOpts}}
	cfg := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname":      "e2e",
		"log_directory": logDir,
		"labels":        map[string]string{"e2e": "crijournal"},
		"linux":         linux,
	}
	return writePodJSON(t, "pod-"+sanitize(name)+"-"+uid[:8], cfg)
}

// ctrOption changes a container configuration.
type ctrOption func(cfg map[string]any)

func withMemoryLimit(bytes int64) ctrOption {
	return func(cfg map[string]any) {
		linux, _ := cfg["linux"].(map[string]any)
		if linux == nil {
			linux = map[string]any{}
			cfg["linux"] = linux
		}
		linux["resources"] = map[string]any{"memory_limit_in_bytes": bytes}
	}
}

func withLogPath(p string) ctrOption { return func(cfg map[string]any) { cfg["log_path"] = p } }

func withImage(ref string) ctrOption {
	return func(cfg map[string]any) { cfg["image"] = map[string]any{"image": ref} }
}

func withMount(containerPath, hostPath string) ctrOption {
	return func(cfg map[string]any) {
		mounts, _ := cfg["mounts"].([]any)
		cfg["mounts"] = append(mounts, map[string]any{"container_path": containerPath, "host_path": hostPath, "readonly": true})
	}
}

// containerConfig writes a container configuration for crictl create: the
// test image, command, and a log file <name>_<attempt>.log in the pod's log
// directory.
func containerConfig(t *testing.T, name string, attempt int, command []string, opts ...ctrOption) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "attempt": attempt},
		"image":    map[string]any{"image": testImage},
		"command":  command,
		"log_path": fmt.Sprintf("%s_%d.log", name, attempt),
		"labels":   map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)},
		}},
	}
	for _, o := range opts {
		o(cfg)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("ctr-%s-%d.json", sanitize(name), attempt))
	writeFile(t, path, string(b), 0o644)
	return path
}

// sleeper is a command that runs until it is killed (sh as PID 1 of its pid
// namespace ignores SIGTERM: stopping it takes the SIGKILL after the timeout).
var sleeper = []string{"sh", "-c", "echo hello-from-container; sleep 3600"}

// ---------------------------------------------------------------------------
// crictl

// create runs crictl create [flags] podID ctr pod and returns the container
// ID it printed; err is crictl's error, with its stderr.
func (d *daemon) create(t *testing.T, flags []string, podID, ctr, pod string) (id, stderr string, err error) {
	t.Helper()
	args := append(append([]string{"create"}, flags...), podID, ctr, pod)
	stdout, stderr, err := d.crictl(t, args...)
	if err != nil {
		return "", stderr, err
	}
	id = lastLine(stdout)
	if !idRE.MatchString(id) {
		t.Fatalf("crictl %s printed %q, not a container ID", strings.Join(args, " "), stdout)
	}
	return id, stderr, nil
}

// mustCreate runs crictl create and fails the test unless it returns an ID.
func (d *daemon) mustCreate(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	id, stderr, err := d.create(t, nil, podID, ctr, pod)
	if err != nil {
		t.Fatalf("crictl create %s %s: %v\nstderr: %s", podID, ctr, err, stderr)
	}
	return id
}

// run creates and starts a container, and returns its ID.
func (d *daemon) run(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	id := d.mustCreate(t, podID, ctr, pod)
	d.mustCrictl(t, "start", id)
	return id
}

// ps returns the IDs crictl ps -q lists (with -a, every state).
func (d *daemon) ps(t *testing.T, all bool) []string {
	t.Helper()
	args := []string{"ps", "-q"}
	if all {
		args = append(args, "-a")
	}
	ids := strings.Fields(d.mustCrictl(t, args...))
	slices.Sort(ids)
	return ids
}

// requirePs fails the test unless crictl ps -a -q lists exactly want.
func (d *daemon) requirePs(t *testing.T, why string, want ...string) {
	t.Helper()
	requireListed(t, why, "crictl ps -a -q", d.ps(t, true), want)
}

// ctrStatus is the part of crictl inspect -o json the tests read.
type ctrStatus struct {
	Status struct {
		ID         string `json:"id"`
		State      string `json:"state"`
		ExitCode   int    `json:"exitCode"`
		Reason     string `json:"reason"`
		StartedAt  string `json:"startedAt"`
		FinishedAt string `json:"finishedAt"`
		LogPath    string `json:"logPath"`
		ImageRef   string `json:"imageRef"`
		Metadata   struct {
			Name    string `json:"name"`
			Attempt int    `json:"attempt"`
		} `json:"metadata"`
	} `json:"status"`
}

// inspect returns the container's status from crictl inspect -o json.
func (d *daemon) inspect(t *testing.T, id string) ctrStatus {
	t.Helper()
	var st ctrStatus
	d.crictlStatus(t, "inspect", id, &st, func() string { return st.Status.ID })
	return st
}

// requireCtrState fails the test unless crictl inspect reports the state.
func (d *daemon) requireCtrState(t *testing.T, id, want string) ctrStatus {
	t.Helper()
	st := d.inspect(t, id)
	if st.Status.State != want {
		t.Fatalf("crictl inspect %s: state %q, want %q", id, st.Status.State, want)
	}
	return st
}

// requireExited fails the test unless the container exited with code.
func (d *daemon) requireExited(t *testing.T, id string, code int) ctrStatus {
	t.Helper()
	st := d.requireCtrState(t, id, "CONTAINER_EXITED")
	if st.Status.ExitCode != code {
		t.Fatalf("crictl inspect %s: exited with %d (reason %q), want %d", id, st.Status.ExitCode, st.Status.Reason, code)
	}
	return st
}

// execSync runs crictl exec --sync and returns stdout, trimmed.
func (d *daemon) execSync(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	return strings.TrimSpace(d.mustCrictl(t, append([]string{"exec", "--sync", id}, cmd...)...))
}

// waitLog waits until crictl logs of the container holds want.
func (d *daemon) waitLog(t *testing.T, id, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		stdout, stderr, err := d.crictlTimeout(10*time.Second, "logs", id)
		if err == nil && strings.Contains(stdout+stderr, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("crictl logs %s did not show %q within %v: %v\nstdout: %s\nstderr: %s", id, want, within, err, stdout, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCtr stops (at once) and removes a container.
func (d *daemon) removeCtr(t *testing.T, id string) {
	t.Helper()
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "rm", id)
}

// loadPodConfig reads a pod configuration file as crictl does, for gRPC calls.
func loadPodConfig(t *testing.T, path string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		t.Fatalf("pod config %s: %v", path, err)
	}
	return cfg
}

// loadContainerConfig reads a container configuration file, for gRPC calls.
func loadContainerConfig(t *testing.T, path string) *runtimeapi.ContainerConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		t.Fatalf("container config %s: %v", path, err)
	}
	return cfg
}

// ---------------------------------------------------------------------------
// The live journal

// containerRecords returns the container records of the live journal.
func (d *daemon) containerRecords(t *testing.T) []journal.Record {
	t.Helper()
	var out []journal.Record
	for _, r := range d.liveRecords(t) {
		if r.Kind == journal.KindContainer {
			out = append(out, r)
		}
	}
	return out
}

// waitContainerRecord waits until the live journal holds exactly one
// container record, and cond holds for it, and returns it.
func (d *daemon) waitContainerRecord(t *testing.T, what string, within time.Duration, cond func(journal.Record) bool) journal.Record {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		recs := d.containerRecords(t)
		if len(recs) == 1 && cond(recs[0]) {
			return recs[0]
		}
		if time.Now().After(deadline) {
			var got []string
			for _, r := range recs {
				got = append(got, describeSteps(r))
			}
			t.Fatalf("no container record %s within %v; container records: %q", what, within, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// What containers leave on the node

// runcList lists the runtime's containers under root (runc list, which would
// make root if it did not exist).
func runcList(root string) ([]string, error) {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	out, err := exec.Command("runc", "--root", root, "list", "-q").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("runc --root %s list: %v: %s", root, err, out)
	}
	return strings.Fields(string(out)), nil
}

type procInfo struct {
	pid     int
	cmdline string
}

// conmonProcesses lists the live processes (not zombies) whose command line
// names the conmon state directory: the conmons of a daemon (or the tests'
// wrapper of conmon, before it execs conmon).
func conmonProcesses(stateDir string) []procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	needle := []byte(stateDir + "/")
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, needle) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, procInfo{pid, strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))})
	}
	return out
}

// storageContainers reads containers/storage's containers from its
// containers.json files (any driver), without opening the store (the daemon
// holds its locks): container ID -> its layer's ID (which names its root
// filesystem's mount).
func storageContainers(storageRoot string) (map[string]string, error) {
	ids := map[string]string{}
	for _, name := range []string{"containers.json", "volatile-containers.json"} {
		files, _ := filepath.Glob(filepath.Join(storageRoot, "*-containers", name))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			var cs []struct {
				ID    string `json:"id"`
				Layer string `json:"layer"`
			}
			if len(bytes.TrimSpace(b)) > 0 {
				if err := json.Unmarshal(b, &cs); err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
			}
			for _, c := range cs {
				ids[c.ID] = c.Layer
			}
		}
	}
	return ids, nil
}

// cgroupDirs lists the cgroups below parent in every hierarchy, deepest
// first (the parent itself excluded).
func cgroupDirs(parent string) []string {
	var out []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		root := filepath.Join(h, parent)
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() && p != root {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// containerLeaks lists what containers left on the node that kept does not
// accept: runtime containers, conmons, storage containers, conmon's state
// files, cgroups under the pods' cgroup parent, and mounts under the node's
// directory (but the namespace pins, checked apart).
func (d *daemon) containerLeaks(t *testing.T, kept func(string) bool) []string {
	t.Helper()
	var leaks []string
	ids, err := runcList(d.runcRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !kept(id) {
			leaks = append(leaks, "runtime container "+id)
		}
	}
	for _, p := range conmonProcesses(d.ociStateDir) {
		if !kept(p.cmdline) {
			leaks = append(leaks, fmt.Sprintf("conmon process %d: %s", p.pid, p.cmdline))
		}
	}
	sids, err := storageContainers(d.storageRoot())
	if err != nil {
		t.Fatal(err)
	}
	var keptLayers []string // the root filesystems of kept containers
	for id, layer := range sids {
		if !kept(id) {
			leaks = append(leaks, "storage container "+id)
		} else if layer != "" {
			keptLayers = append(keptLayers, layer)
		}
	}
	for _, sub := range []string{"containers", "exits", "attach"} {
		entries, err := os.ReadDir(filepath.Join(d.ociStateDir, sub))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !kept(e.Name()) {
				leaks = append(leaks, "conmon state "+filepath.Join(d.ociStateDir, sub, e.Name()))
			}
		}
	}
	for _, cg := range cgroupDirs(d.cgroupParent) {
		if !kept(cg) {
			leaks = append(leaks, "cgroup "+cg)
		}
	}
	for _, m := range mountsBelow(d.base) {
		if m == d.nsDir || strings.HasPrefix(m, d.nsDir+"/") {
			continue // namespace pins: checked by leaks
		}
		if m == filepath.Join(d.storageRoot(), "overlay") {
			continue // the overlay driver's home, made private once and left mounted
		}
		if !kept(m) && !slices.ContainsFunc(keptLayers, func(l string) bool { return strings.Contains(m, l) }) {
			leaks = append(leaks, "mount "+m)
		}
	}
	return leaks
}

// removeContainersLeft removes what containers a test left on its node once
// the daemon is stopped: it kills their conmons, deletes their runtime
// containers, removes their cgroups and conmon's state directory.
func (d *daemon) removeContainersLeft(t *testing.T) {
	removeNodeContainers(t.Logf, d.runcRoot(), d.ociStateDir, d.cgroupParent)
	if h := d.opts.secondHandler; h != "" {
		removeNodeContainers(t.Logf, d.handlerRoot(h), oci.StateDirFor(d.runRoot, h), d.cgroupParent)
	}
}

// handlerRoot is the runc root of the handler opts.secondHandler names.
func (d *daemon) handlerRoot(handler string) string {
	return filepath.Join(d.runRoot, "runc-"+handler)
}

// sweepContainers removes the containers of a node whose test process died.
func sweepContainers(dir string) {
	runRoot := filepath.Join(dir, "run")
	removeNodeContainers(func(string, ...any) {}, filepath.Join(runRoot, "runc"), oci.StateDirFor(runRoot, "runc"), "/cje2e-"+filepath.Base(dir))
	// A second handler's, under any name (TestContainerDetails).
	roots, _ := filepath.Glob(filepath.Join(runRoot, "runc-*"))
	for _, root := range roots {
		h := strings.TrimPrefix(filepath.Base(root), "runc-")
		removeNodeContainers(func(string, ...any) {}, root, oci.StateDirFor(runRoot, h), "/cje2e-"+filepath.Base(dir))
	}
}

func removeNodeContainers(logf func(string, ...any), runcRoot, stateDir, cgroupParent string) {
	for _, p := range conmonProcesses(stateDir) {
		logf("cleanup: killing conmon %d: %s", p.pid, p.cmdline)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	ids, _ := runcList(runcRoot)
	for _, id := range ids {
		out, err := exec.Command("runc", "--root", runcRoot, "delete", "--force", id).CombinedOutput()
		logf("cleanup: runc delete --force %s: %v %s", id, err, out)
	}
	if strings.HasPrefix(cgroupParent, "/cje2e-") {
		dirs := cgroupDirs(cgroupParent)
		hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
		for _, h := range hierarchies {
			dirs = append(dirs, filepath.Join(h, cgroupParent))
		}
		for _, dir := range dirs {
			// A cgroup whose last process is still exiting is busy for a moment.
			for i := 0; i < 50; i++ {
				err := syscall.Rmdir(dir)
				if err == nil || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	if strings.HasPrefix(stateDir, "/run/cjo-") {
		if err := os.RemoveAll(stateDir); err != nil {
			logf("cleanup: %v", err)
		}
	}
}

// ---------------------------------------------------------------------------
// A slow conmon

// conmonWrapper installs a wrapper of conmon in a directory of the test and
// returns its path, for daemonOptions.conmonPath. Each call logs its
// arguments to conmon-calls.log beside it, sleeps the duration in
// conmon-sleep beside it if that file exists (see slowConmon), then execs
// the real conmon (keeping the sync pipe, fd 3).
func conmonWrapper(t *testing.T) string {
	t.Helper()
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		t.Skipf("conmon not found: %v", err)
	}
	dir := t.TempDir()
	script := `#!/bin/bash
# crijournal end-to-end tests: conmon, slowed on demand.
dir=` + shellQuote(dir) + `
delay=
if [ -f "$dir/conmon-sleep" ]; then
	delay="$(cat "$dir/conmon-sleep")"
fi
echo "$*" >> "$dir/conmon-calls.log"
if [ -n "$delay" ]; then
	sleep "$delay"
fi
exec ` + shellQuote(conmon) + ` "$@"
`
	path := filepath.Join(dir, "conmon")
	writeFile(t, path, script, 0o755)
	return path
}

// slowConmon makes every later conmon start of the daemon (which must use
// conmonWrapper) sleep dur first; 0 makes it fast again.
func (d *daemon) slowConmon(t *testing.T, dur time.Duration) {
	t.Helper()
	if d.opts.conmonPath == "" {
		t.Fatal("slowConmon: the daemon does not use the conmon wrapper")
	}
	path := filepath.Join(filepath.Dir(d.opts.conmonPath), "conmon-sleep")
	if dur <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(dur.Seconds(), 'f', 3, 64)+"\n", 0o644)
}

// conmonCalls returns how many times the conmon wrapper was started.
func (d *daemon) conmonCalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(d.opts.conmonPath), "conmon-calls.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// waitConmonCall waits until the conmon wrapper has been started n times.
func (d *daemon) waitConmonCall(t *testing.T, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for d.conmonCalls(t) < n {
		if time.Now().After(deadline) {
			t.Fatalf("conmon was not started %d times within %v (%d)", n, within, d.conmonCalls(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isZombie reports whether pid has exited but not been reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// TestContainerDetails covers what the kubelet relies on beyond the
// lifecycle: a pod on a second runtime handler runs its containers there;
// the image's stop signal is what StopContainer sends; ContainerStatus
// reports the image, its digest and the mounts; ImageStatus verbose carries
// the image's configuration; ReopenContainerLog after a rotation writes to
// the new file, and is refused for a container that no longer runs.
func TestContainerDetails(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	const usr1Tag = "stop-usr1"
	usr1Image := testImagePrefix + "/" + testImageRepo + ":" + usr1Tag
	usr1Digest := storagetest.PushBusyboxStopSignal(t, reg.host, testImageRepo, usr1Tag, "SIGUSR1")
	d := startDaemon(t, daemonOptions{registries: reg.mirror(), secondHandler: "second"})
	secondRoot := d.handlerRoot("second")
	d.pull(t, usr1Image)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cri := d.cri(t)

	pod := d.containerPod(t, "details", false)
	podID := d.mustRunp(t, "--runtime", "second", pod)
	if st, err := cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID}); err != nil || st.Status.RuntimeHandler != "second" {
		t.Fatalf("PodSandboxStatus = %v, %v; want runtime handler second", st, err)
	}
	hostDir := t.TempDir()
	writeFile(t, filepath.Join(hostDir, "greeting"), "hello\n", 0o644)
	script := `trap 'echo got-usr1; exit 3' USR1; while true; do echo tick; sleep 0.2; done`
	id := d.run(t, podID, containerConfig(t, "details", 0, []string{"sh", "-c", script},
		withImage(usr1Image), withMount("/data", hostDir)), pod)
	if out, err := exec.Command("runc", "--root", secondRoot, "state", id).CombinedOutput(); err != nil {
		t.Errorf("the container is not in the second handler's runtime root %s: %v\n%s", secondRoot, err, out)
	}
	if got := d.execSync(t, id, "cat", "/data/greeting"); got != "hello" {
		t.Errorf("the mount shows %q, want hello", got)
	}

	st, err := cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	s := st.Status
	if s.Image.GetImage() != usr1Image || !strings.HasSuffix(s.ImageRef, "@"+usr1Digest) {
		t.Errorf("ContainerStatus image %q ref %q, want %s and a reference ending @%s", s.Image.GetImage(), s.ImageRef, usr1Image, usr1Digest)
	}
	if len(s.Mounts) != 1 || s.Mounts[0].ContainerPath != "/data" || s.Mounts[0].HostPath != hostDir || !s.Mounts[0].Readonly {
		t.Errorf("ContainerStatus mounts %v, want /data from %s, read-only", s.Mounts, hostDir)
	}
	if s.CreatedAt <= 0 || s.StartedAt < s.CreatedAt {
		t.Errorf("ContainerStatus created %d started %d", s.CreatedAt, s.StartedAt)
	}

	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	img, err := runtimeapi.NewImageServiceClient(conn).ImageStatus(ctx, &runtimeapi.ImageStatusRequest{
		Image: &runtimeapi.ImageSpec{Image: usr1Image}, Verbose: true})
	if err != nil || img.Image == nil || !strings.Contains(img.Info["info"], "SIGUSR1") {
		t.Errorf("ImageStatus verbose of %s = %v, %v; want its configuration (stop signal SIGUSR1) in the info", usr1Image, img, err)
	}

	// Log rotation, as the kubelet does it: rename, then ReopenContainerLog.
	d.waitLog(t, id, "tick", 10*time.Second)
	if err := os.Rename(s.LogPath, s.LogPath+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cri.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	d.waitLog(t, id, "tick", 10*time.Second) // the new file

	// The image's stop signal: the container's trap exits 3 at once.
	start := time.Now()
	d.mustCrictl(t, "stop", "-t", "30", id)
	t.Logf("crictl stop took %v", time.Since(start).Round(time.Millisecond))
	d.requireExited(t, id, 3)
	d.waitLog(t, id, "got-usr1", 5*time.Second)
	_, err = cri.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ReopenContainerLog of an exited container = %v, want FailedPrecondition", err)
	}

	d.mustCrictl(t, "rm", id)
	d.removePod(t, podID)
	if entries, _ := os.ReadDir(secondRoot); len(entries) != 0 {
		t.Errorf("the second handler's runtime root still holds %d entries", len(entries))
	}
	d.stopClean(t)
}

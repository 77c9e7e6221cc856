package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/leaks"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// The container tests: a container's life through crictl, bad requests, exits,
// a pod's stop and removal with containers in it, and the details the kubelet
// reads. Each starts its own daemon (startContainerDaemon), with a loopback
// registry holding busybox (harness_images_test.go), runs pods whose cgroup parent and
// log directory belong to the node, and ends with the leak check, which covers
// containers too (containerLeaks, harness_leaks_test.go): runtime containers,
// conmons, storage containers, cgroups, conmon's state files and mounts. Their
// helpers are in harness_containers_test.go; the crashes, timeouts, storage
// and load of containers are tested in container_{crash,timeout,storage,load}_test.go.

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
	// An exec probe that leaves a process running in the background is answered when
	// its command exits, and the process goes on running in the container.
	execStart := time.Now()
	if got := d.execSync(t, id, "sh", "-c", "sleep 300 & echo fg; exit 0"); got != "fg" {
		t.Errorf("crictl exec --sync %s sh -c 'sleep 300 & echo fg; exit 0' printed %q, want fg", id, got)
	}
	if took := time.Since(execStart); took > 10*time.Second {
		t.Errorf("crictl exec --sync of a command leaving a background process took %v: it waited for the background process", took)
	}
	// The same through the streaming server (crictl exec without --sync).
	execStart = time.Now()
	if out := strings.TrimSpace(d.mustCrictl(t, "exec", id, "sh", "-c", "sleep 301 & echo fg; exit 0")); out != "fg" {
		t.Errorf("crictl exec %s sh -c 'sleep 301 & echo fg; exit 0' printed %q, want fg", id, out)
	}
	if took := time.Since(execStart); took > 10*time.Second {
		t.Errorf("crictl exec of a command leaving a background process took %v: it waited for the background process", took)
	}
	if ps := d.execSync(t, id, "ps", "-o", "args"); !strings.Contains(ps, "sleep 300") || !strings.Contains(ps, "sleep 301") {
		t.Errorf("the background sleeps 300 and 301 no longer run in the container:\n%s", ps)
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
	if !strings.HasPrefix(cg, d.cgroupRoot()+"/") || !strings.Contains(cg, limited) {
		t.Errorf("memory cgroup of %s is %q, want one under the pod's cgroup parent %s named after it", limited, cg, d.cgroupRoot())
	}
	limitFile := memoryLimitFile(cg)
	if got := readTrimmed(t, limitFile); got != fmt.Sprint(limit) {
		t.Errorf("%s is %s, want %d", limitFile, got, limit)
	}
	// Resources can be changed while it runs.
	d.mustCrictl(t, "update", "--memory", fmt.Sprint(2*limit), limited)
	if got := readTrimmed(t, limitFile); got != fmt.Sprint(2*limit) {
		t.Errorf("after crictl update --memory %d, %s is %s", 2*limit, limitFile, got)
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
		// A missing host path is made (TestMissingHostPathCreated), unless it is not clean.
		{"mount of a missing host path that is not clean", podID, []ctrOption{withMount("/data", existing+"/nonexistent-"+randomHex(t, 4)+"/../x")}, "InvalidArgument", "not absolute and clean"},
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
	// Its runtime container is deleted in the background, as containerd deletes an
	// exited task; the container stays, with its status, log and bundle (the spec NRI
	// plugins are shown), until it is removed, which removes the rest.
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		ids, err := runcList(d.runcRoot())
		if err == nil && slices.Contains(ids, seven) {
			err = fmt.Errorf("runc still lists the exited container %s", seven)
		}
		return err
	})
	if _, err := os.Stat(filepath.Join(d.ociStateDir, "containers", seven, "config.json")); err != nil {
		t.Errorf("the exited container's bundle lost its spec: %v", err)
	}
	d.requireExited(t, seven, 7)
	d.requirePs(t, "exited, its runtime container deleted", seven)
	d.mustCrictl(t, "logs", seven)
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
	for _, p := range leaks.Conmons(d.ociStateDir) {
		t.Errorf("conmon still running after stopp: %d %s", p.PID, p.Cmdline)
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

// TestContainerDetails covers what the kubelet relies on beyond the
// lifecycle: a pod on a second runtime handler runs its containers there;
// the image's stop signal is what StopContainer sends unless the config names
// one, and ContainerStatus reports the one in effect; ContainerStatus
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
	if out, err := runcCmd("--root", secondRoot, "state", id).CombinedOutput(); err != nil {
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
	if s.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR1 {
		t.Errorf("ContainerStatus stop signal %v, want the image's SIGNAL_SIGUSR1", s.StopSignal)
	}
	start := time.Now()
	d.mustCrictl(t, "stop", "-t", "30", id)
	t.Logf("crictl stop took %v", time.Since(start).Round(time.Millisecond))
	d.requireExited(t, id, 3)
	d.waitLog(t, id, "got-usr1", 5*time.Second)

	// The config's stop signal wins over the image's: the trap on USR2 exits 4.
	both := `trap 'exit 3' USR1; trap 'echo got-usr2; exit 4' USR2; echo trapping; while true; do sleep 0.2; done`
	id2 := d.run(t, podID, containerConfig(t, "details-usr2", 0, []string{"sh", "-c", both}, withImage(usr1Image),
		func(cfg map[string]any) { cfg["stop_signal"] = int(runtimeapi.Signal_SIGNAL_SIGUSR2) }), pod)
	d.waitLog(t, id2, "trapping", 10*time.Second)
	if st, err := cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id2}); err != nil || st.Status.StopSignal != runtimeapi.Signal_SIGNAL_SIGUSR2 {
		t.Errorf("ContainerStatus of a container whose config asks for SIGUSR2 (image: SIGUSR1) = %v, %v; want stop signal SIGNAL_SIGUSR2", st, err)
	}
	d.mustCrictl(t, "stop", "-t", "30", id2)
	d.requireExited(t, id2, 4)
	d.mustCrictl(t, "rm", id2)
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

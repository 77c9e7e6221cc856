package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

var ctxb = context.Background()

func TestCreateStartStateAndLog(t *testing.T) {
	r := newRuntime(t)
	c := createContainer(t, r, []string{"sh", "-c", "echo hello; echo oops >&2; sleep 30"}, nil)
	if c.pid <= 0 {
		t.Fatalf("Create returned pid %d", c.pid)
	}
	st, err := r.State(ctxb, c.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatusCreated || st.Pid != c.pid || st.Bundle != c.bundle {
		t.Fatalf("state after Create = %+v, want created with pid %d and bundle %s", st, c.pid, c.bundle)
	}
	if pid, err := r.ConmonPID(c.id); err != nil || !testenv.Alive(pid) {
		t.Fatalf("ConmonPID = %d, %v; want a live conmon", pid, err)
	}
	if err := r.Start(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if st, err = r.State(ctxb, c.id); err != nil || st.Status != StatusRunning {
		t.Fatalf("state after Start = %+v, %v; want running", st, err)
	}
	line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+[+-]\d\d:\d\d stdout F hello$`)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		b, err := os.ReadFile(c.logPath)
		if err != nil {
			return err
		}
		if !line.Match(b) || !strings.Contains(string(b), " stderr F oops\n") {
			return fmt.Errorf("log file holds %q, want CRI lines with hello on stdout and oops on stderr", b)
		}
		return nil
	})
	if _, _, ok, err := r.ExitStatus(c.id); ok || err != nil {
		t.Fatalf("ExitStatus of a running container: ok=%v err=%v", ok, err)
	}
}

func TestTerminalContainer(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "[ -t 1 ] && echo on-a-tty; sleep 30"}, func(in *SpecInput) {
		in.Container.Tty = true
	})
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if b, _ := os.ReadFile(c.logPath); !strings.Contains(string(b), "stdout F on-a-tty") {
			return fmt.Errorf("log holds %q", b)
		}
		return nil
	})
}

// waitLog waits until the container's log holds want.
// backgroundPID waits for the line "background <PID>" in c's log, which the tests'
// shells echo after starting a process in the background, and returns the PID.
func backgroundPID(t *testing.T, c *testContainer) string {
	t.Helper()
	waitLog(t, c, "stdout F background ")
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`stdout F background (\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no background PID in the log %q", b)
	}
	return string(m[1])
}

func waitLog(t *testing.T, c *testContainer, want string) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if b, _ := os.ReadFile(c.logPath); !strings.Contains(string(b), want) {
			return fmt.Errorf("log holds %q, want %q", b, want)
		}
		return nil
	})
}

// TestExitReleasesConmonPidfd: the pidfd of a container's conmon that Create keeps (for
// Running) is closed once the exit is read, not kept until the container is removed.
func TestExitReleasesConmonPidfd(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"true"}, nil)
	if r.conmons.take(c.id) == nil {
		t.Fatal("Create kept no pidfd of the conmon: the test no longer tests anything")
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if _, _, ok, _ := r.ExitStatus(c.id); !ok {
			return errors.New("no exit recorded")
		}
		return nil
	})
	if r.conmons.take(c.id) != nil {
		t.Error("the conmon's pidfd is still kept after the exit was read")
	}
}

// TestStatsDuringDeleteKeepsNoCgroup: Stats polled while the container is deleted (a
// kubelet's ListContainerStats racing a removal) does not put the deleted container's
// cgroup back into the cache, where nothing would remove it again.
func TestStatsDuringDeleteKeepsNoCgroup(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = r.Stats(c.id)
			}
		}
	}()
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-polled
	r.cgroups.mu.Lock()
	_, kept := r.cgroups.m[c.id]
	r.cgroups.mu.Unlock()
	if kept {
		t.Error("the deleted container's cgroup is back in the stats cache")
	}
}

// A started container with a live conmon is stopped without asking the runtime its
// state: the stop signal goes through a pidfd, and so does the final SIGKILL of a
// container with a pid namespace of its own (the kernel kills the rest of the
// namespace with its init); only a kill of a container without one (here the node's)
// forks the runtime. The runtime binary is swapped, after Create, for a script that
// logs each call and runs it.
// recordRuntimeCalls makes r run its runtime through a wrapper that records each
// call's subcommand, until the test ends; calls returns them, in order.
func recordRuntimeCalls(t *testing.T, r *Runtime) (calls func() []string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "calls")
	wrapper := filepath.Join(t.TempDir(), "runtime")
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do case $a in state|kill|delete|start|create|exec|ps|list) echo $a >> %s; break;; esac; done\nexec %s \"$@\"\n", file, r.path)), 0o755); err != nil {
		t.Fatal(err)
	}
	real := r.path
	r.path = wrapper
	t.Cleanup(func() { r.path = real }) // before the wrapper's directory goes
	return func() []string {
		b, _ := os.ReadFile(file)
		return strings.Fields(string(b))
	}
}

func TestWatchExits(t *testing.T) {
	r := newRuntime(t)
	ctx, cancel := context.WithCancel(ctxb)
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan error, 1)
	go func() {
		done <- r.WatchExits(ctx, func(id string) {
			mu.Lock()
			seen[id]++
			mu.Unlock()
		})
	}()
	c := startContainer(t, r, []string{"sh", "-c", "exit 7"}, nil)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if seen[c.id] == 0 {
			return fmt.Errorf("no exit reported for %s; seen %v", c.id, seen)
		}
		return nil
	})
	code, _, ok, err := r.ExitStatus(c.id)
	if err != nil || !ok || code != 7 {
		t.Fatalf("ExitStatus = %d, %v, %v; want 7", code, ok, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WatchExits: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchExits did not return after its context ended")
	}

	// A new watch first reports the exit files already there.
	ctx2, cancel2 := context.WithCancel(ctxb)
	defer cancel2()
	got := make(chan string, 10)
	go func() { _ = r.WatchExits(ctx2, func(id string) { got <- id }) }()
	select {
	case id := <-got:
		if id != c.id {
			t.Fatalf("initial scan reported %s, want %s", id, c.id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("initial scan reported nothing")
	}
}

// Release deletes an exited container's runtime container (and with it its cgroup) and
// lets its conmon go, keeping its exit, its bundle's spec and its state directory; the
// Delete of the removal then has no runtime container to ask about, and removes the rest.
// A container without a recorded exit is left alone.
func TestReleaseKeepsTheExitAndTheBundle(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "echo ready; sleep 30"}, nil)
	waitLog(t, c, "stdout F ready")
	if err := r.Release(ctxb, c.id); !errors.Is(err, ErrNoExit) {
		t.Fatalf("Release of a running container = %v, want ErrNoExit", err)
	}
	if !testenv.Alive(c.pid) {
		t.Fatal("Release of a running container killed it")
	}
	conmon := conmonPID(t, r, c.id)
	if err := r.Stop(ctxb, c.id, true, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := r.Release(ctxb, c.id); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if _, err := r.State(ctxb, c.id); !errors.Is(err, ErrNotFound) {
		t.Errorf("State after Release: %v, want ErrNotFound", err)
	}
	if testenv.Alive(conmon) {
		t.Errorf("conmon %d still alive after Release", conmon)
	}
	if _, err := os.Lstat(c.cgroupDir("memory")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the container's cgroup outlived Release: %v", err)
	}
	if code, _, ok, err := r.ExitStatus(c.id); err != nil || !ok || code != 137 {
		t.Errorf("ExitStatus after Release = %d, %v, %v; want 137 recorded", code, ok, err)
	}
	if _, err := os.Stat(filepath.Join(c.bundle, "config.json")); err != nil {
		t.Errorf("the bundle's spec after Release: %v", err)
	}
	calls := recordRuntimeCalls(t, r)
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	// A release that comes after the removal (the reaper late) does nothing.
	if err := r.Release(ctxb, c.id); !errors.Is(err, ErrNoExit) {
		t.Errorf("Release after Delete = %v, want ErrNoExit", err)
	}
	if got := calls(); len(got) != 0 {
		t.Errorf("Delete and a late Release after Release ran the runtime: %q", got)
	}
	for _, p := range []string{r.containerDir(c.id), r.exitFile(c.id), filepath.Join(r.attachDir(), c.id)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by Delete after Release (%v)", p, err)
		}
	}
}

// TestConmonInThePodsCgroup: Create moves conmon out of the daemon's cgroup into
// crijournal-conmon-<id> beside the container's (cgroupfs driver), and leaves the
// container's init in its own; Release, at the container's exit, removes conmon's
// cgroup with conmon, and a Delete after it succeeds. (Delete without Release:
// TestDeleteIsIdempotentAndLeavesNothing.)
func TestConmonInThePodsCgroup(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	conmon := conmonPID(t, r, c.id)
	want := path.Join(path.Dir(c.spec.Linux.CgroupsPath), "crijournal-conmon-"+c.id)
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		if got := cgroupOf(t, conmon, ctrl); got != want {
			t.Errorf("conmon's %s cgroup = %s, want %s", ctrl, got, want)
		}
	}
	if got := cgroupOf(t, c.pid, "memory"); got != c.spec.Linux.CgroupsPath {
		t.Errorf("the container's memory cgroup = %s, want its own %s", got, c.spec.Linux.CgroupsPath)
	}
	if err := r.Stop(ctxb, c.id, true, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Lstat(c.conmonCgroupDir(ctrl)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("conmon's cgroup %s outlived Release (%v)", c.conmonCgroupDir(ctrl), err)
		}
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
}

func TestConmonCgroupNames(t *testing.T) {
	for _, tc := range []struct {
		cgroupsPath, want string
		ok                bool
	}{
		{"/crijournal/crijournal-c1", "/crijournal/crijournal-conmon-c1", true},
		{"/kubepods/burstable/pod12/crijournal-c1", "/kubepods/burstable/pod12/crijournal-conmon-c1", true},
		{"/other-name", "/crijournal-conmon-c1", true},    // a path an NRI plugin chose
		{"kubepods-pod12.slice:crijournal:c1", "", false}, // systemd: the scope (conmonScope)
		{"", "", false},
	} {
		got, ok := conmonCgroup(tc.cgroupsPath, "c1")
		if got != tc.want || ok != tc.ok {
			t.Errorf("conmonCgroup(%q) = %q, %v; want %q, %v", tc.cgroupsPath, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDeleteIsIdempotentAndLeavesNothing(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	conmon := conmonPID(t, r, c.id)
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if ids, err := r.Containers(ctxb); err != nil || slices.Contains(ids, c.id) {
		t.Fatalf("runc list after Delete = %v, %v", ids, err)
	}
	if _, err := r.State(ctxb, c.id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("State after Delete: %v, want ErrNotFound", err)
	}
	if testenv.Alive(conmon) {
		t.Fatalf("conmon %d still alive after Delete", conmon)
	}
	if testenv.Alive(c.pid) {
		t.Fatalf("container init %d still alive after Delete", c.pid)
	}
	for _, p := range []string{r.containerDir(c.id), filepath.Join(r.attachDir(), c.id), r.exitFile(c.id),
		filepath.Join(c.bundle, "config.json"), filepath.Join(c.bundle, "ctl"), filepath.Join(c.bundle, "attach"),
		c.cgroupDir("memory"), c.cgroupDir("cpu"), c.cgroupDir("pids"), c.conmonCgroupDir("memory"), c.conmonCgroupDir("pids")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by Delete (%v)", p, err)
		}
	}
	if _, err := r.ConmonPID(c.id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ConmonPID after Delete: %v", err)
	}
	if err := r.Delete(ctxb, "never-created"); err != nil {
		t.Fatalf("Delete of an unknown container: %v", err)
	}
	requireNoZombies(t)
}

// TestDeleteReapsAnInitWhoseConmonDied: a container whose conmon was killed is handed to
// this process (a subreaper, as the daemon), which nothing else reaps it for; Delete
// kills it and reaps it, so that it does not stay a zombie for the daemon's life.
func TestDeleteReapsAnInitWhoseConmonDied(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	if err := syscall.Kill(conmonPID(t, r, c.id), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ppid := parentPid(c.pid); ppid != os.Getpid() {
			return fmt.Errorf("the container's init %d has parent %d, not this process", c.pid, ppid)
		}
		return nil
	})
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if st := testenv.ProcState(c.pid); st != "" {
		t.Fatalf("the container's init %d is left in state %s after Delete, want it reaped", c.pid, st)
	}
}

// TestDeleteRemovesLeftCgroupWithoutConfig retries a Delete whose first attempt failed:
// that attempt removed the bundle's config.json (and the caller may have removed the
// bundle), and the runtime left the container's cgroup (its init was a zombie nobody
// reaped yet). The retry must still find and remove the cgroup.
func TestDeleteRemovesLeftCgroupWithoutConfig(t *testing.T) {
	cgroupV1(t)
	r := newRuntime(t)
	c := createContainer(t, r, []string{"sleep", "30"}, nil)
	if _, err := r.runtimeCmd(ctxb, nil, "delete", "--force", c.id); err != nil {
		t.Fatal(err)
	}
	for _, ctrl := range []string{"memory", "pids"} {
		if err := os.MkdirAll(c.cgroupDir(ctrl), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(c.bundle, "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	for _, ctrl := range []string{"memory", "pids"} {
		if _, err := os.Stat(c.cgroupDir(ctrl)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left by Delete (%v)", c.cgroupDir(ctrl), err)
		}
	}
}

// TestDeleteKillsUnrecordedConmon deletes a container whose Create was cut off (the
// daemon killed) after conmon started but before its PID was recorded: Delete must
// find that conmon by its command line and kill it, or it would go on to create the
// container after the cleanup; so too when the pid file is there but holds no PID. A
// stand-in (sh, with conmon's arguments) plays conmon, sleeping as a slow one does.
func TestDeleteKillsUnrecordedConmon(t *testing.T) {
	tests := []struct {
		name    string
		pidFile []byte // conmon's pid file's content; nil: no file
	}{
		{name: "no pid file"},
		// What a crash of the node can leave of the file, not fsynced, where the run
		// root is on a disk.
		{name: "an empty pid file", pidFile: []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuntime(t)
			id := randomHex(t, 8)
			if err := os.Mkdir(r.containerDir(id), 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.pidFile != nil {
				if err := os.WriteFile(r.conmonPidFile(id), tt.pidFile, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("sh", "-c", "sleep 30; :", "conmon", "--sync", "-c", id, "--exit-dir", r.exitsDir())
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			start := time.Now()
			if err := r.Delete(ctxb, id); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("the unrecorded conmon %d still runs %v after Delete", cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
			}
			if _, err := os.Stat(r.containerDir(id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state directory left by Delete (%v)", err)
			}
		})
	}
}

func TestResourcesInCgroup(t *testing.T) {
	cgroupV1(t)
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, func(in *SpecInput) {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20,
		}}
	})
	for file, want := range map[string]string{
		c.cgroupDir("cpu") + "/cpu.cfs_quota_us":         "50000",
		c.cgroupDir("cpu") + "/cpu.cfs_period_us":        "100000",
		c.cgroupDir("cpu") + "/cpu.shares":               "512",
		c.cgroupDir("memory") + "/memory.limit_in_bytes": strconv.Itoa(64 << 20),
	} {
		if got := readCgroupFile(t, file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
	limit := int64(128 << 20)
	if err := r.UpdateResources(ctxb, c.id, &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}); err != nil {
		t.Fatal(err)
	}
	if got := readCgroupFile(t, c.cgroupDir("memory")+"/memory.limit_in_bytes"); got != strconv.FormatInt(limit, 10) {
		t.Fatalf("memory limit after UpdateResources = %s, want %d", got, limit)
	}
}

func TestPrivilegedContainerGetsTheDaemonsCapabilities(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, func(in *SpecInput) {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}}
	})
	caps, err := ownCapabilities("CapBnd")
	if err != nil {
		t.Fatal(err)
	}
	own := caps[0]
	eff := capLine(t, c.pid, "CapEff")
	if eff != own {
		t.Fatalf("privileged container's CapEff = %x, want the daemon's bounding set %x", eff, own)
	}
	if _, _, code, err := r.ExecSync(ctxb, c.id, []string{"ls", "/dev/null"}, 10*time.Second); err != nil || code != 0 {
		t.Fatalf("exec in privileged container: %d, %v", code, err)
	}
}

func capLine(t *testing.T, pid int, key string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

func TestNegativeOOMScoreIsClamped(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, func(in *SpecInput) {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{OomScoreAdj: -998}}
	})
	own := readCgroupFile(t, "/proc/self/oom_score_adj")
	ownN, _ := strconv.Atoi(own)
	want := strconv.Itoa(max(-998, ownN))
	if got := readCgroupFile(t, fmt.Sprintf("/proc/%d/oom_score_adj", c.pid)); got != want {
		t.Fatalf("container oom_score_adj = %s, want %s", got, want)
	}
}

// childEnv makes the test binary act as a short-lived daemon: it creates and starts
// the container described by the JSON in the variable, then exits without cleaning
// up.
const childEnv = "OCI_TEST_CHILD_CREATE"

type childJob struct {
	Config Config
	ID     string
	Spec   *specs.Spec
	Log    string
}

func childCreate() int {
	var job childJob
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r, err := New(job.Config)
	if err == nil {
		_, err = create(ctxb, r, job.ID, job.Spec, job.Log, StdinNone)
	}
	if err == nil {
		err = r.Start(ctxb, job.ID)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestContainerOutlivesDaemon(t *testing.T) {
	r := newRuntime(t)
	// Hand the ID over to a "daemon" process that dies right after starting it.
	c := deletedContainer(t, r)
	job, err := json.Marshal(childJob{
		Config: Config{Handler: "runc", Root: r.root, StateDir: r.stateDir},
		ID:     c.id, Spec: c.spec, Log: c.logPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(job))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("daemon process: %v\n%s", err, out)
	}
	st, err := r.State(ctxb, c.id)
	if err != nil || st.Status != StatusRunning {
		t.Fatalf("state after the daemon exited = %+v, %v; want running", st, err)
	}
	conmon, err := r.ConmonPID(c.id)
	if err != nil || !testenv.Alive(conmon) {
		t.Fatalf("conmon %d not alive after the daemon exited: %v", conmon, err)
	}
	// A new daemon life can still stop and delete it.
	if err := r.Stop(ctxb, c.id, true, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	if code, _, ok, err := r.ExitStatus(c.id); err != nil || !ok || code != 137 {
		t.Fatalf("ExitStatus = %d, %v, %v", code, ok, err)
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if testenv.Alive(conmon) {
		t.Fatalf("conmon %d alive after Delete", conmon)
	}
	requireNoZombies(t)
}

// TestValidIDAsThePattern: validID accepts what ^[A-Za-z0-9_-]{1,64}$ matched, the
// pattern it replaced, and nothing else.
func TestValidIDAsThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	for _, id := range []string{
		"", "a", "Z", "0", "_", "-", "abc-DEF_123", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"a/b", "../x", "a.b", "a b", "a\n", "é", "a\x00", strings.Repeat("f", 63) + "/", "`", "@", "[", "{", ":",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	} {
		if got, want := validID(id) == nil, pattern.MatchString(id); got != want {
			t.Errorf("validID(%q) ok = %v, the pattern %v", id, got, want)
		}
	}
	for c := range 256 { // every byte, alone
		id := string([]byte{byte(c)})
		if got, want := validID(id) == nil, pattern.MatchString(id); got != want {
			t.Errorf("validID(%q) ok = %v, the pattern %v", id, got, want)
		}
	}
}

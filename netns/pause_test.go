package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/internal/testenv"
)

// TestMain builds the pause program that StartPause and PinUser run, and lets the
// test binary serve as a process that only looks like a pause process ("<test
// binary> pause <sandbox ID>", see startLookalike), which waits for a signal.
func TestMain(m *testing.M) {
	if len(os.Args) >= 2 && os.Args[1] == "pause" {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		os.Exit(0)
	}
	os.Exit(testenv.RunWithPause(m))
}

// testPause returns the pause program to start for a test: the one TestMain built,
// running as 65535.
func testPause(t *testing.T) PauseProgram {
	t.Helper()
	return PauseProgram{Path: testenv.PauseProgram(t), UID: 65535, GID: 65535}
}

// requireNsenter stops the test unless it runs as root with nsenter.
func requireNsenter(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		testenv.Need(t, "netns pause tests need nsenter (util-linux)")
	}
}

// testBinary is the path of this test binary, which serves as a process that
// looks like a pause process (see TestMain).
func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// testCgroupParent is the cgroup under which the tests put their pause processes.
const testCgroupParent = "/crijournal-netns-test"

// testPauseCgroup returns a pause program whose process goes in a cgroup of its own
// for sandbox id, and removes the cgroup (and the parent, once empty) when the test
// ends.
func testPauseCgroup(t *testing.T, id string) PauseProgram {
	t.Helper()
	prog := testPause(t)
	prog.Cgroup = testCgroupParent + "/" + id
	t.Cleanup(func() {
		for _, cg := range []string{prog.Cgroup, testCgroupParent} {
			_ = RemoveCgroup(cg) // the parent stays while another test uses it
		}
	})
	return prog
}

// cgroupDirs returns the directories of the cgroup at path that exist on this node,
// in the cgroup v2 hierarchy or in any of the v1 ones.
func cgroupDirs(path string) []string {
	var dirs []string
	for _, pattern := range []string{"/sys/fs/cgroup" + path, "/sys/fs/cgroup/*" + path} {
		m, _ := filepath.Glob(pattern)
		for _, d := range m {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// requireInCgroup fails the test unless pid is in the cgroup at path, in every
// hierarchy that has it.
func requireInCgroup(t *testing.T, pid int, path string) {
	t.Helper()
	dirs := cgroupDirs(path)
	if len(dirs) == 0 {
		t.Fatalf("no cgroup %s", path)
	}
	for _, d := range dirs {
		procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)) {
			t.Errorf("process %d is not in %s (%q, %v)", pid, d, procs, err)
		}
	}
}

// startTestPause starts a pause process for a new sandbox under a temp dir, in a
// cgroup of its own (see testPauseCgroup), and stops it when the test ends.
func startTestPause(t *testing.T) (dir, id, path string, pid int) {
	t.Helper()
	dir, id = t.TempDir(), newSandboxID(t)
	prog := testPauseCgroup(t, id)
	path, pid, err := StartPause(context.Background(), dir, id, nil, prog)
	if err != nil {
		t.Fatalf("StartPause: %v", err)
	}
	t.Cleanup(func() {
		if err := StopPause(context.Background(), path, 0); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir, id, path, pid
}

// requireConfined fails the test unless the pause process pid is confined (see package
// internal/pause): hostUID and hostGID as the node sees them, no capability, no new
// privileges, a seccomp filter, and an empty read-only root and working directory in a
// mount namespace of its own; and that it runs the sleeper of the test's pause program.
func requireConfined(t *testing.T, pid int, hostUID, hostGID uint32) {
	t.Helper()
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err != nil || exe != pause.SleeperPath(testPause(t).Path) {
		t.Errorf("pause process %d runs %q (%v), want the sleeper %s", pid, exe, err, pause.SleeperPath(testPause(t).Path))
	}
	for field, want := range map[string]string{
		"Uid":        strings.Repeat(strconv.Itoa(int(hostUID))+"\t", 3) + strconv.Itoa(int(hostUID)),
		"Gid":        strings.Repeat(strconv.Itoa(int(hostGID))+"\t", 3) + strconv.Itoa(int(hostGID)),
		"Groups":     "",
		"CapInh":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"CapEff":     "0000000000000000",
		"CapBnd":     "0000000000000000",
		"CapAmb":     "0000000000000000",
		"NoNewPrivs": "1",
		"Seccomp":    "2",
	} {
		if got := testenv.ProcStatus(pid, field); got != want {
			t.Errorf("pause process %d: %s %q, want %q", pid, field, got, want)
		}
	}
	proc := "/proc/" + strconv.Itoa(pid)
	if inode(t, proc+"/ns/mnt") == inode(t, "/proc/self/ns/mnt") {
		t.Errorf("pause process %d is in the node's mount namespace", pid)
	}
	for _, dir := range []string{proc + "/root", proc + "/cwd", proc + "/root/..", proc + "/cwd/.."} {
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 0 {
			t.Errorf("pause process %d: %s holds %v (%v), want an empty directory", pid, dir, entries, err)
		}
	}
	if err := os.WriteFile(proc+"/root/x", nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("pause process %d: writing to its root: %v, want EROFS", pid, err)
	}
}

// waitReaped waits until pid is gone from /proc: not even a zombie. StartPause
// reaps the pause processes it started when they exit.
func waitReaped(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 10*time.Millisecond, func() error {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("process %d not reaped after %v (state %q)", pid, within, testenv.ProcStatus(pid, "State"))
	})
}

// nsMembers lists the processes whose pid namespace is the one pinned at
// path, with their state letter.
func nsMembers(t *testing.T, path string) map[int]string {
	t.Helper()
	want := inode(t, path)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/pid", &st) != nil || st.Ino != want {
			continue
		}
		if s := testenv.ProcStatus(pid, "State"); s != "" {
			out[pid] = s[:1]
		}
	}
	return out
}

func TestStartPause(t *testing.T) {
	requireNsenter(t)
	dir, id, path, pid := startTestPause(t)

	if want := filepath.Join(dir, "pidns", id); path != want || PinPath(dir, PID, id) != want {
		t.Fatalf("path %q, PinPath %q, want %q", path, PinPath(dir, PID, id), want)
	}
	if !IsPinned(path) || !testenv.IsMountPoint(t, path) {
		t.Fatalf("%s is not a pinned namespace", path)
	}
	if inode(t, path) == inode(t, "/proc/self/ns/pid") {
		t.Fatal("the pinned pid namespace is the host's")
	}
	if got, want := inode(t, "/proc/"+strconv.Itoa(pid)+"/ns/pid"), inode(t, path); got != want {
		t.Fatalf("pause process %d is in pid namespace %d, want the pinned %d", pid, got, want)
	}
	nspid := strings.Fields(testenv.ProcStatus(pid, "NSpid"))
	if len(nspid) != 2 || nspid[0] != strconv.Itoa(pid) || nspid[1] != "1" {
		t.Fatalf("NSpid of the pause process is %q, want [%d 1]", nspid, pid)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); len(args) != 3 || args[1] != "pause" || args[2] != id {
		t.Fatalf("pause process command line %q", args)
	}
	if sid, _ := unix.Getsid(pid); sid != pid {
		t.Errorf("pause process %d is in session %d, want its own", pid, sid)
	}
	// Once confined it became the sleeper (see requireConfined), with no environment.
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err != nil || len(env) != 0 {
		t.Errorf("pause process environment %q (%v), want none", env, err)
	}
	if !PauseAlive(path) {
		t.Fatal("PauseAlive = false for a running pause process")
	}
	requireConfined(t, pid, 65535, 65535)
	requireInCgroup(t, pid, testCgroupParent+"/"+id)

	// A process that joins the namespace is not PID 1 there, and an orphan it
	// leaves is reaped by the pause process.
	out := run(t, "nsenter", "--pid="+path, "sh", "-c", `echo $$; sleep 0.2 & exit 0`)
	if inner, err := strconv.Atoi(out); err != nil || inner <= 1 {
		t.Fatalf("a process that joined the namespace has PID %q there, want more than 1", out)
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		members := nsMembers(t, path)
		if len(members) == 1 && members[pid] != "" && members[pid] != "Z" {
			return nil
		}
		return fmt.Errorf("the namespace holds %v 5s later, want only the pause process %d (orphans reaped)", members, pid)
	})

	// A second pause process for the same sandbox is refused, and the first
	// stays.
	if _, _, err := StartPause(context.Background(), dir, id, nil, testPause(t)); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("StartPause of an existing pin: %v, want fs.ErrExist", err)
	}
	if !testenv.Alive(pid) || !IsPinned(path) {
		t.Fatal("a refused StartPause touched the existing pause process or pin")
	}
}

// TestStartPauseNamespaces starts pause processes that join a sandbox's pinned
// namespaces of some kinds, as a pod that shares its network, or its IPC, with the
// node does not: each is in the pinned namespaces of those kinds, in the caller's of
// the others, and in a cgroup namespace of its own rooted at its cgroup.
func TestStartPauseNamespaces(t *testing.T) {
	requireNsenter(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		join []Kind
	}{
		{"pod network and ipc", []Kind{Net, IPC, UTS}},
		{"node network", []Kind{IPC}},
		{"node network and ipc", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := t.TempDir(), newSandboxID(t)
			var pins Paths
			if len(tc.join) > 0 {
				var err error
				if pins, err = Pin(ctx, dir, id, tc.join, "pod"); err != nil {
					t.Fatalf("Pin: %v", err)
				}
				t.Cleanup(func() {
					for _, p := range pins {
						if err := Unpin(ctx, p); err != nil {
							t.Errorf("cleanup: %v", err)
						}
					}
				})
			}
			prog := testPauseCgroup(t, id)
			path, pid, err := StartPause(ctx, dir, id, tc.join, prog)
			if err != nil {
				t.Fatalf("StartPause: %v", err)
			}
			t.Cleanup(func() {
				if err := StopPause(ctx, path, 0); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			ns := "/proc/" + strconv.Itoa(pid) + "/ns/"
			for _, k := range []Kind{Net, IPC, UTS} {
				want, of := inode(t, "/proc/self/ns/"+string(k)), "the caller's"
				if p, ok := pins[k]; ok {
					want, of = inode(t, p), "the pinned "+p
				}
				if got := inode(t, ns+string(k)); got != want {
					t.Errorf("pause process %d is in %s namespace %d, want %s (%d)", pid, k, got, of, want)
				}
			}
			if inode(t, ns+"cgroup") == inode(t, "/proc/self/ns/cgroup") {
				t.Fatalf("pause process %d is in the caller's cgroup namespace", pid)
			}
			// Seen from its own cgroup namespace, the pause process is at the root of
			// every hierarchy: the namespace was made once it was in its cgroup.
			requireInCgroup(t, pid, prog.Cgroup)
			own := run(t, "nsenter", "--cgroup="+ns+"cgroup", "cat", "/proc/"+strconv.Itoa(pid)+"/cgroup")
			for line := range strings.Lines(own) {
				if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
					t.Errorf("pause process %d in its own cgroup namespace: %q, want the root (/) of every hierarchy", pid, own)
					break
				}
			}
		})
	}
}

// TestStartPauseJoinUnpinned checks that a pause process is not started in the
// caller's namespace of a kind it was to join when the sandbox has no pin of that
// kind, and that the failed start leaves nothing.
func TestStartPauseJoinUnpinned(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir, id := t.TempDir(), newSandboxID(t)
	paths, err := Pin(ctx, dir, id, []Kind{IPC}, "")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	t.Cleanup(func() { _ = Unpin(ctx, paths[IPC]) })
	if path, pid, err := StartPause(ctx, dir, id, []Kind{IPC, Net}, testPause(t)); err == nil {
		_ = StopPause(ctx, path, pid)
		t.Fatal("StartPause joining a network namespace that is not pinned succeeded")
	}
	if _, err := os.Lstat(PinPath(dir, PID, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed StartPause left its pin: %v", err)
	}
	if pids := (pauseMatcher{sandboxID: id}).find(0); pids != 0 {
		t.Errorf("a failed StartPause left pause process %d", pids)
	}
}

// TestPauseOOMScoreAdj starts pause processes, by StartPause and by PinUser (a pod with
// its own user namespace), with and without an oom_score_adj of their own: each has the
// one it was given, or else the caller's, which it inherits. The one given is above the
// caller's, which the kernel lets any caller set.
func TestPauseOOMScoreAdj(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	own, err := strconv.Atoi(strings.TrimSpace(readFile(t, "/proc/self/oom_score_adj")))
	if err != nil {
		t.Fatal(err)
	}
	raised := min(own+500, 1000)
	if raised == own {
		t.Fatalf("the test process runs at oom_score_adj %d: no higher one to give a pause process", own)
	}
	maps := []IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	for _, tc := range []struct {
		name   string
		userns bool
		adj    *int
		want   int
	}{
		{"StartPause, inherited", false, nil, own},
		{"StartPause, raised", false, &raised, raised},
		{"PinUser, inherited", true, nil, own},
		{"PinUser, raised", true, &raised, raised},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, id := t.TempDir(), newSandboxID(t)
			prog := testPauseCgroup(t, id)
			prog.OOMScoreAdj = tc.adj
			var pid int
			if tc.userns {
				step := UserPinStep(dir, id, []Kind{Net, PID}, "", maps, maps, prog)
				pins, err := step.Run(ctx)
				if err != nil {
					t.Fatalf("PinUser: %v", err)
				}
				t.Cleanup(func() {
					if err := undoUserPin(ctx, step.Args); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				})
				pid = pins.PID
			} else {
				var path string
				if path, pid, err = StartPause(ctx, dir, id, nil, prog); err != nil {
					t.Fatalf("StartPause: %v", err)
				}
				t.Cleanup(func() {
					if err := StopPause(ctx, path, 0); err != nil {
						t.Errorf("cleanup: %v", err)
					}
				})
			}
			got := strings.TrimSpace(readFile(t, "/proc/"+strconv.Itoa(pid)+"/oom_score_adj"))
			if got != strconv.Itoa(tc.want) {
				t.Errorf("pause process %d: oom_score_adj %s, want %d", pid, got, tc.want)
			}
		})
	}
}

// readFile returns the content of the file at path.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStopPause(t *testing.T) {
	requireNsenter(t)
	_, _, path, pid := startTestPause(t)
	// Someone else in the namespace: it dies with the pause process.
	joined := exec.Command("nsenter", "--pid="+path, "sleep", "60")
	if err := joined.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = joined.Process.Kill(); _ = joined.Wait() })
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if members := nsMembers(t, path); len(members) < 2 {
			return fmt.Errorf("the sleep did not join the namespace: %v", members)
		}
		return nil
	})
	members := nsMembers(t, path)

	if err := StopPause(context.Background(), path, pid); err != nil {
		t.Fatalf("StopPause: %v", err)
	}
	for p := range members {
		if testenv.Alive(p) {
			t.Errorf("process %d of the namespace is alive after StopPause (state %s)", p, testenv.ProcStatus(p, "State"))
		}
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pin %s still there after StopPause: %v", path, err)
	}
	if testenv.IsMountPoint(t, path) {
		t.Errorf("%s still mounted", path)
	}
	if PauseAlive(path) {
		t.Error("PauseAlive = true after StopPause")
	}
	waitReaped(t, pid, 5*time.Second)
	if err := StopPause(context.Background(), path, pid); err != nil {
		t.Fatalf("second StopPause: %v", err)
	}
}

func TestStopPauseWrongPID(t *testing.T) {
	requireNsenter(t)
	_, _, path, pid := startTestPause(t)
	stranger := exec.Command("sleep", "60")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })

	// Neither a stranger nor this test process is killed for the pause
	// process; the pause process is found through the pin all the same.
	for _, wrong := range []int{stranger.Process.Pid, os.Getpid()} {
		_, _, path, pid := startTestPause(t)
		if err := StopPause(context.Background(), path, wrong); err != nil {
			t.Fatalf("StopPause with PID %d: %v", wrong, err)
		}
		testenv.WaitGone(t, pid, 5*time.Second)
	}
	if !testenv.Alive(stranger.Process.Pid) {
		t.Fatalf("StopPause killed process %d, which is not a pause process", stranger.Process.Pid)
	}
	// The first pause process, not asked about, still runs.
	if !testenv.Alive(pid) || !PauseAlive(path) {
		t.Fatal("StopPause of other pins touched an unrelated pause process")
	}
}

func TestStopPauseEmptyOrGone(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir, id := t.TempDir(), newSandboxID(t)
	path := PinPath(dir, PID, id)

	// Nothing there at all.
	if err := StopPause(ctx, path, 0); err != nil {
		t.Fatalf("StopPause of nothing: %v", err)
	}
	// A pin file that was never mounted, and no process: a crash before the
	// start.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if PauseAlive(path) {
		t.Fatal("PauseAlive = true for an unmounted pin file")
	}
	if err := StopPause(ctx, path, 0); err != nil {
		t.Fatalf("StopPause of an unmounted pin file: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pin still there: %v", err)
	}

	// A pinned namespace whose pause process died.
	_, _, pinned, pid := startTestPause(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitReaped(t, pid, 5*time.Second)
	if PauseAlive(pinned) {
		t.Fatal("PauseAlive = true after the pause process died")
	}
	if err := StopPause(ctx, pinned, 0); err != nil {
		t.Fatalf("StopPause of a namespace whose pause process died: %v", err)
	}
	if _, err := os.Lstat(pinned); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pin still there: %v", err)
	}

	// A failed start leaves nothing.
	if _, _, err := StartPause(ctx, dir, id, nil, PauseProgram{Path: "/nonexistent/pause"}); err == nil {
		t.Fatal("StartPause of a missing program succeeded")
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a failed StartPause left its pin: %v", err)
	}
}

// startUnpinned starts a process that looks like a pause process, "<test
// binary> pause <id>", in a new pid namespace or not, without a pin, and kills
// it when the test ends.
func startUnpinned(t *testing.T, id string, newNS bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testBinary(t), "pause", id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if newNS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// TestStopPauseUnpinned covers a crash between the start of the pause process
// and its pin: the undo finds the process by its command line.
func TestStopPauseUnpinned(t *testing.T) {
	requireRoot(t)
	dir, id := t.TempDir(), newSandboxID(t)
	path := PinPath(dir, PID, id)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	orphan := startUnpinned(t, id, true)
	// Not it: another sandbox's pause process, and the same command line in
	// the caller's own pid namespace.
	other := startUnpinned(t, newSandboxID(t), true)
	sameNS := startUnpinned(t, id, false)
	time.Sleep(100 * time.Millisecond)

	if err := StopPause(context.Background(), path, 0); err != nil {
		t.Fatalf("StopPause: %v", err)
	}
	testenv.WaitGone(t, orphan.Process.Pid, 5*time.Second)
	for _, c := range []*exec.Cmd{other, sameNS} {
		if !testenv.Alive(c.Process.Pid) {
			t.Errorf("StopPause killed %v (process %d), which is not the sandbox's pause process", c.Args, c.Process.Pid)
		}
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pin still there: %v", err)
	}
}

func TestStartPauseInvalid(t *testing.T) {
	ctx := context.Background()
	dir, id := t.TempDir(), newSandboxID(t)
	for name, tc := range map[string]struct{ dir, id, binary string }{
		"bad id":           {dir, "../x", "/bin/true"},
		"relative dir":     {"rel", id, "/bin/true"},
		"no program":       {dir, id, ""},
		"relative program": {dir, id, "true"},
	} {
		if _, _, err := StartPause(ctx, tc.dir, tc.id, nil, PauseProgram{Path: tc.binary}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for _, adj := range []int{-1001, 1001} {
		if _, _, err := StartPause(ctx, dir, id, nil, PauseProgram{Path: "/bin/true", OOMScoreAdj: &adj}); !errors.Is(err, ErrInvalid) {
			t.Errorf("StartPause with oom_score_adj %d: %v, want ErrInvalid", adj, err)
		}
	}
	for _, join := range [][]Kind{{PID}, {User}, {Net, Net}, {"mnt"}} {
		if _, _, err := StartPause(ctx, dir, id, join, PauseProgram{Path: "/bin/true"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("StartPause joining %v: %v, want ErrInvalid", join, err)
		}
	}
	for _, p := range []string{"", "rel/pidns/" + id, filepath.Join(dir, "netns", id), filepath.Join(dir, "pidns", "..")} {
		if err := StopPause(ctx, p, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("StopPause(%q): %v, want ErrInvalid", p, err)
		}
	}
	if _, err := Pin(ctx, dir, id, []Kind{PID}, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Pin of a pid namespace: %v, want ErrInvalid", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused calls left %d entries in %s", len(entries), dir)
	}
}

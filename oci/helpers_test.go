package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childCreate())
	}
	if os.Getenv(endingConmonEnv) != "" {
		endingConmon()
	}
	// As the daemon does: orphans of the runtimes come to us, so a leaked one shows
	// up as our zombie.
	if err := BecomeSubreaper(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// requireRoot stops the test unless it runs as root (see testenv).
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "oci runtime tests run containers")
}

// requireRunc stops the test unless it runs as root with runc, conmon and a static
// busybox (/bin/busybox, Debian: busybox-static) installed.
func requireRunc(t *testing.T) {
	t.Helper()
	requireRoot(t)
	for _, tool := range []string{"runc", "conmon"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "oci runtime tests need %s (Debian: runc, conmon)", tool)
		}
	}
	if !exists("/bin/busybox") {
		testenv.Need(t, "oci runtime tests need /bin/busybox (Debian: busybox-static)")
	}
}

// wrapTool writes dir/<tool>-wrapper, a shell script that runs the shell command before
// and then execs tool (looked up in PATH) with its arguments, and returns its path.
func wrapTool(t *testing.T, dir, tool, before string) string {
	t.Helper()
	path, err := exec.LookPath(tool)
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, tool+"-wrapper")
	writeFile(t, wrapper, "#!/bin/sh\n"+before+"\nexec "+path+" \"$@\"\n")
	if err := os.Chmod(wrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// randomHex returns n random bytes as hex.
func randomHex(t *testing.T, n int) string { return testenv.RandomHex(t, n) }

// shortTempDir returns a temp dir with a short path (t.TempDir's can be too long for
// the attach socket paths under a StateDir), removed after the test.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "oci")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

// newRuntime returns a runc Runtime with its root and state under a temp dir. At
// the end of the test (after the test's containers are deleted) it checks that runc has
// no container left, and that this process has no zombie child (see noZombies): a
// process a test leaks to this process, a subreaper, is caught by the test that leaked
// it, not by every later test's requireNoZombies.
func newRuntime(t *testing.T) *Runtime {
	t.Helper()
	requireRunc(t)
	dir := shortTempDir(t)
	r, err := New(Config{Handler: "runc", Root: filepath.Join(dir, "runc"), StateDir: filepath.Join(dir, "s")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, err := r.Containers(context.Background())
		if err != nil {
			t.Errorf("runc list: %v", err)
		}
		for _, id := range ids {
			t.Errorf("runc container %s left behind", id)
			_ = r.Delete(context.Background(), id)
		}
		if err := noZombies(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// newRootfs builds a minimal root filesystem: busybox and a few links to it, and a
// passwd and group file.
func newRootfs(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile("/bin/busybox", filepath.Join(root, "bin/busybox")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"sh", "sleep", "echo", "cat", "true", "false", "id", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", n)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
	writeFile(t, filepath.Join(root, "etc/group"), "root:x:0:\nnogroup:x:65534:\n")
	return root
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// testContainer is a container made by createContainer.
type testContainer struct {
	id, logPath string
	bundle      string // the state directory
	spec        *specs.Spec
	pid         int
}

// cgroupDir returns the container's cgroup directory in a v1 controller's hierarchy.
func (c *testContainer) cgroupDir(controller string) string {
	return filepath.Join("/sys/fs/cgroup", controller, c.spec.Linux.CgroupsPath)
}

// conmonPID returns the PID of the conmon of container id, failing the test when it has
// none recorded.
func conmonPID(t *testing.T, r *Runtime, id string) int {
	t.Helper()
	pid, err := r.ConmonPID(id)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// conmonCgroupDir returns the directory of the cgroup of the container's conmon in a v1
// controller's hierarchy: crijournal-conmon-<id> beside the container's.
func (c *testContainer) conmonCgroupDir(controller string) string {
	return filepath.Join("/sys/fs/cgroup", controller, filepath.Dir(c.spec.Linux.CgroupsPath), "crijournal-conmon-"+c.id)
}

// cgroupOf returns the cgroup of process pid in a v1 controller's hierarchy, or in the
// v2 hierarchy on a machine that has only that one, from /proc/<pid>/cgroup.
func cgroupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
		}
		if slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2]
		}
	}
	if v2 == "" {
		t.Fatalf("process %d is in no cgroup of %s: %q", pid, controller, b)
	}
	return v2
}

// createContainer builds the spec of a container running args (edited by edit, if
// given) in a fresh root filesystem, under a cgroup parent of its own, and creates
// it. The container is deleted, and its cgroup parent removed, when the test ends.
func createContainer(t *testing.T, r *Runtime, args []string, edit func(*SpecInput)) *testContainer {
	t.Helper()
	c, err := tryCreate(t, r, args, edit)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return c
}

// tryCreate is createContainer that returns Create's error.
func tryCreate(t *testing.T, r *Runtime, args []string, edit func(*SpecInput)) (*testContainer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tryCreateCtx(ctx, t, r, args, edit)
}

// tryCreateCtx is tryCreate with the context of Create.
func tryCreateCtx(ctx context.Context, t *testing.T, r *Runtime, args []string, edit func(*SpecInput)) (*testContainer, error) {
	t.Helper()
	id := randomHex(t, 8)
	parent := "/crijournal-test-" + randomHex(t, 4)
	in := SpecInput{
		ID: id,
		Container: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "test"},
			Command:  args,
		},
		Sandbox: &runtimeapi.PodSandboxConfig{Hostname: "testpod",
			Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent}},
		Rootfs: newRootfs(t),
	}
	if edit != nil {
		edit(&in)
	}
	id, parent = in.ID, in.Sandbox.GetLinux().GetCgroupParent()
	spec, err := Spec(t.Context(), in)
	if err != nil {
		t.Fatalf("Spec: %v", err)
	}
	bundle := r.containerDir(id)
	logPath := filepath.Join(t.TempDir(), "ctr.log")
	t.Cleanup(func() {
		if err := r.Delete(context.Background(), id); err != nil {
			t.Errorf("cleanup Delete: %v", err)
		}
		if err := removeCgroup(parent); err != nil {
			t.Errorf("cleanup cgroup parent: %v", err)
		}
	})
	pid, err := create(ctx, r, id, spec, logPath, StdinModeOf(in.Container))
	if err != nil {
		return &testContainer{id: id, bundle: bundle, logPath: logPath, spec: spec}, err
	}
	return &testContainer{id: id, bundle: bundle, logPath: logPath, spec: spec, pid: pid}, nil
}

// deletedContainer is a container as tryCreate makes it, running sleep, created and
// deleted again: its ID, spec and log path, for a test that creates it its own way.
func deletedContainer(t *testing.T, r *Runtime) *testContainer {
	t.Helper()
	c, err := tryCreate(t, r, []string{"sleep", "30"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(context.Background(), c.id); err != nil {
		t.Fatal(err)
	}
	return c
}

// create creates container id from spec as the daemon does: conmon prepared, then
// the container created under it.
func create(ctx context.Context, r *Runtime, id string, spec *specs.Spec, logPath string, stdin StdinMode) (int, error) {
	p, err := r.Prepare(ctx, id, logPath, spec.Process.Terminal, stdin)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.Create(ctx, spec)
}

// startContainer creates and starts a container running args.
func startContainer(t *testing.T, r *Runtime, args []string, edit func(*SpecInput)) *testContainer {
	t.Helper()
	c := createContainer(t, r, args, edit)
	if err := r.Start(context.Background(), c.id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return c
}

// zombieChildren lists this process's children that are zombies.
func zombieChildren() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if testenv.ProcStatus(pid, "PPid") == strconv.Itoa(os.Getpid()) && testenv.IsZombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// zombieWait bounds the wait for this process's exited children to be reaped: by their
// owners (a goroutine waiting on conmon's pidfd, an exec), or, where a test runs
// ReapOrphans as the daemon does, orphanGrace after ReapOrphans first saw them. On a
// loaded node each of these may wait seconds for a CPU.
const zombieWait = orphanGrace + 10*time.Second

// noZombies returns an error naming this process's zombie children if it still has some
// after zombieWait.
func noZombies() error {
	err := testenv.Poll(zombieWait, 20*time.Millisecond, func() error {
		if z := zombieChildren(); len(z) > 0 {
			return fmt.Errorf("zombie children of the test process: %s", describeProcs(z))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (waited %v)", err, zombieWait)
	}
	return nil
}

// asleep returns nil when process pid sleeps (state S) as a process named name, having
// exec'd it as a shell does its last command, or sleeps with a sleeping child of that
// name, forked and exec'd; an error says what still runs.
func asleep(pid int, name string) error {
	if st := testenv.ProcState(pid); st != "S" {
		return fmt.Errorf("process %d in state %q, want S", pid, st)
	}
	if testenv.ProcStatus(pid, "Name") == name {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || testenv.ProcStatus(p, "PPid") != strconv.Itoa(pid) {
			continue
		}
		if testenv.ProcStatus(p, "Name") == name && testenv.ProcState(p) == "S" {
			return nil
		}
	}
	return fmt.Errorf("process %d (%s) has no sleeping child %q yet", pid, testenv.ProcStatus(pid, "Name"), name)
}

// describeProcs names processes by what /proc still tells of a zombie, so that a
// failure says what leaked: "31762 (sleep, NSpid 31762, NSsid 31750)", where NSpid
// and NSsid hold one value per pid namespace, the node's first.
func describeProcs(pids []int) string {
	field := func(pid int, name string) string {
		return strings.Join(strings.Fields(testenv.ProcStatus(pid, name)), " ")
	}
	var out []string
	for _, pid := range pids {
		out = append(out, fmt.Sprintf("%d (%s, NSpid %s, NSsid %s)", pid, field(pid, "Name"), field(pid, "NSpid"), field(pid, "NSsid")))
	}
	return strings.Join(out, ", ")
}

// requireNoZombies fails the test if this process keeps a zombie child (see noZombies).
func requireNoZombies(t *testing.T) {
	t.Helper()
	if err := noZombies(); err != nil {
		t.Fatal(err)
	}
}

// reapOrphans runs ReapOrphans, as the daemon does, until the test ends: for a test
// whose containers hand processes to this process (a subreaper, as the daemon), such as
// one in the node's pid namespace whose background process outlives its conmon. Call it
// before newRuntime, so that it still runs while newRuntime's cleanup checks that no
// zombie is left.
func reapOrphans(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ReapOrphans(ctx, 20*time.Millisecond, nil)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// readCgroupFile returns the trimmed content of a cgroup file.
func readCgroupFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// cgroupV1 skips or fails a test that reads v1 cgroup files on a machine without
// them.
func cgroupV1(t *testing.T) {
	t.Helper()
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		t.Skip("this test reads cgroup v1 files; the machine has cgroup v2 only")
	}
}

// requireInvalidSpec requires err to be ErrInvalidSpec with a message that contains want.
func requireInvalidSpec(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrInvalidSpec saying %q", err, want)
	}
}

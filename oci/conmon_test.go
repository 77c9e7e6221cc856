package oci

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestReadSync(t *testing.T) {
	for _, tc := range []struct {
		in      string
		pid     int
		errPart string
	}{
		{`{"pid": 1234}` + "\n", 1234, ""},
		{`{"pid": -1, "message": "{\"level\":\"error\",\"msg\":\"runc create failed: unable to start container process: exec: \\\"nope\\\": executable file not found in $PATH\",\"time\":\"2026-01-01T00:00:00Z\"}\n"}`,
			0, `exec: "nope": executable file not found`},
		{`{"pid": -1, "message": "plain text failure"}`, 0, "plain text failure"},
		{`{"pid": -1}`, 0, "without a message"},
		{``, 0, "exited without reporting"},
		{`garbage`, 0, "sync pipe"},
	} {
		pid, err := readSync(strings.NewReader(tc.in))
		if tc.errPart == "" {
			if err != nil || pid != tc.pid {
				t.Errorf("readSync(%q) = %d, %v; want %d", tc.in, pid, err, tc.pid)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errPart) {
			t.Errorf("readSync(%q) = %d, %v; want an error with %q", tc.in, pid, err, tc.errPart)
		}
	}
}

func TestRuntimeMessage(t *testing.T) {
	out := `{"level":"warning","msg":"ignored","time":"x"}
{"level":"error","msg":"container does not exist","time":"x"}
`
	if got := runtimeMessage([]byte(out)); got != "container does not exist" {
		t.Fatalf("runtimeMessage = %q", got)
	}
	if got := runtimeMessage([]byte("time=\"x\" level=error msg=\"boom\"\n")); got != `time="x" level=error msg="boom"` {
		t.Fatalf("plain runtimeMessage = %q", got)
	}
	if !isNotFound("container does not exist") || isNotFound("permission denied") {
		t.Fatal("isNotFound")
	}
}

func TestIsConmonOf(t *testing.T) {
	cmdline := []byte("/usr/bin/conmon\x00--sync\x00-c\x00abc\x00-u\x00abc\x00--exit-dir\x00/run/x/exits\x00")
	if !isConmonOf(cmdline, "/run/x/exits", "abc") {
		t.Fatal("our conmon not recognised")
	}
	if isConmonOf(cmdline, "/run/y/exits", "abc") || isConmonOf(cmdline, "/run/x/exits", "abd") {
		t.Fatal("another runtime's or container's conmon recognised")
	}
	if isConmonOf([]byte("sleep\x00100\x00"), "/run/x/exits", "abc") {
		t.Fatal("a stranger recognised")
	}
}

func TestValidID(t *testing.T) {
	for _, id := range []string{"a", "0123456789abcdef", strings.Repeat("f", 64), "a_b-c"} {
		if err := validID(id); err != nil {
			t.Errorf("validID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", "a.b", strings.Repeat("f", 65), "a b"} {
		if err := validID(id); err == nil {
			t.Errorf("validID(%q) accepted", id)
		}
	}
}

func TestNewRefusesLongStateDir(t *testing.T) {
	_, err := New(Config{Handler: "runc", Root: "/run/x", StateDir: "/" + strings.Repeat("d", 40)})
	if err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("New with a long state dir: %v", err)
	}
}

// TestRemoveCgroupWaitsForAnExitingProcess: a cgroup whose last process is on its way
// out (conmon, whose pidfd has said it exited, may still count in it for a moment) is
// removed once it is empty, not refused as busy at the first try.
func TestRemoveCgroupWaitsForAnExitingProcess(t *testing.T) {
	testenv.RequireRoot(t, "the test makes cgroups")
	p := "/crijournal-test-" + randomHex(t, 4)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = sleeper.Process.Kill()
			_ = sleeper.Wait()
		})
	}
	t.Cleanup(func() { stop(); _ = removeCgroup(p) })
	m, err := manager.New(&cgroups.Cgroup{Path: p, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		time.Sleep(20 * time.Millisecond)
		stop()
	}()
	if err := removeCgroup(p); err != nil {
		t.Errorf("removeCgroup while its process exits: %v", err)
	}
	<-exited
}

// TestNewLeavesRunRootSearchable: New makes its own directories private (0700) but a
// missing run root above them searchable (0755): containers in a user namespace reach
// their root filesystems through it as their mapped root, and a 0700 run root refused
// them all on a fresh node (critest's NamespaceMode_POD spec saw it).
func TestNewLeavesRunRootSearchable(t *testing.T) {
	requireRunc(t)
	runRoot := filepath.Join(shortTempDir(t), "run")
	if _, err := New(Config{Handler: "runc", Root: filepath.Join(runRoot, "runc"), StateDir: filepath.Join(runRoot, "oci")}); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]os.FileMode{runRoot: 0o755, filepath.Join(runRoot, "runc"): 0o700, filepath.Join(runRoot, "oci"): 0o700} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm() &^ 0o022; got != want&^0o022 {
			t.Errorf("%s has mode %04o, want %04o", dir, st.Mode().Perm(), want)
		}
	}
}

// endingConmonEnv makes the test binary a stand-in for a conmon part way through its
// exit (endingConmon).
const endingConmonEnv = "OCI_TEST_ENDING_CONMON"

func init() {
	if os.Getenv(endingConmonEnv) != "" {
		runtime.LockOSThread() // TestMain runs on the main thread
	}
}

// endingConmon names the process conmon and ends its main thread, not the process: the
// runtime's other threads live on. To /proc it is then what a process is part way
// through its exit (no command line left, not yet exited to its pidfd), for as long as
// the test needs. It does not return.
func endingConmon() {
	if unix.Gettid() != os.Getpid() {
		fmt.Fprintln(os.Stderr, "the ending conmon's stand-in does not run on its main thread")
		os.Exit(1)
	}
	name := []byte("conmon\x00")
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0) // this thread only
	select {}                               // not reached
}

// TestDeleteReapsAnEndingConmon: a conmon part way through its exit (it has written the
// exit file) has no command line left, yet it is the container's conmon: Delete waits
// for it, ends it after its grace and reaps it, rather than taking it for a stranger and
// leaving it a zombie of this process: a conmon of an earlier life of the daemon, as in
// TestContainerOutlivesDaemon, has no goroutine of this one to reap it. The stand-in is
// this test binary, its main thread ended (endingConmon).
func TestDeleteReapsAnEndingConmon(t *testing.T) {
	r := newRuntime(t)
	id := randomHex(t, 8)
	if err := os.Mkdir(r.containerDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), endingConmonEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		// Delete reaped it, or the test failed and it is ended here.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	f, err := openPidfd(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if len(cmdline) > 0 || procComm(pid) != "conmon" {
			return fmt.Errorf("the stand-in %d is not an ending conmon yet: command line %q, name %q", pid, cmdline, procComm(pid))
		}
		return nil
	})
	if exited(f) {
		t.Fatalf("the stand-in %d exited: it no longer stands for a conmon that is ending", pid)
	}
	if err := os.WriteFile(r.conmonPidFile(id), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctxb, id); err != nil {
		t.Fatal(err)
	}
	if st := testenv.ProcState(pid); st != "" {
		t.Fatalf("the ending conmon %d is left in state %s after Delete, want it ended and reaped", pid, st)
	}
}

package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// A zombie this process (a subreaper, as the daemon) inherited from a container's pid
// namespace keeps the container's init from finishing its exit: Stop would report it
// survived SIGKILL. ReapOrphans reaps it, but not while an exec claims it, and the
// container then stops.
func TestReapOrphansLetsAContainerExit(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	// The command of a runc exec that nothing waits for: `true` exits at once and stays
	// a zombie of this process, in the container's pid namespace.
	pidFile := filepath.Join(t.TempDir(), "pid")
	if out, err := exec.Command(r.path, "--root", r.root, "exec", "--detach", "--pid-file", pidFile, c.id, "true").CombinedOutput(); err != nil {
		t.Fatalf("runc exec: %v\n%s", err, out)
	}
	pid, err := readPidFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !testenv.IsZombie(pid) {
			return errors.New("the exec'd command is not a zombie yet")
		}
		return nil
	})
	if ns := namespacePid(pid); ns <= 1 {
		t.Fatalf("the exec'd command's pid in the container = %d, want > 1", ns)
	}

	ctx, cancel := context.WithCancel(ctxb)
	done := make(chan struct{})
	var reaped atomic.Int64
	go func() {
		defer close(done)
		ReapOrphans(ctx, 50*time.Millisecond, func(p, _ int) { reaped.Store(int64(p)) })
	}()
	defer func() { cancel(); <-done }()

	// Claimed by an exec: left alone, well past the grace.
	release := await(pid)
	time.Sleep(orphanGrace + 300*time.Millisecond)
	if !testenv.IsZombie(pid) || reaped.Load() != 0 {
		t.Fatalf("a claimed zombie was reaped (reaped %d)", reaped.Load())
	}
	release()

	if err := r.Stop(ctxb, c.id, true, syscall.SIGKILL, 0); err != nil {
		t.Fatalf("Stop with an inherited zombie in the container: %v", err)
	}
	if got := int(reaped.Load()); got != pid {
		t.Errorf("reaped pid %d, want the exec'd command %d", got, pid)
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
}

// A process of a container in the node's pid namespace that outlives the container's
// init and its conmon comes to this process (a subreaper, as the daemon), in the
// session runc made for the container; once it exits, ReapOrphans reaps it (a stopped
// container's background process, killed with it, was left a zombie of the daemon for
// its life). The daemon's own children are left to their owners: one in this process's
// session and one that leads a session of its own, as conmon does.
func TestReapOrphansOfTheNodesPidNamespace(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo background $!"}, func(in *SpecInput) {
		sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
	})
	conmon := conmonPID(t, r, c.id)
	orphan, _ := strconv.Atoi(backgroundPID(t, c))
	// The shell has exited, and its conmon after it: the sleep is this process's child.
	testenv.WaitGone(t, conmon, 10*time.Second)
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ppid := parentPid(orphan); ppid != os.Getpid() {
			return fmt.Errorf("the background sleep %d has parent %d, not this process", orphan, ppid)
		}
		return nil
	})

	// The daemon's own children, exited and not waited for yet.
	own := exec.Command("true")
	leader := exec.Command("true")
	leader.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	for _, cmd := range []*exec.Cmd{own, leader} {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, testenv.Until(fmt.Sprintf("%s to exit", cmd), func() bool {
			return testenv.IsZombie(cmd.Process.Pid)
		}))
	}
	f, err := openPidfd(orphan)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := signalPidfd(f, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, testenv.Until("the background sleep to die", func() bool {
		return testenv.IsZombie(orphan)
	}))

	ctx, cancel := context.WithCancel(ctxb)
	done := make(chan struct{})
	var mu sync.Mutex
	reaped := map[int]int{}
	go func() {
		defer close(done)
		ReapOrphans(ctx, 20*time.Millisecond, func(pid, nsPid int) {
			mu.Lock()
			defer mu.Unlock()
			reaped[pid] = nsPid
		})
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	defer stop()
	testenv.Eventually(t, orphanGrace+10*time.Second, 20*time.Millisecond, func() error {
		if testenv.IsZombie(orphan) {
			return fmt.Errorf("the container's background process %d is still a zombie of this process", orphan)
		}
		return nil
	})
	mu.Lock()
	nsPid, ok := reaped[orphan]
	mu.Unlock()
	if !ok || nsPid != orphan {
		t.Errorf("reaped %v, want %d (as %d in the node's pid namespace)", reaped, orphan, orphan)
	}
	// They were zombies before the orphan, and as long: a reaper that took them would
	// have taken them in the same look, which has ended once it stopped.
	stop()
	for _, cmd := range []*exec.Cmd{own, leader} {
		if err := cmd.Wait(); err != nil {
			t.Errorf("the daemon's own child %s, reaped by its owner: %v (ReapOrphans took it)", cmd, err)
		}
	}
}

// TestAnyZombie: anyZombie says yes while a child has exited and not been waited for,
// leaves it waitable (its owner's Wait still gets its status), and agrees with /proc
// before and after.
func TestAnyZombie(t *testing.T) {
	if got, want := anyZombie(), len(zombieChildren()) > 0; got != want {
		t.Fatalf("before: anyZombie = %v, /proc shows zombie children %v", got, zombieChildren())
	}
	cmd := exec.Command("sh", "-c", "exit 3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if fields := statFields(cmd.Process.Pid); len(fields) == 0 || fields[0] != "Z" {
			return fmt.Errorf("child %d not a zombie yet: %v", cmd.Process.Pid, fields)
		}
		return nil
	})
	for range 2 { // a look takes nothing away
		if !anyZombie() {
			t.Fatalf("anyZombie = false with child %d a zombie", cmd.Process.Pid)
		}
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait after the looks = %v, want exit status 3", err)
	}
	if got, want := anyZombie(), len(zombieChildren()) > 0; got != want {
		t.Errorf("after Wait: anyZombie = %v, /proc shows zombie children %v", got, zombieChildren())
	}
}

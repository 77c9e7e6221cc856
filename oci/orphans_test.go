package oci

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
		if !zombie(pid) {
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
	if !zombie(pid) || reaped.Load() != 0 {
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

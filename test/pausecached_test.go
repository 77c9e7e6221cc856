package test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestCachedSandboxLosesPause: a cached sandbox with a shared pid namespace whose pause
// process dies is never handed to the retry (it lost what it was made of), and a claimed
// one is watched.
//   - The pause dies while the daemon is down: recovery rolls the cached sandbox back,
//     and the retry gets a new, ready one.
//   - The pause dies after a restart, while the sandbox is still cached: the pause
//     watcher started by recovery rolls it back, and the retry gets a new one.
//   - The retry after a restart claims a sound cached sandbox; when its pause dies
//     afterwards the sandbox is reported NOTREADY at once (watched since the claim).
func TestCachedSandboxLosesPause(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d := startDaemon(t, daemonOptions{})

	// cache times a pid-POD pod's creation out and lets it finish, cached.
	cache := func(t *testing.T, name string) (pod, created string, pause int) {
		t.Helper()
		pod = d.pidPod(t, name, nsModePod)
		created = d.timeOut(t, pod)
		reaper.add(created)
		d.waitNetworkDone(t, created, 2*slowADD)
		return pod, created, d.requirePause(t, created)
	}
	kill := func(t *testing.T, pid int) {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill the pause process %d: %v", pid, err)
		}
		testenv.WaitGone(t, pid, 10*time.Second)
	}
	// retryGetsNew requires that the retry of pod gets a new, ready sandbox with a pause
	// process, and that nothing of the old one is left; then removes the new one.
	retryGetsNew := func(t *testing.T, pod, old string) {
		t.Helper()
		d.requireNoPause(t, old, "the broken cached sandbox", 10*time.Second)
		id := d.mustRunp(t, pod)
		reaper.add(id)
		if id == old {
			t.Fatalf("the retry claimed the cached sandbox %s whose pause process is dead", id)
		}
		d.requireState(t, id, "SANDBOX_READY")
		d.requirePause(t, id)
		d.assertNoLeaks(t, id)
		d.removePod(t, id)
	}

	t.Run("pause dies while the daemon is down", func(t *testing.T) {
		pod, created, pause := cache(t, "cachedown")
		d.stop(t)
		kill(t, pause)
		d.start(t, daemonBinary(t))
		d.waitReady(t)
		if log := d.logOfStart(d.starts); !strings.Contains(log, "lost part of itself: rolled back") {
			t.Errorf("recovery did not roll the cached sandbox back:\n%s", log)
		}
		retryGetsNew(t, pod, created)
	})

	t.Run("pause dies while cached, after a restart", func(t *testing.T) {
		pod, created, pause := cache(t, "cacheafter")
		d.restart(t)
		kill(t, pause)
		retryGetsNew(t, pod, created)
	})

	t.Run("pause dies after the claim", func(t *testing.T) {
		pod, created, pause := cache(t, "claimed")
		d.restart(t)
		if id := d.mustRunp(t, pod); id != created {
			t.Fatalf("the retry got %s, want the cached %s", id, created)
		}
		kill(t, pause)
		testenv.Eventually(t, 5*time.Second, 100*time.Millisecond, func() error {
			if d.inspectp(t, created).Status.State != "SANDBOX_NOTREADY" {
				return fmt.Errorf("the claimed sandbox %s is still ready 5 s after its pause process died", created)
			}
			return nil
		})
		d.removePod(t, created)
	})

	d.requireNoPidnsPins(t)
	d.stopClean(t)
}

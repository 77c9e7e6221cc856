package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/failpoint"
)

// Helpers of the crash tests' daemon: restarts with a failure point armed or not, the
// wait for its death at the point, and its log of one start.

// restartArmed stops the daemon and starts it again with the failure point
// armed to kill it, and waits until it is ready.
func (d *daemon) restartArmed(t *testing.T, point string) {
	t.Helper()
	d.stop(t)
	d.mu.Lock()
	d.opts.env = []string{failpoint.EnvVar + "=" + point + "=kill"}
	d.mu.Unlock()
	d.start(t, daemonBinary(t))
	d.waitReady(t)
}

// restartUnarmed starts the daemon again without the extra environment of
// its options (the failure points), and waits until it is ready.
func (d *daemon) restartUnarmed(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	d.opts.env = nil
	d.mu.Unlock()
	d.restart(t)
}

// requireKilledAt waits until the daemon has died, and fails the test unless
// it died of SIGKILL sent by the failure point (the point logs itself on
// stderr just before). A daemon still running after within never reached
// the point: it is killed and the test fails.
func (d *daemon) requireKilledAt(t *testing.T, point string, within time.Duration) {
	t.Helper()
	p, start, exitErr := d.awaitOwnExit(t, within, fmt.Sprintf("after the request: failure point %s was never reached (misspelt, or not on this path)", point))
	var ee *exec.ExitError
	ws, ok := syscall.WaitStatus(0), false
	if errors.As(exitErr, &ee) {
		ws, ok = ee.Sys().(syscall.WaitStatus)
	}
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the daemon (pid %d) ended with %v, want death by SIGKILL at %s; log:\n%s", p.Pid, exitErr, point, d.logTail(60))
	}
	if log := d.logOfStart(start); !strings.Contains(log, "failpoint "+point+": SIGKILL") {
		t.Fatalf("the daemon (pid %d) died of SIGKILL, but failure point %s did not send it; log:\n%s", p.Pid, point, d.logTail(60))
	}
	t.Logf("the daemon (pid %d) killed itself at %s", p.Pid, point)
}

// awaitOwnExit waits until the daemon ends by itself and returns its process, the number
// of its start and how it ended. A daemon still running after within is killed and the
// test fails, saying it was still running "<within> <still>".
func (d *daemon) awaitOwnExit(t *testing.T, within time.Duration, still string) (p *os.Process, start int, exitErr error) {
	t.Helper()
	d.mu.Lock()
	p, done, start := d.proc, d.done, d.starts
	d.mu.Unlock()
	if p == nil {
		t.Fatal("no daemon was started")
	}
	select {
	case <-done:
	case <-time.After(within):
		d.kill(t)
		t.Fatalf("the daemon was still running %v %s; log:\n%s", within, still, d.logTail(60))
	}
	d.reap()
	d.mu.Lock()
	exitErr = d.exitErr
	d.mu.Unlock()
	return p, start, exitErr
}

// logOfStart returns the daemon's log written by its nth start.
func (d *daemon) logOfStart(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.Index(s, fmt.Sprintf("=== e2e: start %d at ", n))
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, fmt.Sprintf("=== e2e: start %d at ", n+1)); j >= 0 {
		s = s[:j]
	}
	return s
}

// terminate sends SIGTERM to the daemon and waits for it to exit. If it is
// still running after limit it is killed and the test fails. It returns how
// long the exit took.
func (d *daemon) terminate(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	d.mu.Lock()
	p, done := d.proc, d.done
	d.mu.Unlock()
	if p == nil {
		t.Fatal("terminate: the daemon is not running")
	}
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to the daemon (pid %d): %v", p.Pid, err)
	}
	select {
	case <-done:
	case <-time.After(limit):
		_ = p.Kill()
		<-done
		d.reap()
		t.Fatalf("the daemon (pid %d) was still running %v after SIGTERM; killed. log:\n%s", p.Pid, limit, d.logTail(60))
	}
	elapsed := time.Since(start)
	d.reap()
	t.Logf("the daemon (pid %d) exited %v after SIGTERM: %s", p.Pid, elapsed.Round(time.Millisecond), d.lastExit())
	return elapsed
}

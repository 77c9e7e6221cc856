package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestReopenLog(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "while true; do echo tick; sleep 0.1; done"}, nil)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if b, _ := os.ReadFile(c.logPath); !strings.Contains(string(b), "tick") {
			return errors.New("no tick logged yet")
		}
		return nil
	})
	if err := os.Rename(c.logPath, c.logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if b, _ := os.ReadFile(c.logPath); !strings.Contains(string(b), "stdout F tick") {
			return errors.New("no tick in the reopened log")
		}
		return nil
	})
	if err := r.Stop(ctxb, c.id, true, syscall.SIGKILL, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctxb, c.id); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("ReopenLog of a stopped container: %v, want ErrNotRunning", err)
	}
}

// TestMovedLog: a log moved (as a claim by a retry with another log path does) keeps
// receiving the container's output at its new path, MoveLog again is a no-op, and after
// a rotation the file conmon reopens at its own path is brought to the new one; nothing
// is left at the old path.
func TestMovedLog(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "while true; do echo tick; sleep 0.1; done"}, nil)
	moved := filepath.Join(filepath.Dir(c.logPath), "1.log")
	for range 2 {
		if err := r.MoveLog(c.id, moved); err != nil {
			t.Fatal(err)
		}
	}
	logged := func(path string) func() error {
		return func() error {
			if b, _ := os.ReadFile(path); !strings.Contains(string(b), "stdout F tick") {
				return fmt.Errorf("no tick in %s", path)
			}
			return nil
		}
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, logged(moved))
	if err := os.Rename(moved, moved+".1"); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if exists(c.logPath) {
		t.Fatalf("the reopened log was left at conmon's path %s", c.logPath)
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, logged(moved))
	// Moved back where conmon writes: a reopen leaves it there.
	if err := r.MoveLog(c.id, c.logPath); err != nil {
		t.Fatal(err)
	}
	if err := r.ReopenLog(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, logged(c.logPath))
	if exists(moved) {
		t.Fatalf("%s still there after the log moved back", moved)
	}
}

// TestConmonLogSizeMaxArgs: conmon gets --log-size-max when the bound is positive and
// the container has a log, and not otherwise.
func TestConmonLogSizeMaxArgs(t *testing.T) {
	for _, tc := range []struct {
		logMax  int64
		logPath string
		want    bool
	}{
		{1 << 30, "/var/log/pods/p/c/0.log", true},
		{65536, "/var/log/pods/p/c/0.log", true},
		{0, "/var/log/pods/p/c/0.log", false},
		{-1, "/var/log/pods/p/c/0.log", false},
		{65536, "", false},
	} {
		r := &Runtime{stateDir: "/run/x", root: "/run/x/runc", path: "/usr/sbin/runc", logMax: tc.logMax}
		args := strings.Join(r.conmonArgs("abc", tc.logPath, false, StdinNone), " ")
		flag := fmt.Sprintf("--log-size-max %d", tc.logMax)
		if got := strings.Contains(args, flag); got != tc.want || (!tc.want && strings.Contains(args, "--log-size-max")) {
			t.Errorf("bound %d, log %q: conmon %q, want %q: %v", tc.logMax, tc.logPath, args, flag, tc.want)
		}
	}
}

// TestLogSizeMaxBoundsTheLog: a container that writes far past the bound leaves a log no
// larger than it, which holds its last line (conmon starts the file again, it does not
// stop writing).
func TestLogSizeMaxBoundsTheLog(t *testing.T) {
	r := newRuntime(t)
	const bound = 64 << 10
	r.logMax = bound
	// About 1 MiB: 20000 lines of 50 bytes.
	c := startContainer(t, r, []string{"sh", "-c",
		`i=0; while [ $i -lt 20000 ]; do echo "line $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1)); done`}, nil)
	testenv.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		if _, _, ok, _ := r.ExitStatus(c.id); !ok {
			return errors.New("the writer has not exited")
		}
		return nil
	})
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > bound || !strings.Contains(string(b), "stdout F line 19999 ") {
		t.Errorf("log of %d bytes (bound %d), last line there: %v", len(b), bound, strings.Contains(string(b), "line 19999 "))
	}
}

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
